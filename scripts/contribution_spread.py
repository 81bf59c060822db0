#!/usr/bin/env python
"""Measure (not a test) how far the ``contributions`` and ``faithfulness`` steps' numbers move across CPU code paths
and thread counts: both steps of a run (the demo's settings, read from the run's config) under ``OMP_NUM_THREADS``
1 and 2 and ``ATEN_CPU_CAPABILITY`` ``default`` and ``avx2`` (torch reads it at start-up: every setting is its own
process; the numba ALTI kernels take torch's thread count), and ALTI per layer read in the extraction stream
(``extract-segments --alti-stats-partial`` on ``contributions.stream_segments`` segments, then ``surface-stats``).
For every numeric cell of contribution_stats.csv, contribution_heads.csv, faithfulness.csv, head_ablation.csv and
attention_stats_alti.csv the largest difference between two settings; for
table1_contributions.csv the largest accuracy difference in words (accuracy x count) and the chosen heads that
differ. Written as JSON (``--out``) and, with ``--tolerances FILE``, into that tolerances file's
``groups.contributions`` (the regression gate: ``atol`` = 10 x the largest difference, at least 1e-7;
``words`` = 4 x the largest word difference, at least 4) and ``contribution_spread`` (the measurements).

    .venv/bin/python scripts/contribution_spread.py --run results/offline-minilm --config config/offline.yaml \\
        --tolerances tests/golden/tolerances.json
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

import numpy as np
import pandas as pd

SETTINGS = [{"OMP_NUM_THREADS": t, "ATEN_CPU_CAPABILITY": c}
            for t, c in itertools.product(("1", "2"), ("default", "avx2"))]
NUMERIC_TABLES = ("contribution_stats.csv", "contribution_heads.csv", "faithfulness.csv", "head_ablation.csv",
                  "attention_stats_alti.csv")
#: the tolerance groups: the statistics of the contributions step and of ALTI in the extraction stream, and the
#: faithfulness step's agreement tables
ATOL_GROUPS = {"atol": ("contribution_stats.csv", "contribution_heads.csv", "attention_stats_alti.csv"),
               "faithfulness_atol": ("faithfulness.csv", "head_ablation.csv")}
ATOL_FACTOR, ATOL_FLOOR, WORDS_FACTOR, WORDS_FLOOR = 10.0, 1e-7, 4, 4


def commands(run: Path, cfg: dict, model: str, out: Path) -> list[list[str]]:
    """The two steps' command lines as the workflow writes them (the config's sample sizes), outputs under ``out``."""
    c, seed = cfg["contributions"], str(cfg.get("seed", 0))
    py = [sys.executable, "-m", "bertlook"]
    contrib = [*py, "contributions", "--model", model, "--segments", str(run / "corpus/segments.jsonl"),
               "--treebank", str(run / "treebank/dev.conllu"), "--n-segments", str(c["segments"]),
               "--n-sentences", str(c["sentences"]), "--seed", seed, "--device", "cpu",
               "--treebank-kind", "silver", "--bootstrap", "1000"]
    if c.get("value_zeroing_segments"):
        contrib += ["--value-zeroing-segments", str(c["value_zeroing_segments"])]
    for flag, name in (("--out-stats", "contribution_stats.csv"), ("--out-heads", "contribution_heads.csv"),
                       ("--out-table", "table1_contributions.csv"), ("--out-markdown", "table1_contributions.md"),
                       ("--summary", "contribution_stats.summary.json")):
        contrib += [flag, str(out / name)]
    faith = [*py, "faithfulness", "--model", model, "--segments", str(run / "corpus/segments.jsonl"),
             "--n-segments", str(c["faithfulness_segments"]), "--ablated-tokens", str(c["ablated_tokens"]),
             "--value-zeroing-layers", str(c.get("faithfulness_value_zeroing", "all")),
             "--head-ablation", str(c.get("head_ablation", "mean")), "--bootstrap", str(c.get("bootstrap", 1000)),
             "--seed", seed, "--device", "cpu",
             "--out-table", str(out / "faithfulness.csv"), "--out-markdown", str(out / "faithfulness.md"),
             "--out-heads", str(out / "head_ablation.csv"), "--summary", str(out / "faithfulness.summary.json")]
    # ALTI per layer in the extraction stream (extract-segments --alti-stats-partial, then surface-stats)
    alti = [*py, "extract-segments", "--model", model, "--segments", str(run / "corpus/segments.jsonl"),
            "--batch-size", str(cfg["extraction"]["batch_size"]), "--max-seq-len", str(cfg["segments"]["max_seq_len"]),
            "--device", "cpu", "--alti-stats-partial", str(out / "stats_alti.npz")]
    if c.get("stream_segments"):
        alti += ["--alti-max-examples", str(c["stream_segments"])]
    stats = [*py, "surface-stats", "--partial", str(out / "stats_alti.npz"), "--out",
             str(out / "attention_stats_alti.csv"), "--summary", str(out / "attention_stats_alti.summary.json")]
    return [contrib, faith, alti, stats]


def run_setting(cmds: list[list[str]], env_extra: dict[str, str]) -> float:
    env = {**os.environ, **env_extra, "BERTLOOK_PROGRESS": "0"}
    t0 = time.perf_counter()
    for cmd in cmds:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"{env_extra}: {cmd[3]} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return time.perf_counter() - t0


def numeric_spread(frames: list[pd.DataFrame]) -> float:
    """The largest absolute difference of a numeric cell between two settings (NaN where every setting has NaN)."""
    cols = [c for c in frames[0].columns if pd.api.types.is_numeric_dtype(frames[0][c])]
    if not cols:
        return 0.0
    arr = np.stack([f[cols].to_numpy(dtype=np.float64) for f in frames])  # [setting, row, column]
    if not np.array_equal(np.isnan(arr[0]), np.isnan(arr).any(axis=0)):
        raise SystemExit("a cell is NaN in one setting and not in another")
    return float(np.nan_to_num(arr.max(axis=0) - arr.min(axis=0)).max())


def table1_spread(frames: list[pd.DataFrame]) -> tuple[float, int]:
    """(largest accuracy difference in words, rows whose chosen head / layer differs between settings)."""
    words = np.stack([(f["accuracy"] * f["count"]).to_numpy(dtype=np.float64) for f in frames])
    best = np.stack([f["best"].astype(str).to_numpy() for f in frames])
    return float((words.max(axis=0) - words.min(axis=0)).max()), int((best != best[0]).any(axis=0).sum())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", required=True, help="a finished run directory (results/offline-minilm)")
    ap.add_argument("--config", required=True, help="its configuration (config/offline.yaml)")
    ap.add_argument("--out", default=None, help="write the measurements as JSON here")
    ap.add_argument("--tolerances", default=None, help="update groups.contributions of this tolerances file")
    ap.add_argument("--from-json", default=None, help="set the tolerances from an earlier --out file (no runs)")
    args = ap.parse_args(argv)
    if args.from_json:
        result = json.loads(Path(args.from_json).read_text(encoding="utf-8"))
        if args.tolerances:
            write_tolerances(args.tolerances, result)
        return 0
    from bertlook.pipeline.config import load_config  # the validated config, defaults filled in

    cfg = load_config(args.config)
    model = cfg["models"][0]["name_or_path"]
    run = Path(args.run)
    seconds, outs = {}, []
    with tempfile.TemporaryDirectory() as tmp:
        for s in SETTINGS:
            tag = f"omp{s['OMP_NUM_THREADS']}-{s['ATEN_CPU_CAPABILITY']}"
            out = Path(tmp) / tag
            out.mkdir()
            seconds[tag] = round(run_setting(commands(run, cfg, model, out), s), 1)
            print(f"{tag}: {seconds[tag]} s", flush=True)
            outs.append(out)
        spread = {name: numeric_spread([pd.read_csv(o / name) for o in outs]) for name in NUMERIC_TABLES}
        words, best_changed = table1_spread([pd.read_csv(o / "table1_contributions.csv") for o in outs])
    result = {"settings": [" ".join(f"{k}={v}" for k, v in s.items()) for s in SETTINGS], "seconds": seconds,
              "max_abs_diff": spread, "table1_max_word_diff": words, "table1_best_changed": best_changed,
              "measured": time.strftime("%Y-%m-%d"), "run": str(run), "model": model}
    print(json.dumps(result, indent=2))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    if args.tolerances:
        write_tolerances(args.tolerances, result)
    return 0


def write_tolerances(path: str, result: dict) -> None:
    """``groups.contributions`` and ``contribution_spread`` of the tolerances file ``path`` from a measurement."""
    spread, words, best_changed = result["max_abs_diff"], result["table1_max_word_diff"], result["table1_best_changed"]
    largest = {key: max(spread[t] for t in tables) for key, tables in ATOL_GROUPS.items()}
    atols = {key: max(ATOL_FACTOR * v, ATOL_FLOOR) for key, v in largest.items()}
    k = max(WORDS_FACTOR * int(np.ceil(words)), WORDS_FLOOR)
    doc = json.loads(Path(path).read_text(encoding="utf-8"))
    doc["groups"]["contributions"] = {
        **atols, "words": k,
        "why": (f"contributions / faithfulness tables under {', '.join(result['settings'])}: the largest change of a "
                f"number per table (at the CSV's 6 significant digits): "
                f"{', '.join(f'{n} {v:.3g}' for n, v in spread.items())}; atol (the statistics and the report "
                f"card's ALTI columns) and faithfulness_atol (the agreement tables, the card's ablation_loss) = "
                f"{ATOL_FACTOR:g} x the largest change of their tables, at least {ATOL_FLOOR:g}. Table 1 per map "
                f"kind: accuracies moved by at most {words:g} words, {best_changed} chosen heads changed; k = "
                f"{WORDS_FACTOR} x that, at least {WORDS_FLOOR} words (scripts/contribution_spread.py)")}
    doc["contribution_spread"] = result
    Path(path).write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
    print(f"wrote groups.contributions of {path}: {atols}, words {k}")


if __name__ == "__main__":
    sys.exit(main())
