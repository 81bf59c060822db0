"""Small random BERT models built locally from a config (tests, demos and benchmarks; no hub).

``make_tiny_bert(out_dir)`` writes a complete Hugging Face model directory (config, safetensors
weights, WordPiece ``vocab.txt`` and fast-tokenizer files) that ``AutoModel.from_pretrained`` and
``AutoTokenizer.from_pretrained`` load offline. Weights are random but seeded, so two calls with the
same arguments give identical files. ``make_tiny_multilingual(out_dir, kind, texts)`` does the same for
mBERT-like (WordPiece), XLM-R-like (SentencePiece Unigram, ``▁``) and RoBERTa-like (byte-level BPE)
models whose tokenizer is trained on ``texts`` on the fly. ``random_ln_bert()`` is a BERT in memory with random
LayerNorms (the ALTI tests), ``random_ln_encoder(arch)`` the same for every encoder layout (the layout tests).
"""

from __future__ import annotations

import collections
import json
import math
import os
from pathlib import Path
from typing import Iterable

import torch
import transformers
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers
from transformers import (AutoModel, AutoModelForCausalLM, AutoTokenizer, BertConfig, BertForMaskedLM, BertModel,
                          BertTokenizer, BertTokenizerFast, GPT2Tokenizer, RobertaConfig, RobertaForMaskedLM,
                          RobertaModel, RobertaTokenizer, XLMRobertaConfig, XLMRobertaForMaskedLM, XLMRobertaModel,
                          XLMRobertaTokenizer)

SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]

# A small English vocabulary: enough whole words for hand-written fixtures, plus single letters and
# "##" continuations so that any lower-case ASCII word can be split into wordpieces.
_BASE_WORDS = (
    "the a an of to in on at for with by from and or but not is was were be been are has have had "
    "it he she they we i you his her their its this that these those there here which who what "
    "cat dog mat sat saw ran man woman house city river king queen book books read reads wrote "
    "john mary paris london france england war world people time year years first new one two three "
    "said says made make went go goes came come big small old good great long many more most some "
    "all any each other such only also after before during between into over under about than then "
    "when where while because as so if up out very can will would could should may might must "
    ". , ; : ' \" ( ) - ! ? 's"
).split()


def tiny_vocab(extra_words: Iterable[str] = ()) -> list[str]:
    """Return a WordPiece vocabulary (special tokens first, then words, letters and ## letters)."""
    letters = [chr(c) for c in range(ord("a"), ord("z") + 1)]
    digits = [str(d) for d in range(10)]
    vocab: list[str] = []
    seen: set[str] = set()
    for tok in [*SPECIAL_TOKENS, *_BASE_WORDS, *extra_words, *letters, *digits,
                *("##" + c for c in letters + digits)]:
        if tok not in seen:
            seen.add(tok)
            vocab.append(tok)
    return vocab


def make_tiny_bert(
    out_dir: str | os.PathLike,
    *,
    num_layers: int = 2,
    num_heads: int = 2,
    hidden_size: int = 32,
    intermediate_size: int = 64,
    max_position_embeddings: int = 160,
    seed: int = 0,
    mlm_head: bool = False,
    vocab: list[str] | None = None,
) -> Path:
    """Write a random BERT (``BertModel`` or ``BertForMaskedLM``) plus tokenizer to ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    vocab = vocab or tiny_vocab()
    vocab_file = out / "vocab.txt"
    vocab_file.write_text("\n".join(vocab) + "\n", encoding="utf-8")
    try:  # transformers >= 5: BertTokenizer is the fast tokenizer and takes ``vocab``
        tokenizer = BertTokenizer(vocab=str(vocab_file), do_lower_case=True)
        if not tokenizer.is_fast:
            raise TypeError
    except TypeError:  # transformers 4.x
        tokenizer = BertTokenizerFast(vocab_file=str(vocab_file), do_lower_case=True)
    tokenizer.save_pretrained(out)

    config = BertConfig(
        vocab_size=len(vocab),
        hidden_size=hidden_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        intermediate_size=intermediate_size,
        max_position_embeddings=max_position_embeddings,
        type_vocab_size=2,
        pad_token_id=0,
    )
    torch.manual_seed(seed)
    model = (BertForMaskedLM if mlm_head else BertModel)(config)
    model.save_pretrained(out)
    return out


#: the encoder architectures :func:`make_tiny_encoder` builds beside BERT (their transformers config and model
#: classes); each gets BERT's WordPiece tokenizer ([CLS] ... [SEP], as DistilBERT has; ALBERT's own is a
#: SentencePiece model with the same special tokens, DeBERTa-v3's too, ModernBERT's a byte-level BPE with [CLS] /
#: [SEP]). The tiny ALBERT shares one layer across its layers (as albert-base-v2: ``num_hidden_groups`` 1); the tiny
#: DeBERTa-v2 has DeBERTa-v3's relative-position attention (``p2c|c2p``, shared keys, position buckets, no absolute
#: positions, no token types); the tiny ModernBERT alternates global and local (sliding-window) attention.
ENCODER_ARCHS = {
    "bert": ("BertConfig", "BertModel", "BertForMaskedLM"),
    "albert": ("AlbertConfig", "AlbertModel", "AlbertForMaskedLM"),
    "distilbert": ("DistilBertConfig", "DistilBertModel", "DistilBertForMaskedLM"),
    "deberta_v2": ("DebertaV2Config", "DebertaV2Model", "DebertaV2ForMaskedLM"),
    "modernbert": ("ModernBertConfig", "ModernBertModel", "ModernBertForMaskedLM"),
}


def tiny_encoder_config(arch: str, *, vocab_size: int, layers: int = 2, heads: int = 2, hidden: int = 32,
                        intermediate_size: int = 64, max_position_embeddings: int = 160, groups: int = 1, **extra):
    """The transformers config of a tiny ``arch`` (:data:`ENCODER_ARCHS`; ``extra``: more config keys)."""
    config_cls = getattr(transformers, ENCODER_ARCHS[arch][0])
    common = dict(vocab_size=vocab_size, max_position_embeddings=max_position_embeddings, pad_token_id=0)
    if arch == "albert":
        # the released ALBERTs' layout: ONE layer group, its one AlbertLayer run for every layer (num_hidden_groups
        # 1; read by call order, bertlook.attention.layer_calls); groups > 1: one layer group per `groups` layers
        params = dict(embedding_size=hidden // 2, hidden_size=hidden, num_hidden_layers=layers,
                      num_hidden_groups=groups, num_attention_heads=heads, intermediate_size=intermediate_size,
                      type_vocab_size=2)
    elif arch == "distilbert":
        params = dict(dim=hidden, n_layers=layers, n_heads=heads, hidden_dim=intermediate_size)
    elif arch == "deberta_v2":  # microsoft/deberta-v3-base's attention, with 16 position buckets
        params = dict(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                      intermediate_size=intermediate_size, relative_attention=True, position_buckets=16,
                      max_relative_positions=-1, pos_att_type=["p2c", "c2p"], norm_rel_ebd="layer_norm",
                      share_att_key=True, position_biased_input=False, type_vocab_size=0, layer_norm_eps=1e-7)
    elif arch == "modernbert":  # answerdotai/ModernBERT-base's layout: global attention every 2nd layer here
        params = dict(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                      intermediate_size=intermediate_size, local_attention=4, global_attn_every_n_layers=2,
                      bos_token_id=2, eos_token_id=3, cls_token_id=2, sep_token_id=3)
    else:
        params = dict(hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                      intermediate_size=intermediate_size, type_vocab_size=2)
    return config_cls(**{**common, **params, **extra})


def make_tiny_encoder(out_dir: str | os.PathLike, arch: str, *, layers: int = 2, heads: int = 2, hidden: int = 32,
                      intermediate_size: int = 64, max_position_embeddings: int = 160, seed: int = 0,
                      groups: int = 1, mlm_head: bool = False) -> Path:
    """Write a tiny random encoder of ``arch`` (one of :data:`ENCODER_ARCHS`: BERT, ALBERT with ``groups`` layer
    groups (default 1: one layer shared by all layers, as the released ALBERTs), DistilBERT, DeBERTa-v2/v3,
    ModernBERT; :func:`tiny_encoder_config`) with the WordPiece tokenizer of :func:`make_tiny_bert` to ``out_dir``;
    ``mlm_head``: the masked-LM class (its head)."""
    if arch not in ENCODER_ARCHS:
        raise ValueError(f"unknown encoder architecture {arch!r} (use one of {', '.join(ENCODER_ARCHS)})")
    out = make_tiny_bert(out_dir, num_layers=layers, num_heads=heads, hidden_size=hidden,
                         intermediate_size=intermediate_size, max_position_embeddings=max_position_embeddings,
                         seed=seed, mlm_head=mlm_head)
    if arch == "bert":
        return out
    _config_name, base_name, mlm_name = ENCODER_ARCHS[arch]
    model_cls = getattr(transformers, mlm_name if mlm_head else base_name)
    config = tiny_encoder_config(arch, vocab_size=len(tiny_vocab()), layers=layers, heads=heads, hidden=hidden,
                                 intermediate_size=intermediate_size, max_position_embeddings=max_position_embeddings,
                                 groups=groups)
    for stale in out.glob("*.safetensors"):  # the BERT weights make_tiny_bert wrote
        stale.unlink()
    torch.manual_seed(seed)
    model_cls(config).save_pretrained(out)
    return out


def random_layer_norms(model, generator: "torch.Generator"):
    """``model`` with every LayerNorm's gamma drawn as ``1 + 0.5 N(0, 1)`` and beta as ``0.5 N(0, 1)`` from
    ``generator``, in module order (their initial 1 and 0 would hide the LayerNorm's part of ALTI: with beta = 0
    the choice of sigma cancels in the normalised map)."""
    with torch.no_grad():
        for mod in model.modules():
            if isinstance(mod, torch.nn.LayerNorm):
                mod.weight.copy_(1.0 + 0.5 * torch.randn(mod.weight.shape, generator=generator))
                if mod.bias is not None:  # a LayerNorm without bias (ModernBERT's default) draws no beta
                    mod.bias.copy_(0.5 * torch.randn(mod.bias.shape, generator=generator))
    return model


def random_ln_bert(*, layers: int = 1, hidden: int = 8, heads: int = 2, vocab: int = 20,
                   intermediate: int | None = None, max_positions: int = 16, initializer_range: float = 0.02,
                   seed: int = 0, mlm: bool = False, pooling: bool = True,
                   generator: "torch.Generator | None" = None):
    """A tiny random BERT in memory (``BertModel``, ``BertForMaskedLM`` with ``mlm``) in eval mode, eager attention,
    its weights drawn after ``torch.manual_seed(seed)`` and its LayerNorms by :func:`random_layer_norms` from
    ``generator`` (default: one seeded ``seed + 1``; pass your own to draw inputs from it afterwards). The ALTI
    tests' model: a post-LN encoder whose LayerNorms matter."""
    config = BertConfig(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                        intermediate_size=intermediate or 2 * hidden, max_position_embeddings=max_positions,
                        initializer_range=initializer_range, attn_implementation="eager")
    torch.manual_seed(seed)
    model = (BertForMaskedLM(config) if mlm else BertModel(config, add_pooling_layer=pooling)).eval()
    return random_layer_norms(model, generator if generator is not None else torch.Generator().manual_seed(seed + 1))


def random_ln_encoder(arch: str, *, layers: int = 3, hidden: int = 16, heads: int = 2, vocab: int = 30,
                      max_positions: int = 32, initializer_range: float = 0.3, seed: int = 0, mlm: bool = False,
                      **extra):
    """A tiny random encoder of ``arch`` (:data:`ENCODER_ARCHS`, config :func:`tiny_encoder_config` with
    ``intermediate_size`` 2 x ``hidden`` and ``extra``) in memory, in eval mode, eager attention: the base class
    (the masked-LM class with ``mlm``), its weights drawn after ``torch.manual_seed(seed)`` and its LayerNorms by
    :func:`random_layer_norms` from a generator seeded ``seed + 1``. The layout tests' models (as
    :func:`random_ln_bert` is BERT's)."""
    config = tiny_encoder_config(arch, vocab_size=vocab, layers=layers, heads=heads, hidden=hidden,
                                 intermediate_size=2 * hidden, max_position_embeddings=max_positions,
                                 initializer_range=initializer_range, attn_implementation="eager", **extra)
    torch.manual_seed(seed)
    model = getattr(transformers, ENCODER_ARCHS[arch][2 if mlm else 1])(config).eval()
    return random_layer_norms(model, torch.Generator().manual_seed(seed + 1))


def bert_base_config(**overrides):
    """A ``BertConfig`` with BERT-base dimensions (12 layers x 12 heads, hidden 768) for benchmarks."""
    params = dict(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                  intermediate_size=3072, max_position_embeddings=512, type_vocab_size=2)
    params.update(overrides)
    return BertConfig(**params)


def make_segment(tokenizer, sid: int, text_a: str, text_b: str) -> dict:
    """A hand-made segment record (``[CLS] A [SEP] B [SEP]``, pair segment ids) for tests and demos."""
    a, b = tokenizer.tokenize(text_a), tokenizer.tokenize(text_b)
    tokens = [tokenizer.cls_token, *a, tokenizer.sep_token, *b, tokenizer.sep_token]
    seg_ids = [0] * (len(a) + 2) + [1] * (len(b) + 1)
    return {"id": sid, "doc": "Test", "text_a": text_a, "text_b": text_b, "tokens": tokens,
            "segment_ids": seg_ids, "truncated": False}


# ------------------------------------------------------------------------------------------------
# tiny multilingual models: tokenizers trained on the fly (mBERT-like, XLM-R-like, RoBERTa-like)

MULTILINGUAL_KINDS = ("wordpiece", "sentencepiece", "bytebpe")
# XLM-R / RoBERTa order: <s>=0, <pad>=1, </s>=2, <unk>=3 (XLMRobertaTokenizer's Unigram has unk_id=3)
_ROBERTA_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]


def _learn_wordpiece_vocab(words: collections.Counter, vocab_size: int) -> list[str]:
    """A WordPiece vocabulary (no special tokens) learnt by BPE merges over ``words`` (word -> count).

    Every character is in the vocabulary, word-initially and as a ``##`` continuation; then the most
    frequent adjacent pair is merged until ``vocab_size`` tokens exist or no pair occurs twice. Ties are
    broken by the pair's text, so the result depends on ``words`` only. (The ``tokenizers``
    WordPieceTrainer breaks frequency ties by hash-map order, so two runs on the same text can give
    different vocabularies; the tokenizer itself is still the library's WordPiece model.)
    """
    segs = {w: [w[0], *("##" + c for c in w[1:])] for w in sorted(words)}
    vocab = sorted({t for seg in segs.values() for t in seg})
    have = set(vocab)
    while len(vocab) < vocab_size:
        pairs: collections.Counter = collections.Counter()
        for w, seg in segs.items():
            for a, b in zip(seg, seg[1:]):
                pairs[(a, b)] += words[w]
        best = min(((-c, a, b) for (a, b), c in pairs.items() if c >= 2), default=None)
        if best is None:
            break
        _, a, b = best
        merged = a + b[2:]
        for w, seg in segs.items():
            i, out = 0, []
            while i < len(seg):
                if i + 1 < len(seg) and seg[i] == a and seg[i + 1] == b:
                    out.append(merged)
                    i += 2
                else:
                    out.append(seg[i])
                    i += 1
            segs[w] = out
        if merged not in have:
            have.add(merged)
            vocab.append(merged)
    return vocab


def _unigram_scores(pieces: list[str], words: collections.Counter) -> list[tuple[str, float]]:
    """Deterministic scores of Unigram ``pieces``: log of each piece's share of substring occurrences in ``words``.

    (The ``tokenizers`` UnigramTrainer gives the characters it keeps for coverage scores that differ by
    1e-4 in hash-map order from run to run; the piece set it chooses is kept, the scores are recomputed.)
    """
    counts = {p: 0 for p in pieces}
    for w, c in words.items():
        for i in range(len(w)):
            for j in range(i + 1, min(len(w), i + 16) + 1):
                if w[i:j] in counts:
                    counts[w[i:j]] += c
    total = sum(counts.values()) or 1
    return [(p, round(math.log(max(counts[p], 1) / total), 6)) for p in pieces]


def _train_backend(kind: str, texts: list[str], vocab_size: int, specials: list[str] | None = None):
    """Train a ``tokenizers.Tokenizer`` with the pipeline the matching transformers class rebuilds on load.

    Deterministic: the same ``texts`` give the same vocabulary (see :func:`_learn_wordpiece_vocab` and
    :func:`_unigram_scores` for where the library's trainers are not). ``specials``: the special tokens of
    a byte-level BPE (default RoBERTa's).
    """
    def pre_tokenized(tok) -> collections.Counter:
        words: collections.Counter = collections.Counter()
        for text in texts:
            norm = tok.normalizer.normalize_str(text) if tok.normalizer is not None else text
            words.update(w for w, _ in tok.pre_tokenizer.pre_tokenize_str(norm))
        return words

    if kind == "wordpiece":  # mBERT: cased, accents kept, every CJK ideograph its own pre-token
        tok = Tokenizer(models.WordPiece({t: i for i, t in enumerate(SPECIAL_TOKENS)}, unk_token="[UNK]"))
        tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                    strip_accents=False, lowercase=False)
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        learnt = _learn_wordpiece_vocab(pre_tokenized(tok), vocab_size - len(SPECIAL_TOKENS))
        vocab = {t: i for i, t in enumerate([*SPECIAL_TOKENS, *learnt])}
        tok.model = models.WordPiece(vocab, unk_token="[UNK]", continuing_subword_prefix="##")
        return tok
    if kind == "sentencepiece":  # XLM-R: Unigram over whitespace-split words with a "▁" prefix
        tok = Tokenizer(models.Unigram())
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.WhitespaceSplit(),
            pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always"),
        ])
        trainer = trainers.UnigramTrainer(vocab_size=vocab_size, special_tokens=_ROBERTA_SPECIALS,
                                          unk_token="<unk>", max_piece_length=8, n_sub_iterations=2,
                                          shrinking_factor=0.75, show_progress=False)
        tok.train_from_iterator(texts, trainer=trainer)
        trained = [p for p, _ in json.loads(tok.to_str())["model"]["vocab"]]
        n_special = len(_ROBERTA_SPECIALS)
        if trained[:n_special] != _ROBERTA_SPECIALS:
            raise ValueError("the Unigram trainer did not put the special tokens first")
        scored = sorted(_unigram_scores(sorted(set(trained[n_special:])), pre_tokenized(tok)),
                        key=lambda ps: (-ps[1], ps[0]))
        tok.model = models.Unigram([(p, 0.0) for p in _ROBERTA_SPECIALS] + scored, unk_id=3, byte_fallback=False)
        return tok
    if kind == "bytebpe":  # RoBERTa / GPT-2: byte-level BPE over the 256 byte symbols
        tok = Tokenizer(models.BPE(continuing_subword_prefix="", end_of_word_suffix="", fuse_unk=False))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        # every symbol is in the initial alphabet, so ids and hence frequency ties are ordered: deterministic
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(specials or _ROBERTA_SPECIALS),
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
        tok.train_from_iterator(texts, trainer=trainer)
        return tok
    raise ValueError(f"unknown tokenizer kind {kind!r} (use one of {', '.join(MULTILINGUAL_KINDS)})")


def _wrap_backend(kind: str, backend, *, trim_offsets: bool):
    """The transformers fast tokenizer class of ``kind`` built from the trained vocabulary (and merges).

    transformers 5 rebuilds a class's own normalizer / pre-tokenizer / post-processor from the vocabulary
    when it loads a directory, so the tokenizer is built the same way here (the caller checks that the
    reloaded tokenizer encodes the training texts exactly as the trained backend does).
    """
    model = json.loads(backend.to_str())["model"]
    if kind == "wordpiece":
        return BertTokenizer(vocab=dict(model["vocab"]), do_lower_case=False, strip_accents=False,
                             tokenize_chinese_chars=True)
    if kind == "sentencepiece":
        return XLMRobertaTokenizer(vocab=[(str(p), float(s)) for p, s in model["vocab"]])
    return RobertaTokenizer(vocab=dict(model["vocab"]), merges=_merges(model), add_prefix_space=False,
                            trim_offsets=trim_offsets)


def _merges(model: dict) -> list[tuple[str, ...]]:
    """The merges of a trained BPE backend's ``model`` (strings ``"a b"`` or pairs) as tuples."""
    return [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]


def _save_checked(tokenizer, backend, texts: list[str], out: Path, what: str):
    """Save ``tokenizer`` to ``out`` and reload it; ValueError unless the reloaded tokenizer encodes every text
    exactly as the trained ``backend`` does. Returns the reloaded tokenizer."""
    tokenizer.save_pretrained(out)
    reloaded = AutoTokenizer.from_pretrained(out)
    for text in texts:
        want = backend.encode(text, add_special_tokens=False).ids
        got = reloaded(text, add_special_tokens=False)["input_ids"]
        if want != got:
            raise ValueError(f"{what}: the saved tokenizer encodes {text[:40]!r} differently from the trained one "
                             f"({got[:10]} vs {want[:10]})")
    return reloaded


def make_tiny_multilingual(
    out_dir: str | os.PathLike,
    kind: str,
    texts: Iterable[str],
    *,
    vocab_size: int = 1000,
    seed: int = 0,
    layers: int = 2,
    heads: int = 2,
    hidden: int = 32,
    intermediate_size: int = 64,
    max_position_embeddings: int = 160,
    mlm_head: bool = False,
    trim_offsets: bool = True,
) -> Path:
    """Write a tiny random multilingual model with a tokenizer trained on ``texts`` to ``out_dir``.

    ``kind``:

    * ``"wordpiece"`` (mBERT-like): ``BertNormalizer(handle_chinese_chars=True, lowercase=False,
      strip_accents=False)`` + ``BertPreTokenizer`` + WordPiece (``##``), ``[CLS]``/``[SEP]``,
      ``BertModel`` (``BertForMaskedLM`` with ``mlm_head``);
    * ``"sentencepiece"`` (XLM-R-like): Unigram with the ``WhitespaceSplit`` + ``Metaspace("▁")``
      pre-tokenizer, ``<s> <pad> </s> <unk> <mask>`` (ids 0..4), ``XLMRobertaModel`` /
      ``XLMRobertaForMaskedLM``;
    * ``"bytebpe"`` (RoBERTa-like): byte-level BPE (``Ġ``), ``trim_offsets`` as given, ``RobertaModel`` /
      ``RobertaForMaskedLM``.

    The tokenizer is trained with the ``tokenizers`` library (deterministic for the same ``texts``),
    wrapped in the matching transformers fast tokenizer class and saved with the model (random
    weights, ``torch.manual_seed(seed)``, safetensors), so that ``bertlook.attention.modeling``
    (``resolve_model`` / ``load_tokenizer`` / ``load_model``) loads the directory. RoBERTa-style models
    number positions from ``pad_token_id + 1 = 2``: their config gets ``max_position_embeddings + 2``
    so that sequences of ``max_position_embeddings`` tokens fit. The tokenizer reloaded from
    ``out_dir`` is checked to encode every text exactly as the trained tokenizer does (ValueError if not).
    """
    if kind not in MULTILINGUAL_KINDS:
        raise ValueError(f"unknown tokenizer kind {kind!r} (use one of {', '.join(MULTILINGUAL_KINDS)})")
    texts = [str(t) for t in texts]
    if not any(t.strip() for t in texts):
        raise ValueError("make_tiny_multilingual: no training text")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    backend = _train_backend(kind, texts, vocab_size)
    reloaded = _save_checked(_wrap_backend(kind, backend, trim_offsets=trim_offsets), backend, texts, out,
                             f"make_tiny_multilingual({kind})")
    n_vocab = len(reloaded)
    common = dict(vocab_size=n_vocab, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                  intermediate_size=intermediate_size)
    if kind == "wordpiece":
        config = BertConfig(**common, max_position_embeddings=max_position_embeddings, type_vocab_size=2,
                            pad_token_id=reloaded.pad_token_id)
        cls = BertForMaskedLM if mlm_head else BertModel
    else:
        ids = dict(pad_token_id=reloaded.pad_token_id, bos_token_id=reloaded.bos_token_id,
                   eos_token_id=reloaded.eos_token_id)
        Config, MaskedLM, Model = ((XLMRobertaConfig, XLMRobertaForMaskedLM, XLMRobertaModel)
                                   if kind == "sentencepiece" else (RobertaConfig, RobertaForMaskedLM, RobertaModel))
        config = Config(**common, **ids, max_position_embeddings=max_position_embeddings + 2, type_vocab_size=1)
        cls = MaskedLM if mlm_head else Model
    torch.manual_seed(seed)
    model = cls(config)
    model.save_pretrained(out)
    return out


# ------------------------------------------------------------------------------------- decoders
#: the decoder architectures :func:`make_tiny_decoder` builds: (config class, special tokens, BOS added)
DECODER_ARCHS = {
    "gpt2": ("GPT2Config", ["<|endoftext|>"], False),  # GPT-2: no BOS; <|endoftext|> is BOS, EOS and UNK
    "gpt_neox": ("GPTNeoXConfig", ["<|endoftext|>"], False),  # Pythia: as GPT-2
    "llama": ("LlamaConfig", ["<s>", "</s>", "<unk>"], True),  # Llama: BOS <s> before every sequence
    "qwen2": ("Qwen2Config", ["<|endoftext|>"], False),  # Qwen2: no BOS
}


def _decoder_config(arch: str, n_vocab: int, *, layers: int, heads: int, hidden: int, intermediate_size: int,
                    max_positions: int, bos: int, eos: int, kv_heads: int | None = None):
    cls = getattr(transformers, DECODER_ARCHS[arch][0])
    if arch == "gpt2":
        return cls(vocab_size=n_vocab, n_embd=hidden, n_layer=layers, n_head=heads, n_inner=intermediate_size,
                   n_positions=max_positions, bos_token_id=bos, eos_token_id=eos)
    common = dict(vocab_size=n_vocab, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                  intermediate_size=intermediate_size, max_position_embeddings=max_positions,
                  bos_token_id=bos, eos_token_id=eos)
    if arch == "gpt_neox":
        return cls(**common)
    return cls(**common, num_key_value_heads=kv_heads or heads, tie_word_embeddings=False)


def make_tiny_decoder(out_dir: str | os.PathLike, arch: str, texts: Iterable[str], *, vocab_size: int = 400,
                      seed: int = 0, layers: int = 2, heads: int = 2, hidden: int = 32, intermediate_size: int = 64,
                      max_positions: int = 160, lm_head: bool = False, kv_heads: int | None = None) -> Path:
    """Write a tiny random decoder-only model (``arch``: one of :data:`DECODER_ARCHS`) with a byte-level BPE
    tokenizer trained on ``texts`` to ``out_dir`` (safetensors weights, ``torch.manual_seed(seed)``).

    The tokenizer is a ``GPT2Tokenizer`` over the trained vocabulary and merges with the architecture's
    conventions: GPT-2, GPT-NeoX and Qwen2 add no BOS (``<|endoftext|>`` is their BOS/EOS), Llama adds ``<s>``
    before every sequence. ``lm_head``: the ``*ForCausalLM`` class (the next-token head) instead of the base
    model; ``kv_heads``: grouped-query attention (Llama, Qwen2: fewer key/value heads than heads). The reloaded
    tokenizer is checked to encode every text as the trained one does (ValueError if not).
    """
    if arch not in DECODER_ARCHS:
        raise ValueError(f"unknown decoder architecture {arch!r} (use one of {', '.join(DECODER_ARCHS)})")
    _, specials, add_bos = DECODER_ARCHS[arch]
    texts = [str(t) for t in texts]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    backend = _train_backend("bytebpe", texts, vocab_size, specials=specials)
    model = json.loads(backend.to_str())["model"]
    bos, eos = specials[0], specials[1] if len(specials) > 1 else specials[0]
    unk = specials[-1]
    tokenizer = GPT2Tokenizer(vocab=dict(model["vocab"]), merges=_merges(model), bos_token=bos, eos_token=eos,
                              unk_token=unk, add_prefix_space=False, add_bos_token=add_bos)
    reloaded = _save_checked(tokenizer, backend, texts, out, f"make_tiny_decoder({arch})")
    config = _decoder_config(arch, len(reloaded), layers=layers, heads=heads, hidden=hidden,
                             intermediate_size=intermediate_size, max_positions=max_positions,
                             bos=reloaded.convert_tokens_to_ids(bos), eos=reloaded.convert_tokens_to_ids(eos),
                             kv_heads=kv_heads)
    torch.manual_seed(seed)
    model_obj = (AutoModelForCausalLM if lm_head else AutoModel).from_config(config)
    model_obj.save_pretrained(out)
    return out
