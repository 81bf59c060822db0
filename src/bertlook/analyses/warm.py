"""Compile the numba kernels once, into numba's on-disk cache, before any job needs them.

The kernels (:mod:`~bertlook.analyses.xlogx`, :mod:`~bertlook.analyses.map_kernels`,
:mod:`~bertlook.analyses.trees_numba`, :mod:`~bertlook.analyses.probes.kernels`,
:mod:`~bertlook.attention.alti_kernels`: ~3.7 s on one core) are compiled with
``cache=True``: the first process that calls one compiles it (~14 s for all of them on one core) and every
later process loads it from the cache (``__pycache__`` next to the module, or ``NUMBA_CACHE_DIR``). Without
this step, the first run of a fresh checkout pays that compile in several jobs at once (jobs that start
together each compile). ``make install`` calls :func:`warm_kernels`; it calls the public functions, not the
kernels, so that the compiled signatures are those the pipeline uses (float16 maps for the statistics and the
rollout, float32 and float64 for the JS divergence, float64 scores for the tree decoder); the probes' loops,
called by the cohorts with float32 arrays, are called directly with those types.
"""

from __future__ import annotations

import time

import numpy as np

from bertlook.analyses import trees
from bertlook.attention import alti_kernels
from bertlook.analyses.cluster_heads import JsAccumulator, js_divergence_example
from bertlook.analyses.probes import kernels as pk
from bertlook.analyses.rollout import rollout
from bertlook.analyses.surface_stats import SurfaceStatsAccumulator, row_entropy


def warm_kernels() -> dict[str, float]:
    """Call each compiled path once on tiny inputs; seconds per path (compile or cache load)."""
    rng = np.random.default_rng(0)
    maps = rng.random((2, 2, 6, 6))  # [layer, head, query_pos, key_pos]
    maps16 = (maps / maps.sum(axis=-1, keepdims=True)).astype(np.float16)
    calls = {
        "surface_stats.row_entropy (float16)": lambda: row_entropy(maps16),
        "rollout.rollout (float16)": lambda: rollout(maps16),
        "cluster_heads.js_divergence_example (float32)": lambda: js_divergence_example(maps16),
        "cluster_heads.js_divergence_example (float64)": lambda: js_divergence_example(maps16, dtype="float64"),
        "trees.chu_liu_edmonds_batch": lambda: trees.chu_liu_edmonds_batch(rng.random((2, 5, 5))),
    }
    calls.update(_reader_calls(maps16))
    calls.update(_probe_calls(rng))
    calls["alti_kernels (per layer float32, per head float64)"] = lambda: _alti_calls(rng)
    seconds = {}
    for name, call in calls.items():
        start = time.perf_counter()
        call()
        seconds[name] = time.perf_counter() - start
    return seconds


def _reader_calls(maps16) -> dict:
    """The one-pass readers' kernels (analyses.layer_stats, the JS reader's visible triangle and estimator), on an
    encoder's and a decoder's (causal) float16 maps, through the accumulators the extraction stream feeds."""
    tokens = ["[CLS]", "a", ".", "b", ",", "[SEP]"]
    causal16 = maps16.copy()
    causal16[..., ~np.tri(6, dtype=bool)] = 0  # [layer, head, query_pos, key_pos]: keys <= query only

    def stats(causal: bool) -> None:
        acc = SurfaceStatsAccumulator(2, 2, causal=causal, **({"cls_token": None, "sep_token": None} if causal else {}))
        acc.add({"id": 0, "tokens": tokens}, causal16 if causal else maps16)

    def js(causal: bool, rows) -> None:
        JsAccumulator(2, 2, causal=causal, rows=rows).add({"id": 0, "tokens": tokens}, causal16 if causal else maps16)

    return {
        "layer_stats (encoder, causal)": lambda: (stats(False), stats(True)),
        "cluster_heads.JsAccumulator (causal, estimator)": lambda: (js(True, None), js(True, 3), js(False, 3)),
    }


def _alti_calls(rng) -> None:
    """ALTI's CPU kernels with the dtypes :mod:`bertlook.attention.contributions` hands them."""
    a = rng.random((1, 2, 3, 3)).astype(np.float32)  # [batch, head, query_pos, key_pos]
    f = rng.random((1, 2, 3, 4)).astype(np.float32)  # [batch, head, key_pos, d]
    x = rng.random((1, 3, 4)).astype(np.float32)  # [batch, seq, d]
    alti_kernels.alti_layer_rows(a, f, x, x, np.ones((1, 3), np.float32), np.ones(4, np.float32))
    alti_kernels.alti_heads_rows(a, f.astype(np.float64))


def _probe_calls(rng) -> dict:
    """The fused probe loops (float32, as the cohorts call them; ``direct`` is a value, not a type)."""
    W, H = 2, pk.LANES
    f = lambda *shape: rng.random(shape).astype(np.float32)  # noqa: E731
    a, b, d, sg = f(W, H), f(W + 1, H), f(2 * W, H), f(W, W + 1, H)
    return {
        "probes.kernels.sigma_grid": lambda: pk.sigma_grid(a, b, d, a, b, d, False, True, sg),
        "probes.kernels.mlp_scores, mlp_backward": lambda: (
            pk.mlp_scores(sg, f(W * W, H), f(W, W)),
            pk.mlp_backward(sg, f(W * W, H), f(W, W + 1), f(W, H), f(W * W, H), f(W, H), f(W + 1, H))),
        "probes.kernels.hidden_scores, hidden_backward": lambda: (
            pk.hidden_scores(sg, f(H), f(W, W + 1)),
            pk.hidden_backward(sg, f(H), f(W, W + 1), f(H), f(W, H), f(W + 1, H), f(2 * W, H))),
        "probes.kernels.attn_scores, attn_backward": lambda: (  # K = 2 heads, V = 3 variants
            pk.attn_scores(f(W, W, 2), f(W, 2, 4), f(W, 3, 4), f(W + 1, 3, 4), f(3, 2), f(3, W, W + 1), f(W, 3, 2)),
            pk.attn_backward(f(W, W, 2), f(W, 2, 4), f(3, W, W + 1), f(3, 2), f(W, 3, 2), f(W, 3, 4), f(W + 1, 3, 4),
                             f(3, 2))),
    }


def main() -> None:
    seconds = warm_kernels()
    print(f"numba kernels ready ({sum(seconds.values()):.1f} s): " + ", ".join(seconds))


if __name__ == "__main__":
    main()
