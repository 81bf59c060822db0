"""Small random BERT models built locally from a config (tests, demos and benchmarks; no hub).

``make_tiny_bert(out_dir)`` writes a complete Hugging Face model directory (config, safetensors
weights, WordPiece ``vocab.txt`` and fast-tokenizer files) that ``AutoModel.from_pretrained`` and
``AutoTokenizer.from_pretrained`` load offline. Weights are random but seeded, so two calls with the
same arguments give identical files.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

import torch
from transformers import BertConfig, BertForMaskedLM, BertModel, BertTokenizer, BertTokenizerFast

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
