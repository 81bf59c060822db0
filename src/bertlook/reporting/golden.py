"""The regression gate: every checked number of a run, and what another machine may get for it.

``bertlook make-golden RUN_DIR --tolerances tests/golden/tolerances.json`` writes the golden file,
``bertlook check-regression RUN_DIR --against FILE`` compares a run with it (exit 1 on any difference,
missing or extra number; 2 on bad input). Format ``bertlook-golden/2``: groups of values, each group with
the ``rtol`` / ``atol`` of its continuous numbers. A value is either

* a plain JSON value: a float matches when ``|got - golden| <= atol + rtol |golden|`` (float summation
  order only); integers, strings and nulls must be equal; or
* a check computed by make-golden from the computation (:mod:`bertlook.reporting.golden_ranges`):
  ``{"value": v, "min": lo, "max": hi}`` (the accepted interval, e.g. an accuracy plus or minus the
  words an argmax may flip on another CPU, in the units of the number), ``{"value": v, "any_of": [...]}``
  (a head choice between near-tied heads, a significance flag whose p-value interval straddles alpha), or
  ``{"value": v, "unchecked": why}`` (a comparison against a near-tied runner-up, which may be another head).

The word tolerances come from ``tests/golden/tolerances.json``, measured by ``scripts/measure_tolerance.py``
(argmaxes: how many float16 decisions are within one ulp, how often another CPU code path or thread count
moves a stored value) and ``scripts/probe_spread.py`` (trained probes under two thread counts and CPU code
paths); every group names its rule in ``tolerance``.
"""

from __future__ import annotations

import dataclasses
import math
import os
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np

from bertlook import __version__
from bertlook.analyses.table1 import CROSSFIT_COLUMNS, NOPUNCT_COLUMNS, PAIRED_COLUMNS
from bertlook.errors import BertlookError
from bertlook.pipeline.steps import GoldenTable
from bertlook.reporting.golden_ranges import poisson_k
from bertlook.reporting.golden_rules import add_ranges
from bertlook.reporting.run_files import (
    CLUSTERS_CSV, GRADIENTS_CSV, HEAD_ACCURACY_CSV, JS_CSV, MANIFEST, STATS_CSV, TABLE1_CSV, TABLE2_COLUMNS, TABLE2_CSV,
    TABLE3_CSV, parse_number, read_run_csv, read_json_file, read_run_stats, read_manifest,
)

GOLDEN_FORMAT = "bertlook-golden/2"
TOLERANCES_FORMAT = "bertlook-tolerances/1"
#: full-precision tables: float rounding only
STATS_TOL = {"rtol": 1e-6, "atol": 1e-9}
#: tables written with 6 significant digits (io_utils.write_csv, "%.6g"): one unit in the 6th digit
SIX_DIGIT_TOL = {"rtol": 1e-5, "atol": 1e-9}
EXACT = {"rtol": 0.0, "atol": 0.0}
GOLDEN_HEADER = (
    "Every checked number of one run. A plain float matches when |got - golden| <= atol + rtol * |golden| with "
    "the rtol/atol of its group (float summation order only: rtol 1e-6 for tables written at full precision, "
    "1e-5 for tables written with 6 significant digits); integers, strings and nulls must be equal. A value "
    "written as {value, min, max} must lie in [min, max] (with the group's rtol/atol beyond it), one written "
    "as {value, any_of} must be one of any_of, one written as {value, unchecked} is not compared (the reason "
    "is given). Those ranges come from the computation: an argmax-based number (accuracy, UAS) may move by "
    "the group's tolerance in words on another CPU code path or thread count (tolerance: how it was set), a "
    "head chosen by such numbers may be any head within twice that many words of the chosen one. A key "
    "missing from the run or present only in the run is a regression too. Regenerate with `bertlook "
    "make-golden RUN_DIR --tolerances tests/golden/tolerances.json --out FILE` after an intended change."
)
#: summary files whose integer counts go into the golden file (required ones first)
COUNT_SUMMARIES = {
    "segments": ("corpus/segments.summary.json", True),
    "treebank": ("treebank/treebank.summary.json", True),
    "extraction": ("attention/segments.summary.json", False),
    "words_dev": ("attention/words-dev.summary.json", False),
    "words_train": ("attention/words-train.summary.json", False),
    "stats": ("tables/attention_stats.summary.json", False),
    "heads": ("tables/head_accuracy.summary.json", False),
    "tree_heads": ("tables/tree_heads.summary.json", False),
}
# Integers of the summaries that are not the run's results: the machine (free disk, the store-size estimate
# with the absolute input path in its index part), timings, and the near-tie candidate lists the ranges are
# made from (their word counts are argmax-based: checked through the tables' ranges instead).
NOT_COUNTS = frozenset({"disk_free_bytes", "estimated_bytes", "selections", "positional_candidates", "readers"})


# ====================================================================================== tolerances
@dataclasses.dataclass(frozen=True)
class Tolerances:
    """Word tolerances of the gate (``tests/golden/tolerances.json``); zeros: exact word counts.

    An argmax-based count whose ``f`` words rest on a float16 near-tie (``fragile``: the ``heads`` and
    ``tree-heads`` steps count them) may move by :meth:`k_argmax` ``(f)`` words: the Poisson quantile of
    ``f x argmax_lambda`` (the measured chance that such a word flips, times a safety factor); a single-head
    tree count by :meth:`k_tree` (``tree_factor`` times that: a flipped edge can re-route a spanning tree).
    """

    argmax_lambda: float = 0.0  # expected flips per fragile word on another CPU code path / thread count
    tree_factor: int = 2
    probe_words: int = 0  # one seed's dev UAS count of a trained probe (Table 3, its twins, the ablations)
    positional_lambda_per_row: float = 0.0  # expected argmax-row flips per token row (positional statistics)
    risk: float = 1e-6  # P(a number moves by more than its tolerance by float rounding alone)
    contribution_atol: float = 0.0  # the contributions tables' numbers (measured spread x 10)
    faithfulness_atol: float = 0.0  # the faithfulness tables' numbers (measured spread x 10)
    contribution_words: int = 0  # Table 1 per map kind: words an accuracy may move (measured flips x 4, >= 4)
    source: str = "none: exact word counts"
    why: dict[str, str] = dataclasses.field(default_factory=dict)

    def k_argmax(self, fragile: int) -> int:
        return poisson_k(max(0, int(fragile)) * self.argmax_lambda, self.risk)

    def k_tree(self, fragile: int) -> int:
        return self.tree_factor * self.k_argmax(fragile)


def read_tolerances(path: str | os.PathLike | None) -> Tolerances:
    """The tolerances file (``scripts/measure_tolerance.py`` output); None: :class:`Tolerances` of zeros."""
    if path is None:
        return Tolerances()
    doc = read_json_file(path, "tolerances file")
    if doc.get("format") != TOLERANCES_FORMAT:
        raise BertlookError(f"{path}: not a tolerances file (format {doc.get('format')!r}, expected "
                            f"{TOLERANCES_FORMAT!r})")
    groups = doc.get("groups")
    if not isinstance(groups, dict):
        raise BertlookError(f"{path}: `groups` must be an object")

    def get(name: str, key: str, kind: type) -> Any:
        g = groups.get(name)
        v = g.get(key) if isinstance(g, dict) else None
        if not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0 or (kind is int and int(v) != v):
            raise BertlookError(f"{path}: groups.{name}.{key} must be a number >= 0"
                                + (" (whole words)" if kind is int else "") + f", got {v!r}")
        return kind(v)

    why = {name: str(g.get("why", "")) for name, g in groups.items() if isinstance(g, dict)}
    contrib = {"contribution_atol": get("contributions", "atol", float),
               "faithfulness_atol": get("contributions", "faithfulness_atol", float),
               "contribution_words": get("contributions", "words", int)} if "contributions" in groups else {}
    return Tolerances(argmax_lambda=get("argmax", "lambda_per_fragile", float),
                      tree_factor=get("tree", "factor", int), probe_words=get("probe", "words", int),
                      positional_lambda_per_row=get("positional", "lambda_per_row", float),
                      risk=get("argmax", "risk", float), source=f"{path} (measured {doc.get('measured', '?')})",
                      why=why, **contrib)


# ====================================================================================== values
def _golden_float(x: float) -> float | None:
    return None if math.isnan(x) else float(x)


def _group(source: str, tol: dict[str, float], values: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"source": source, **tol, **extra, "values": values}


def is_check(entry: Any) -> bool:
    """Whether a golden value is a check object (``{"value": ..., "min"/"max" | "any_of" | "unchecked"}``)."""
    return isinstance(entry, dict) and "value" in entry


def golden_value(entry: Any) -> Any:
    """The run's own value of a golden entry (plain, or a check's ``value``)."""
    return entry["value"] if is_check(entry) else entry


def _same(golden: Any, got: Any, rtol: float, atol: float) -> bool:
    if golden is None or got is None:
        return golden is None and got is None
    g_num = isinstance(golden, (int, float)) and not isinstance(golden, bool)
    n_num = isinstance(got, (int, float)) and not isinstance(got, bool)
    if g_num and n_num:
        if isinstance(golden, int) and isinstance(got, int):
            return golden == got
        g, n = float(golden), float(got)
        if math.isinf(g) or math.isinf(n):
            return g == n
        return abs(n - g) <= atol + rtol * abs(g)
    return type(golden) is type(got) and golden == got


def matches(entry: Any, got: Any, rtol: float, atol: float) -> bool:
    """Whether ``got`` passes the golden ``entry`` (a plain value or a check) with the group's tolerances."""
    if not is_check(entry):
        return _same(entry, got, rtol, atol)
    if "unchecked" in entry:
        return True
    if "any_of" in entry:
        return any(_same(v, got, rtol, atol) for v in entry["any_of"])
    if got is None or entry["value"] is None:
        return got is None and entry["value"] is None
    if not isinstance(got, (int, float)) or isinstance(got, bool):
        return False
    lo, hi = float(entry["min"]), float(entry["max"])
    return lo - (atol + rtol * abs(lo)) <= float(got) <= hi + (atol + rtol * abs(hi))


# ==================================================================================== the groups
def _column_floats(path: Path, df, keys: tuple[str, ...]) -> dict[str, Any]:
    values: dict[str, Any] = {}
    # "fragile" columns are the near-tie counts the ranges are made from, not results
    data_cols = [c for c in df.columns if c not in keys and c != "note" and not c.startswith("fragile")]
    for i, r in df.iterrows():
        key = "/".join(str(r[k]).strip() for k in keys)
        for c in data_cols:
            cell = str(r[c]).strip()
            try:
                values[f"{key}/{c}"] = _golden_float(parse_number(cell, f"{path}:{i + 2}"))
            except BertlookError:
                values[f"{key}/{c}"] = cell
    return values


def _g_attention_stats(run_dir: Path, name: str = STATS_CSV) -> dict[str, Any]:
    if name != STATS_CSV and not (run_dir / name).is_file():
        return _group(name, SIX_DIGIT_TOL, {"status": "absent"})
    stats = read_run_stats(run_dir, name)
    cols = [c for c in stats.columns if c not in ("layer", "head")]
    values = {}
    for r in stats.itertuples(index=False):
        for c in cols:
            values[f"{r.layer}-{r.head}/{c}"] = _golden_float(float(getattr(r, c)))
    return _group(name, SIX_DIGIT_TOL, values)


def _g_table1(run_dir: Path, name: str = TABLE1_CSV) -> dict[str, Any]:
    path = run_dir / name
    if name != TABLE1_CSV and not path.is_file():
        return _group(name, STATS_TOL, {"status": "absent"})
    df = read_run_csv(path, required=("relation", "best_head", "direction", "accuracy", "baseline_offset",
                                   "baseline_accuracy", "count"), what="Table 1 twin")
    floats = [c for c in ("accuracy", "ci_low", "ci_high", "baseline_accuracy", "baseline_ci_low",
                          "baseline_ci_high", "heldout_accuracy") if c in df.columns]
    strings = [c for c in ("best_head", "direction", "baseline_offset", "heldout_head", "heldout_direction")
               if c in df.columns]
    values: dict[str, Any] = {}
    for i, r in df.iterrows():
        rel = r["relation"].strip()
        where = f"{path}:{i + 2}"
        for c in floats:
            values[f"{rel}/{c}"] = _golden_float(parse_number(r[c], f"{where}: {c}"))
        for c in strings:
            values[f"{rel}/{c}"] = str(r[c]).strip()
        values[f"{rel}/count"] = int(parse_number(r["count"], f"{where}: count"))
    return _group(name, STATS_TOL, values)


def _g_table1_stats(run_dir: Path, name: str = TABLE1_CSV) -> dict[str, Any]:
    """The columns of a Table 1 twin beyond the paper (cross-fitted choice, paired tests, punctuation
    candidates; docs/definitions.md#paired-tests-of-table-1): ``absent`` when the table lacks them."""
    path = run_dir / name
    if not path.is_file():
        return _group(name + " (beyond the paper)", STATS_TOL, {"status": "absent"})
    df = read_run_csv(path, required=("relation",), what="Table 1 twin")
    cols = [c for c in (*CROSSFIT_COLUMNS, *PAIRED_COLUMNS, *NOPUNCT_COLUMNS) if c in df.columns]
    if not cols:
        return _group(name + " (beyond the paper)", STATS_TOL, {"status": "absent"})
    ints = {c for c in cols if c.endswith(("_b", "_c")) or c == "gold_head_punct"}
    strings = {c for c in cols if c.endswith(("_head", "_direction", "_head_a", "_head_b", "_direction_a",
                                               "_direction_b", "_significant"))}
    values: dict[str, Any] = {"status": "ok"}
    for i, r in df.iterrows():
        rel = r["relation"].strip()
        where = f"{path}:{i + 2}"
        for c in cols:
            cell = str(r[c]).strip()
            if c in strings:
                values[f"{rel}/{c}"] = cell
            elif c in ints:
                n = parse_number(cell, f"{where}: {c}")
                values[f"{rel}/{c}"] = None if math.isnan(n) else int(n)
            else:
                values[f"{rel}/{c}"] = _golden_float(parse_number(cell, f"{where}: {c}"))
    return _group(name + " (beyond the paper)", STATS_TOL, values)


def _g_head_accuracy(run_dir: Path) -> dict[str, Any]:
    path = run_dir / HEAD_ACCURACY_CSV
    df = read_run_csv(path, required=("relation", "layer", "head", "direction", "accuracy"), what="head accuracy table")
    values = {}
    for i, r in df[df["relation"].str.strip() == "All"].iterrows():
        key = f"All/{r['layer'].strip()}-{r['head'].strip()}/{r['direction'].strip()}"
        values[key] = _golden_float(parse_number(r["accuracy"], f"{path}:{i + 2}"))
    if not values:
        raise BertlookError(f"{path}: no `All` rows")
    return _group(HEAD_ACCURACY_CSV + " (All rows)", STATS_TOL, values)


def _g_table3(run_dir: Path, name: str = TABLE3_CSV) -> dict[str, Any]:
    path = run_dir / name
    if not path.is_file():
        return _group(name, SIX_DIGIT_TOL, {"status": "absent"})
    df = read_run_csv(path, required=("probe", "uas_mean"), what="Table 3 twin")
    values: dict[str, Any] = {"status": "ok"}
    for i, r in df.iterrows():
        probe = r["probe"].strip()
        for c in ("uas_mean", "uas_sd", "uas_mst_mean"):
            if c in df.columns:
                values[f"{probe}/{c}"] = _golden_float(parse_number(r[c], f"{path}:{i + 2}"))
        if "n_seeds" in df.columns:
            n = parse_number(r["n_seeds"], f"{path}:{i + 2}")
            values[f"{probe}/n_seeds"] = None if math.isnan(n) else int(n)
    return _group(name, SIX_DIGIT_TOL, values)


def _g_table2(run_dir: Path) -> dict[str, Any]:
    path = run_dir / TABLE2_CSV
    if not path.is_file():
        return _group(TABLE2_CSV, STATS_TOL, {"status": "absent"})
    df = read_run_csv(path, required=("system", *TABLE2_COLUMNS), what="Table 2 twin")
    if (df["system"].str.strip() == "not run").all():
        return _group(TABLE2_CSV, STATS_TOL, {"status": "not run"})
    values: dict[str, Any] = {"status": "ok"}
    for i, r in df.iterrows():
        system = r["system"].strip()
        where = f"{path}:{i + 2}"
        for c in TABLE2_COLUMNS:
            values[f"{system}/{c}"] = _golden_float(parse_number(r[c], where))
            if f"n_{c}" in df.columns:
                n = parse_number(r[f"n_{c}"], where)
                values[f"{system}/n_{c}"] = None if math.isnan(n) else int(n)
        if "head" in df.columns:
            values[f"{system}/head"] = str(r["head"]).strip()
    return _group(TABLE2_CSV, STATS_TOL, values)


def _g_gradients(run_dir: Path) -> dict[str, Any]:
    path = run_dir / GRADIENTS_CSV
    if not path.is_file():
        return _group(GRADIENTS_CSV, SIX_DIGIT_TOL, {"status": "absent"})
    df = read_run_csv(path, required=("layer", "target", "mean_abs_grad", "attention_mass"),
                      what="[SEP] gradient table")
    if (df["mean_abs_grad"].str.strip() == "").all() and (df["attention_mass"].str.strip() == "").all():
        return _group(GRADIENTS_CSV, SIX_DIGIT_TOL, {"status": "not run"})
    values: dict[str, Any] = {"status": "ok"}
    for i, r in df.iterrows():
        key = f"{r['layer'].strip()}/{r['target'].strip()}"
        for c in ("mean_abs_grad", "attention_mass"):
            values[f"{key}/{c}"] = _golden_float(parse_number(r[c], f"{path}:{i + 2}"))
    return _group(GRADIENTS_CSV, SIX_DIGIT_TOL, values)


def _g_clusters(run_dir: Path, name: str = CLUSTERS_CSV) -> dict[str, Any]:
    path = run_dir / name
    if name != CLUSTERS_CSV and not path.is_file():
        return _group(name + " (behaviour labels)", EXACT, {"status": "absent"})
    df = read_run_csv(path, required=("layer", "head", "behavior"), what="head clusters table")
    values = {f"{r['layer'].strip()}-{r['head'].strip()}": str(r["behavior"]).strip() for _, r in df.iterrows()}
    return _group(name + " (behaviour labels)", EXACT, values)


def _g_numeric_table(name: str, keys: tuple[str, ...], tol: dict[str, float]) -> Callable[[Path], dict[str, Any]]:
    """A golden group of every cell of a table (beyond the paper: rollout, head report, importance):
    rows keyed by ``keys``, numbers as floats (NaN -> null), other cells as strings; ``absent`` when
    the step is switched off, ``not run`` for a table that says so in a ``note`` column."""

    def group(run_dir: Path) -> dict[str, Any]:
        path = run_dir / name
        if not path.is_file():
            return _group(name, tol, {"status": "absent"})
        df = read_run_csv(path, required=keys, what=name)
        data_cols = [c for c in df.columns if c not in keys and c != "note"]
        if "note" in df.columns and all(str(v).strip() == "" for c in data_cols for v in df[c]):
            return _group(name, tol, {"status": "not run"})
        return _group(name, tol, {"status": "ok", **_column_floats(path, df, keys)})

    return group


def _g_js(run_dir: Path) -> dict[str, Any]:
    path = run_dir / JS_CSV
    df = read_run_csv(path, what="JS divergence matrix")
    if df.shape[1] < 2 or df.shape[0] != df.shape[1] - 1:
        raise BertlookError(f"{path}: expected a square matrix with a label column, got {df.shape[0]} rows x "
                            f"{df.shape[1]} columns")
    try:
        m = df.iloc[:, 1:].apply(lambda s: s.str.strip().astype(float)).to_numpy(dtype=np.float64)
    except ValueError as err:
        raise BertlookError(f"{path}: non-numeric cell: {err}") from None
    upper = np.sort(m[np.triu_indices(m.shape[0], k=1)])[::-1]
    values: dict[str, Any] = {"n_heads": int(m.shape[0]), "sum": float(m.sum())}
    for k, v in enumerate(upper[:5], start=1):
        values[f"largest/{k}"] = float(v)
    return _group(JS_CSV + " (sum of the matrix; 5 largest head-pair values)", SIX_DIGIT_TOL, values)


def _int_leaves(obj: Any, prefix: str, out: dict[str, int]) -> None:
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k not in NOT_COUNTS:
                _int_leaves(v, f"{prefix}/{k}", out)
    elif isinstance(obj, int) and not isinstance(obj, bool):
        out[prefix] = int(obj)


def _g_counts(run_dir: Path) -> dict[str, Any]:
    values: dict[str, int] = {}
    for name, (rel, required) in COUNT_SUMMARIES.items():
        path = run_dir / rel
        if not path.is_file() and not required:
            continue
        _int_leaves(read_json_file(path, f"{name} summary"), name, values)
    return _group("integer counts of the step summaries: " + ", ".join(r for r, _ in COUNT_SUMMARIES.values()),
                  EXACT, values)


GOLDEN_GROUPS: dict[str, Callable[[Path], dict[str, Any]]] = {
    "attention_stats": _g_attention_stats,
    "table1": _g_table1,
    "table1_stats": _g_table1_stats,
    "head_accuracy_all": _g_head_accuracy,
    "table3": _g_table3,
    "table2": _g_table2,
    "sep_gradients": _g_gradients,
    "head_clusters": _g_clusters,
    "js_divergence": _g_js,
    "counts": _g_counts,
    # beyond the paper ("absent" when switched off)
    "attention_stats_norm": lambda run_dir: _g_attention_stats(run_dir, "tables/attention_stats_norm.csv"),
    "table1_norm": lambda run_dir: _g_table1(run_dir, "tables/table1_norm.csv"),
    "table1_norm_stats": lambda run_dir: _g_table1_stats(run_dir, "tables/table1_norm.csv"),
    "table3_norm": lambda run_dir: _g_table3(run_dir, "tables/table3_norm.csv"),
    "head_clusters_norm": lambda run_dir: _g_clusters(run_dir, "tables/head_clusters_norm.csv"),
    "table1_rollout": lambda run_dir: _g_table1(run_dir, "tables/table1_rollout.csv"),
}


def table_group(table: GoldenTable) -> Callable[[Path], dict[str, Any]]:
    """The golden group of a table a step declares (:class:`bertlook.pipeline.steps.GoldenTable`): every
    cell, numbers at 6 significant digits."""
    return _g_numeric_table(table.path, table.keys, SIX_DIGIT_TOL)


def run_values(run_dir: str | os.PathLike, tables: Iterable[GoldenTable] = ()) -> dict[str, dict[str, Any]]:
    """Every group of :data:`GOLDEN_GROUPS` of a run, and one per golden table the steps declare
    (``tables``: :func:`bertlook.pipeline.steps.golden_tables` of :func:`bertlook.cli.declared_steps`),
    plain values (no ranges): what a run is checked on."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise BertlookError(f"{run_dir}: run directory not found")
    groups = {**GOLDEN_GROUPS}
    for table in tables:
        if table.group in groups:
            raise BertlookError(f"golden group {table.group!r} of {table.path} is declared twice")
        groups[table.group] = table_group(table)
    return {name: fn(run_dir) for name, fn in groups.items()}


def make_golden(run_dir: str | os.PathLike, tolerances: Tolerances | None = None,
                tables: Iterable[GoldenTable] = ()) -> dict[str, Any]:
    """The golden file of a run: :func:`run_values` (with the declared golden ``tables``), with the ranges of
    :func:`bertlook.reporting.golden_rules.add_ranges` (word tolerances ``tolerances``; none: exact words).

    Groups: ``attention_stats`` (every head, every column), ``table1`` (per relation: accuracies, CI
    bounds, held-out accuracy; head, direction, offset as strings; count), ``table1_stats`` (the columns
    beyond the paper: cross-fitted choice, runner-up, paired tests, no-punctuation choice), ``head_accuracy_all``
    (the ``All`` rows: every head and direction), ``table3`` (uas_mean, uas_sd, uas_mst_mean, n_seeds per
    probe), ``table2``, ``sep_gradients`` (per layer and target, or the status), ``head_clusters``
    (behaviour labels), ``js_divergence`` (the matrix sum and its 5 largest head-pair values), ``counts``
    (every integer of the step summaries but :data:`NOT_COUNTS`), and the twins beyond the paper.
    """
    run_dir = Path(run_dir)
    groups = run_values(run_dir, tables)
    tolerances = tolerances or Tolerances()
    add_ranges(run_dir, groups, tolerances)
    run = run_dir.name
    if (run_dir / MANIFEST).is_file():
        run = str(read_manifest(run_dir).get("run") or run)
    return {
        "format": GOLDEN_FORMAT,
        "run": run,
        "made_with": f"bertlook {__version__}",
        "comparison": GOLDEN_HEADER,
        "tolerances": {**dataclasses.asdict(tolerances)},
        "groups": groups,
    }


# ==================================================================================== reading, comparing
def read_golden(path: str | os.PathLike) -> dict[str, Any]:
    """A golden file, checked (format, groups with ``values``, numeric ``rtol``/``atol``, well-formed checks)."""
    doc = read_json_file(path, "golden file")
    if doc.get("format") != GOLDEN_FORMAT:
        raise BertlookError(f"{path}: not a golden file of this version (format {doc.get('format')!r}, expected "
                            f"{GOLDEN_FORMAT!r}; regenerate it with `bertlook make-golden`)")
    groups = doc.get("groups")
    if not isinstance(groups, dict):
        raise BertlookError(f"{path}: `groups` must be an object")
    for name, g in groups.items():
        if not isinstance(g, dict) or not isinstance(g.get("values"), dict):
            raise BertlookError(f"{path}: group {name!r} lacks a `values` object")
        for key in ("rtol", "atol"):
            v = g.get(key)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0:
                raise BertlookError(f"{path}: group {name!r}: `{key}` must be a number >= 0, got {v!r}")
        for key, entry in g["values"].items():
            _check_entry(entry, f"{path}: {name}/{key}")
    return doc


def _check_entry(entry: Any, where: str) -> None:
    if isinstance(entry, dict) and not is_check(entry):
        raise BertlookError(f"{where}: an object value must have `value` (a check), got {sorted(entry)}")
    if not is_check(entry):
        return
    kinds = [k for k in ("min", "any_of", "unchecked") if k in entry]
    if len(kinds) != 1:
        raise BertlookError(f"{where}: a check needs exactly one of min/max, any_of, unchecked, got {sorted(entry)}")
    if kinds[0] == "min":
        lo, hi = entry.get("min"), entry.get("max")
        if not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (lo, hi)) or lo > hi:
            raise BertlookError(f"{where}: `min` and `max` must be numbers with min <= max, got {lo!r}, {hi!r}")
    elif kinds[0] == "any_of" and not isinstance(entry["any_of"], list):
        raise BertlookError(f"{where}: `any_of` must be a list")


def compare_golden(golden: dict[str, Any], current: dict[str, Any]) -> list[dict[str, Any]]:
    """Differences between a golden file and a run's groups (:func:`run_values` or :func:`make_golden`).

    Each difference: ``{"path": "group/key", "kind": "differs" | "missing in run" | "not in golden",
    "golden": the golden entry, "got": value}``; an empty list: no regression.
    """
    diffs: list[dict[str, Any]] = []
    ggroups, cgroups = golden["groups"], current["groups"] if "groups" in current else current
    for name, g in ggroups.items():
        cur = cgroups.get(name)
        if cur is None:
            diffs.append({"path": name, "kind": "missing in run", "golden": f"{len(g['values'])} values", "got": None})
            continue
        rtol, atol = float(g["rtol"]), float(g["atol"])
        got_values = {k: golden_value(v) for k, v in cur["values"].items()}
        for key, entry in g["values"].items():
            path = f"{name}/{key}"
            if key not in got_values:
                diffs.append({"path": path, "kind": "missing in run", "golden": entry, "got": None})
            elif not matches(entry, got_values[key], rtol, atol):
                diffs.append({"path": path, "kind": "differs", "golden": entry, "got": got_values[key]})
        for key in got_values:
            if key not in g["values"]:
                diffs.append({"path": f"{name}/{key}", "kind": "not in golden", "golden": None, "got": got_values[key]})
    for name, cur in cgroups.items():
        if name not in ggroups:
            diffs.append({"path": name, "kind": "not in golden", "golden": None, "got": f"{len(cur['values'])} values"})
    return diffs


def _describe(entry: Any) -> str:
    if not is_check(entry):
        return repr(entry)
    if "min" in entry:
        return f"{entry['value']!r} (accepted {entry['min']!r} .. {entry['max']!r})"
    if "any_of" in entry:
        return f"{entry['value']!r} (accepted any of {entry['any_of']!r})"
    return f"{entry['value']!r} (not compared: {entry['unchecked']})"


def check_against_golden(run_dir: str | os.PathLike, golden_path: str | os.PathLike,
                         out: Callable[[str], None] = print, tables: Iterable[GoldenTable] = ()) -> int:
    """Exit code 1 and every difference printed when the run differs from the golden file, else 0
    (``tables``: the declared golden tables, as for :func:`make_golden`; a golden group the run lacks is a
    difference)."""
    golden = read_golden(golden_path)
    diffs = compare_golden(golden, {"groups": run_values(run_dir, tables)})
    values = [e for g in golden["groups"].values() for e in g["values"].values()]
    n, n_ranges = len(values), sum(1 for e in values if is_check(e))
    if not diffs:
        out(f"{run_dir}: all {n} numbers of {golden_path} match ({n_ranges} of them within ranges set by the "
            "computation; tolerances per group in the file)")
        return 0
    out(f"{run_dir}: {len(diffs)} difference(s) from {golden_path} ({n} golden numbers):")
    for d in diffs:
        if d["kind"] == "differs":
            g = golden_value(d["golden"])
            extra = ""
            if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (g, d["got"])):
                extra = f" (difference {float(d['got']) - float(g):+.3g})"
            out(f"  differs: {d['path']}: golden {_describe(d['golden'])}, got {d['got']!r}{extra}")
        elif d["kind"] == "missing in run":
            out(f"  missing in run: {d['path']} (golden {_describe(d['golden'])})")
        else:
            out(f"  not in golden (extra in run): {d['path']} (got {d['got']!r})")
    return 1
