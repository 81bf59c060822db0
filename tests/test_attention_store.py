"""Attention store: round trip, sharding, atomicity, validation."""

import json

import numpy as np
import pytest

from bertlook.attention_store import AttentionStore, AttentionStoreError, AttentionWriter


def _attn(rng, layers, heads, n):
    a = rng.random((layers, heads, n, n))
    return a / a.sum(-1, keepdims=True)


def test_round_trip_and_sharding(tmp_path):
    rng = np.random.default_rng(0)
    maps = [_attn(rng, 2, 3, n) for n in (4, 7, 5)]
    out = tmp_path / "store"
    # tiny shards: every example after the first opens a new shard
    with AttentionWriter(out, num_layers=2, num_heads=3, shard_bytes=400, meta={"model": {"x": 1}}) as w:
        for i, a in enumerate(maps):
            w.add({"id": i, "tokens": [f"t{k}" for k in range(a.shape[-1])]}, a)
    store = AttentionStore(out)
    assert len(store) == 3 and store.meta["n_shards"] == 3 and store.meta["model"] == {"x": 1}
    for (rec, got), want in zip(store, maps):
        assert got.dtype == np.float16 and got.shape == want.shape
        np.testing.assert_allclose(got, want, atol=1e-3)
        assert rec["n"] == want.shape[-1]
    assert not any(p.name.startswith(".store.tmp") for p in tmp_path.iterdir())


def test_exception_leaves_nothing(tmp_path):
    out = tmp_path / "store"
    with pytest.raises(RuntimeError):
        with AttentionWriter(out, num_layers=1, num_heads=1) as w:
            w.add({"id": 0, "tokens": ["a", "b"]}, np.full((1, 1, 2, 2), 0.5))
            raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []


def test_shape_and_token_checks(tmp_path):
    w = AttentionWriter(tmp_path / "s", num_layers=1, num_heads=2)
    with pytest.raises(AttentionStoreError, match="example 7"):
        w.add({"id": 7, "tokens": ["a", "b"]}, np.zeros((1, 1, 2, 2)))
    with pytest.raises(AttentionStoreError, match="3 tokens"):
        w.add({"id": 8, "tokens": ["a", "b", "c"]}, np.zeros((1, 2, 2, 2)))
    w.abort()


def test_excluded_counts_in_meta_and_bad_store(tmp_path):
    out = tmp_path / "s"
    w = AttentionWriter(out, num_layers=1, num_heads=1)
    w.add({"id": 0, "tokens": ["a"]}, np.ones((1, 1, 1, 1)))
    w.close(excluded={"too_long": 2, "ids": [5, 9]})
    meta = json.loads((out / "meta.json").read_text())
    assert meta["excluded"] == {"too_long": 2, "ids": [5, 9]} and meta["n_examples"] == 1
    (out / "index.jsonl").write_text('{"id": 0, "n": 1, "shard": 0, "offset": 0, "tokens": ["a"]}\nnot json\n')
    with pytest.raises(AttentionStoreError, match=r"index.jsonl:2"):
        AttentionStore(out)
    with pytest.raises(AttentionStoreError, match="not an attention store"):
        AttentionStore(tmp_path / "nothing")
