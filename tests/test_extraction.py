"""bertlook.extraction: batched attention extraction into an attention store."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest

from bertlook.attention_store import AttentionStore
from bertlook.errors import BertlookError
from bertlook.extraction import encode_segment, extract_segments, extract_to_store, register_cli
from bertlook.tiny_models import make_segment as _segment

TEXTS = [  # (text_a, text_b)
    ("the cat sat on the mat .", "the dog ran ."),
    ("john saw mary .", "she read a book in paris ."),
    ("the king and the queen went to london .", "they said it was a very good city , and then they came home ."),
    ("a man .", "a woman ."),
    ("it was a big house .", "there were many people ."),
]




@pytest.fixture(scope="module")
def tokenizer(tiny_bert_dir):
    from bertlook.modeling import load_tokenizer, resolve_model

    return load_tokenizer(resolve_model(str(tiny_bert_dir)))


@pytest.fixture(scope="module")
def segments(tokenizer):
    return [_segment(tokenizer, i, a, b) for i, (a, b) in enumerate(TEXTS)]


@pytest.fixture(scope="module")
def tiny_model(tiny_bert_dir):
    from bertlook.modeling import load_model, resolve_model

    return load_model(resolve_model(str(tiny_bert_dir)), "cpu")


@pytest.fixture(scope="module")
def sharp_model(tiny_bert_dir):
    """The tiny BERT with scaled-up query/key weights, so that its maps are far from uniform."""
    import torch

    from bertlook.modeling import load_model, resolve_model

    model = load_model(resolve_model(str(tiny_bert_dir)), "cpu")
    with torch.no_grad():
        for layer in model.encoder.layer:
            for lin in (layer.attention.self.query, layer.attention.self.key):
                lin.weight.mul_(12.0)
                lin.bias.normal_(0, 0.5, generator=torch.Generator().manual_seed(1))
    return model


def _examples(segments, tokenizer, mode="zeros"):
    return [(seg, *encode_segment(seg, tokenizer, mode)) for seg in segments]


def _direct(model, input_ids, token_type_ids):
    """Batch-1 fp32 forward pass: [L, H, n, n]."""
    import torch

    with torch.inference_mode():
        ids = torch.tensor([input_ids])
        out = model(input_ids=ids, attention_mask=torch.ones_like(ids),
                    token_type_ids=torch.tensor([token_type_ids]), output_attentions=True)
    return torch.stack(out.attentions, dim=1)[0].numpy()


def _maps_by_id(store_dir):
    store = AttentionStore(store_dir)
    return store, {rec["id"]: np.asarray(attn, dtype=np.float32) for rec, attn in store}


# ------------------------------------------------------------------------------------ encoding

def test_encode_segment_modes(segments, tokenizer):
    seg = segments[0]
    ids, tts = encode_segment(seg, tokenizer, "zeros")
    assert ids == tokenizer.convert_tokens_to_ids(seg["tokens"])
    assert ids[0] == tokenizer.cls_token_id and ids[-1] == tokenizer.sep_token_id
    assert tts == [0] * len(ids)
    ids2, tts2 = encode_segment(seg, tokenizer, "pair")
    assert ids2 == ids and tts2 == seg["segment_ids"] and 1 in tts2


def test_encode_segment_errors(segments, tokenizer):
    bad = dict(segments[0], id=77, tokens=["[CLS]", "zzzunknownzzz", "[SEP]"], segment_ids=[0, 0, 0])
    with pytest.raises(BertlookError, match="segment 77"):
        encode_segment(bad, tokenizer)
    no_seg = {k: v for k, v in segments[0].items() if k != "segment_ids"}
    with pytest.raises(BertlookError, match="segment_ids"):
        encode_segment(no_seg, tokenizer, "pair")
    with pytest.raises(BertlookError, match="mode"):
        encode_segment(segments[0], tokenizer, "ab")


# ------------------------------------------------------------------------------------ extraction

def test_extract_matches_direct_forward(segments, tokenizer, sharp_model, tmp_path):
    examples = _examples(segments, tokenizer)
    meta = {"special_tokens": {"cls": "[CLS]", "sep": "[SEP]"}, "model": {"spec": "tiny"}}
    summary = extract_to_store(examples, sharp_model, tmp_path / "store", batch_size=2, meta=meta, progress_every=0)
    assert summary["n_examples"] == len(segments) and summary["excluded_too_long"] == 0
    assert summary["tokens"] == sum(len(s["tokens"]) for s in segments)
    assert summary["dtype"] == "float16" and summary["batch_size"] == 2 and summary["device"] == "cpu"
    assert summary["tokens_per_second"] > 0 and summary["seconds"] >= 0

    store, maps = _maps_by_id(tmp_path / "store")
    assert store.meta["special_tokens"] == {"cls": "[CLS]", "sep": "[SEP]"}
    assert store.meta["model"] == {"spec": "tiny"}
    assert (store.meta["num_layers"], store.meta["num_heads"]) == (2, 2)
    assert store.meta["dtype"] == "float16" and store.meta["level"] == "token"
    assert store.meta["excluded"]["too_long"] == 0
    # store order: longest first, ties by id
    lengths = [rec["n"] for rec in store.records]
    assert lengths == sorted(lengths, reverse=True)
    assert sorted(maps) == [s["id"] for s in segments]
    for rec in store.records:
        seg = segments[rec["id"]]
        assert rec["tokens"] == seg["tokens"] and rec["n"] == len(seg["tokens"])
    for seg, ids, tts in examples:
        got = maps[seg["id"]]
        n = len(ids)
        assert got.shape == (2, 2, n, n)
        want = _direct(sharp_model, ids, tts)
        np.testing.assert_allclose(got, want, atol=1e-3, rtol=2e-3)
        np.testing.assert_allclose(got.sum(-1), 1.0, atol=5e-3)
    # the sharpened model is not uniform: the comparison above is meaningful
    assert max(float(m.max()) for m in maps.values()) > 0.5


def test_sorted_batching_equals_batch_one(segments, tokenizer, sharp_model, tmp_path):
    examples = _examples(segments, tokenizer)
    extract_to_store(examples, sharp_model, tmp_path / "b1", batch_size=1, progress_every=0)
    extract_to_store(examples, sharp_model, tmp_path / "b4", batch_size=4, progress_every=0)
    _, m1 = _maps_by_id(tmp_path / "b1")
    _, m4 = _maps_by_id(tmp_path / "b4")
    assert m1.keys() == m4.keys()
    for k in m1:
        np.testing.assert_allclose(m1[k], m4[k], atol=1e-3)


def test_zeros_vs_pair_token_types_differ(segments, tokenizer, tiny_model, tmp_path):
    extract_to_store(_examples(segments, tokenizer, "zeros"), tiny_model, tmp_path / "z", progress_every=0)
    extract_to_store(_examples(segments, tokenizer, "pair"), tiny_model, tmp_path / "p", progress_every=0)
    _, mz = _maps_by_id(tmp_path / "z")
    _, mp = _maps_by_id(tmp_path / "p")
    diff = max(float(np.abs(mz[k] - mp[k]).max()) for k in mz)
    assert diff > 5e-4
    for seg, ids, tts in _examples(segments, tokenizer, "pair"):
        np.testing.assert_allclose(mp[seg["id"]], _direct(tiny_model, ids, tts), atol=1e-3)


def test_over_long_example_excluded_and_counted(segments, tokenizer, tiny_model, tmp_path):
    examples = _examples(segments, tokenizer)
    lengths = {seg["id"]: len(ids) for seg, ids, _ in examples}
    limit = sorted(lengths.values())[-2]  # only the longest example is over the limit
    longest = max(lengths, key=lengths.get)
    summary = extract_to_store(examples, tiny_model, tmp_path / "s", max_seq_len=limit, progress_every=0)
    assert summary["excluded_too_long"] == 1 and summary["excluded_ids"] == [longest]
    assert summary["n_examples"] == len(segments) - 1
    store = AttentionStore(tmp_path / "s")
    assert len(store) == len(segments) - 1 and longest not in {r["id"] for r in store.records}
    assert store.meta["excluded"] == {"too_long": 1, "too_long_ids": [longest], "max_seq_len": limit}


def test_exception_mid_extraction_leaves_nothing(segments, tokenizer, tiny_model, tmp_path, monkeypatch):
    calls = {"n": 0}
    real_forward = tiny_model.forward

    def flaky_forward(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise RuntimeError("simulated failure in the second batch")
        return real_forward(*args, **kwargs)

    monkeypatch.setattr(tiny_model, "forward", flaky_forward)
    out = tmp_path / "parent" / "store"
    with pytest.raises(RuntimeError, match="simulated"):
        extract_to_store(_examples(segments, tokenizer), tiny_model, out, batch_size=2, progress_every=0)
    assert calls["n"] == 2
    assert not out.exists()
    assert list(out.parent.iterdir()) == []  # no temporary directory left behind


def test_bad_examples_rejected(segments, tokenizer, tiny_model, tmp_path):
    ex = _examples(segments, tokenizer)
    with pytest.raises(BertlookError, match="duplicate"):
        extract_to_store([ex[0], ex[0]], tiny_model, tmp_path / "d", progress_every=0)
    seg, ids, tts = ex[1]
    with pytest.raises(BertlookError, match=r"example 1"):
        extract_to_store([(seg, ids, tts[:-1])], tiny_model, tmp_path / "d", progress_every=0)
    with pytest.raises(BertlookError, match="max_position_embeddings"):
        extract_to_store(ex, tiny_model, tmp_path / "d", max_seq_len=100000, progress_every=0)
    assert not (tmp_path / "d").exists()


# ------------------------------------------------------------------------------------ glue + CLI

def _write_segments(path: Path, segments) -> Path:
    path.write_text("".join(json.dumps(s) + "\n" for s in segments), encoding="utf-8")
    return path


def test_extract_segments_and_cli(segments, tokenizer, tiny_model, tiny_bert_dir, tmp_path, capsys):
    seg_path = _write_segments(tmp_path / "segments.jsonl", segments)
    longest = max(len(s["tokens"]) for s in segments)
    summary = extract_segments(seg_path, str(tiny_bert_dir), tmp_path / "store", batch_size=2,
                               segment_ids="pair", max_seq_len=longest - 1, device="cpu", progress_every=0)
    assert summary["excluded_too_long"] == 1 and summary["n_examples"] == len(segments) - 1
    assert summary["segment_ids"] == "pair" and summary["model"] == str(tiny_bert_dir)
    store, maps = _maps_by_id(tmp_path / "store")
    assert store.meta["special_tokens"] == {"cls": "[CLS]", "sep": "[SEP]"}
    assert store.meta["segment_ids"] == "pair"
    assert store.meta["model"]["source"] == "local" and store.meta["model"]["weights_sha256"]
    assert store.meta["model"]["num_layers"] == 2
    seg = segments[0]
    ids, tts = encode_segment(seg, tokenizer, "pair")
    np.testing.assert_allclose(maps[0], _direct(tiny_model, ids, tts), atol=1e-3)

    parser = argparse.ArgumentParser(prog="bertlook")
    register_cli(parser.add_subparsers(dest="step"))
    args = parser.parse_args(["extract", "--segments", str(seg_path), "--model", str(tiny_bert_dir),
                              "--out", str(tmp_path / "cli_store"), "--batch-size", "3", "--device", "cpu",
                              "--max-seq-len", str(longest - 1), "--summary", str(tmp_path / "summary.json")])
    assert args.segment_ids == "zeros" and args.shard_mb == 256
    assert args.func(args) == 0
    printed = capsys.readouterr().out
    assert "excluded 1" in printed and f"{len(segments) - 1} examples" in printed
    written = json.loads((tmp_path / "summary.json").read_text())
    assert written["excluded_too_long"] == 1 and written["batch_size"] == 3
    assert len(AttentionStore(tmp_path / "cli_store")) == len(segments) - 1


def test_extract_segments_rejects_foreign_tokens(segments, tiny_bert_dir, tmp_path):
    bad = [dict(segments[0], tokens=["[CLS]", "the", "qqqq", "[SEP]"], segment_ids=[0, 0, 0, 0])]
    seg_path = _write_segments(tmp_path / "segments.jsonl", bad)
    with pytest.raises(BertlookError, match="segment 0"):
        extract_segments(seg_path, str(tiny_bert_dir), tmp_path / "store", device="cpu", progress_every=0)
    assert not (tmp_path / "store").exists()
