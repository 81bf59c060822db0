#!/usr/bin/env python
"""Measure the word tolerances of the regression gate (tests/golden/tolerances.json): how many words an
argmax-based number can move when the same run is computed on another CPU code path or thread count.

The word-level maps are float32 sums of the model's attention, stored in float16; another CPU code path
(torch's ``ATEN_CPU_CAPABILITY=default|avx2|avx512``) or another thread count changes the float32 values in
their last bits, which moves a stored float16 value by one unit in the last place (ulp) when the float32
value lies next to a float16 rounding boundary. An argmax decision can then flip only when its two best
candidates are within one float16 ulp of each other (a *fragile* decision; exact float16 ties included).
This script, on the run's own treebank and model:

1. extracts the dev word-level maps (attention and norm-based) and a sample of segments under every setting
   (CPU code path x thread count);
2. compares the settings: the share of float16 values that differ (``p_change``), and how many words every
   head-accuracy number (relation x head x direction) and every single-head tree count moved;
3. derives the rule the gate applies per number (bertlook.reporting.golden): a number with ``f`` near-tied words
   (the ``fragile`` counts of the heads and tree-heads steps) may move by ``k(f)`` words, the Poisson quantile
   at 1 - 1e-6 of ``f x lambda``, lambda = the chance that a near-tied word flips (at most 2 p_change, or the
   observed rate if higher) x a safety factor 4; trees get a factor (2, raised until every observed flip is
   within it); it checks that every observed flip lies within its number's ``k`` (exit 1 if not);
4. the positional statistics (argmax rows of the token maps): lambda per row from the sample's most fragile head.

The probe tolerance comes from ``scripts/probe_spread.py`` (trained probes, not argmaxes): given with
``--probe-spread JSON``, it is the safety factor times the largest difference of one seed's dev words
between two settings (at least the safety factor).

    .venv/bin/python scripts/measure_tolerance.py --run results/offline-minilm --out tests/golden/tolerances.json
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bertlook.analyses.heads import score_heads
from bertlook.analyses.tree_heads import tree_heads
from bertlook.attention.store import open_store
from bertlook.reporting.golden_ranges import FAMILY_RISK, poisson_k

SAFETY = 4.0


def capabilities() -> list[str]:
    """The torch CPU code paths this CPU can run (``ATEN_CPU_CAPABILITY`` values)."""
    flags = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    caps = ["default"]
    if " avx2" in flags:
        caps.append("avx2")
    if " avx512f" in flags and " avx512bw" in flags:
        caps.append("avx512")
    return caps


def extract(setting: tuple[str, int], treebank: Path, model: str, out: Path, segments: Path | None) -> float:
    cap, threads = setting
    env = {**os.environ, "ATEN_CPU_CAPABILITY": cap, "OMP_NUM_THREADS": str(threads), "BERTLOOK_PROGRESS": "0"}
    cmd = [sys.executable, "-m", "bertlook", "extract-words", "--model", model, "--treebank", str(treebank),
           "--out", str(out / "words"), "--norms-out", str(out / "normwords"), "--device", "cpu"]
    t0 = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
    if segments is not None:
        cmd = [sys.executable, "-m", "bertlook", "extract-segments", "--model", model, "--segments", str(segments),
               "--out", str(out / "segments"), "--device", "cpu"]
        subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def changed_values(a_path: Path, b_path: Path) -> tuple[int, int, int]:
    """(float16 values, values that differ, largest difference in ulps) between two stores of one input."""
    a, b = open_store(a_path), open_store(b_path)
    total = diff = worst = 0
    for k in range(len(a)):
        x, y = a.get(k).view(np.uint16).astype(np.int32), b.get(k).view(np.uint16).astype(np.int32)
        total += x.size
        d = np.abs(x - y)
        diff += int((d > 0).sum())
        worst = max(worst, int(d.max()))
    return total, diff, worst


def fragile_rows(path: Path) -> tuple[np.ndarray, int]:
    """Fragile argmax rows per head ``[L, H]`` of a token-level store (the positional statistics) and the rows."""
    store = open_store(path, level="token")
    out = np.zeros((store.num_layers, store.num_heads), dtype=np.int64)
    rows = 0
    for k in range(len(store)):
        s = np.sort(store.get(k).view(np.uint16).astype(np.int32), axis=-1)  # [layer, head, query, key]
        out += ((s[..., -1] - s[..., -2]) <= 1).sum(-1)
        rows += s.shape[-2]
    return out, rows


def all_counts(scores) -> np.ndarray:
    """Correct words ``[R + 1, L, H, 2]`` (row 0 = All)."""
    return np.concatenate([scores.correct.sum(axis=0)[None], scores.correct])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", default="results/offline-minilm", help="a finished run (its treebank, manifest)")
    ap.add_argument("--model", default=None, help="model spec (default: the run's manifest)")
    ap.add_argument("--segments", type=int, default=100, help="segments sampled for the positional rows")
    ap.add_argument("--threads", default="1,2", help="thread counts compared (default 1,2)")
    ap.add_argument("--probe-spread", default=None, metavar="JSON", help="scripts/probe_spread.py output")
    ap.add_argument("--out", required=True, metavar="JSON")
    args = ap.parse_args(argv)
    run = Path(args.run)
    model = args.model or json.loads((run / "manifest.json").read_text())["model"]["config"]["name_or_path"]
    settings = list(itertools.product(capabilities(), [int(t) for t in args.threads.split(",")]))
    with tempfile.TemporaryDirectory() as tmp:
        seg = Path(tmp, "segments.jsonl")
        lines = (run / "corpus" / "segments.jsonl").read_text(encoding="utf-8").splitlines()[: args.segments]
        seg.write_text("\n".join(lines) + "\n", encoding="utf-8")
        dirs = []
        for s in settings:
            d = Path(tmp, f"{s[0]}-{s[1]}")
            sec = extract(s, run / "treebank" / "dev.conllu", model, d, seg)
            print(f"extracted under ATEN_CPU_CAPABILITY={s[0]} OMP_NUM_THREADS={s[1]} in {sec:.0f} s", flush=True)
            dirs.append(d)
        result = compare_settings(settings, dirs)
    result.update(meta(settings, model, run, args))
    if args.probe_spread:
        result["groups"].update(probe_tolerances(json.loads(Path(args.probe_spread).read_text())))
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    for name, g in result["groups"].items():
        print(f"{name}: {g['why']}")
    if not result["measurements"]["head_accuracy_flips_within_k"]:
        print("error: a head-accuracy number moved by more than its tolerance k(f)", file=sys.stderr)
        return 1
    return 0


def _word_numbers(scores) -> tuple[np.ndarray, np.ndarray]:
    """(correct, fragile) ``[R + 1, L, H, 2]`` of head accuracy (row 0 = All)."""
    cat = lambda a: np.concatenate([a.sum(axis=0)[None], a])  # noqa: E731
    return cat(scores.correct), cat(scores.fragile)


def _tree_numbers(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """(correct [3, K]: dep2head, head2dep, uuas hits; fragile [3, K]: per direction, uuas = max) of a store."""
    per, info = tree_heads(path)
    c = np.array([info["correct"]["dep2head"], info["correct"]["head2dep"], info["correct"]["uuas_hits"]])
    f = per[["fragile_dep2head", "fragile_head2dep"]].to_numpy().T
    return c, np.vstack([f, f.max(axis=0)])


def compare_settings(settings, dirs) -> dict:
    """Compare every setting's stores with the first's: changed float16 values, word flips per number."""
    ref = dirs[0]
    values = changed = worst = 0
    heads = {m: _word_numbers(score_heads(open_store(ref / m, level="word"))) for m in ("words", "normwords")}
    trees = {m: _tree_numbers(ref / m) for m in ("words", "normwords")}
    word_flips, tree_flips = [], []  # (flips, fragile) of every number, every setting
    for d in dirs[1:]:
        for m in ("words", "normwords", "segments"):
            t, c, w = changed_values(ref / m, d / m)
            values, changed, worst = values + t, changed + c, max(worst, w)
        for m in ("words", "normwords"):
            got, _ = _word_numbers(score_heads(open_store(d / m, level="word")))
            word_flips.append((np.abs(got - heads[m][0]).ravel(), heads[m][1].ravel()))
            tgot, _ = _tree_numbers(d / m)
            tree_flips.append((np.abs(tgot - trees[m][0]).ravel(), trees[m][1].ravel()))
    rows_frag, rows = fragile_rows(ref / "segments")
    p_change = changed / values if values else 0.0
    flips = np.concatenate([f for f, _ in word_flips])  # [number x setting]
    fragile = np.concatenate([g for _, g in word_flips])  # [number x setting]
    # a near-tied word flips only when one of its two values moves: at most 2 p_change; the observed rate if higher
    p_flip = max(float(flips.sum()) / max(1, int(fragile.sum())), 2 * p_change)
    lam = p_flip * SAFETY
    k_of = lambda f: poisson_k(f * lam)  # noqa: E731
    word_ok = all(int(x) <= k_of(int(g)) for x, g in zip(flips, fragile))
    tflips = np.concatenate([f for f, _ in tree_flips])
    tfrag = np.concatenate([g for _, g in tree_flips])
    tree_factor = 2
    while not all(int(x) <= tree_factor * k_of(int(g)) for x, g in zip(tflips, tfrag)):
        tree_factor += 1
    return {
        "format": "bertlook-tolerances/1",
        "measurements": {
            "float16_values_compared": values, "float16_values_changed": changed, "p_change": p_change,
            "max_ulp_change": worst, "fragile_words_max_per_number": int(fragile.max()),
            "head_accuracy_flips": int(flips.sum()), "head_accuracy_max_flips_per_number": int(flips.max()),
            "head_accuracy_flips_within_k": word_ok, "tree_flips": int(tflips.sum()),
            "tree_max_flips_per_number": int(tflips.max()), "p_flip": p_flip,
            "k_of_the_most_fragile_number": k_of(int(fragile.max())),
            "positional_fragile_rows_max_per_head_in_sample": int(rows_frag.max()), "positional_rows_in_sample": rows,
        },
        "groups": {
            "argmax": {"lambda_per_fragile": lam, "risk": FAMILY_RISK, "why": (
                f"float16 values changed by another CPU code path / thread count: {changed} of {values} (p_change "
                f"{p_change:.2e}, at most {worst} ulp); a near-tied word (two best within one ulp) flips with "
                f"probability <= 2 p_change (observed: {int(flips.sum())} flips over {int(fragile.sum())} near-tied "
                f"words); lambda = {p_flip:.2e} x safety {SAFETY:g} per near-tied word; a number with f near-tied "
                f"words moves by at most k(f) = the Poisson(f x lambda) quantile at 1 - {FAMILY_RISK:g} words "
                f"(observed flips all within k: {word_ok}; the most fragile number, {int(fragile.max())} words: "
                f"k = {k_of(int(fragile.max()))})")},
            "tree": {"factor": tree_factor, "why": (
                f"single-head trees: {tree_factor} x k(f) of the head's near-tied words (a flipped edge can re-route "
                f"a spanning tree); observed: {int(tflips.sum())} flips, at most {int(tflips.max())} of one number, "
                f"all within {tree_factor} x k")},
            "positional": {"lambda_per_row": int(rows_frag.max()) / max(1, rows) * lam, "why": (
                f"fragile argmax rows (token maps): at most {int(rows_frag.max())} of {rows} sampled rows of one "
                f"head x lambda; make-golden scales it to the run's rows and takes the Poisson quantile")},
        },
    }


def probe_tolerances(spread: dict) -> dict:
    worst = int(spread["max_words_per_seed"])
    return {"probe": {"words": max(int(SAFETY) * worst, int(SAFETY)), "why": (
        f"trained probes (Table 3, its norm twin, the ablations: every seed of the demo) under "
        f"{'; '.join(spread.get('settings', []))}: a seed's dev UAS moved by at most {worst} words; k = {SAFETY:g} "
        f"times that, at least {SAFETY:g} words (scripts/probe_spread.py)")}}


def meta(settings, model, run, args) -> dict:
    import torch

    return {"measured": datetime.date.today().isoformat(), "model": model, "run": str(run),
            "settings": [f"ATEN_CPU_CAPABILITY={c} OMP_NUM_THREADS={t}" for c, t in settings],
            "cpu": platform.processor() or platform.machine(), "torch": torch.__version__,
            "segments_sampled": args.segments}


if __name__ == "__main__":
    sys.exit(main())
