"""The end of a run, for a person: what it found beside the paper, where its results are, how long it took.

:func:`end_of_run_summary` is printed by the Snakefile's ``onsuccess`` handler (``make demo``, ``make reproduce``,
any ``snakemake`` run that finishes) instead of leaving the reader with Snakemake's job list. Numbers come from
each run's ``comparison.csv`` (the comparison with the paper); nothing is recomputed. A run whose comparison is
not there yet (a target short of ``all``) is listed with its folder only.
"""

from __future__ import annotations

import csv
import os
import re
from collections import Counter
from pathlib import Path

#: (section, item, metric, label, unit, show the row's note) of comparison.csv rows shown; ``item`` is a regular
#: expression the row's item matches whole
HEADLINES = (
    ("Table 1", "All", "best-head accuracy (%)", "Table 1: best head, all relations", "%", True),
    ("Table 1", "All", "baseline accuracy (%)", "Table 1: best fixed-offset baseline", "%", True),
    ("Table 2", r"Head \d+-\d+", "all (%)", "Table 2: best coreference head", "%", True),
    ("Table 3", r"Attn \+ GloVe", "UAS (%)", "Table 3: Attn + GloVe probe, UAS", "%", True),
    ("Figure facts", "sep_share_layers_6_10", None, "Fig 2: attention to [SEP], layers 6-10", "", False),
)


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))


def _find(rows: list[dict[str, str]], section: str, item: str, metric: str | None) -> dict[str, str] | None:
    for r in rows:
        if r["section"] == section and re.fullmatch(item, r["item"]) and (metric is None or r["metric"] == metric):
            return r
    return None


def _number(text: str, unit: str) -> str:
    try:
        value = float(text)
    except (TypeError, ValueError):
        return "-"
    return f"{value:.1f}{unit}" if unit else f"{value:.3g}"


def _run_lines(run_dir: Path) -> list[str]:
    lines = [f"{run_dir.name}  ({run_dir}/)"]
    comparison = run_dir / "comparison.csv"
    if not comparison.is_file():
        return lines + ["  no comparison with the paper yet (the run stopped short of it)"]
    rows = _rows(comparison)
    for section, item, metric, label, unit, with_note in HEADLINES:
        r = _find(rows, section, item, metric)
        if r is None:
            continue
        value = _number(r["reproduced"], unit) if r["reproduced"] else r["status"]
        note = r["note"].split(";")[0].strip()[:40] if with_note and r.get("note") and r["reproduced"] else ""
        lines.append(f"  {label:<42} {value:>8}   paper {_number(r['paper'], unit):>7}" + (f"   ({note})" if note else ""))
    counts = Counter(r["status"] for r in rows)
    lines.append("  against the paper: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
                 + f" ({len(rows)} numbers; {run_dir / 'comparison.md'})")
    for what, rel in (("tables", "tables/"), ("figures", "figures/"), ("head explorer", "explorer.html")):
        if (run_dir / rel).exists():
            lines.append(f"  {what + ':':<15}{run_dir / rel}")
    return lines


def _duration(seconds: float) -> str:
    minutes, s = divmod(int(round(seconds)), 60)
    return f"{minutes} min {s} s" if minutes else f"{s} s"


def end_of_run_summary(run_dirs: list[str | os.PathLike], *, elapsed_s: float | None = None,
                       summary_dir: str | os.PathLike | None = None, configfiles: list[str] = ()) -> str:
    """The text printed when a run finishes: per run its headline numbers beside the paper's, the counts of
    the comparison, where its tables, figures and explorer are; the cross-model summary; how to get the report;
    the wall time of this invocation (``elapsed_s``)."""
    head = "bertlook: finished" + (f" in {_duration(elapsed_s)}" if elapsed_s is not None else "")
    lines = [head + ". What the run found, beside the paper (Clark et al. 2019; comparable only for the "
             "paper's model and data):", ""]
    for run_dir in run_dirs:
        lines += _run_lines(Path(run_dir)) + [""]
    if summary_dir is not None and (Path(summary_dir) / "models_summary.md").is_file():
        side = Path(summary_dir) / "explorer.html"
        lines.append(f"models side by side: {Path(summary_dir) / 'models_summary.md'}"
                     + (f", {side}" if side.is_file() else ""))
    config = " ".join(f"--configfile {c}" for c in configfiles)
    lines.append(f"HTML report: make report CONFIG={configfiles[-1] if configfiles else 'config.yaml'}  (or: snakemake "
                 f"{config + ' ' if config else ''}--report results/<run>/report.html)")
    return "\n".join(lines)
