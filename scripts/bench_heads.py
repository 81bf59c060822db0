#!/usr/bin/env python
"""Benchmark (not a test): vectorized head scoring vs a naive per-head Python loop.

Builds a temporary word-level attention store of random Dirichlet attention (default 12 x 12 heads,
300 sentences of 10-40 words, random trees with SD-like labels, some ``poss`` + ``'s``), times
``bertlook.analyses.heads.score_heads`` on it (best of ``--repeats``), then a naive loop over sentences,
heads and words (one ``np.argmax`` per word and direction, masking the word itself by hand) on the
same store, and checks that both give identical correct counts per relation, head and direction.

    .venv/bin/python scripts/bench_heads.py [--sentences 300] [--layers 12] [--heads 12] [--seed 0]
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time

import numpy as np

from bertlook.attention.store import AttentionStore, AttentionWriter
from bertlook.analyses.heads import POSS_RELATIONS, POSSESSIVE_TOKENS, score_heads

RELATIONS = ("det", "nsubj", "dobj", "amod", "prep", "pobj", "punct", "nn", "advmod", "aux", "poss")


def build_store(path: str, *, L: int, H: int, n_sent: int, min_w: int, max_w: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    with AttentionWriter(path, num_layers=L, num_heads=H, level="word") as w:
        for k in range(n_sent):
            W = int(rng.integers(min_w, max_w + 1))
            root = int(rng.integers(1, W + 1))
            heads = [0 if i + 1 == root else int(rng.choice([j for j in range(1, W + 1) if j != i + 1]))
                     for i in range(W)]
            rels = ["root" if h == 0 else str(rng.choice(RELATIONS)) for h in heads]
            words = [f"w{i}" for i in range(W)]
            xpos = ["NN"] * W
            for i in range(W - 1):
                if rels[i] == "poss" and rng.random() < 0.5:
                    words[i + 1], xpos[i + 1] = "'s", "POS"
            attn = rng.dirichlet(np.full(W + 2, 0.3), size=(L, H, W + 2))
            w.add({"id": k, "tokens": ["[CLS]", *words, "[SEP]"], "heads": heads, "rels": rels, "xpos": xpos}, attn)


def naive_scores(store: AttentionStore, relations: list[str]) -> np.ndarray:
    """correct[R, L, H, 2] with Python loops over sentences, heads and words."""
    rel_index = {r: i for i, r in enumerate(relations)}
    out = np.zeros((len(relations), store.num_layers, store.num_heads, 2), dtype=np.int64)
    for rec, attn in store:
        heads, rels, xpos, tokens = rec["heads"], rec["rels"], rec["xpos"], rec["tokens"]
        W = len(heads)
        for layer in range(store.num_layers):
            for head in range(store.num_heads):
                a = np.asarray(attn[layer, head], dtype=np.float32)
                for i in range(1, W + 1):
                    s = i
                    if rels[i - 1] in POSS_RELATIONS and i < W and (
                            xpos[i] == "POS" or tokens[i + 1].lower() in POSSESSIVE_TOKENS):
                        s = i + 1
                    row = a[s, 1 : W + 1].copy()
                    row[s - 1] = -np.inf
                    col = a[1 : W + 1, s].copy()
                    col[s - 1] = -np.inf
                    gold = heads[i - 1]
                    r = rel_index[rels[i - 1]]
                    out[r, layer, head, 0] += int(gold > 0 and int(np.argmax(row)) + 1 == gold)
                    out[r, layer, head, 1] += int(gold > 0 and int(np.argmax(col)) + 1 == gold)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--sentences", type=int, default=300)
    ap.add_argument("--min-words", type=int, default=10)
    ap.add_argument("--max-words", type=int, default=40)
    ap.add_argument("--repeats", type=int, default=3, help="vectorized timing: best of this many runs")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    L, H, S = args.layers, args.heads, args.sentences
    with tempfile.TemporaryDirectory(prefix="bench_heads_") as tmp:
        build_store(f"{tmp}/store", L=L, H=H, n_sent=S, min_w=args.min_words, max_w=args.max_words, seed=args.seed)
        store = AttentionStore(f"{tmp}/store")
        n_words = sum(len(r["heads"]) for r in store.records)
        score_heads(store, max_examples=5)  # warm-up (page cache, imports)
        t_vec = math.inf
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            scores = score_heads(store)
            t_vec = min(t_vec, time.perf_counter() - t0)
        t0 = time.perf_counter()
        naive = naive_scores(store, scores.relations)
        t_naive = time.perf_counter() - t0

    same = np.array_equal(naive, scores.correct)
    print(f"store: {S} sentences, {n_words} words ({args.min_words}-{args.max_words} per sentence), "
          f"{L}x{H} = {L * H} heads, 2 directions, seed {args.seed}")
    print(f"score_heads (vectorized, best of {args.repeats}): {t_vec:.3f} s = {S / t_vec:,.0f} sentences/s "
          f"({n_words * L * H * 2 / t_vec / 1e6:.1f} M word-head-direction predictions/s)")
    print(f"naive loop over heads and words:        {t_naive:.3f} s = {S / t_naive:,.1f} sentences/s")
    print(f"speed-up: {t_naive / t_vec:.0f}x")
    print(f"identical correct counts [relations x heads x directions]: {same} "
          f"({int(scores.correct.sum())} correct predictions; poss words switched: {scores.n_poss_affected})")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
