#!/usr/bin/env python
"""Benchmark (not a test): vectorized JS divergence matrix vs a Python loop over head pairs.

Builds a temporary attention store of random Dirichlet attention (default 12 x 12 heads, n = 64,
3 examples), times ``bertlook.analyses.cluster_heads.js_divergence_matrix`` on it, then times a plain Python
loop over head pairs calling ``js_pair_naive`` on a random subset of pairs and extrapolates that to
all pairs (the output says so). The naive loop is timed twice: on the float16 maps as read from the
store (what a naive loop over the store does) and on maps converted to float64 beforehand (the
strictest baseline). Both must agree on the subset.

    .venv/bin/python scripts/bench_js.py [--n 64] [--examples 3] [--naive-pairs 1000] [--threads 1]
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time

import numpy as np

from bertlook.attention.store import AttentionStore, AttentionWriter
from bertlook.analyses.cluster_heads import js_divergence_matrix, js_pair_naive

TARGET_SPEEDUP = 20.0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--n", type=int, default=64, help="tokens per example (default 64)")
    ap.add_argument("--examples", type=int, default=3)
    ap.add_argument("--alpha", type=float, default=0.3, help="Dirichlet concentration of each attention row")
    ap.add_argument("--naive-pairs", type=int, default=1000, help="pairs per example timed with the naive loop")
    ap.add_argument("--threads", type=int, default=1, help="worker threads of the vectorized version")
    ap.add_argument("--backend", default="numpy", choices=["numpy", "torch"])
    ap.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    ap.add_argument("--repeats", type=int, default=3, help="vectorized timing: best of this many runs")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    L, H, n, E = args.layers, args.heads, args.n, args.examples
    K = L * H
    all_pairs = K * (K - 1) // 2
    rng = np.random.default_rng(args.seed)
    with tempfile.TemporaryDirectory(prefix="bench_js_") as tmp:
        with AttentionWriter(f"{tmp}/store", num_layers=L, num_heads=H) as w:
            for e in range(E):
                attn = rng.dirichlet(np.full(n, args.alpha), size=(L, H, n))
                w.add({"id": e, "tokens": ["[CLS]"] + ["w"] * (n - 2) + ["[SEP]"]}, attn)
        store = AttentionStore(f"{tmp}/store")

        js_divergence_matrix(store, max_examples=1, num_threads=args.threads,
                             backend=args.backend, dtype=args.dtype)  # warm-up
        t_vec = math.inf
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            D = js_divergence_matrix(store, num_threads=args.threads, backend=args.backend, dtype=args.dtype)
            t_vec = min(t_vec, time.perf_counter() - t0)

        iu = np.array([(i, j) for i in range(K) for j in range(i + 1, K)])
        sub = iu[rng.choice(len(iu), size=min(args.naive_pairs, len(iu)), replace=False)]
        naive_f16 = np.zeros(len(sub))
        naive_f64 = np.zeros(len(sub))
        t_f16 = t_f64 = 0.0
        for _, attn in store:
            t0 = time.perf_counter()
            for k, (i, j) in enumerate(sub):
                naive_f16[k] += js_pair_naive(attn[i // H, i % H], attn[j // H, j % H])
            t_f16 += time.perf_counter() - t0
            a64 = np.asarray(attn, dtype=np.float64)  # conversion not timed
            t0 = time.perf_counter()
            for k, (i, j) in enumerate(sub):
                naive_f64[k] += js_pair_naive(a64[i // H, i % H], a64[j // H, j % H])
            t_f64 += time.perf_counter() - t0

    timed_pairs = len(sub) * E
    total_pairs = all_pairs * E
    est_f16 = t_f16 / timed_pairs * total_pairs
    est_f64 = t_f64 / timed_pairs * total_pairs
    vec = D[sub[:, 0], sub[:, 1]]
    rel = np.abs(vec - naive_f64) / np.maximum(np.abs(naive_f64), 1e-12)
    same_f = np.abs(naive_f16 - naive_f64).max()

    print(f"setup: {L}x{H} = {K} heads, n = {n}, {E} examples, Dirichlet alpha {args.alpha}, "
          f"{all_pairs} head pairs per example ({total_pairs} in all)")
    print(f"vectorized js_divergence_matrix (backend {args.backend}, {args.dtype}, {args.threads} thread(s), "
          f"best of {args.repeats}): {t_vec:.3f} s  = {t_vec / E * 1e3:.1f} ms/example, "
          f"{total_pairs / t_vec:,.0f} pairs/s")
    print(f"naive Python loop over pairs with js_pair_naive: timed on {len(sub)} random pairs x {E} examples "
          f"= {timed_pairs} pairs, EXTRAPOLATED to all {total_pairs} pairs:")
    print(f"  on float16 maps as read from the store: {t_f16:.3f} s measured -> {est_f16:.2f} s estimated, "
          f"{timed_pairs / t_f16:,.0f} pairs/s, vectorized is {est_f16 / t_vec:.1f}x faster")
    print(f"  on maps pre-converted to float64:       {t_f64:.3f} s measured -> {est_f64:.2f} s estimated, "
          f"{timed_pairs / t_f64:,.0f} pairs/s, vectorized is {est_f64 / t_vec:.1f}x faster")
    ok = est_f64 / t_vec >= TARGET_SPEEDUP
    print(f"target >= {TARGET_SPEEDUP:.0f}x vs the strict (float64) baseline: {'met' if ok else 'NOT met'}; "
          f"vs the store-read baseline: {'met' if est_f16 / t_vec >= TARGET_SPEEDUP else 'NOT met'}")
    print(f"agreement on the {len(sub)} timed pairs (sums over {E} examples): max relative difference "
          f"{rel.max():.2e}, max absolute {np.abs(vec - naive_f64).max():.2e} "
          f"(values {naive_f64.min():.3g}..{naive_f64.max():.3g}); naive float16 vs float64 input: {same_f:.1e}")
    return 0 if rel.max() < 1e-4 else 1


if __name__ == "__main__":
    sys.exit(main())
