"""Compile the numba kernels once, into numba's on-disk cache, before any job needs them.

The kernels (:mod:`~bertlook.analyses.xlogx`, :mod:`~bertlook.analyses.map_kernels`,
:mod:`~bertlook.analyses.trees_numba`) are compiled with ``cache=True``: the first process that calls
one compiles it (~14 s for all of them on one core) and every later process loads it from the cache
(``__pycache__`` next to the module, or ``NUMBA_CACHE_DIR``). Without this step, the first run of a
fresh checkout pays that compile in several jobs at once (jobs that start together each compile).
``make install`` calls :func:`warm_kernels`; it calls the public functions, not the kernels, so that
the compiled signatures are those the pipeline uses (float16 maps for the statistics and the rollout,
float32 and float64 for the JS divergence, float64 scores for the tree decoder).
"""

from __future__ import annotations

import time

import numpy as np


def warm_kernels() -> dict[str, float]:
    """Call each compiled path once on tiny inputs; seconds per path (compile or cache load)."""
    from bertlook.analyses.cluster_heads import js_divergence_example
    from bertlook.analyses.rollout import rollout
    from bertlook.analyses.surface_stats import row_entropy
    from bertlook.analyses.trees import chu_liu_edmonds_batch

    rng = np.random.default_rng(0)
    maps = rng.random((2, 2, 6, 6))  # [layer, head, query_pos, key_pos]
    maps16 = (maps / maps.sum(axis=-1, keepdims=True)).astype(np.float16)
    calls = {
        "surface_stats.row_entropy (float16)": lambda: row_entropy(maps16),
        "rollout.rollout (float16)": lambda: rollout(maps16),
        "cluster_heads.js_divergence_example (float32)": lambda: js_divergence_example(maps16),
        "cluster_heads.js_divergence_example (float64)": lambda: js_divergence_example(maps16, dtype="float64"),
        "trees.chu_liu_edmonds_batch": lambda: chu_liu_edmonds_batch(rng.random((2, 5, 5))),
    }
    seconds = {}
    for name, call in calls.items():
        start = time.perf_counter()
        call()
        seconds[name] = time.perf_counter() - start
    return seconds


def main() -> None:
    seconds = warm_kernels()
    print(f"numba kernels ready ({sum(seconds.values()):.1f} s): " + ", ".join(seconds))


if __name__ == "__main__":
    main()
