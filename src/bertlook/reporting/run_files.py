"""A run directory's files, read: where each table lies, the JSON and CSV readers whose errors name the file,
and the per-head statistics typed. Shared by the comparison with the paper (:mod:`bertlook.reporting.compare`),
the golden files (:mod:`bertlook.reporting.golden`), several runs side by side
(:mod:`bertlook.reporting.models_summary`) and the notebook API (:mod:`bertlook.reporting.api`).

Light at the top (the workflow reads :mod:`bertlook.reporting.compare` when it builds the DAG).
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Sequence

from bertlook.errors import BertlookError
from bertlook.io_utils import read_csv_strings
from bertlook.pipeline.sharding import read_json_object
from bertlook.reporting.plotting import read_figure_table

MANIFEST = "manifest.json"
STATS_CSV = "tables/attention_stats.csv"
NORM_STATS_CSV = "tables/attention_stats_norm.csv"
TABLE1_CSV = "tables/table1.csv"
TABLE2_CSV = "tables/table2.csv"
TABLE3_CSV = "tables/table3.csv"
HEAD_ACCURACY_CSV = "tables/head_accuracy.csv"
CLUSTERS_CSV = "tables/head_clusters.csv"
JS_CSV = "tables/js_divergence.csv"
GRADIENTS_CSV = "tables/sep_gradients.csv"
TABLE2_COLUMNS = ("all", "pronoun", "proper", "nominal")


def read_json_file(path: str | os.PathLike, what: str) -> dict[str, Any]:
    """A JSON object file of a run (``what`` names it in errors: missing, unreadable, not an object)."""
    path = Path(path)
    if not path.is_file():
        raise BertlookError(f"{path}: {what} not found")
    return read_json_object(path, what)


def check_run_dir(run_dir: str | os.PathLike) -> Path:
    """``run_dir`` as a Path, checked: a directory holding ``manifest.json`` (else an error that names the run
    directories inside it)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise BertlookError(f"{run_dir}: run directory not found")
    if not (run_dir / MANIFEST).is_file():
        runs = sorted(p.name for p in run_dir.iterdir() if (p / MANIFEST).is_file()) if run_dir.is_dir() else []
        hint = f" (run directories inside: {', '.join(runs)}; give one of them)" if runs else ""
        raise BertlookError(f"{run_dir / MANIFEST}: manifest not found{hint}")
    return run_dir


def read_manifest(run_dir: str | os.PathLike) -> dict[str, Any]:
    """``RUN_DIR/manifest.json`` as a dict (:class:`BertlookError` naming the file when missing/invalid)."""
    return read_json_file(check_run_dir(run_dir) / MANIFEST, "run manifest")


def read_run_csv(path: str | os.PathLike, *, required: Sequence[str] = (), what: str = "table"):
    """A CSV as strings (empty cells stay ``""``); errors name the file."""
    return read_csv_strings(path, required=required, what=what)


def parse_number(text: Any, where: str = "") -> float:
    """A CSV cell as float; empty / NaN -> nan; garbage -> BertlookError naming ``where``."""
    if text is None:
        return math.nan
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return float(text)
    s = str(text).strip()
    if s.lower() in ("", "nan", "na", "<na>", "none"):
        return math.nan
    try:
        return float(s)
    except ValueError:
        raise BertlookError(f"{where}: expected a number, got {s!r}") from None


def read_run_stats(run_dir: Path, name: str = STATS_CSV):
    """The run's per-head statistics table (``tables/attention_stats.csv``) with its columns typed."""
    from bertlook.analyses.surface_stats import STAT_COLUMNS  # lazy: numpy/pandas; compare is read at DAG build

    path = run_dir / name
    header = list(read_run_csv(path, required=("layer", "head"), what="attention statistics").columns)
    floats = [c for c in header if c not in ("layer", "head")]
    missing = [c for c in STAT_COLUMNS if c not in header]
    if missing:
        raise BertlookError(f"{path}:1: missing column(s) {', '.join(missing)}")
    return read_figure_table(path, int_cols=("layer", "head"), float_cols=floats)
