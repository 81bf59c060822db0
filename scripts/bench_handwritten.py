#!/usr/bin/env python
"""Benchmark (not a test): bertlook's hand-written parts against the libraries that do the same.

docs/DESIGN.md ("What bertlook still writes by hand") records, for each hand-written part, the
library that could replace it and the decision; the "keep: faster / stricter" decisions rest on
these numbers. Same input for both sides, best of ``--repeats`` runs; under a minute on 2 cores.

1. CoNLL-U reading: a generated file of ``--sentences`` (5,000) random trees of 5-40 words, read by
   ``bertlook.data.treebank.read_conllu`` (validates every tree) and by the ``conllu`` package
   (``parse_incr``, no tree validation). Then strictness: eight malformed files (wrong column count,
   spaces for tabs, non-integer head, head out of range, no root, a cycle, ids out of order, duplicate
   sent_id): is each rejected, and does the message name ``file:line``?
2. Chu-Liu-Edmonds: ``--matrices`` (2,000) random 30-word score matrices decoded by
   ``bertlook.analyses.trees.chu_liu_edmonds`` and by ``networkx.maximum_spanning_arborescence`` (graph
   construction included: it is part of using it); networkx runs on the first ``--nx-matrices`` (200)
   and its time is scaled to the same count. Both trees' summed scores must agree.
3. Attention store: ``--examples`` (100) random maps [6, 12, n, n] (n = 20..128, rows sum to 1),
   written and read back through ``bertlook.attention.store`` (streaming writer; every map checked on
   read) and through ``safetensors.numpy`` (one file; ``save_file`` needs every map in memory at once).

Libraries: ``pip install -c constraints.txt -e ".[bench]"`` (conllu, networkx); a missing one skips
its part.

    .venv/bin/python scripts/bench_handwritten.py [--sentences 5000] [--matrices 2000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def best_of(repeats: int, func) -> tuple[float, object]:
    best, result = math.inf, None
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = func()
        best = min(best, time.perf_counter() - t0)
    return best, result


def have(module: str) -> bool:
    if importlib.util.find_spec(module) is None:
        print(f"  ({module} is not installed: pip install -c constraints.txt -e '.[bench]'; skipped)")
        return False
    return True


# ---- 1. CoNLL-U ---------------------------------------------------------------------------------

WORDS = "the a of to in cat dog sat on mat john saw mary house big small old new city river".split()


def conllu_sentence(rng: np.random.Generator, k: int, n: int) -> list[str]:
    """A random tree of ``n`` words (each word's head an earlier word, word 1 the root)."""
    lines = [f"# sent_id = s{k}", f"# text = sentence {k}"]
    for i in range(1, n + 1):
        head = 0 if i == 1 else int(rng.integers(1, i))
        form = WORDS[int(rng.integers(len(WORDS)))]
        lines.append(f"{i}\t{form}\t{form}\tNOUN\tNN\t_\t{head}\t{'root' if head == 0 else 'dep'}\t_\t_")
    return lines


def write_conllu(path: Path, n_sentences: int, seed: int = 0) -> int:
    rng = np.random.default_rng(seed)
    words = 0
    with open(path, "w", encoding="utf-8") as fh:
        for k in range(n_sentences):
            n = int(rng.integers(5, 41))
            words += n
            fh.write("\n".join(conllu_sentence(rng, k, n)) + "\n\n")
    return words


def malformed_cases() -> dict[str, tuple[list[str], int]]:
    """name -> (file lines, 1-based line of the problem); one good sentence first."""
    good = conllu_sentence(np.random.default_rng(1), 0, 3) + [""]
    row = "{}\tw\tw\tNOUN\tNN\t_\t{}\tdep\t_\t_"
    base = len(good) + 2  # the bad sentence's first word line (after 1 comment)
    return {
        "9 columns": (good + ["# sent_id = bad", "1\tw\tw\tNOUN\tNN\t_\t0\troot\t_"], base),
        "spaces for tabs": (good + ["# sent_id = bad", "1 w w NOUN NN _ 0 root _ _"], base),
        "non-integer head": (good + ["# sent_id = bad", row.format(1, 0), row.format(2, "x")], base + 1),
        "head out of range": (good + ["# sent_id = bad", row.format(1, 0), row.format(2, 9)], base + 1),
        "no root": (good + ["# sent_id = bad", row.format(1, 2), row.format(2, 1)], base),
        "cycle": (good + ["# sent_id = bad", row.format(1, 0), row.format(2, 3), row.format(3, 2)], base + 1),
        "ids out of order": (good + ["# sent_id = bad", row.format(1, 0), row.format(3, 1)], base + 1),
        "duplicate sent_id": (good + ["# sent_id = s0", row.format(1, 0)], base - 1),
    }


def bench_conllu(args, tmp: Path) -> None:
    from bertlook.errors import BertlookError
    from bertlook.data.treebank import read_conllu

    print(f"1. CoNLL-U reading: {args.sentences} sentences")
    path = tmp / "bench.conllu"
    words = write_conllu(path, args.sentences)
    ours, sents = best_of(args.repeats, lambda: read_conllu(path))
    assert len(sents) == args.sentences
    print(f"  bertlook.data.treebank.read_conllu (validating): {ours:.3f} s  ({words / ours:,.0f} words/s)")
    if not have("conllu"):
        return
    import conllu

    def parse_lib():
        with open(path, encoding="utf-8") as fh:
            return list(conllu.parse_incr(fh))

    lib, parsed = best_of(args.repeats, parse_lib)
    assert len(parsed) == args.sentences
    print(f"  conllu.parse_incr (no tree checks):         {lib:.3f} s  ({words / lib:,.0f} words/s)")
    print(f"  ratio conllu / bertlook: {lib / ours:.2f}x  (> 1: bertlook faster)")

    print("  strictness on malformed files (rejected? message names file:line?):")
    print(f"  {'case':20s} {'bertlook':28s} conllu")
    for name, (lines, line) in malformed_cases().items():
        bad = tmp / f"bad-{name.replace(' ', '_')}.conllu"
        bad.write_text("\n".join(lines) + "\n\n", encoding="utf-8")
        try:
            read_conllu(bad)
            ours_says = "accepted"
        except BertlookError as err:
            ours_says = "rejected, " + ("names file:line" if f"{bad}:{line}" in str(err) else f"no file:line ({err})")
        try:
            with open(bad, encoding="utf-8") as fh:
                trees = list(conllu.parse_incr(fh))
            for tree in trees:  # conllu checks the tree only when asked for it
                tree.to_tree()
            lib_says = "accepted"
        except Exception as err:  # noqa: BLE001 - report whatever the library raises
            text = str(err).replace("\n", " ")
            where = "names the line" if f"line {line}" in text or f":{line}" in text else "no line number"
            lib_says = f"rejected ({type(err).__name__}, {where}): {text[:60]}"
        print(f"  {name:20s} {ours_says:28s} {lib_says}")


# ---- 2. Chu-Liu-Edmonds ----------------------------------------------------------------------------


def bench_cle(args) -> None:
    from bertlook.analyses.trees import chu_liu_edmonds

    n_words = 30
    print(f"2. Chu-Liu-Edmonds: {args.matrices} random {n_words}-word score matrices")
    rng = np.random.default_rng(0)
    mats = [rng.normal(size=(n_words + 1, n_words + 1)) for _ in range(args.matrices)]
    ours, heads = best_of(args.repeats, lambda: [chu_liu_edmonds(m) for m in mats])
    print(f"  bertlook.analyses.trees.chu_liu_edmonds: {ours:.3f} s  ({ours / len(mats) * 1e3:.2f} ms per matrix)")
    if not have("networkx"):
        return
    import networkx as nx

    def tree_score(m, h):
        return sum(m[d, h[d]] for d in range(1, len(h)))

    def nx_decode(m):
        g = nx.DiGraph()
        n = m.shape[0]
        g.add_weighted_edges_from((h, d, float(m[d, h])) for d in range(1, n) for h in range(n) if h != d)
        arb = nx.maximum_spanning_arborescence(g, attr="weight", preserve_attrs=False)
        out = np.full(n, -1)
        for h, d in arb.edges():
            out[d] = h
        return out

    k = min(args.nx_matrices, len(mats))
    lib, nx_heads = best_of(args.repeats, lambda: [nx_decode(m) for m in mats[:k]])
    lib_scaled = lib * len(mats) / k
    same = sum(np.array_equal(a, b) for a, b in zip(heads[:k], nx_heads))
    score_ok = all(math.isclose(tree_score(m, a), tree_score(m, b), rel_tol=1e-9, abs_tol=1e-9)
                   for m, a, b in zip(mats[:k], heads[:k], nx_heads))
    print(f"  networkx.maximum_spanning_arborescence: {lib:.3f} s on {k} ({lib / k * 1e3:.2f} ms per matrix; "
          f"{lib_scaled:.1f} s for {len(mats)})")
    print(f"  ratio networkx / bertlook: {lib_scaled / ours:.1f}x  (> 1: bertlook faster)")
    print(f"  same trees: {same} of {k}; same maximal scores: {score_ok}")


# ---- 3. attention store ---------------------------------------------------------------------------


def bench_store(args, tmp: Path) -> None:
    from bertlook.attention.store import AttentionWriter, open_store

    layers, heads = 6, 12
    print(f"3. Attention store: {args.examples} maps [{layers}, {heads}, n, n], n = 20..128")
    rng = np.random.default_rng(0)
    maps = []
    for _ in range(args.examples):
        n = int(rng.integers(20, 129))
        x = rng.normal(size=(layers, heads, n, n)).astype(np.float32)
        e = np.exp(x - x.max(axis=-1, keepdims=True))
        maps.append((e / e.sum(axis=-1, keepdims=True)).astype(np.float16))
    mb = sum(m.nbytes for m in maps) / 2**20

    def write_ours():
        with AttentionWriter(tmp / "store", num_layers=layers, num_heads=heads) as w:
            for i, m in enumerate(maps):
                w.add({"id": i, "tokens": ["t"] * m.shape[2]}, m)
            w.close()

    def read_ours():
        return sum(float(a[0, 0, 0, 0]) for _, a in open_store(tmp / "store"))

    w_ours, _ = best_of(args.repeats, write_ours)
    r_ours, _ = best_of(args.repeats, read_ours)
    print(f"  bertlook.attention.store: write {w_ours:.3f} s, read + check every map {r_ours:.3f} s ({mb:.0f} MiB)")
    if not have("safetensors"):
        return
    from safetensors import safe_open
    from safetensors.numpy import save_file

    def write_lib():
        save_file({str(i): m for i, m in enumerate(maps)}, str(tmp / "maps.safetensors"))

    def read_lib():
        with safe_open(str(tmp / "maps.safetensors"), framework="np") as f:
            return sum(float(f.get_tensor(str(i))[0, 0, 0, 0]) for i in range(len(maps)))

    w_lib, _ = best_of(args.repeats, write_lib)
    r_lib, _ = best_of(args.repeats, read_lib)
    print(f"  safetensors.numpy: write {w_lib:.3f} s (all maps in memory), read {r_lib:.3f} s (no checks)")
    print(f"  ratio safetensors / bertlook: write {w_lib / w_ours:.2f}x, read {r_lib / r_ours:.2f}x  (> 1: bertlook faster)")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sentences", type=int, default=5000)
    p.add_argument("--matrices", type=int, default=2000)
    p.add_argument("--nx-matrices", type=int, default=200)
    p.add_argument("--examples", type=int, default=100)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-handwritten-") as d:
        tmp = Path(d)
        bench_conllu(args, tmp)
        bench_cle(args)
        bench_store(args, tmp)
    print(f"total {time.perf_counter() - t0:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
