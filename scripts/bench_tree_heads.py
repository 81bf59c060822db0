#!/usr/bin/env python
"""Benchmark (not a test): the spanning-tree decoders of ``bertlook tree-heads`` against naive baselines.

For each sentence of a word-level store (``--store``, e.g. results/offline-minilm/attention/words-dev; by
default a synthetic store of ``--sentences`` random-tree sentences of 8-40 words, 6 x 12 heads), the
2 K gold-root score matrices of the tree-heads step (both directions; every head) and the K symmetrised
maps are decoded by

1. Chu-Liu-Edmonds: ``bertlook.analyses.trees.chu_liu_edmonds_batch`` (all matrices of a sentence at
   once) against ``chu_liu_edmonds`` (one matrix at a time, one cycle per recursion: the probes' decoder,
   the naive baseline); both trees' summed scores must agree for every matrix;
2. undirected maximum spanning trees: ``bertlook.analyses.trees.max_spanning_tree_batch`` (Prim's
   algorithm vectorised over the heads) against ``scipy.sparse.csgraph.minimum_spanning_tree`` per head
   (on ``max + 1 - w``, so that every edge is non-zero); the summed weights must agree.

Prints the time per matrix of each side and the ratio, best of ``--repeats`` runs.

    .venv/bin/python scripts/bench_tree_heads.py [--store DIR] [--sentences 40] [--max-sentences 40] [--repeats 1]
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time

import numpy as np


def best_of(repeats: int, func) -> tuple[float, object]:
    best, result = math.inf, None
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = func()
        best = min(best, time.perf_counter() - t0)
    return best, result


def load_matrices(store_path: str, max_sentences: int):
    """Per sentence: the [2K, W+1, W+1] gold-root CLE inputs and the [K, W, W] symmetrised maps."""
    from bertlook.analyses.trees import gold_root_scores
    from bertlook.attention.store import open_store

    st = open_store(store_path, level="word")
    out = []
    for i, (rec, A) in enumerate(st):
        if i >= max_sentences:
            break
        W = int(rec["n"]) - 2
        if W < 2:
            continue
        roots = np.flatnonzero(np.asarray(rec["heads"]) == 0)  # [root]
        words = A.astype(np.float64).reshape(-1, W + 2, W + 2)[:, 1 : W + 1, 1 : W + 1]  # [layer*head, word, word]
        both = np.concatenate([words, words.transpose(0, 2, 1)])  # [direction*layer*head, word, word]
        cle = np.stack([gold_root_scores(m, roots) for m in both])  # [direction*layer*head, node, node]
        out.append((cle, words + words.transpose(0, 2, 1)))
    return out


def tree_score(s: np.ndarray, heads: np.ndarray) -> float:
    return float(s[np.arange(1, len(heads)), heads[1:]].sum())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", default=None, help="word-level store (default: a synthetic one)")
    ap.add_argument("--sentences", type=int, default=40, help="sentences of the synthetic store (default 40)")
    ap.add_argument("--max-sentences", type=int, default=40, help="sentences decoded (default 40)")
    ap.add_argument("--repeats", type=int, default=1)
    args = ap.parse_args(argv)

    from scipy.sparse.csgraph import minimum_spanning_tree

    from bertlook.analyses.trees import chu_liu_edmonds, chu_liu_edmonds_batch, max_spanning_tree_batch

    with tempfile.TemporaryDirectory() as tmp:
        store = args.store
        if store is None:
            from bertlook.testing.synthetic_stores import write_synthetic_word_store

            store = f"{tmp}/words"
            write_synthetic_word_store(store, n_sentences=args.sentences, seed=0)
        mats = load_matrices(store, args.max_sentences)
    n_cle = sum(len(c) for c, _ in mats)
    n_mst = sum(len(u) for _, u in mats)
    print(f"{len(mats)} sentences, {n_cle} gold-root CLE matrices, {n_mst} undirected MST matrices "
          f"({'store ' + args.store if args.store else 'synthetic store'})")

    t_batch, res_batch = best_of(args.repeats, lambda: [chu_liu_edmonds_batch(c) for c, _ in mats])
    t_naive, res_naive = best_of(args.repeats, lambda: [[chu_liu_edmonds(m) for m in c] for c, _ in mats])
    same = all(math.isclose(tree_score(m, hb), tree_score(m, hn), rel_tol=1e-9, abs_tol=1e-9)
               for (c, _), b, n in zip(mats, res_batch, res_naive) for m, hb, hn in zip(c, b, n))
    print(f"1. Chu-Liu-Edmonds: chu_liu_edmonds_batch {t_batch / n_cle * 1e3:.3f} ms per matrix, "
          f"chu_liu_edmonds (naive, per matrix) {t_naive / n_cle * 1e3:.3f} ms: {t_naive / t_batch:.1f}x; "
          f"same maximal scores: {same}")

    def scipy_all():
        out = []
        for _, u in mats:
            rows = []
            for w in u:
                x = w.max() + 1.0 - w
                np.fill_diagonal(x, 0.0)
                rows.append(minimum_spanning_tree(x).tocoo())
            out.append(rows)
        return out

    t_prim, res_prim = best_of(args.repeats, lambda: [max_spanning_tree_batch(u) for _, u in mats])
    t_scipy, res_scipy = best_of(args.repeats, scipy_all)
    same_mst = True
    for (_, u), parents, trees in zip(mats, res_prim, res_scipy):
        for w, parent, tree in zip(u, parents, trees):
            ours = float(w[np.arange(1, len(parent)), parent[1:]].sum())
            theirs = float(w[tree.row, tree.col].sum())
            same_mst &= len(tree.row) == len(parent) - 1 and math.isclose(ours, theirs, rel_tol=1e-9, abs_tol=1e-9)
    print(f"2. undirected MST: max_spanning_tree_batch {t_prim / n_mst * 1e3:.3f} ms per matrix, scipy "
          f"minimum_spanning_tree {t_scipy / n_mst * 1e3:.3f} ms: {t_scipy / t_prim:.1f}x; "
          f"same maximal weights: {same_mst}")
    return 0 if same and same_mst else 1


if __name__ == "__main__":
    sys.exit(main())
