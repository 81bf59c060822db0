"""The one place where the paper's printed numbers are joined into the twin tables.

The analyses return frames of the run's own numbers only (:func:`bertlook.analyses.table1.table1`,
:func:`bertlook.analyses.coref.table2_frame`, :func:`bertlook.analyses.probes.reference.run_probes`); the CLI of
each step passes them through the matching ``join_table*`` here before writing the CSV and the
Markdown. The numbers come from :mod:`bertlook.reporting.paper_reference` (``paper_reference.yaml``,
percents as printed) and are stored as fractions, like the run's numbers. The PASS/FAIL judgement of a
run against the paper is :mod:`bertlook.reporting.compare` (``comparison.csv``), which reads the same
reference.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from bertlook.analyses.table1 import HELDOUT_COLUMNS, TABLE1_COLUMNS
from bertlook.reporting.paper_reference import table1_reference, table2_reference, table3_reference

#: Table 1 columns added after the run's own paper-twin columns (``TABLE1_COLUMNS`` and the held-out
#: ones) and before the columns beyond the paper (cross-fitted choice, paired tests, candidate sets);
#: ``diff_accuracy``: ours - paper, only when comparable.
TABLE1_PAPER_COLUMNS = [
    "paper_relation", "paper_head", "paper_direction", "paper_accuracy", "paper_baseline",
    "paper_baseline_offset", "paper_note", "diff_accuracy",
]
#: Table 2 columns with the paper's numbers (fractions) and head.
TABLE2_PAPER_COLUMNS = ["paper_all", "paper_pronoun", "paper_proper", "paper_nominal", "paper_head"]
#: Table 3: the paper's UAS of each probe (fraction), placed before ``note``.
TABLE3_PAPER_COLUMN = "paper_uas"


def _fraction(value: Any) -> float:
    return float("nan") if value is None else float(value) / 100.0


def _one_line(text: Any) -> str:
    return " ".join(str(text or "").split())


def join_table1(table: pd.DataFrame, scheme: str = "sd", *, comparable: bool = False) -> pd.DataFrame:
    """``table`` (rows keyed by ``relation`` in the run's relation ``scheme``) with
    :data:`TABLE1_PAPER_COLUMNS` inserted after its paper-twin columns (``TABLE1_COLUMNS``, then the
    held-out ones when present), so the columns beyond the paper stay last; rows the paper does not
    have get empty / NaN cells. ``diff_accuracy`` (ours - paper, fraction) is filled only when the run
    is ``comparable``."""
    paper = table1_reference(scheme)
    cols: dict[str, list[Any]] = {c: [] for c in TABLE1_PAPER_COLUMNS}
    for rel, acc in zip(table["relation"], table["accuracy"]):
        ref = paper.get(rel)
        if ref is None:
            for c, empty in zip(TABLE1_PAPER_COLUMNS, ("", "", "", np.nan, np.nan, pd.NA, "", np.nan)):
                cols[c].append(empty)
            continue
        p_acc = float(ref["accuracy"]) / 100.0
        cols["paper_relation"].append(str(ref.get("paper_relation", ref.get("relation", rel))))
        cols["paper_head"].append(str(ref["head"]))
        cols["paper_direction"].append(str(ref.get("direction", "")))
        cols["paper_accuracy"].append(p_acc)
        cols["paper_baseline"].append(float(ref["baseline"]) / 100.0)
        cols["paper_baseline_offset"].append(int(ref["baseline_offset"]))
        cols["paper_note"].append(_one_line(ref.get("note", "")))
        cols["diff_accuracy"].append(float(acc) - p_acc if comparable else np.nan)
    out = table.copy()
    twin = [c for c in (*TABLE1_COLUMNS, *HELDOUT_COLUMNS) if c in out.columns]
    at = max(list(out.columns).index(c) for c in twin) + 1 if twin else len(out.columns)
    for c in TABLE1_PAPER_COLUMNS:
        values = pd.array(cols[c], dtype="Int64") if c == "paper_baseline_offset" else cols[c]
        out.insert(at, c, values)
        at += 1
    for c in ("paper_accuracy", "paper_baseline", "diff_accuracy"):
        out[c] = out[c].astype("float64")
    return out


def join_table2(table: pd.DataFrame, columns: tuple[str, ...] = ()) -> pd.DataFrame:
    """``table`` (one row per ``system``) with the paper's numbers (:data:`TABLE2_PAPER_COLUMNS`);
    the ``neural`` row, which bertlook does not run, gets the paper's note. ``columns``: the final
    column order (default: the run's columns, then the paper's)."""
    paper = table2_reference()
    out = table.copy()
    refs = [paper.get(str(s), {}) for s in out["system"]]
    for name in ("all", "pronoun", "proper", "nominal"):
        out[f"paper_{name}"] = [_fraction(ref.get(name)) for ref in refs]
    out["paper_head"] = [str(ref.get("head", "") or "") for ref in refs]
    notes = list(out["note"]) if "note" in out else [""] * len(out)
    for i, (system, ref) in enumerate(zip(out["system"], refs)):
        if system == "neural":
            notes[i] = "paper only: " + str(ref.get("note", "a neural coreference system"))
    out["note"] = notes
    if columns:
        out = out[list(columns)]
    return out


def join_table3(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` (one row per ``probe``) with the paper's UAS (fraction) in :data:`TABLE3_PAPER_COLUMN`,
    placed before ``note``; the frame's ``attrs`` (per-seed runs, store summaries) are kept."""
    paper = table3_reference()
    out = table.copy()
    values = [_fraction(paper[str(p)]["uas"]) if str(p) in paper else np.nan for p in out["probe"]]
    at = list(out.columns).index("note") if "note" in out.columns else len(out.columns)
    out.insert(at, TABLE3_PAPER_COLUMN, pd.Series(values, index=out.index, dtype="float64"))
    out.attrs = dict(table.attrs)
    return out
