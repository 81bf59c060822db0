"""The layer-wise JS reader (issue 42): visible triangle of causal maps, sampled-rows estimator, torch kernel."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from bertlook.analyses.cluster_heads import (
    JsAccumulator,
    js_divergence_example,
    js_divergence_partial,
    js_pair_naive,
    reduce_js_divergence,
)
from bertlook.analyses.js_device import ESTIMATOR, EntryPlan, sample_rows, stable_id_hash
from bertlook.attention.store import AttentionStore, AttentionWriter
from bertlook.errors import BertlookError

torch = pytest.importorskip("torch")

L, H = 2, 3


def causal_maps(rng, n, *, layers=L, heads=H, alpha=0.4):
    """float16 ``[layer, head, n, n]``: row q a Dirichlet draw over keys 0..q, zeros after."""
    a = np.zeros((layers, heads, n, n))
    for q in range(n):
        a[..., q, : q + 1] = rng.dirichlet(np.full(q + 1, alpha), size=(layers, heads))
    return a.astype(np.float16)


def dense_maps(rng, n, *, layers=L, heads=H, alpha=0.4):
    return rng.dirichlet(np.full(n, alpha), size=(layers, heads, n)).astype(np.float16)


def run(acc, examples, *, as_tensors=False):
    for k, a in enumerate(examples):
        for layer in range(a.shape[0]):
            x = torch.from_numpy(a[layer]) if as_tensors else a[layer]
            acc.add_layer({"id": k}, layer, x)
        acc.end_example({"id": k})
    return acc.total


def naive_total(examples):
    K = L * H
    D = np.zeros((K, K))
    for a in examples:
        a = a.astype(np.float32)
        for i in range(K):
            for j in range(i + 1, K):
                D[i, j] += js_pair_naive(a[i // H, i % H], a[j // H, j % H])
    return D + D.T


def test_causal_visible_triangle_equals_full_computation():
    rng = np.random.default_rng(0)
    examples = [causal_maps(rng, n) for n in (1, 2, 6, 33, 64)]
    full = run(JsAccumulator(L, H), examples)
    visible = run(JsAccumulator(L, H, causal=True), examples)
    ref = naive_total(examples)  # float64, every entry
    # the skipped entries (p = q = s/n) add exactly 0; the full float32 computation adds their rounding
    # (measured max rel to the float64 reference: visible 1.7e-7, full 2.8e-7)
    np.testing.assert_allclose(visible, ref, rtol=2e-6, atol=1e-9)
    np.testing.assert_allclose(full, ref, rtol=2e-5, atol=1e-7)
    np.testing.assert_allclose(visible, full, rtol=2e-5, atol=1e-7)


def test_encoder_add_equals_js_divergence_example_bit_for_bit():
    rng = np.random.default_rng(1)
    examples = [dense_maps(rng, n) for n in (3, 17, 40)]
    want = sum(js_divergence_example(a) for a in examples)
    np.testing.assert_array_equal(run(JsAccumulator(L, H), examples), want)
    acc = JsAccumulator(L, H)
    for k, a in enumerate(examples):
        acc.add({"id": k}, a)
    np.testing.assert_array_equal(acc.total, want)  # add() == add_layer() + end_example()
    np.testing.assert_array_equal(run(JsAccumulator(L, H), examples, as_tensors=True), want)  # CPU tensors


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("rows", [None, 5])
def test_torch_kernel_equals_numba_on_cpu_tensors(causal, rows):
    rng = np.random.default_rng(2)
    make = causal_maps if causal else dense_maps
    examples = [make(rng, n) for n in (4, 23, 48)]
    host = run(JsAccumulator(L, H, causal=causal, rows=rows), examples)
    dev = run(JsAccumulator(L, H, causal=causal, rows=rows, device_kernel=True), examples, as_tensors=True)
    # both float32 entries and logs (Cephes logf vs torch's); numba sums blocks of 512 products in float32,
    # torch every product in float64: measured max rel 2e-7 exact, 1e-6 sampled (weights up to 10); the torch
    # kernel is within 2e-8 of the float64 reference (numba 2e-7)
    np.testing.assert_allclose(dev, host, rtol=3e-6, atol=1e-8)
    if rows is None:
        np.testing.assert_allclose(dev, naive_total(examples), rtol=2e-6, atol=1e-8)


def test_torch_kernel_blocks_do_not_change_the_sums():
    from bertlook.analyses.js_device import js_terms_torch

    rng = np.random.default_rng(3)
    P = torch.from_numpy(rng.dirichlet(np.full(50, 0.5), size=7).astype(np.float32))
    one = js_terms_torch(P, block_bytes=1)  # one pair per block
    allb = js_terms_torch(P, block_bytes=2**30)
    for a, b in zip(one, allb):
        np.testing.assert_array_equal(np.triu(a.numpy()), np.triu(b.numpy()))


def test_sample_rows_strata():
    q, w = sample_rows(10, None, 0, 7)
    np.testing.assert_array_equal(q, np.arange(10))
    np.testing.assert_array_equal(w, np.ones(10))
    q, w = sample_rows(10, 12, 0, 7)  # R >= n: every row
    np.testing.assert_array_equal(q, np.arange(10))
    q, w = sample_rows(103, 8, 5, "doc-1")
    bounds = (np.arange(9) * 103) // 8
    assert ((q >= bounds[:-1]) & (q < bounds[1:])).all()
    np.testing.assert_array_equal(w, np.diff(bounds))
    assert w.sum() == 103
    q2, _ = sample_rows(103, 8, 5, "doc-1")
    np.testing.assert_array_equal(q, q2)
    assert stable_id_hash(3) == stable_id_hash(3) != stable_id_hash("3")
    draws = {tuple(sample_rows(103, 8, s, "doc-1")[0]) for s in range(5)}
    assert len(draws) > 1


def test_stable_hash_does_not_depend_on_the_process():
    code = "from bertlook.analyses.js_device import stable_id_hash as h; print(h('x'), h(12))"
    outs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": str(s)}).stdout for s in (1, 2)}
    assert len(outs) == 1


@pytest.mark.parametrize("causal", [False, True])
def test_entry_plan_groups_cover_the_sampled_rows(causal):
    plan = EntryPlan(50, causal=causal, rows=7, seed=1, example_id=0)
    covered = np.sort(np.concatenate([idx for _, idx in plan.groups]))
    want = [s * 50 + k for s, qs in enumerate(plan.q) for k in range(qs + 1 if causal else 50)]
    np.testing.assert_array_equal(covered, want)
    assert plan.size == len(want) == len(plan.entry_weight)


@pytest.mark.parametrize("causal", [False, True])
def test_estimator_deterministic_and_exact_when_rows_cover(causal):
    rng = np.random.default_rng(4)
    make = causal_maps if causal else dense_maps
    examples = [make(rng, n) for n in (9, 30, 31)]
    exact = run(JsAccumulator(L, H, causal=causal), examples)
    np.testing.assert_array_equal(run(JsAccumulator(L, H, causal=causal, rows=31), examples), exact)
    a = run(JsAccumulator(L, H, causal=causal, rows=4, seed=3), examples)
    np.testing.assert_array_equal(a, run(JsAccumulator(L, H, causal=causal, rows=4, seed=3), examples))
    assert not np.array_equal(a, run(JsAccumulator(L, H, causal=causal, rows=4, seed=4), examples))
    assert not np.array_equal(a, exact)


@pytest.mark.parametrize("causal", [False, True])
def test_estimator_unbiased(causal):
    rng = np.random.default_rng(5)
    make = causal_maps if causal else dense_maps
    examples = [make(rng, 13, alpha=0.3)]
    exact = run(JsAccumulator(L, H, causal=causal), examples)
    draws = np.array([run(JsAccumulator(L, H, causal=causal, rows=3, seed=s), examples) for s in range(300)])
    iu = np.triu_indices(L * H, 1)
    mean, se = draws.mean(axis=0)[iu], draws.std(axis=0)[iu] / np.sqrt(len(draws))
    assert (np.abs(mean - exact[iu]) <= 5 * se + 1e-9).all()
    assert np.abs(mean - exact[iu]).max() / exact[iu].max() < 0.05


def test_reader_errors():
    rng = np.random.default_rng(6)
    a = dense_maps(rng, 5)
    acc = JsAccumulator(L, H)
    with pytest.raises(BertlookError, match="expected 0"):
        acc.add_layer({"id": 0}, 1, a[1])
    acc.add_layer({"id": 0}, 0, a[0])
    with pytest.raises(BertlookError, match="1 of 2 layers"):
        acc.end_example({"id": 0})
    with pytest.raises(BertlookError, match="shape"):
        JsAccumulator(L, H).add_layer({"id": 0}, 0, a)
    with pytest.raises(BertlookError, match="example id"):
        JsAccumulator(L, H, rows=2).add_layer({}, 0, a[0])
    with pytest.raises(BertlookError, match="rows must be >= 1"):
        JsAccumulator(L, H, rows=0)


def make_store(path, rng):
    with AttentionWriter(path, num_layers=L, num_heads=H) as w:
        for i, n in enumerate((6, 9)):
            w.add({"id": i, "tokens": ["[CLS]"] + ["a"] * (n - 2) + ["[SEP]"]}, dense_maps(rng, n))
    return AttentionStore(path)


def test_partials_refuse_to_mix_estimators(tmp_path):
    rng = np.random.default_rng(7)
    store = make_store(tmp_path / "s", rng)
    exact = js_divergence_partial(store)
    assert "estimator" not in exact[0] and "rows" not in exact[0]  # exact partials: the format of before
    est4 = js_divergence_partial(store, rows=4, seed=1)
    assert est4[0]["estimator"] == ESTIMATOR and est4[0]["rows"] == 4 and est4[0]["seed"] == 1
    est5 = js_divergence_partial(store, rows=5, seed=1)
    with pytest.raises(BertlookError, match=r"b\.npz: JS estimator 'sampled-rows' differs from 'exact' in a\.npz"):
        reduce_js_divergence([exact, est4], where=["a.npz", "b.npz"])
    with pytest.raises(BertlookError, match=r"b\.npz: JS estimator rows 5 differs from 4 in a\.npz"):
        reduce_js_divergence([est4, est5], where=["a.npz", "b.npz"])
    D, info = reduce_js_divergence([est4, est4], where=["a.npz", "b.npz"])
    np.testing.assert_array_equal(D, 2 * est4[1]["js_sum"])
    assert info["estimator"] == ESTIMATOR and info["rows"] == 4


def test_store_reader_needs_no_torch(tmp_path):
    rng = np.random.default_rng(8)
    make_store(tmp_path / "s", rng)
    code = ("import sys; from bertlook.attention.store import AttentionStore;"
            "from bertlook.analyses.cluster_heads import js_divergence_partial;"
            f"m, a = js_divergence_partial(AttentionStore({str(tmp_path / 's')!r}), rows=3);"
            "print('torch' in sys.modules, m['n_examples'])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "2"]


def test_cli_js_rows(tmp_path, capsys):
    import argparse

    from bertlook.cli.cluster_heads import register_cli

    store = make_store(tmp_path / "s", np.random.default_rng(9))
    p = argparse.ArgumentParser()
    register_cli(p.add_subparsers())
    for name, extra in (("exact.npz", []), ("rows.npz", ["--js-rows", "3", "--seed", "2"])):
        a = p.parse_args(["cluster-heads", "--attention", str(store.path), "--out-partial", str(tmp_path / name), *extra])
        assert a.func(a) == 0
    want = js_divergence_partial(store, rows=3, seed=2)[1]["js_sum"]
    np.testing.assert_array_equal(np.load(tmp_path / "rows.npz")["js_sum"], want)
    a = p.parse_args(["cluster-heads", "--partial", str(tmp_path / "exact.npz"), "--partial", str(tmp_path / "rows.npz"),
                      "--stats", "x.csv", "--out-js", "j.csv", "--out-clusters", "c.csv"])
    with pytest.raises(BertlookError, match="rows.npz: JS estimator 'sampled-rows' differs from 'exact' in .*exact.npz"):
        a.func(a)
    a = p.parse_args(["cluster-heads", "--attention", str(store.path), "--out-partial", "x.npz", "--js-rows", "0"])
    with pytest.raises(BertlookError, match="--js-rows must be >= 1"):
        a.func(a)


@pytest.mark.parametrize("argv", [
    ["cluster-heads", "--attention", "s", "--out-partial", "x.npz", "--js-rows", "0"],
    ["cluster-heads", "--attention", "s", "--out-partial", "x.npz", "--threads", "0"],
    ["extract-segments", "--segments", "seg.jsonl", "--model", "m", "--js-rows", "0"],
])
def test_cli_refuses_a_count_below_1_with_error_and_exit_2(argv, tmp_path, monkeypatch, capsys):
    """The shared check (errors.check_at_least), before any file is read: ``error: NAME must be >= 1``, exit 2."""
    from bertlook.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    flag = argv[-2]
    assert capsys.readouterr().err.startswith(f"error: {flag} must be >= 1, got 0")


def test_copy_triangle_is_the_visible_index_gather():
    from bertlook.analyses.js_device import _visible_index, copy_triangle

    x = np.random.default_rng(10).random((3, 11, 11)).astype(np.float16)
    out = np.empty((3, 66), dtype=np.float32)
    copy_triangle(x, out)
    np.testing.assert_array_equal(out, x.reshape(3, -1)[:, _visible_index(11)])


def test_entries_per_pair_matches_the_plans():
    from bertlook.analyses.js_device import entries_per_pair

    for causal in (False, True):
        assert entries_per_pair(40, causal=causal) == EntryPlan(40, causal=causal, rows=None, seed=0, example_id=0).size
        assert entries_per_pair(40, causal=causal, rows=64) == entries_per_pair(40, causal=causal)
        sizes = [EntryPlan(400, causal=causal, rows=8, seed=s, example_id=0).size for s in range(200)]
        assert abs(np.mean(sizes) - entries_per_pair(400, causal=causal, rows=8)) < 0.02 * np.mean(sizes)
