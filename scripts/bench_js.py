#!/usr/bin/env python
"""Benchmark (not a test): the JS divergence backends on demo-shaped maps, and the machine's FMA limit.

Times ``bertlook.analyses.cluster_heads.js_divergence_example`` (one example: smoothing, per-head sums,
the ``K (K + 1) / 2`` pairwise mixture sums ``sum (P_i + P_j) ln (P_i + P_j)``) with the backends
numpy, torch and numba at 1 and 2 threads (and numpy at 8 threads requested: what the workflow ran
before numba, with ``OMP_NUM_THREADS=8`` on a 2-core machine), on random Dirichlet maps of the
demo's shape (6 x 12 heads, n = 128) or on the first examples of a store (``--store``). Prints
milliseconds per example, nanoseconds per pair-element (one entry of one head pair), the speed-ups
of numba over the previous backends, the seconds the demo would take (1000 examples x 2 map kinds),
and how close numba gets to the machine's arithmetic throughput: a Horner-chain multiply-add probe
over an L2-resident float32 array gives the ns per vector-lane FMA, times
:data:`FLOPS_PER_ELEMENT` the kernel's floating-point operations per pair-element. Also the first
call's time with an empty and with a filled numba cache (fresh processes), and the agreement of
numba with the numpy backend in float64.

    .venv/bin/python scripts/bench_js.py [--threads 1,2] [--examples 3] [--store DIR]
"""

from __future__ import annotations

import argparse
import math
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
from numba import njit

from bertlook.analyses.cluster_heads import js_divergence_example

# floating-point operations per pair-element of the numba kernel (an FMA counts as one, as in the
# probe): x = P_i + P_j (1); m = (1 + m) - 1 (1); z = m^2 (1); Horner P(m): 8 FMA; y = P(m) m z (2);
# y += e LN2_LO (1 FMA); y -= z / 2 (1 FMA); m + y (1); + e LN2_HI (1 FMA); x * ln x (1); sum (1).
# Not counted: the exponent's 4 integer operations and its int -> float conversion.
FLOPS_PER_ELEMENT = 19
PROBE_FMAS = 16  # FMAs per element of the probe
DEMO_EXAMPLES, DEMO_MAP_KINDS = 1000, 2
BEFORE = ("numpy", 8)  # what the workflow ran before numba (OMP_NUM_THREADS=8 on 2 cores)


@njit(nogil=True, fastmath=True)
def _fma_probe(x, reps):  # x: [entry], L2-resident
    """``sum_e h(x_e)``, ``h`` a degree-16 Horner chain: independent elements, 16 FMAs each."""
    acc = np.float32(0.0)
    for _ in range(reps):
        for e in range(x.size):
            v = x[e]
            h = v
            for _k in range(PROBE_FMAS):
                h = h * v + np.float32(0.5)
            acc += h
    return acc


def fma_ns_per_lane(repeats: int = 5) -> float:
    """Best-of ns per single-lane FMA (vectorised: 8 lanes per AVX2 instruction), one thread."""
    x = np.random.default_rng(0).random(16384, dtype=np.float32) * np.float32(0.5)  # 64 KiB: L2, not L1
    _fma_probe(x, 1)
    reps = 200
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        _fma_probe(x, reps)
        best = min(best, time.perf_counter() - t0)
    return best / (reps * x.size * PROBE_FMAS) * 1e9


def demo_maps(args) -> list["np.ndarray"]:
    """Attention maps ``[layer, head, n, n]`` float32: from ``--store`` or random Dirichlet rows."""
    if args.store:
        from bertlook.attention.store import open_store

        store = open_store(args.store, level="token")
        return [np.asarray(store.get(k), dtype=np.float32) for k in range(min(args.examples, len(store)))]
    rng = np.random.default_rng(args.seed)
    shape = (args.layers, args.heads, args.n)
    return [rng.dirichlet(np.full(args.n, args.alpha), size=shape).astype(np.float32) for _ in range(args.examples)]


def pair_elements(maps) -> int:
    """Entries of all head pairs ``j >= i`` over the examples (what the mixture kernels visit)."""
    return sum(a.shape[0] * a.shape[1] * (a.shape[0] * a.shape[1] + 1) // 2 * a.shape[2] ** 2 for a in maps)


def time_backend(maps, backend: str, threads: int, repeats: int) -> float:
    """Best-of seconds for all ``maps`` (one warm-up example first)."""
    js_divergence_example(maps[0], backend=backend, num_threads=threads)
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        for a in maps:
            js_divergence_example(a, backend=backend, num_threads=threads)
        best = min(best, time.perf_counter() - t0)
    return best


FIRST_CALL = """
import time, numpy as np
t0 = time.perf_counter()
from bertlook.analyses import xlogx
t1 = time.perf_counter()
P = np.full((3, 16), 1 / 16, dtype=np.float32)
xlogx.row_xlx(P); xlogx.mixture_xlx(P)
print(f"{t1 - t0:.3f} {time.perf_counter() - t1:.3f}")
"""


def first_call_seconds() -> list[tuple[float, float]]:
    """``(import, first call)`` seconds of two fresh processes sharing an empty numba cache dir."""
    out = []
    with tempfile.TemporaryDirectory(prefix="bench_js_cache_") as cache:
        env = {**os.environ, "NUMBA_CACHE_DIR": cache}
        for _ in range(2):
            res = subprocess.run([sys.executable, "-c", FIRST_CALL], env=env, capture_output=True, text=True,
                                 check=True)
            out.append(tuple(float(v) for v in res.stdout.split()))
    return out


def report_accuracy(maps) -> None:
    a = maps[0]
    got = js_divergence_example(a, backend="numba")
    ref = js_divergence_example(a, backend="numpy", dtype="float64")
    old = js_divergence_example(a, backend="numpy")
    rel = lambda D: np.abs(D - ref).max() / ref.max()  # noqa: E731
    print(f"accuracy on example 0 vs numpy float64: numba max |diff| / max {rel(got):.1e}, sum rel "
          f"{abs(got.sum() / ref.sum() - 1):.1e}; numpy float32 (before): {rel(old):.1e}, "
          f"{abs(old.sum() / ref.sum() - 1):.1e}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--n", type=int, default=128, help="tokens per example (default 128, the demo's)")
    ap.add_argument("--examples", type=int, default=3)
    ap.add_argument("--alpha", type=float, default=0.3, help="Dirichlet concentration of each attention row")
    ap.add_argument("--store", default=None, help="time the first --examples examples of this store instead")
    ap.add_argument("--threads", default="1,2", help="thread counts to time, comma-separated (default 1,2)")
    ap.add_argument("--repeats", type=int, default=2, help="best of this many runs")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    maps = demo_maps(args)
    elements = pair_elements(maps)
    a = maps[0]
    print(f"maps: {len(maps)} examples, {a.shape[0]}x{a.shape[1]} = {a.shape[0] * a.shape[1]} heads, "
          f"n = {a.shape[2]}{' (first example)' if args.store else ''}; {elements / len(maps):,.0f} "
          f"pair-elements per example; {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}")
    for k, (imp, call) in enumerate(first_call_seconds()):
        print(f"numba first call ({'empty' if k == 0 else 'filled'} cache): import {imp:.2f} s, "
              f"compile or load + run {call:.2f} s")

    threads = [int(t) for t in args.threads.split(",")]
    plan = sorted({BEFORE, *((b, t) for b in ("numpy", "torch", "numba") for t in threads)},
                  key=lambda bt: (("numpy", "torch", "numba").index(bt[0]), bt[1]))
    ms = {}
    for backend, t in plan:
        sec = time_backend(maps, backend, t, args.repeats)
        ms[backend, t] = sec / len(maps) * 1e3
        print(f"  {backend:6s} {t} thread(s): {ms[backend, t]:8.1f} ms/example  {sec / elements * 1e9:6.3f} "
              f"ns/pair-element  demo {ms[backend, t] * DEMO_EXAMPLES * DEMO_MAP_KINDS / 1e3:6.0f} s")

    fma = fma_ns_per_lane()
    limit = FLOPS_PER_ELEMENT * fma
    print(f"machine: {fma:.4f} ns per FMA lane (one thread) x {FLOPS_PER_ELEMENT} operations per element "
          f"= {limit:.3f} ns/pair-element arithmetic limit")
    for t in threads:
        if ("numba", t) not in ms:
            continue
        ns = ms["numba", t] * 1e6 * len(maps) / elements
        before = [BEFORE, ("torch", t)]
        ratios = ", ".join(f"{ms[b] / ms['numba', t]:.1f}x faster than {b[0]} {b[1]} thr" for b in before)
        print(f"numba {t} thread(s): {ratios}; {ns / (limit / min(t, os.cpu_count() or 1)):.2f}x the limit")
    report_accuracy(maps)
    print(f"load average at the end: {os.getloadavg()[0]:.2f} (other processes on the cores slow the 2-thread runs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
