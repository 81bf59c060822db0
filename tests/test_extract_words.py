"""bertlook.attention.extract_words: words -> tokens, token -> word attention, word-level extraction (extract-words)."""

from __future__ import annotations

import argparse
import json
from dataclasses import FrozenInstanceError, dataclass, field, replace
from pathlib import Path

import numpy as np
import pytest

from bertlook.attention.alignment import Alignment, align_words, token_to_word_attention
from bertlook.attention.extract_words import (
    WordExtractionOptions,
    extract_word_attention,
    extract_word_attention_from_sentences,
    prepare_word_examples,
)
from bertlook.cli.extract_words import register_cli
from bertlook.attention.store import AttentionStore
from bertlook.errors import BertlookError

WORDS = ["The", "cat", "John's", "1234", "unbelievably", "."]
TRAIN_TEXTS = [
    "the cat sat on the mat .",
    "John's dog ran 42 miles , didn't it ?",
    "unbelievable things happen to the cat",
]


@dataclass
class Sent:
    """Stand-in for bertlook.data.treebank.Sentence (duck typing)."""

    sent_id: str
    words: list[str]
    heads: list[int] = field(default_factory=list)
    rels: list[str] = field(default_factory=list)
    upos: list[str] = field(default_factory=list)
    xpos: list[str] = field(default_factory=list)

    def __post_init__(self):
        n = len(self.words)
        self.heads = self.heads or [i + 2 if i + 1 < n else 0 for i in range(n)]  # right-branching
        self.rels = self.rels or ["dep"] * (n - 1) + ["root"]
        self.upos = self.upos or ["X"] * n
        self.xpos = self.xpos or ["XX"] * n


# ------------------------------------------------------------------------------------ tokenizers

@pytest.fixture(scope="module")
def bert_tok(tiny_bert_dir):
    from bertlook.attention.modeling import load_tokenizer, resolve_model

    return load_tokenizer(resolve_model(str(tiny_bert_dir)))


def _byte_level_tokenizer(trim_offsets: bool, add_prefix_space: bool):
    from tokenizers import ByteLevelBPETokenizer, processors
    from transformers import PreTrainedTokenizerFast

    bpe = ByteLevelBPETokenizer(add_prefix_space=add_prefix_space, trim_offsets=trim_offsets)
    bpe.train_from_iterator(TRAIN_TEXTS, vocab_size=300, min_frequency=1, show_progress=False,
                            special_tokens=["<s>", "<pad>", "</s>", "<unk>"])
    bpe.post_processor = processors.RobertaProcessing(
        ("</s>", bpe.token_to_id("</s>")), ("<s>", bpe.token_to_id("<s>")),
        trim_offsets=trim_offsets, add_prefix_space=add_prefix_space,
    )
    return PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, bos_token="<s>", eos_token="</s>",
                                   cls_token="<s>", sep_token="</s>", pad_token="<pad>", unk_token="<unk>")


@pytest.fixture(scope="module", params=[(True, False), (False, False), (False, True)],
                ids=["trim", "notrim", "notrim-prefix"])
def bpe_tok(request):
    return _byte_level_tokenizer(*request.param)


def _check_alignment(al: Alignment, words, tokenizer, n_special_first: str, n_special_last: str):
    n = len(al.input_ids)
    assert len(al.tokens) == len(al.word_of_token) == n
    assert al.tokens[0] == n_special_first and al.tokens[-1] == n_special_last
    assert al.word_of_token[0] == -1 and al.word_of_token[-1] == -1
    inner = al.word_of_token[1:-1]
    assert -1 not in inner and inner == sorted(inner)  # contiguous, in word order
    assert len(al.token_spans) == len(words)
    assert al.token_spans[0][0] == 1 and al.token_spans[-1][1] == n - 1
    for w, (s, e) in enumerate(al.token_spans):
        assert e > s and all(al.word_of_token[t] == w for t in range(s, e))
    for (_, e), (s2, _) in zip(al.token_spans, al.token_spans[1:]):
        assert e == s2
    np.testing.assert_array_equal(al.groups(), [0, *[w + 1 for w in inner], len(words) + 1])


def test_align_wordpiece(bert_tok):
    al = align_words(WORDS, bert_tok, sent_id="s1")
    _check_alignment(al, WORDS, bert_tok, "[CLS]", "[SEP]")
    assert al.input_ids == bert_tok(" ".join(WORDS))["input_ids"]
    pieces = [al.tokens[s:e] for s, e in al.token_spans]
    assert pieces[0] == ["the"] and pieces[1] == ["cat"]
    assert pieces[2] == ["john", "'", "s"]  # apostrophe: BERT splits punctuation inside the word
    assert pieces[3] == ["1", "##2", "##3", "##4"]  # number
    assert pieces[4][0] == "u" and all(p.startswith("##") for p in pieces[4][1:])  # split word
    assert pieces[5] == ["."]  # punctuation
    for word, toks in zip(WORDS, pieces):
        assert "".join(t.removeprefix("##") for t in toks) == word.lower()
    assert al.split_words == 3 and al.n_words == 6


def test_align_byte_level_bpe(bpe_tok):
    al = align_words(WORDS, bpe_tok, sent_id="s1")
    _check_alignment(al, WORDS, bpe_tok, "<s>", "</s>")
    assert al.input_ids == bpe_tok(" ".join(WORDS))["input_ids"]
    for word, (s, e) in zip(WORDS, al.token_spans):
        # the tokens of a word decode to the word (plus the leading space marker)
        assert bpe_tok.convert_tokens_to_string(al.tokens[s:e]).strip() == word
    # later words start with the space marker, which belongs to the word it precedes
    for s, _ in al.token_spans[1:]:
        assert al.tokens[s].startswith("Ġ")
    assert al.split_words >= 3  # "John's", "1234", "unbelievably" are not single tokens


def test_align_words_with_inner_space_and_unknown_chars(bert_tok, bpe_tok):
    words = ["a", "1 000", "b", "é"]
    for tok in (bert_tok, bpe_tok):
        al = align_words(words, tok)
        _check_alignment(al, words, tok, al.tokens[0], al.tokens[-1])
        assert al.token_spans[1][1] - al.token_spans[1][0] >= 2


def test_align_errors_name_sentence(bert_tok):
    with pytest.raises(BertlookError, match=r"sentence 'bad-1'.*no token for word.*2 '\\x07'"):
        align_words(["the", "\x07", "cat"], bert_tok, sent_id="bad-1")
    with pytest.raises(BertlookError, match="sentence 'e'.*empty"):
        align_words(["the", "", "cat"], bert_tok, sent_id="e")
    with pytest.raises(BertlookError, match="no words"):
        align_words([], bert_tok, sent_id="z")


def test_align_needs_special_tokens(bpe_tok):
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(TRAIN_TEXTS, vocab_size=280, min_frequency=1, show_progress=False,
                            special_tokens=["<s>", "</s>"])
    plain = PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer)  # no post-processor: no <s> ... </s>
    with pytest.raises(BertlookError, match="sentence 7: expected the tokenizer to add"):
        align_words(["the", "cat"], plain, sent_id=7)


# ------------------------------------------------------------------------------------ token -> word

# 5 tokens: [CLS] w1 w2a w2b [SEP]; word 2 has two tokens.
TOKEN_MAP = np.array([
    [0.50, 0.10, 0.10, 0.10, 0.20],
    [0.20, 0.20, 0.30, 0.10, 0.20],
    [0.10, 0.40, 0.20, 0.20, 0.10],
    [0.30, 0.10, 0.10, 0.40, 0.10],
    [0.25, 0.25, 0.25, 0.00, 0.25],
], dtype=np.float32)
HAND_ALIGNMENT = Alignment(input_ids=[2, 10, 11, 12, 3], tokens=["[CLS]", "w1", "w2", "##b", "[SEP]"],
                           word_of_token=[-1, 0, 1, 1, -1], token_spans=[(1, 2), (2, 4)])
# columns summed: [CLS] w1 w2 [SEP]
#   row [CLS] .5  .1  .2  .2 | row w1 .2 .2 .4 .2 | row w2a .1 .4 .4 .1 | row w2b .3 .1 .5 .1 | row [SEP] .25 x4
EXPECTED = {
    "first": [[0.5, 0.1, 0.2, 0.2], [0.2, 0.2, 0.4, 0.2], [0.1, 0.4, 0.4, 0.1], [0.25, 0.25, 0.25, 0.25]],
    "mean": [[0.5, 0.1, 0.2, 0.2], [0.2, 0.2, 0.4, 0.2], [0.2, 0.25, 0.45, 0.1], [0.25, 0.25, 0.25, 0.25]],
    "max": [[0.5, 0.1, 0.2, 0.2], [0.2, 0.2, 0.4, 0.2], [3 / 13, 4 / 13, 5 / 13, 1 / 13], [0.25, 0.25, 0.25, 0.25]],
}


@pytest.mark.parametrize("mode", ["mean", "first", "max"])
def test_token_to_word_hand_computed(mode):
    out = token_to_word_attention(TOKEN_MAP[None, None], HAND_ALIGNMENT, from_split=mode)
    assert out.shape == (1, 1, 4, 4) and out.dtype == np.float32
    np.testing.assert_allclose(out[0, 0], EXPECTED[mode], atol=1e-6)
    np.testing.assert_allclose(out.sum(-1), 1.0, atol=1e-6)
    # float16 input (as read from a store) gives the same up to float16 rounding
    out16 = token_to_word_attention(TOKEN_MAP[None, None].astype(np.float16), HAND_ALIGNMENT, from_split=mode)
    np.testing.assert_allclose(out16[0, 0], EXPECTED[mode], atol=2e-3)


def _released_code_reference(tt, words_to_tokens, mode):
    """Loop version of the authors' get_word_word_attention (one head)."""
    ww = np.array(tt, dtype=np.float64)
    not_starts = [t for word in words_to_tokens for t in word[1:]]
    for word in words_to_tokens:
        ww[:, word[0]] = ww[:, word].sum(axis=-1)
    ww = np.delete(ww, not_starts, -1)
    for word in words_to_tokens:
        if mode == "mean":
            ww[word[0]] = np.mean(ww[word], axis=0)
        elif mode == "max":
            ww[word[0]] = np.max(ww[word], axis=0)
            ww[word[0]] /= ww[word[0]].sum()
    return np.delete(ww, not_starts, 0)


@pytest.mark.parametrize("mode", ["mean", "first", "max"])
def test_token_to_word_matches_released_code_loop(bert_tok, mode):
    al = align_words(WORDS, bert_tok)
    n = al.n_tokens
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(2, 3, n, n)) * 3
    attn = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    out = token_to_word_attention(attn, al, from_split=mode)
    assert out.shape == (2, 3, al.n_words + 2, al.n_words + 2)
    words_to_tokens = [[0], *[list(range(s, e)) for s, e in al.token_spans], [n - 1]]
    for layer in range(2):
        for head in range(3):
            ref = _released_code_reference(attn[layer, head], words_to_tokens, mode)
            np.testing.assert_allclose(out[layer, head], ref, atol=1e-5)
    np.testing.assert_allclose(out.sum(-1), 1.0, atol=1e-5)
    # [CLS] / [SEP] stay first / last: their rows and columns are the token-level ones (columns summed)
    np.testing.assert_allclose(out[:, :, 0, 0], attn[:, :, 0, 0], atol=1e-6)
    np.testing.assert_allclose(out[:, :, -1, -1], attn[:, :, -1, -1], atol=1e-6)
    np.testing.assert_allclose(out[:, :, 0, -1], attn[:, :, 0, -1], atol=1e-6)


def test_token_to_word_errors():
    with pytest.raises(BertlookError, match="from_split"):
        token_to_word_attention(TOKEN_MAP[None, None], HAND_ALIGNMENT, from_split="last")
    with pytest.raises(BertlookError, match="does not match"):
        token_to_word_attention(TOKEN_MAP[None, None, :4, :4], HAND_ALIGNMENT)
    middle = Alignment(input_ids=[2, 10, 3, 11, 3], tokens=["[CLS]", "a", "[SEP]", "b", "[SEP]"],
                       word_of_token=[-1, 0, -1, 1, -1], token_spans=[(1, 2), (3, 4)])
    with pytest.raises(BertlookError, match="special token inside"):
        token_to_word_attention(TOKEN_MAP[None, None], middle)


# ------------------------------------------------------------------------------------ extraction

CONLLU = """\
# sent_id = s1
# text = The cat sat.
1\tThe\tthe\tDET\tDT\t_\t2\tdet\t_\t_
2\tcat\tcat\tNOUN\tNN\t_\t3\tnsubj\t_\t_
3\tsat\tsit\tVERB\tVBD\t_\t0\troot\t_\tSpaceAfter=No
4\t.\t.\tPUNCT\t.\t_\t3\tpunct\t_\t_

# sent_id = s2
1\tJohn's\tJohn's\tPROPN\tNNP\t_\t2\tnsubj\t_\t_
2\tsang\tsing\tVERB\tVBD\t_\t0\troot\t_\t_
3\t42\t42\tNUM\tCD\t_\t2\tobj\t_\t_

# sent_id = s3-long
1\tthe\tthe\tDET\tDT\t_\t2\tdet\t_\t_
2\tkingdom\tkingdom\tNOUN\tNN\t_\t0\troot\t_\t_
3\tof\tof\tADP\tIN\t_\t4\tcase\t_\t_
4\tparis\tparis\tPROPN\tNNP\t_\t2\tnmod\t_\t_
5\tand\tand\tCCONJ\tCC\t_\t6\tcc\t_\t_
6\tlondon\tlondon\tPROPN\tNNP\t_\t4\tconj\t_\t_
7\tis\tbe\tAUX\tVBZ\t_\t2\tcop\t_\t_
8\textraordinarily\textraordinarily\tADV\tRB\t_\t2\tadvmod\t_\t_

"""


def _direct_word_maps(model_dir, alignment, mode):
    import torch

    from bertlook.attention.modeling import load_model, resolve_model

    model = load_model(resolve_model(str(model_dir)), "cpu")
    with torch.inference_mode():
        ids = torch.tensor([alignment.input_ids])
        out = model(input_ids=ids, attention_mask=torch.ones_like(ids), output_attentions=True)
    tok_maps = torch.stack(out.attentions, dim=1)[0].numpy()
    return token_to_word_attention(tok_maps, alignment, from_split=mode)


def test_extract_words_end_to_end(tiny_bert_dir, bert_tok, tmp_path):
    conllu = tmp_path / "dev.conllu"
    conllu.write_text(CONLLU, encoding="utf-8")
    out = tmp_path / "words"
    opts = WordExtractionOptions(batch_size=2, max_seq_len=16, device="cpu", from_split="mean", progress_every=0)
    summary = extract_word_attention(conllu, str(tiny_bert_dir), out, opts, summary_extra={"split": "dev"})
    assert summary["n_sentences"] == 3 and summary["n_extracted"] == 2
    assert summary["excluded_too_long"] == 1 and summary["excluded_too_long_ids"] == ["s3-long"]
    assert summary["excluded_alignment"] == 0 and summary["excluded_alignment_ids"] == []
    assert summary["n_words"] == 7 and summary["split"] == "dev" and summary["level"] == "word"
    # split words: John's (john ' s), sang (s ##a ##n ##g), 42 (4 ##2)
    assert summary["n_split_words"] == 3 and summary["split_word_fraction"] == pytest.approx(3 / 7, abs=1e-6)
    assert summary["tokens_per_second"] > 0

    store = AttentionStore(out)
    assert store.meta["level"] == "word" and store.meta["from_split"] == "mean"
    assert store.meta["special_tokens"] == {"cls": "[CLS]", "sep": "[SEP]"}
    assert store.meta["treebank"] == str(conllu) and store.meta["model"]["source"] == "local"
    assert store.meta["excluded"] == {"alignment": 0, "alignment_ids": [], "too_long": 1,
                                      "too_long_ids": ["s3-long"], "max_seq_len": 16}
    recs = {r["id"]: r for r in store.records}
    assert set(recs) == {"s1", "s2"}
    assert recs["s1"]["tokens"] == ["[CLS]", "The", "cat", "sat", ".", "[SEP]"]
    assert recs["s1"]["heads"] == [2, 3, 0, 3] and recs["s1"]["rels"] == ["det", "nsubj", "root", "punct"]
    assert recs["s1"]["upos"] == ["DET", "NOUN", "VERB", "PUNCT"] and recs["s1"]["xpos"] == ["DT", "NN", "VBD", "."]
    assert recs["s1"]["split_words"] == 0 and recs["s1"]["n_wordpieces"] == 6
    assert recs["s2"]["split_words"] == 3 and recs["s2"]["heads"] == [2, 0, 2]
    for i, (rec, attn) in enumerate(store):
        w = len(rec["heads"])
        assert attn.shape == (2, 2, w + 2, w + 2) and rec["n"] == w + 2
        np.testing.assert_allclose(np.asarray(attn, np.float32).sum(-1), 1.0, atol=5e-3)
        sent_words = rec["tokens"][1:-1]
        want = _direct_word_maps(tiny_bert_dir, align_words(sent_words, bert_tok), "mean")
        np.testing.assert_allclose(np.asarray(attn, np.float32), want, atol=2e-3)


def test_extract_words_alignment_exclusions_and_first_mode(tiny_bert_dir, bert_tok, tmp_path):
    sents = [Sent("a", ["the", "cat", "sat"]), Sent("ctl", ["the", "\x07", "cat"]),
             Sent("b", ["unbelievably", "good", "."])]
    opts = WordExtractionOptions(device="cpu", from_split="first", progress_every=0)
    summary = extract_word_attention_from_sentences(sents, str(tiny_bert_dir), tmp_path / "w", opts)
    assert summary["n_extracted"] == 2 and summary["excluded_alignment"] == 1
    assert summary["excluded_alignment_ids"] == ["ctl"] and "'ctl'" in summary["alignment_errors"][0]
    store = AttentionStore(tmp_path / "w")
    assert store.meta["from_split"] == "first"
    assert store.meta["excluded"]["alignment"] == 1 and store.meta["excluded"]["alignment_ids"] == ["ctl"]
    rec, attn = next((r, a) for r, a in store if r["id"] == "b")
    want = _direct_word_maps(tiny_bert_dir, align_words(sents[2].words, bert_tok), "first")
    np.testing.assert_allclose(np.asarray(attn, np.float32), want, atol=2e-3)

    with pytest.raises(BertlookError, match="duplicate sentence id 'a'"):
        prepare_word_examples([sents[0], sents[0]], bert_tok, path="x.conllu")


def test_extract_words_roberta_style(tmp_path):
    """A tiny RoBERTa (byte-level BPE, <s> ... </s>, pad id 1) runs through the same pipeline."""
    from transformers import RobertaConfig, RobertaModel

    tok = _byte_level_tokenizer(trim_offsets=False, add_prefix_space=True)
    model_dir = tmp_path / "tiny_roberta"
    tok.save_pretrained(model_dir)
    cfg = RobertaConfig(vocab_size=len(tok), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=32, max_position_embeddings=66, pad_token_id=1, bos_token_id=0,
                        eos_token_id=2, type_vocab_size=1)
    RobertaModel(cfg).save_pretrained(model_dir)
    sents = [Sent("r1", WORDS), Sent("r2", ["the", "cat"])]
    opts = WordExtractionOptions(device="cpu", max_seq_len=64, progress_every=0)
    for mode in ("mean", "max"):
        summary = extract_word_attention_from_sentences(sents, str(model_dir), tmp_path / mode,
                                                        replace(opts, from_split=mode))
        assert summary["n_extracted"] == 2 and summary["special_tokens"] == {"cls": "<s>", "sep": "</s>"}
        store = AttentionStore(tmp_path / mode)
        for rec, attn in store:
            assert rec["tokens"][0] == "<s>" and rec["tokens"][-1] == "</s>"
            assert attn.shape == (1, 2, len(rec["heads"]) + 2, len(rec["heads"]) + 2)
            np.testing.assert_allclose(np.asarray(attn, np.float32).sum(-1), 1.0, atol=5e-3)
            # batched with padding (pad id 1) equals batch-1
            want = _direct_word_maps(model_dir, align_words(rec["tokens"][1:-1], tok), mode)
            np.testing.assert_allclose(np.asarray(attn, np.float32), want, atol=2e-3)


def test_cli_extract_words(tiny_bert_dir, tmp_path, capsys):
    conllu = tmp_path / "t.conllu"
    conllu.write_text(CONLLU, encoding="utf-8")
    parser = argparse.ArgumentParser(prog="bertlook")
    sub = parser.add_subparsers(dest="step")
    p = register_cli(sub)
    help_text = p.format_help()
    for flag in ("--treebank", "--model", "--revision", "--out", "--from-split", "--batch-size",
                 "--max-seq-len", "--device", "--shard-mb", "--summary", "Input:", "Output:"):
        assert flag in help_text
    args = parser.parse_args(["extract-words", "--treebank", str(conllu), "--model", str(tiny_bert_dir),
                              "--out", str(tmp_path / "store"), "--from-split", "max", "--max-seq-len", "16",
                              "--device", "cpu", "--summary", str(tmp_path / "s.json")])
    assert args.func(args) == 0
    line = capsys.readouterr().out.strip()
    assert line.startswith("extract-words: 2/3 sentences") and "excluded 1 over 16" in line
    assert "0 unalignable" in line and "split words 42.9%" in line
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["from_split"] == "max" and summary["excluded_too_long_ids"] == ["s3-long"]
    assert AttentionStore(tmp_path / "store").meta["from_split"] == "max"
    with pytest.raises(SystemExit):
        parser.parse_args(["extract-words", "--treebank", "x", "--model", "m", "--out", "o", "--from-split", "sum"])


def test_missing_treebank_file(tiny_bert_dir, tmp_path):
    with pytest.raises(BertlookError, match="treebank file not found"):
        extract_word_attention(tmp_path / "nope.conllu", str(tiny_bert_dir), tmp_path / "o",
                               WordExtractionOptions(device="cpu"))


def test_word_extraction_options_are_frozen_keyword_only_and_checked_first(tiny_bert_dir, tmp_path):
    opts = WordExtractionOptions(device="cpu")
    with pytest.raises(FrozenInstanceError):
        opts.device = "cuda"  # type: ignore[misc]
    with pytest.raises(TypeError):
        WordExtractionOptions("v1")  # type: ignore[misc]
    missing = tmp_path / "nope.conllu"  # option errors come before the file check
    with pytest.raises(TypeError, match="unexpected keyword"):
        extract_word_attention(missing, str(tiny_bert_dir), tmp_path / "o", opts, batch_sizes=2)
    with pytest.raises(TypeError, match="WordExtractionOptions"):
        extract_word_attention(missing, str(tiny_bert_dir), tmp_path / "o", {"device": "cpu"})
    with pytest.raises(BertlookError, match="unknown --from-split 'sum'"):  # a keyword override is checked too
        extract_word_attention_from_sentences([], str(tiny_bert_dir), tmp_path / "o", opts, from_split="sum")
    assert not (tmp_path / "o").exists()


def test_empty_treebank_gives_empty_store(tiny_bert_dir, tmp_path):
    conllu = tmp_path / "train.conllu"
    conllu.write_text("", encoding="utf-8")
    summary = extract_word_attention(conllu, str(tiny_bert_dir), tmp_path / "o",
                                     WordExtractionOptions(device="cpu", progress_every=0))
    assert summary["n_sentences"] == 0 and summary["n_extracted"] == 0 and summary["split_word_fraction"] is None
    store = AttentionStore(tmp_path / "o")
    assert len(store) == 0 and store.meta["level"] == "word"


def test_extract_words_unk_counts_gate_and_size_estimate(tiny_bert_dir, tmp_path, monkeypatch):
    """[UNK] words are counted and named; the store's size estimate (words + 2 per map) is exact for the maps."""
    from bertlook.attention import modeling

    sents = [Sent("a", ["the", "cat", "sat", "."]), Sent("snow", ["the", "☃", "sat", "on", "the", "mat"]),
             Sent("b", ["unbelievably", "good", "."])]
    opts = WordExtractionOptions(device="cpu", progress_every=0)
    summary = extract_word_attention_from_sentences(sents, str(tiny_bert_dir), tmp_path / "w", opts)
    assert summary["unk_tokens"] == 1 and summary["examples_with_unk"] == 1
    assert summary["unk_examples"] == [{"id": "snow", "unk_tokens": 1, "words": ["☃"]}]
    assert summary["non_special_tokens"] == summary["tokens"] - 2 * 3  # [CLS] and [SEP] of 3 sentences
    assert summary["unk_rate"] == pytest.approx(1 / summary["non_special_tokens"])
    shards = sum(p.stat().st_size for p in (tmp_path / "w").glob("shard-*.bin"))
    total = sum(p.stat().st_size for p in (tmp_path / "w").iterdir())
    assert summary["estimated_map_bytes"] == shards == sum(2 * 2 * 2 * (len(s.words) + 2) ** 2 for s in sents)
    assert total <= summary["estimated_bytes"]
    assert AttentionStore(tmp_path / "w").meta["unknown_tokens"]["unk_tokens"] == 1

    monkeypatch.setattr(modeling, "load_model", lambda *a, **k: pytest.fail("model loaded"))
    with pytest.raises(BertlookError) as err:
        extract_word_attention_from_sentences(sents, str(tiny_bert_dir), tmp_path / "x",
                                              replace(opts, max_unk_rate=0.01))
    assert "'snow': '☃'" in str(err.value) and str(tiny_bert_dir) in str(err.value)
    assert not (tmp_path / "x").exists()
