"""The fused probe loops (bertlook.analyses.probes.kernels): the MLP and hidden-layer cohorts' sigma, scores and
gradients against torch's formulas, factored and per-element exp, the offset rows, the fixed summation order,
vectorised code."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("numba")

from bertlook.analyses.probes import kernels as pk  # noqa: E402
from bertlook.analyses.probes.cohorts import _offset_tables, _sigma  # noqa: E402
from numba_asm import CPUINFO, compiled_asm  # noqa: E402

H = 32  # LANES x 2: the fold runs once


def terms(rng, *shapes, scale=1.5):
    return [(rng.standard_normal(s) * scale).astype(np.float32) for s in shapes]


def grid(direct: bool, a, b, d=None) -> np.ndarray:
    """sigma_grid's ``[word, candidate, hidden]`` from the factors exp(-t), or (``direct``) the terms."""
    by_offset = d is not None
    ts = [a, b, d if by_offset else np.zeros((1, a.shape[1]), np.float32)]
    factors = ts if direct else [np.exp(-t) for t in ts]
    sg = np.empty((a.shape[0], b.shape[0], a.shape[1]), np.float32)
    pk.sigma_grid(*factors, *ts, direct, by_offset, sg)
    return sg


def close(got, want, rtol=2e-6):
    want = np.asarray(want)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * float(np.abs(want).max()))


# ============================================================================================ MLP
@pytest.mark.parametrize("direct", [False, True])
def test_mlp_kernels_are_torch_formulas(direct):
    rng = np.random.default_rng(0)
    W = 7
    a, b = terms(rng, (W, H), (W + 1, H))
    z, g, dh0 = terms(rng, (W * W, H), (W, W + 1), (W, H))
    sg = grid(direct, a, b)
    sig = torch.sigmoid(torch.from_numpy(a)[:, None] + torch.from_numpy(b)[None])  # [word, candidate, hidden]
    close(sg, sig)
    s = np.empty((W, W), np.float32)
    pk.mlp_scores(sg, z, s)
    zt = torch.from_numpy(z).view(W, W, H)
    close(s, (sig[:, 1:] * zt).sum(-1))
    m, da, db = np.empty((W * W, H), np.float32), np.empty((W, H), np.float32), np.empty((W + 1, H), np.float32)
    pk.mlp_backward(sg, z, g, dh0, m, da, db)
    gt = torch.from_numpy(g)
    dsig = torch.cat([torch.from_numpy(dh0)[:, None], zt * gt[:, 1:, None]], dim=1)  # [word, candidate, hidden]
    q = dsig * sig * (1 - sig)
    close(m, (sig[:, 1:] * gt[:, 1:, None]).reshape(W * W, H))
    close(da, q.sum(1))
    close(db, q.sum(0))


# =================================================================================== hidden layer
@pytest.mark.parametrize("direct", [False, True])
def test_hidden_kernels_are_torch_formulas(direct):
    rng = np.random.default_rng(1)
    W = 6
    a, b, d = terms(rng, (W, H), (W + 1, H), (2 * W, H))
    wo, g = terms(rng, (H,), (W, W + 1))
    sg = grid(direct, a, b, d)
    index = _offset_tables(W)[1]  # [word*candidate]: each pair's offset row
    pre = (torch.from_numpy(a)[:, None] + torch.from_numpy(b)[None]).reshape(W * (W + 1), H)
    pre += torch.from_numpy(d)[index]
    sig = torch.sigmoid(pre)  # [word*candidate, hidden]
    close(sg.reshape(-1, H), sig)
    s = np.empty((W, W + 1), np.float32)
    pk.hidden_scores(sg, wo, s)
    close(s, (sig @ torch.from_numpy(wo)).view(W, W + 1))
    dwo, da = np.empty(H, np.float32), np.empty((W, H), np.float32)
    db, dd = np.empty((W + 1, H), np.float32), np.empty((2 * W, H), np.float32)
    pk.hidden_backward(sg, wo, g, dwo, da, db, dd)
    gt = torch.from_numpy(g).reshape(-1, 1)  # [word*candidate, 1]
    q = gt * torch.from_numpy(wo) * sig * (1 - sig)  # [word*candidate, hidden]
    close(dwo, (sig * gt).sum(0))
    close(da, q.view(W, W + 1, H).sum(1))
    close(db, q.view(W, W + 1, H).sum(0))
    close(dd, torch.zeros(2 * W, H).index_add_(0, index, q))


# ============================================================================ attention features
def attn_inputs(rng, W=7, K=5, V=3):
    """A sentence's maps (``gt`` ``[i, j, head]`` = A(i->j), ROOT features ``rt`` ``[i, 2, 2K]``), the GloVe terms
    ``P`` ``[i, v, 2K]``, ``Q`` ``[candidate, v, 2K]`` (two rows more than read: the cohorts pass padded rows), a, b
    ``[v, 2]`` and d loss / d scores ``G`` ``[v, i, candidate]``."""
    gt = rng.random((W, W, K), dtype=np.float32)
    rt = rng.random((W, 2, 2 * K), dtype=np.float32)
    P, Q = terms(rng, (W + 2, V, 2 * K), (W + 3, V, 2 * K))
    ab, G = terms(rng, (V, 2), (V, W, W + 1))
    return gt, rt, P, Q, ab, G


def attn_forward(gt, rt, P, Q, ab, V):
    """:func:`attn_scores` into fresh arrays: the scores ``[v, i, candidate]`` and ``rr`` ``[i, v, 2]``."""
    W = gt.shape[0]
    s, rr = np.empty((V, W, W + 1), np.float32), np.empty((W, V, 2), np.float32)
    pk.attn_scores(gt, rt, P, Q, ab, s, rr)
    return s, rr


def attn_reference(gt, rt, P, Q, ab, G):
    """The Attn cohorts' scores and gradients in float64 torch, from the ``[i, j, 2K]`` pair features (as the
    cohort built them before the loops) and autograd."""
    W = gt.shape[0]
    g = torch.from_numpy(gt).double()
    X = torch.cat([g, g.transpose(0, 1)], dim=-1)  # [i, j, 2K]: x_ij = [A(i->j) ; A(j->i)]
    r = torch.from_numpy(rt).double()
    P, Q, ab = (torch.from_numpy(t[: W + 1]).double().requires_grad_() for t in (P, Q, ab))
    s_words = torch.einsum("ijf,ivf->vij", X, P[:W]) + torch.einsum("ijf,jvf->vij", X, Q[1 : W + 1])
    rr = torch.einsum("icf,ivf->ivc", r, P[:W] + Q[0])  # [i, v, 2]: ra, rb
    s = torch.cat([(rr * ab).sum(-1).T.unsqueeze(-1), s_words], dim=-1)  # [v, i, candidate]
    (s * torch.from_numpy(G).double()).sum().backward()
    return s.detach(), rr.detach(), P.grad[:W], Q.grad, ab.grad


def test_attn_kernels_are_the_pair_feature_formulas():
    rng = np.random.default_rng(4)
    gt, rt, P, Q, ab, G = attn_inputs(rng)
    V, W = G.shape[:2]
    s, rr = attn_forward(gt, rt, P, Q, ab, V)
    dP, dQ, dab = np.zeros_like(P), np.zeros_like(Q), np.zeros_like(ab)
    pk.attn_backward(gt, rt, G, ab, rr, dP, dQ, dab)
    want_s, want_rr, want_dP, want_dQ, want_dab = attn_reference(gt, rt, P, Q, ab, G)
    close(s, want_s, rtol=1e-5)
    close(rr, want_rr, rtol=1e-5)
    close(dP[:W], want_dP, rtol=1e-5)
    close(dQ[: W + 1], want_dQ, rtol=1e-5)
    close(dab, want_dab, rtol=1e-5)
    assert not dP[W:].any() and not dQ[W + 1 :].any()  # the padded rows are neither read nor written


def test_attn_scores_sum_in_the_written_order():
    """Each score is the fold of _fold_sum over its float32 feature terms, bit for bit (K = 20 heads: the fold
    halves once; the ROOT sums over 2K = 40 twice)."""
    rng = np.random.default_rng(6)
    gt, rt, P, Q, ab, G = attn_inputs(rng, W=4, K=20, V=2)
    V, K = G.shape[0], gt.shape[2]
    s, rr = attn_forward(gt, rt, P, Q, ab, V)
    for v, i, j in ((0, 0, 1), (1, 3, 2), (1, 2, 2)):
        row = gt[i, j] * (P[i, v, :K] + Q[j + 1, v, :K]) + gt[j, i] * (P[i, v, K:] + Q[j + 1, v, K:])
        assert s[v, i, j + 1] == pk._fold_sum(row.copy())
        assert rr[i, v, 1] == pk._fold_sum(rt[i, 1] * (P[i, v] + Q[0, v]))


def test_attn_backward_adds_to_what_is_there():
    """The cohort hands in zeros; the loop adds to them (a second call doubles every gradient, up to rounding)."""
    rng = np.random.default_rng(5)
    gt, rt, P, Q, ab, G = attn_inputs(rng)
    s, rr = attn_forward(gt, rt, P, Q, ab, G.shape[0])
    once = [np.zeros_like(P), np.zeros_like(Q), np.zeros_like(ab)]
    twice = [np.zeros_like(P), np.zeros_like(Q), np.zeros_like(ab)]
    pk.attn_backward(gt, rt, G, ab, rr, *once)
    for _ in range(2):
        pk.attn_backward(gt, rt, G, ab, rr, *twice)
    for a, b in zip(once, twice):
        close(b, 2 * a, rtol=1e-6)


def test_offset_row_is_the_offset_tables_index():
    for W in range(1, 9):
        want = _offset_tables(W)[1].view(W, W + 1).numpy()
        got = np.array([[pk.offset_row(W, i, j) for j in range(W + 1)] for i in range(W)])
        assert (got == want).all(), W


# ============================================================================= factored or not
def test_large_terms_take_exp_per_element():
    """A product of exps overflows float32 past e^88: a = -100, b = 99.5 (pre = -0.5) would give sigma = 0 from
    the factors; the terms are seen as too large and the kernel takes exp(-pre) per element instead."""
    W = 2
    a = np.full((W, H), -100.0, np.float32)
    b = np.full((W + 1, H), 99.5, np.float32)
    assert pk.factored(a * 0.4, b * 0.4) and not pk.factored(a, b)
    with np.errstate(over="ignore"):
        wrong = 1.0 / (1.0 + np.exp(-a[0, 0]) * np.exp(-b[0, 0]))
    assert wrong == 0.0  # the control: factors would be wrong here
    sg = _sigma(torch.from_numpy(a / 2), torch.from_numpy(b / 2))  # _sigma doubles its terms (tanh via sigmoid)
    want = float(torch.sigmoid(torch.tensor(-0.5)))
    assert sg.numpy() == pytest.approx(want, rel=1e-6)


def test_factored_limit_keeps_the_product_normal():
    """Two factors below the limit (and three below their share) keep exp(+-sum) inside float32's normal range."""
    for n in (2, 3):
        t = np.nextafter(np.float32(pk.FACTOR_LIMIT / n), np.float32(0))
        assert pk.factored(*[np.array([t])] * n) and not pk.factored(*[np.array([pk.FACTOR_LIMIT / n])] * n)
        for sign in (1.0, -1.0):
            product = np.prod([np.exp(np.float32(sign * t))] * n, dtype=np.float32)
            assert np.isfinite(product) and abs(product) >= np.finfo(np.float32).tiny


# ==================================================================================== summation
def test_fold_sum_order_is_the_written_one():
    """The sum over hidden units is the fold written in _fold_sum, bit for bit (not left to the compiler), for the
    probes' 256 units and for lengths that do not halve evenly."""
    rng = np.random.default_rng(2)
    for n in (1, 5, 16, 17, 25, 32, 200, 256):
        row = (rng.standard_normal(n) * 10.0 ** rng.integers(-3, 4, n)).astype(np.float32)
        want = row.copy()
        while want.size > pk.LANES:
            half = want.size // 2
            top = want.size - half
            front = want[:top].copy()
            front[:half] += want[top:]
            want = front
        total = np.float32(0.0)
        for v in want:
            total = np.float32(total + v)
        assert pk._fold_sum(row.copy()) == total, n
        assert total == pytest.approx(float(row.astype(np.float64).sum()), rel=1e-4, abs=1e-3), n


def test_threads_give_identical_numbers():
    import concurrent.futures

    rng = np.random.default_rng(3)
    W = 9
    a, b, d = terms(rng, (W, H), (W + 1, H), (2 * W, H))
    wo = terms(rng, (H,))[0]

    def run(_):
        s = np.empty((W, W + 1), np.float32)
        pk.hidden_scores(grid(False, a, b, d), wo, s)
        return s

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        outs = list(pool.map(run, range(4)))
    assert all((o == outs[0]).all() for o in outs)


# =================================================================================== compiled code
def _asm(name: str, error_model: str = "numpy") -> str:
    """x86 assembly of kernel ``name`` compiled afresh."""
    from numba import types

    m2, v1, flag = types.Array(types.float32, 2, "C"), types.Array(types.float32, 1, "C"), types.boolean
    m3 = types.Array(types.float32, 3, "C")
    sigs = {"sigma_grid": (m2, m2, m2, m2, m2, m2, flag, flag, m3),
            "mlp_scores": (m3, m2, m2),
            "mlp_backward": (m3, m2, m2, m2, m2, m2, m2),
            "hidden_scores": (m3, v1, m2),
            "hidden_backward": (m3, v1, m2, v1, m2, m2, m2),
            "attn_scores": (m3, m3, m3, m3, m2, m3, m3),
            "attn_backward": (m3, m3, m3, m2, m3, m3, m3, m2)}
    return compiled_asm(getattr(pk, name).py_func, sigs[name], error_model=error_model)


VECTOR_DIVIDE = re.compile(r"vdivps\s[^\n]*%[yz]mm")
VECTOR_MULTIPLY = re.compile(r"(vmulps|vfn?madd\w*ps)\s[^\n]*%[yz]mm")


@pytest.mark.skipif(" avx2" not in CPUINFO, reason="checks x86 AVX2 / AVX-512 vector instructions")
@pytest.mark.parametrize("name", ["sigma_grid", "mlp_scores", "mlp_backward", "hidden_scores", "hidden_backward",
                                  "attn_scores", "attn_backward"])
def test_loops_are_vectorised_without_gathers(name):
    """The loops over hidden units run 8 or 16 lanes at a time (sigma_grid: vdivps on ymm / zmm; the others:
    vmulps / vfmadd on them) and load them without gathers (see xlogx, Loads)."""
    asm = _asm(name)
    assert "vgather" not in asm
    wanted = VECTOR_DIVIDE if name == "sigma_grid" else VECTOR_MULTIPLY
    assert wanted.search(asm), "the loop over hidden units is not vectorised"


@pytest.mark.skipif(" avx2" not in CPUINFO, reason="checks x86 AVX2 / AVX-512 vector instructions")
def test_the_vector_check_sees_scalar_code():
    """The check above can fail: with numba's default error model (a zero check before each float division) the
    same loop compiles to scalar divisions only."""
    assert not VECTOR_DIVIDE.search(_asm("sigma_grid", error_model="python"))


def test_compiled_code_is_cached():
    assert pk.sigma_grid.stats.cache_path  # numba's on-disk cache is on (cache=True)


def test_benchmark_script_runs_small(capsys):
    import importlib.util

    path = Path(__file__).resolve().parents[1] / "scripts" / "bench_probe_kernels.py"
    spec = importlib.util.spec_from_file_location("bench_probe_kernels", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.main(["--words", "4", "--repeat", "2"]) == 0
    out = capsys.readouterr().out
    diff = float(out.rsplit(":", 1)[1])
    assert "ns/element" in out and "of it" in out and diff < 1e-5  # the loops compute torch's numbers
