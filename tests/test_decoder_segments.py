"""Segments of a decoder-only model: the tokenizer's own template (no [CLS]/[SEP]), read back and validated,
and extracted into a store of causal maps (no token type ids reach the model)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bertlook.data.documents import iter_documents
from bertlook.data.segments import build_segments, read_segments, segment_template, write_segments
from bertlook.errors import BertlookError

TEXTS = ["The cat sat on the mat. A dog ran far away.", "Paris is a city in France. London is big and old.",
         "Anarchism is a political philosophy. It is sceptical of authority."] * 3


@pytest.fixture(scope="module")
def decoders(tmp_path_factory):
    from bertlook.testing.tiny_models import make_tiny_decoder

    return {arch: make_tiny_decoder(tmp_path_factory.mktemp(arch), arch, TEXTS, max_positions=200)
            for arch in ("gpt2", "llama")}


def _tok(path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


def test_templates(decoders, tokenizer):
    assert segment_template(tokenizer).describe() == "[CLS] A [SEP] B [SEP]"
    assert segment_template(_tok(decoders["llama"])).describe() == "<s> A B"
    assert segment_template(_tok(decoders["gpt2"])).describe() == "A B"
    t = segment_template(_tok(decoders["llama"]))
    assert t.wrap(["a", "b"], ["c"]) == (["<s>", "a", "b", "c"], [0, 0, 0, 1])
    assert t.n_special == 1


@pytest.mark.parametrize("arch, prefix", [("gpt2", []), ("llama", ["<s>"])])
def test_decoder_segments_round_trip(decoders, wiki_bz2, tmp_path, arch, prefix):
    tok = _tok(decoders[arch])
    segs, summary = build_segments(iter_documents(wiki_bz2), tok, n_segments=5, max_seq_len=40, seed=0)
    assert segs and summary["template"] == " ".join([*prefix, "A", "B"])
    for seg in segs:
        assert seg["template"] == "tokenizer" and len(seg["tokens"]) <= 40
        assert seg["tokens"][:len(prefix)] == prefix
        assert not {"[CLS]", "[SEP]"} & set(seg["tokens"])
        n_a = seg["segment_ids"].count(0)
        assert seg["segment_ids"] == sorted(seg["segment_ids"]) and 0 < n_a < len(seg["tokens"])
    out = tmp_path / "segments.jsonl"
    write_segments(out, segs)
    assert read_segments(out) == segs


def test_bad_template_named_with_line(tmp_path):
    path = tmp_path / "s.jsonl"
    seg = {"id": 0, "doc": "d", "text_a": "a", "text_b": "b", "tokens": ["a", "b"], "segment_ids": [0, 1],
           "truncated": False, "template": "mine"}
    path.write_text(json.dumps(seg) + "\n")
    with pytest.raises(BertlookError, match=r"s.jsonl:1: template must be"):
        read_segments(path)
    seg.pop("template")  # without it: the paper's template, whose first token is [CLS]-like
    path.write_text(json.dumps(seg) + "\n")
    with pytest.raises(BertlookError, match=r"s.jsonl:1: first token must be a \[CLS\]-like token"):
        read_segments(path)


@pytest.mark.parametrize("arch", ["gpt2", "llama"])
def test_decoder_segments_extract_to_causal_maps(decoders, wiki_bz2, tmp_path, arch):
    from bertlook.attention.extraction import extract_segments
    from bertlook.attention.store import open_store

    segs, _ = build_segments(iter_documents(wiki_bz2), _tok(decoders[arch]), n_segments=4, max_seq_len=40, seed=0)
    path = tmp_path / "segments.jsonl"
    write_segments(path, segs)
    # pair segment ids are never passed to a decoder (GPT-2 would embed them as words)
    summary = extract_segments(path, str(decoders[arch]), tmp_path / "store", device="cpu", segment_ids="pair",
                               progress_every=0, max_unk_rate=1.0)
    assert summary["n_segments"] == 4
    store = open_store(tmp_path / "store", level="token")
    assert store.meta["model"]["family"] == "decoder"
    n = 0
    for record, attn in store:
        a = attn.astype(np.float32)  # [layer, head, query_pos, key_pos]
        assert np.triu(a, 1).max() == 0.0  # row i sees tokens 0..i only
        assert np.allclose(a[:, :, 0, 0], 1.0)  # the first row sees itself alone
        n += 1
    assert n == 4
