"""Per-head report card: one row per head joining the per-head tables of earlier steps (``bertlook head-report``).

Nothing is recomputed from attention maps: :func:`build_head_report` reads and validates
``attention_stats.csv`` (``surface-stats``: ``max_attention`` -> ``confidence``, ``cls`` -> ``sink``,
``entropy``, ``positional_offset`` / ``positional_fraction``), ``head_clusters.csv`` (``cluster-heads``:
``behavior``), ``head_accuracy.csv`` (``heads``: the best relation of each head) and, when given,
``coref_heads.csv`` (``coref``: ``all``), ``head_importance.csv`` (``gradients --out-importance``:
``importance``) and ``head_detectors.csv`` (``head-detectors``: ``prev_token``, ``duplicate_token``,
``induction``), and derives the flags ``positional`` and ``sink_head``. Numbers only; the figure is
:func:`bertlook.reporting.extra_figures.fig_head_report`.

Definitions: docs/definitions.md#per-head-report-card
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from bertlook.analyses.heads import ALL, DIRECTIONS, SKIP_RELATIONS
from bertlook.errors import BertlookError, check_at_least
from bertlook.io_utils import read_csv_strings
from bertlook.naming import head_label

REPORT_COLUMNS = [
    "layer", "head", "importance", "confidence", "positional_offset", "positional_fraction", "positional",
    "sink", "sink_head", "entropy", "behaviour", "best_relation", "best_direction", "best_accuracy",
    "coref_accuracy", "prev_token", "duplicate_token", "induction", "alti_sink", "alti_sep", "ablation_loss",
]
#: per-head ALTI shares (contribution_heads.csv of ``contributions``, kind ``alti_heads``) -> report columns
ALTI_COLUMNS = {"alti_sink": "cls", "alti_sep": "sep"}
ALTI_KIND = "alti_heads"
#: the columns of head_detectors.csv (``head-detectors``) the report takes over
DETECTOR_COLUMNS = ["prev_token", "duplicate_token", "induction"]
POSITIONAL_THRESHOLD = 0.9  # positional: at least 90% of the rows' argmax at the head's usual offset
SINK_THRESHOLD = 0.3  # sink head: mean attention to the first token above epsilon = 0.3 (Gu et al. 2025)
DEFAULT_MIN_COUNT = 100  # best relation: among relations with >= this many words (Table 1's rows)


# --------------------------------------------------------------------------------------------------
# reading and validation (every error names the file and line)
# --------------------------------------------------------------------------------------------------


def int_column(df: "pd.DataFrame", col: str, path: Path, *, minimum: int = 1) -> "np.ndarray":
    """Column ``col`` of a CSV read as strings, as integers >= ``minimum``; an error names the file and line."""
    text = df[col].astype(str).str.strip()
    vals = pd.to_numeric(text, errors="coerce")
    bad = vals.isna() | (vals.fillna(0) != vals.fillna(0).round()) | (vals.fillna(minimum) < minimum)
    if bad.any():
        i = int(bad.to_numpy().nonzero()[0][0])
        raise BertlookError(f"{path}:{i + 2}: column {col!r}: expected an integer >= {minimum}, got {text.iloc[i]!r}")
    return vals.to_numpy().astype(np.int64)  # [row]


def _floats(df: "pd.DataFrame", col: str, path: Path, *, allow_empty: bool = False) -> "np.ndarray":
    text = df[col].astype(str).str.strip()
    vals = pd.to_numeric(text, errors="coerce")
    empty = text.str.lower().isin(["", "nan", "na"])
    bad = (vals.isna() & ~empty) | (empty & (not allow_empty))
    if bad.any():
        i = int(bad.to_numpy().nonzero()[0][0])
        raise BertlookError(f"{path}:{i + 2}: column {col!r}: expected a number, got {text.iloc[i]!r}")
    return vals.to_numpy().astype(np.float64)  # [row]


def _head_rows(df: "pd.DataFrame", path: Path) -> list[tuple[int, int]]:
    return list(zip(int_column(df, "layer", path).tolist(), int_column(df, "head", path).tolist()))


def _check_heads(heads: list[tuple[int, int]], grid: set[tuple[int, int]], path: Path, stats_path: Path,
                 *, unique: bool = True) -> None:
    """Every head of ``grid`` appears in ``heads`` (once when ``unique``), and no other head."""
    seen: set[tuple[int, int]] = set()
    for i, h in enumerate(heads):
        if h not in grid:
            raise BertlookError(f"{path}:{i + 2}: head {h[0]}-{h[1]} is not a head of {stats_path} "
                                "(tables of different models or runs?)")
        if unique and h in seen:
            raise BertlookError(f"{path}:{i + 2}: head {h[0]}-{h[1]} appears more than once")
        seen.add(h)
    missing = sorted(grid - seen)
    if missing:
        shown = ", ".join(f"{l}-{h}" for l, h in missing[:5]) + (" ..." if len(missing) > 5 else "")
        raise BertlookError(f"{path}: no row for {len(missing)} head(s) of {stats_path}: {shown}")


def read_stats(path) -> "pd.DataFrame":
    """``attention_stats.csv``: layer, head, confidence (max_attention), sink (cls), entropy, positional columns.

    The heads must form the full grid ``1..L x 1..H``, each once.
    """
    path = Path(path)
    need = ("layer", "head", "max_attention", "cls", "entropy", "positional_offset", "positional_fraction")
    raw = read_csv_strings(path, required=need, what="attention statistics")
    if raw.empty:
        raise BertlookError(f"{path}: no data rows")
    heads = _head_rows(raw, path)
    L, H = max(l for l, _ in heads), max(h for _, h in heads)
    grid = {(l, h) for l in range(1, L + 1) for h in range(1, H + 1)}
    _check_heads(heads, grid, path, path)
    offset = pd.to_numeric(raw["positional_offset"].str.strip(), errors="coerce")
    bad = offset.isna() | (offset.fillna(0) != offset.fillna(0).round())
    if bad.any():
        i = int(bad.to_numpy().nonzero()[0][0])
        raise BertlookError(f"{path}:{i + 2}: column 'positional_offset': expected an integer, "
                            f"got {raw['positional_offset'].iloc[i]!r}")
    out = pd.DataFrame({
        "layer": [l for l, _ in heads], "head": [h for _, h in heads],
        "confidence": _floats(raw, "max_attention", path),
        "positional_offset": offset.to_numpy().astype(np.int64),
        "positional_fraction": _floats(raw, "positional_fraction", path),
        "sink": _floats(raw, "cls", path),
        "entropy": _floats(raw, "entropy", path),
    })
    for col in ("confidence", "positional_fraction", "sink"):
        v = out[col].to_numpy()  # [row]
        bad = ~((v >= 0) & (v <= 1 + 1e-6))
        if bad.any():
            i = int(bad.nonzero()[0][0])
            raise BertlookError(f"{path}:{i + 2}: {col} = {v[i]!r} is not a fraction in [0, 1]")
    return out


def read_clusters(path, grid: set[tuple[int, int]], stats_path) -> dict[tuple[int, int], str]:
    """``head_clusters.csv`` -> {(layer, head): behaviour label}; the same heads as the statistics."""
    path = Path(path)
    raw = read_csv_strings(path, required=("layer", "head", "behavior"), what="head clusters table")
    heads = _head_rows(raw, path)
    _check_heads(heads, grid, path, Path(stats_path))
    labels = raw["behavior"].astype(str).str.strip()
    empty = labels == ""
    if empty.any():
        i = int(empty.to_numpy().nonzero()[0][0])
        raise BertlookError(f"{path}:{i + 2}: empty behavior label")
    return dict(zip(heads, labels.tolist()))


def best_relations(path, grid: set[tuple[int, int]], stats_path, *, min_count: int = DEFAULT_MIN_COUNT):
    """``head_accuracy.csv`` -> (per head ``(relation, direction, accuracy)`` or None, info).

    Candidates: every relation but "All" and Table 1's skipped ones (:data:`bertlook.analyses.heads.SKIP_RELATIONS`:
    root, punctuation) with ``count >= min_count`` words, both directions. Best =
    highest accuracy; ties: more words, then relation name, then dep2head before head2dep.
    """
    path = Path(path)
    check_at_least("min count", min_count, 0)
    raw = read_csv_strings(path, required=("relation", "layer", "head", "direction", "accuracy", "count"),
                           what="head accuracy table")
    if raw.empty:
        raise BertlookError(f"{path}: no data rows")
    heads = _head_rows(raw, path)
    rel = raw["relation"].astype(str).str.strip()
    direction = raw["direction"].astype(str).str.strip()
    bad = ~direction.isin(DIRECTIONS) | (rel == "")
    if bad.any():
        i = int(bad.to_numpy().nonzero()[0][0])
        raise BertlookError(f"{path}:{i + 2}: expected a relation and a direction in {', '.join(DIRECTIONS)}, "
                            f"got {rel.iloc[i]!r}, {direction.iloc[i]!r}")
    count = int_column(raw, "count", path, minimum=0)  # [row]
    acc = _floats(raw, "accuracy", path, allow_empty=True)  # [row]
    bad = (count > 0) & ~((acc >= 0) & (acc <= 1))  # [row]
    if bad.any():
        i = int(bad.nonzero()[0][0])
        raise BertlookError(f"{path}:{i + 2}: accuracy {raw['accuracy'].iloc[i]!r} of {count[i]} words is not in [0, 1]")
    frame = pd.DataFrame({"relation": rel, "layer": [l for l, _ in heads], "head": [h for _, h in heads],
                          "direction": direction, "accuracy": acc, "count": count})
    dup = frame.duplicated(subset=["relation", "layer", "head", "direction"])
    if dup.any():
        i = int(dup.to_numpy().nonzero()[0][0])
        raise BertlookError(f"{path}:{i + 2}: {rel.iloc[i]} {direction.iloc[i]} of head "
                            f"{heads[i][0]}-{heads[i][1]} appears more than once")
    _check_heads(heads, grid, path, Path(stats_path), unique=False)  # one row per relation and direction
    skipped = sorted(set(frame["relation"]) & set(SKIP_RELATIONS))
    words = frame[(frame["relation"] != ALL) & ~frame["relation"].isin(SKIP_RELATIONS)
                  ].groupby("relation", sort=True)["count"].max()
    kept = sorted(r for r, c in words.items() if c >= min_count)
    below = {r: int(c) for r, c in words.items() if c < min_count}
    cand = frame[frame["relation"].isin(kept) & (frame["count"] >= min_count)].copy()
    cand["dir_order"] = cand["direction"].map({d: k for k, d in enumerate(DIRECTIONS)})
    cand = cand.sort_values(["layer", "head", "accuracy", "count", "relation", "dir_order"],
                            ascending=[True, True, False, False, True, True], kind="stable")
    best: dict[tuple[int, int], tuple[str, str, float] | None] = {h: None for h in grid}
    for r in cand.drop_duplicates(subset=["layer", "head"], keep="first").itertuples(index=False):
        best[(int(r.layer), int(r.head))] = (str(r.relation), str(r.direction), float(r.accuracy))
    info = {"min_count": int(min_count), "relations_considered": {r: int(words[r]) for r in kept},
            "relations_below_min_count": below, "relations_skipped": skipped}
    return best, info


def _optional_table(path, column: str, grid, stats_path, what: str, *, kind: str | None = None):
    """An optional per-head table -> ({head: value} or None, status text); ``kind``: only its rows (a table with a
    ``kind`` column, e.g. contribution_heads.csv)."""
    if path is None:
        return None, f"absent: no {what} table given"
    path = Path(path)
    raw = read_csv_strings(path, required=("layer", "head", column, *(("kind",) if kind else ())),
                           what=what + " table")
    if kind is not None:
        raw = raw[raw["kind"].str.strip() == kind].reset_index(drop=True)
        if raw.empty:
            raise BertlookError(f"{path}: no rows of kind {kind!r}")
    if "note" in raw.columns:
        notes = raw["note"].astype(str).str.strip()
        empty_heads = (raw["layer"].str.strip() == "") & (raw["head"].str.strip() == "")
        if len(raw) == 1 and bool(empty_heads.iloc[0]) and notes.iloc[0]:
            note = notes.iloc[0]
            return None, note if note.startswith("not run") else f"not run: {note}"
    if raw.empty:
        raise BertlookError(f"{path}: no data rows")
    heads = _head_rows(raw, path)
    _check_heads(heads, grid, path, Path(stats_path))
    return dict(zip(heads, _floats(raw, column, path, allow_empty=True).tolist())), "ok"


def _contribution_columns(contribution_heads_csv, head_ablation_csv, grid, stats_csv):
    """The card's columns from the ``contributions`` and ``faithfulness`` steps: ``alti_sink`` / ``alti_sep`` (the
    head's ALTI share to the first token / [SEP], :data:`ALTI_COLUMNS`) and ``ablation_loss`` (the loss change of
    removing the head, head_ablation.csv ``loss_change``) -> ``({column: {head: value} or None}, statuses)``."""
    out, status = {}, {}
    for col, share in ALTI_COLUMNS.items():
        out[col], status["alti"] = _optional_table(contribution_heads_csv, share, grid, stats_csv,
                                                   "contribution heads", kind=ALTI_KIND)
    out["ablation_loss"], status["ablation"] = _optional_table(head_ablation_csv, "loss_change", grid, stats_csv,
                                                               "head ablation")
    return out, status


# --------------------------------------------------------------------------------------------------
# the report
# --------------------------------------------------------------------------------------------------


def build_head_report(
    stats_csv: str | os.PathLike,
    clusters_csv: str | os.PathLike,
    head_accuracy_csv: str | os.PathLike,
    *,
    coref_heads_csv: str | os.PathLike | None = None,
    importance_csv: str | os.PathLike | None = None,
    detectors_csv: str | os.PathLike | None = None,
    contribution_heads_csv: str | os.PathLike | None = None,
    head_ablation_csv: str | os.PathLike | None = None,
    min_count: int = DEFAULT_MIN_COUNT,
) -> tuple["pd.DataFrame", dict[str, Any]]:
    """The report card: ``(frame, summary)``, one row per head in (layer, head) order, columns
    :data:`REPORT_COLUMNS`. Optional tables may be None (column empty, the summary says why)."""
    stats = read_stats(stats_csv).sort_values(["layer", "head"], kind="stable").reset_index(drop=True)
    heads = list(zip(stats["layer"].tolist(), stats["head"].tolist()))
    grid = set(heads)
    behaviour = read_clusters(clusters_csv, grid, stats_csv)
    best, rel_info = best_relations(head_accuracy_csv, grid, stats_csv, min_count=min_count)
    importance, importance_status = _optional_table(importance_csv, "importance", grid, stats_csv, "head importance")
    coref, coref_status = _optional_table(coref_heads_csv, "all", grid, stats_csv, "coreference heads")
    detectors = {c: _optional_table(detectors_csv, c, grid, stats_csv, "head detectors") for c in DETECTOR_COLUMNS}
    detectors_status = detectors[DETECTOR_COLUMNS[0]][1]
    extra, extra_status = _contribution_columns(contribution_heads_csv, head_ablation_csv, grid, stats_csv)

    nan = math.nan
    frame = pd.DataFrame({
        "layer": stats["layer"], "head": stats["head"],
        "importance": [importance[h] if importance is not None else nan for h in heads],
        "confidence": stats["confidence"],
        "positional_offset": stats["positional_offset"],
        "positional_fraction": stats["positional_fraction"],
        "positional": stats["positional_fraction"] >= POSITIONAL_THRESHOLD,
        "sink": stats["sink"],
        "sink_head": stats["sink"] > SINK_THRESHOLD,
        "entropy": stats["entropy"],
        "behaviour": [behaviour[h] for h in heads],
        "best_relation": [best[h][0] if best[h] else "" for h in heads],
        "best_direction": [best[h][1] if best[h] else "" for h in heads],
        "best_accuracy": [best[h][2] if best[h] else nan for h in heads],
        "coref_accuracy": [coref[h] if coref is not None else nan for h in heads],
        **{c: [values[h] if values is not None else nan for h in heads] for c, (values, _) in detectors.items()},
        **{c: [values[h] if values is not None else nan for h in heads] for c, values in extra.items()},
    }, columns=REPORT_COLUMNS)
    L, H = int(stats["layer"].max()), int(stats["head"].max())
    labels = [head_label(l - 1, h - 1) for l, h in heads]
    pos = frame["positional"].to_numpy()  # [layer*head]
    sink = frame["sink_head"].to_numpy()  # [layer*head]
    summary: dict[str, Any] = {
        "inputs": {"stats": str(stats_csv), "clusters": str(clusters_csv), "head_accuracy": str(head_accuracy_csv),
                   "coref_heads": None if coref_heads_csv is None else str(coref_heads_csv),
                   "importance": None if importance_csv is None else str(importance_csv),
                   "detectors": None if detectors_csv is None else str(detectors_csv),
                   "contribution_heads": None if contribution_heads_csv is None else str(contribution_heads_csv),
                   "head_ablation": None if head_ablation_csv is None else str(head_ablation_csv)},
        "num_layers": L, "num_heads": H, "n_heads": len(frame),
        "thresholds": {"positional_fraction": POSITIONAL_THRESHOLD, "sink": SINK_THRESHOLD, "min_count": int(min_count)},
        "positional_heads": int(pos.sum()),
        "positional_head_labels": [f"{lab} ({int(k):+d})" for lab, k, p in
                                   zip(labels, frame["positional_offset"], pos) if p],
        "sink_heads": int(sink.sum()),
        "sink_head_labels": [lab for lab, s in zip(labels, sink) if s],
        "behaviours": {str(k): int(v) for k, v in frame["behaviour"].value_counts().sort_index().items()},
        "best_relations": {str(k): int(v) for k, v in
                           frame.loc[frame["best_relation"] != "", "best_relation"].value_counts().sort_index().items()},
        "heads_without_best_relation": int((frame["best_relation"] == "").sum()),
        **rel_info,
        "importance": importance_status,
        "coref": coref_status,
        "detectors": detectors_status,
        **extra_status,
    }
    if importance is not None:
        summary["heads_without_importance"] = int(frame["importance"].isna().sum())
    if coref is not None:
        summary["heads_without_coref_accuracy"] = int(frame["coref_accuracy"].isna().sum())
    return frame, summary
