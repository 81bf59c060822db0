"""bertlook.attention.extraction: batched attention extraction into an attention store."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest

from bertlook.attention.store import AttentionStore
from bertlook.errors import BertlookError
from bertlook.attention.extraction import encode_segment, extract_segments, extract_to_store
from bertlook.cli.extract_segments import register_cli
from bertlook.testing.tiny_models import make_segment as _segment

TEXTS = [  # (text_a, text_b)
    ("the cat sat on the mat .", "the dog ran ."),
    ("john saw mary .", "she read a book in paris ."),
    ("the king and the queen went to london .", "they said it was a very good city , and then they came home ."),
    ("a man .", "a woman ."),
    ("it was a big house .", "there were many people ."),
]




@pytest.fixture(scope="module")
def segments(tokenizer):
    return [_segment(tokenizer, i, a, b) for i, (a, b) in enumerate(TEXTS)]


@pytest.fixture(scope="module")
def tiny_model(tiny_bert_dir):
    from bertlook.attention.modeling import load_model, resolve_model

    return load_model(resolve_model(str(tiny_bert_dir)), "cpu")


@pytest.fixture(scope="module")
def sharp_model(tiny_bert_dir):
    """The tiny BERT with scaled-up query/key weights, so that its maps are far from uniform."""
    import torch

    from bertlook.attention.modeling import load_model, resolve_model

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
    args = parser.parse_args(["extract-segments", "--segments", str(seg_path), "--model", str(tiny_bert_dir),
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


# ------------------------------------------------------------------------------------ unknown tokens

def _unk_segments(tokenizer):
    """The fixture segments plus one whose text holds a symbol the tiny vocabulary lacks (-> [UNK])."""
    segs = [_segment(tokenizer, i, a, b) for i, (a, b) in enumerate(TEXTS)]
    segs.append(_segment(tokenizer, 99, "the ☃ sat on the mat .", "the dog ran ."))
    assert segs[-1]["tokens"].count("[UNK]") == 1
    return segs


def test_unk_statistics(tokenizer):
    from bertlook.attention.guards import segment_unk_words, unk_statistics

    segs = _unk_segments(tokenizer)
    stats = unk_statistics(_examples(segs, tokenizer), tokenizer, words_of=segment_unk_words(tokenizer))
    n_special = sum(t in ("[CLS]", "[SEP]") for s in segs for t in s["tokens"])
    n_all = sum(len(s["tokens"]) for s in segs)
    assert stats["unk_tokens"] == 1 and stats["non_special_tokens"] == n_all - n_special
    assert stats["unk_rate"] == pytest.approx(1 / (n_all - n_special))
    assert stats["examples"] == len(segs) and stats["examples_with_unk"] == 1
    assert stats["unk_examples"] == [{"id": 99, "unk_tokens": 1, "words": ["☃"]}]
    assert stats["unk_token"] == "[UNK]"
    # without texts: the unknown token is shown with its neighbours
    no_text = [dict(segs[-1], text_a=None, text_b=None)]
    stats = unk_statistics(_examples(no_text, tokenizer), tokenizer, words_of=segment_unk_words(tokenizer))
    assert stats["unk_examples"][0]["words"] == ["the [UNK] sat"]


def test_extract_counts_unk_and_stops_above_the_rate_before_loading(tokenizer, tiny_bert_dir, tmp_path,
                                                                    monkeypatch, capsys):
    from bertlook.attention import modeling

    seg_path = _write_segments(tmp_path / "segments.jsonl", _unk_segments(tokenizer))
    summary = extract_segments(seg_path, str(tiny_bert_dir), tmp_path / "store", device="cpu", progress_every=0)
    assert summary["unk_tokens"] == 1 and summary["examples_with_unk"] == 1 and 0 < summary["unk_rate"] < 0.05
    assert summary["max_unk_rate"] == 0.05 and summary["unk_examples"][0]["words"] == ["☃"]
    assert AttentionStore(tmp_path / "store").meta["unknown_tokens"]["unk_tokens"] == 1

    def no_model(*a, **k):
        raise AssertionError("the model must not be loaded when the unknown-token check fails")

    monkeypatch.setattr(modeling, "load_model", no_model)
    with pytest.raises(BertlookError) as err:
        extract_segments(seg_path, str(tiny_bert_dir), tmp_path / "refused", device="cpu", progress_every=0,
                         max_unk_rate=0.001)
    msg = str(err.value)
    assert str(tiny_bert_dir) in msg and "99: '☃'" in msg and "[UNK]" in msg and "--max-unk-rate" in msg
    assert not (tmp_path / "refused").exists()

    from bertlook.cli import main

    capsys.readouterr()
    assert main(["extract-segments", "--segments", str(seg_path), "--model", str(tiny_bert_dir), "--out",
                 str(tmp_path / "cli"), "--device", "cpu", "--max-unk-rate", "0"]) == 2
    err_text = capsys.readouterr().err
    assert "error: model" in err_text and "Traceback" not in err_text
    with pytest.raises(SystemExit) as exit_:
        main(["extract-segments", "--segments", str(seg_path), "--model", str(tiny_bert_dir), "--out",
              str(tmp_path / "cli"), "--max-unk-rate", "1.5"])
    assert exit_.value.code == 2 and "max-unk-rate" in capsys.readouterr().err
    with pytest.raises(BertlookError, match=r"\[0, 1\]"):
        extract_segments(seg_path, str(tiny_bert_dir), tmp_path / "x", max_unk_rate=-0.1)


def test_check_max_unk_rate():
    from bertlook.attention.guards import check_max_unk_rate

    assert check_max_unk_rate(0) == 0.0 and check_max_unk_rate("0.05") == 0.05 and check_max_unk_rate(1) == 1.0
    for bad in (-0.01, 1.01, float("nan"), "x", None):
        with pytest.raises(BertlookError):
            check_max_unk_rate(bad)


# ------------------------------------------------------------------------------------ disk space

def _store_bytes(path: Path) -> tuple[int, int]:
    shards = sum(p.stat().st_size for p in path.glob("shard-*.bin"))
    total = sum(p.stat().st_size for p in path.iterdir() if p.is_file())
    return shards, total


def test_size_estimate_matches_the_written_store(segments, tokenizer, tiny_model, tmp_path, capsys):
    ex = _examples(segments, tokenizer)
    longest = max(len(s["tokens"]) for s in segments)
    summary = extract_to_store(ex, tiny_model, tmp_path / "s", batch_size=2, max_seq_len=longest - 1,
                               progress_every=0, shard_mb=0.001)  # several shards
    shards, total = _store_bytes(tmp_path / "s")
    kept = [len(s["tokens"]) for s in segments if len(s["tokens"]) <= longest - 1]
    assert summary["estimated_map_bytes"] == shards == sum(2 * 2 * 2 * n * n for n in kept)
    overhead = summary["estimated_bytes"] - summary["estimated_map_bytes"]
    assert summary["estimated_bytes"] >= total and summary["estimated_bytes"] - total <= overhead
    assert summary["disk_free_bytes"] > 0
    assert f"estimated store size" in capsys.readouterr().err


def test_disk_space_refusal(segments, tokenizer, tiny_model, tmp_path, monkeypatch):
    import shutil
    from collections import namedtuple

    Usage = namedtuple("Usage", "total used free")
    seen = []

    def tiny_disk(path):
        seen.append(Path(path))
        return Usage(10**9, 10**9 - 50 * 2**20, 50 * 2**20)  # 50 MiB free: below the 100 MiB margin

    monkeypatch.setattr(shutil, "disk_usage", tiny_disk)
    out = tmp_path / "not" / "yet" / "there" / "store"
    with pytest.raises(BertlookError) as err:
        extract_to_store(_examples(segments, tokenizer), tiny_model, out, progress_every=0)
    msg = str(err.value)
    assert "not enough disk space" in msg and str(out) in msg and "50.0 MiB free" in msg
    assert "--max-seq-len" in msg and "n_segments" in msg
    assert seen == [tmp_path]  # nearest existing parent of the output
    assert not out.exists() and not (tmp_path / "not").exists()
    monkeypatch.setattr(shutil, "disk_usage", lambda p: Usage(10**12, 0, 10**12))
    summary = extract_to_store(_examples(segments, tokenizer), tiny_model, out, progress_every=0)
    assert summary["disk_free_bytes"] == 10**12 and out.is_dir()


def test_token_ids_outside_the_vocabulary_refused(segments, tokenizer, tiny_model, tmp_path):
    seg, ids, tts = _examples(segments, tokenizer)[0]
    bad = list(ids)
    bad[1] = tiny_model.config.vocab_size + 5
    with pytest.raises(BertlookError, match=r"example 0: token id\(s\)"):
        extract_to_store([(seg, bad, tts)], tiny_model, tmp_path / "s", progress_every=0)
    assert not (tmp_path / "s").exists()


def test_device_warning_recorded_in_summary(segments, tokenizer, tiny_model, tmp_path, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    summary = extract_to_store(_examples(segments, tokenizer)[:1], tiny_model, tmp_path / "s", progress_every=0)
    assert "CUDA_VISIBLE_DEVICES='0,1'" in summary["device_warning"]
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    summary = extract_to_store(_examples(segments, tokenizer)[:1], tiny_model, tmp_path / "t", progress_every=0)
    assert summary["device_warning"] is None
