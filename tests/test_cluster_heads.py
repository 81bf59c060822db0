"""JS divergence between heads (vectorized vs naive), MDS, behaviour labels, cluster CLI."""

from __future__ import annotations

import argparse
import math
import sys
import warnings

import numpy as np
import pandas as pd
import pytest

from bertlook.attention.store import AttentionStore, AttentionWriter
from bertlook.analyses import cluster_heads as cluster_heads_module
from bertlook.analyses.cluster_heads import (
    DEFAULT_BACKEND,
    behaviour_labels,
    cluster_heads,
    js_divergence_example,
    js_divergence_matrix,
    js_pair_naive,
    mds_embedding,
)
from bertlook.errors import BertlookError
from bertlook.analyses.surface_stats import compute_surface_stats
from bertlook.cli.cluster_heads import register_cli
from bertlook.cli.surface_stats import register_cli as register_stats_cli

LAYERS, HEADS = 2, 3
LENGTHS = (5, 7, 9)


def random_store(path, *, lengths=LENGTHS, num_layers=LAYERS, num_heads=HEADS, seed=0, alpha=0.5):
    rng = np.random.default_rng(seed)
    with AttentionWriter(path, num_layers=num_layers, num_heads=num_heads) as w:
        for i, n in enumerate(lengths):
            attn = rng.dirichlet(np.full(n, alpha), size=(num_layers, num_heads, n))
            tokens = ["[CLS]"] + [".", "a", ",", "b", "c", "d", "e"][: n - 2] + ["[SEP]"]
            w.add({"id": i, "tokens": tokens}, attn)
    return AttentionStore(path)


def naive_matrix(store):
    K = store.num_layers * store.num_heads
    H = store.num_heads
    D = np.zeros((K, K))
    for _, attn in store:
        for i in range(K):
            for j in range(K):
                if i != j:
                    D[i, j] += js_pair_naive(attn[i // H, i % H], attn[j // H, j % H])
    return D


@pytest.fixture()
def store(tmp_path):
    return random_store(tmp_path / "store")


# ----------------------------------------------------------------------------------- naive formula
def test_js_pair_naive_hand_values():
    # p = (1, 0), q = (0, 1), n = 2: smoothed 0.999 p + 0.0005 -> (0.9995, 0.0005) and (0.0005, 0.9995),
    # m = (0.5, 0.5); both KL terms equal 0.9995 ln(0.9995 / 0.5) + 0.0005 ln(0.0005 / 0.5)
    kl = 0.9995 * math.log(1.999) + 0.0005 * math.log(0.001)
    assert js_pair_naive(np.array([1.0, 0.0]), np.array([0.0, 1.0])) == pytest.approx(kl)
    assert kl < math.log(2)
    # p = (1/2, 1/2) (smoothing leaves it), q = (1, 0) -> (0.9995, 0.0005), m = (0.74975, 0.25025)
    kl_p = 0.5 * math.log(0.5 / 0.74975) + 0.5 * math.log(0.5 / 0.25025)
    kl_q = 0.9995 * math.log(0.9995 / 0.74975) + 0.0005 * math.log(0.0005 / 0.25025)
    expected = 0.5 * kl_p + 0.5 * kl_q
    assert js_pair_naive(np.array([0.5, 0.5]), np.array([1.0, 0.0])) == pytest.approx(expected)
    # rows are summed: two identical rows give twice the value
    two = js_pair_naive(np.array([[0.5, 0.5], [0.5, 0.5]]), np.array([[1.0, 0.0], [1.0, 0.0]]))
    assert two == pytest.approx(2 * expected)
    # without smoothing, strictly positive inputs: disjoint-ish distributions approach ln 2
    assert js_pair_naive(np.array([1 - 1e-12, 1e-12]), np.array([1e-12, 1 - 1e-12]), smoothing=0.0) == pytest.approx(
        math.log(2), rel=1e-9)
    p = np.array([[0.2, 0.8], [0.6, 0.4]])
    assert js_pair_naive(p, p) == pytest.approx(0.0, abs=1e-15)


# ------------------------------------------------------------------------------- vectorized matrix
def test_vectorized_equals_naive(store):
    D = js_divergence_matrix(store)
    ref = naive_matrix(store)
    assert D.shape == (6, 6) and D.dtype == np.float64
    np.testing.assert_allclose(D, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "kwargs",
    [
        dict(dtype="float64"),
        dict(dtype="float32", num_threads=2),
        dict(dtype="float64", backend="numpy"),
        dict(dtype="float64", backend="numpy", chunk=1),
        dict(dtype="float64", backend="numpy", chunk=2, num_threads=2),
        dict(dtype="float32", backend="numpy", num_threads=2),
        dict(dtype="float64", backend="torch", chunk=4),
        dict(dtype="float32", backend="torch", num_threads=2),
    ],
)
def test_vectorized_variants_agree(store, kwargs):
    ref = naive_matrix(store)
    tol = 1e-10 if kwargs["dtype"] == "float64" else 1e-5
    np.testing.assert_allclose(js_divergence_matrix(store, **kwargs), ref, rtol=tol, atol=tol)


def test_default_backend_is_numba_and_falls_back_to_torch(store, monkeypatch, capsys):
    pytest.importorskip("numba")
    assert DEFAULT_BACKEND == "numba"
    numba_D = js_divergence_matrix(store)
    np.testing.assert_array_equal(numba_D, js_divergence_matrix(store, backend="numba"))
    torch_D = js_divergence_matrix(store, backend="torch")
    monkeypatch.setitem(sys.modules, "bertlook.analyses.xlogx", None)  # import fails: ImportError
    monkeypatch.delattr(sys.modules["bertlook.analyses"], "xlogx", raising=False)
    monkeypatch.setattr(cluster_heads_module, "_FALLBACK_WARNED", [])
    capsys.readouterr()
    np.testing.assert_array_equal(js_divergence_matrix(store), torch_D)
    np.testing.assert_array_equal(js_divergence_matrix(store, backend="numba"), torch_D)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "numba unavailable" in err and "using torch" in err
    np.testing.assert_allclose(numba_D, torch_D, rtol=1e-5, atol=1e-6)


def test_symmetric_zero_diagonal_and_identical_heads(tmp_path):
    rng = np.random.default_rng(1)
    with AttentionWriter(tmp_path / "s", num_layers=2, num_heads=2) as w:
        for i, n in enumerate((4, 6)):
            attn = rng.dirichlet(np.ones(n), size=(2, 2, n))
            attn[1, 1] = attn[0, 0]  # head 2-2 is a copy of head 1-1
            w.add({"id": i, "tokens": ["x"] * n}, attn)
    D = js_divergence_matrix(AttentionStore(tmp_path / "s"))
    np.testing.assert_array_equal(D, D.T)
    np.testing.assert_array_equal(np.diag(D), 0.0)
    assert D[0, 3] == pytest.approx(0.0, abs=1e-5)
    assert D[0, 1] > 0.1 and (D >= 0).all()


def test_js_bounded_by_n_ln2(tmp_path, store):
    # disjoint heads: head 1 always looks at token 0, head 2 at token 1 -> close to the bound
    n = 6
    attn = np.zeros((1, 2, n, n))
    attn[0, 0, :, 0] = 1.0
    attn[0, 1, :, 1] = 1.0
    D = js_divergence_example(attn)
    assert 0.95 * n * math.log(2) < D[0, 1] <= n * math.log(2)
    # random store: every pair is below the sum over examples of n ln 2
    assert (js_divergence_matrix(store) <= sum(LENGTHS) * math.log(2)).all()


def test_caller_array_untouched_and_max_examples(store):
    attn = np.array(store.get(0), dtype=np.float32)
    before = attn.copy()
    js_divergence_example(attn)
    np.testing.assert_array_equal(attn, before)
    one = js_divergence_matrix(store, max_examples=1)
    np.testing.assert_allclose(one, js_divergence_example(store.get(0)))


def test_bad_arguments(store):
    with pytest.raises(BertlookError):
        js_divergence_matrix(store, dtype="float16")
    with pytest.raises(BertlookError):
        js_divergence_matrix(store, backend="jax")
    with pytest.raises(BertlookError, match="no examples"):
        js_divergence_matrix(store, max_examples=0)


# -------------------------------------------------------------------------------------------- MDS
def two_cluster_matrix():
    rng = np.random.default_rng(3)
    pts = np.concatenate([rng.normal(0, 0.3, (6, 2)), rng.normal([10, 0], 0.3, (6, 2))])
    return np.sqrt(((pts[:, None] - pts[None]) ** 2).sum(-1))


def test_mds_deterministic_and_keeps_clusters():
    D = two_cluster_matrix()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no FutureWarning from scikit-learn parameter names
        a = mds_embedding(D, seed=0, n_init=2, max_iter=200)
        b = mds_embedding(D, seed=0, n_init=2, max_iter=200)
    assert a.shape == (12, 2)
    np.testing.assert_array_equal(a, b)
    E = np.sqrt(((a[:, None] - a[None]) ** 2).sum(-1))
    within = max(E[:6, :6].max(), E[6:, 6:].max())
    between = E[:6, 6:].min()
    assert within < 2.0 < 8.0 < between


def test_mds_rejects_asymmetric():
    D = two_cluster_matrix()
    D[0, 1] += 1.0
    with pytest.raises(BertlookError, match="symmetric"):
        mds_embedding(D, seed=0)


# ------------------------------------------------------------------------------------- behaviours
def test_behaviour_precedence():
    rows = [
        dict(next=0.1, prev=0.1, entropy=1.0, cls=0.1, sep=0.1, punct=0.1),  # other
        dict(next=0.6, prev=0.1, entropy=1.0, cls=0.1, sep=0.1, punct=0.1),  # next
        dict(next=0.6, prev=0.6, entropy=1.0, cls=0.1, sep=0.1, punct=0.1),  # prev beats next
        dict(next=0.6, prev=0.1, entropy=3.9, cls=0.1, sep=0.1, punct=0.1),  # broad beats next
        dict(next=0.1, prev=0.1, entropy=3.9, cls=0.7, sep=0.1, punct=0.1),  # [CLS] beats broad
        dict(next=0.1, prev=0.1, entropy=3.9, cls=0.1, sep=0.7, punct=0.1),  # [SEP] beats broad
        dict(next=0.1, prev=0.1, entropy=1.0, cls=0.7, sep=0.7, punct=0.1),  # [SEP] beats [CLS]
        dict(next=0.1, prev=0.1, entropy=1.0, cls=0.1, sep=0.7, punct=0.7),  # punct beats [SEP]
        dict(next=0.5, prev=0.5, entropy=3.8, cls=0.6, sep=0.6, punct=0.6),  # thresholds are strict
    ]
    assert behaviour_labels(pd.DataFrame(rows)) == [
        "other", "next token", "previous token", "broad", "[CLS]", "[SEP]", "[SEP]", "punctuation", "other",
    ]


def test_behaviour_needs_columns():
    with pytest.raises(BertlookError, match="punct"):
        behaviour_labels(pd.DataFrame([dict(next=0, prev=0, entropy=0, cls=0, sep=0)]))


# ----------------------------------------------------------------------------------- cluster_heads
def test_cluster_heads(store):
    stats, _ = compute_surface_stats(store)
    shuffled = stats.sample(frac=1.0, random_state=0)  # row order must not matter
    js_df, clusters = cluster_heads(store, shuffled, seed=0, n_init=2, max_iter=100)
    labels = ["1-1", "1-2", "1-3", "2-1", "2-2", "2-3"]
    assert list(js_df.columns) == ["head", *labels]
    assert js_df["head"].tolist() == labels
    np.testing.assert_allclose(js_df[labels].to_numpy(), naive_matrix(store), rtol=1e-5, atol=1e-5)
    assert list(clusters.columns) == ["layer", "head", "x", "y", "behavior"]
    assert clusters[["layer", "head"]].values.tolist() == [[1, 1], [1, 2], [1, 3], [2, 1], [2, 2], [2, 3]]
    assert clusters["behavior"].tolist() == behaviour_labels(stats)
    _, again = cluster_heads(store, stats, seed=0, n_init=2, max_iter=100)
    np.testing.assert_array_equal(again[["x", "y"]].to_numpy(), clusters[["x", "y"]].to_numpy())


def test_cluster_heads_missing_head(store):
    stats, _ = compute_surface_stats(store)
    with pytest.raises(BertlookError, match="lacks 1 head"):
        cluster_heads(store, stats.iloc[:-1], seed=0)
    with pytest.raises(BertlookError, match="more than once"):
        cluster_heads(store, pd.concat([stats, stats.iloc[:1]]), seed=0)


# -------------------------------------------------------------------------------------------- CLI
def _parser():
    parser = argparse.ArgumentParser(prog="bertlook")
    sub = parser.add_subparsers(dest="command", required=True)
    register_stats_cli(sub)
    register_cli(sub)
    return parser


def test_cli_stats_then_cluster(tmp_path, store, capsys):
    out = tmp_path / "out"
    p = _parser()
    a = p.parse_args(["surface-stats", "--attention", str(store.path), "--out", str(out / "attention_stats.csv"),
                      "--summary", str(out / "summary.json")])
    assert a.func(a) == 0
    a = p.parse_args(["cluster-heads", "--attention", str(store.path), "--stats", str(out / "attention_stats.csv"),
                      "--out-js", str(out / "js_divergence.csv"), "--out-clusters", str(out / "head_clusters.csv"),
                      "--seed", "0", "--max-examples", "2", "--mds-n-init", "2", "--mds-max-iter", "100",
                      "--mds-eps", "1e-9"])
    assert a.func(a) == 0
    js = pd.read_csv(out / "js_divergence.csv")
    assert js.shape == (6, 7) and js.columns[0] == "head"
    clusters = pd.read_csv(out / "head_clusters.csv")
    assert list(clusters.columns) == ["layer", "head", "x", "y", "behavior"]
    assert "2 of 3 examples" in capsys.readouterr().out
    help_text = p._subparsers._group_actions[0].choices["cluster-heads"].format_help()
    for flag in ("--attention", "--stats", "--out-js", "--out-clusters", "--seed", "--max-examples",
                 "--mds-n-init", "--mds-max-iter", "--mds-eps"):
        assert flag in help_text


def test_cli_bad_stats_file(tmp_path, store):
    bad = tmp_path / "stats.csv"
    bad.write_text("layer,head,cls\n1,1,0.5\n")
    a = _parser().parse_args(["cluster-heads", "--attention", str(store.path), "--stats", str(bad),
                              "--out-js", str(tmp_path / "js.csv"), "--out-clusters", str(tmp_path / "c.csv")])
    with pytest.raises(BertlookError, match="stats.csv"):
        a.func(a)
    assert not (tmp_path / "js.csv").exists()
    a = _parser().parse_args(["cluster-heads", "--attention", str(store.path), "--stats", str(tmp_path / "none.csv"),
                              "--out-js", str(tmp_path / "js.csv"), "--out-clusters", str(tmp_path / "c.csv")])
    with pytest.raises(BertlookError, match="none.csv"):
        a.func(a)
