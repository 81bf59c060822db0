"""Cross-language summary: do the same heads track the same relations across treebanks? (numbers only).

For one model scored on several treebanks (one ``heads`` step per treebank, usually one per language),
reads each ``head_accuracy.csv`` (:func:`load_head_accuracy`) and compares them: the best head of every
relation per treebank (:func:`best_heads`), and per relation whether the treebanks share it, how alike
the whole head rankings are (Spearman) and how well one treebank's best head does on another
(:func:`agreement`); :func:`languages_summary` gathers the counts for the summary JSON. The question is
that of Ravishankar et al. 2021 ("Attention Can Reflect Syntactic Structure (If You Let It)", EACL).
:func:`base_relations` optionally cuts UD subtypes (``nsubj:pass`` -> ``nsubj``), recombining the
correct counts. The figure is :func:`bertlook.reporting.extra_figures.fig_languages`, the markdown
:func:`bertlook.reporting.tables.languages_markdown`.

Definitions: docs/definitions.md#cross-language-summary
"""

from __future__ import annotations

import itertools
import math
import os
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pandas as pd

from bertlook.analyses.head_report import int_column
from bertlook.analyses.heads import ACCURACY_COLUMNS, ALL, DIRECTIONS, SKIP_RELATIONS
from bertlook.errors import BertlookError, check_at_least
from bertlook.io_utils import read_csv_strings
from bertlook.naming import head_label

DEFAULT_MIN_COUNT = 100  # as Table 1's rows
BEST_COLUMNS = ["relation", "direction", "treebank", "best_head", "accuracy", "runner_up_head",
                "runner_up_accuracy", "count"]
AGREEMENT_COLUMNS = ["relation", "direction", "n_treebanks", "treebanks", "same_best_head",
                     "n_distinct_best_heads", "modal_best_head", "modal_count", "mean_spearman",
                     "n_spearman_pairs", "transfer", "n_transfer_pairs"]
SUBTYPE_SEPARATOR = ":"


# --------------------------------------------------------------------------------------------------
# reading (every error names the file and line)
# --------------------------------------------------------------------------------------------------


def _bad_line(mask: "pd.Series | np.ndarray") -> int | None:
    idx = np.asarray(mask).nonzero()[0]  # [bad_row]
    return int(idx[0]) if len(idx) else None


def load_head_accuracy(path: str | os.PathLike) -> "pd.DataFrame":
    """``head_accuracy.csv`` of the ``heads`` step, checked: columns :data:`ACCURACY_COLUMNS` (typed).

    Checks: relation non-empty; direction in :data:`DIRECTIONS`; layer/head integers >= 1; count an
    integer >= 0 and the same on every row of a relation; accuracy a fraction in [0, 1] (may be empty
    only when count is 0); no (relation, layer, head, direction) twice; every (relation, direction)
    has the full ``L x H`` grid of heads. Errors name the file and the line (line 1 = the header).
    """
    path = Path(path)
    raw = read_csv_strings(path, required=ACCURACY_COLUMNS, what="head accuracy table")
    if raw.empty:
        raise BertlookError(f"{path}: no data rows")
    rel = raw["relation"].astype(str).str.strip()
    direction = raw["direction"].astype(str).str.strip()
    i = _bad_line(rel == "")
    if i is not None:
        raise BertlookError(f"{path}:{i + 2}: empty relation")
    i = _bad_line(~direction.isin(DIRECTIONS))
    if i is not None:
        raise BertlookError(f"{path}:{i + 2}: direction {direction.iloc[i]!r} is not one of {', '.join(DIRECTIONS)}")
    ints = {col: int_column(raw, col, path, minimum=minimum)  # [row] each
            for col, minimum in (("layer", 1), ("head", 1), ("count", 0))}
    text = raw["accuracy"].astype(str).str.strip()
    acc = pd.to_numeric(text, errors="coerce").to_numpy().astype(np.float64)  # [row]
    empty = text.str.lower().isin(["", "nan", "na"]).to_numpy()  # [row]
    bad = (np.isnan(acc) & ~empty) | (empty & (ints["count"] > 0)) | (~np.isnan(acc) & ~((acc >= 0) & (acc <= 1)))
    i = _bad_line(bad)
    if i is not None:
        raise BertlookError(f"{path}:{i + 2}: accuracy {text.iloc[i]!r} of {ints['count'][i]} words "
                            "is not a fraction in [0, 1]")
    frame = pd.DataFrame({"relation": rel.to_numpy(dtype=object), "layer": ints["layer"], "head": ints["head"],
                          "direction": direction.to_numpy(dtype=object), "accuracy": acc, "count": ints["count"]},
                         columns=ACCURACY_COLUMNS)
    i = _bad_line(frame.duplicated(subset=["relation", "layer", "head", "direction"]))
    if i is not None:
        raise BertlookError(f"{path}:{i + 2}: {rel.iloc[i]} {direction.iloc[i]} of head "
                            f"{ints['layer'][i]}-{ints['head'][i]} appears more than once")
    first = frame.groupby("relation", sort=False)["count"].transform("first").to_numpy()  # [row]
    i = _bad_line(first != frame["count"].to_numpy())
    if i is not None:
        raise BertlookError(f"{path}:{i + 2}: relation {rel.iloc[i]!r} has count {ints['count'][i]} here and "
                            f"{first[i]} on its first row (one word count per relation)")
    _tensor(frame, str(path))  # the full grid of every (relation, direction)
    return frame


def _tensor(frame: "pd.DataFrame", where: str) -> tuple[list[str], "np.ndarray", "np.ndarray"]:
    """``(relations, counts [R], accuracy [R, 2, L, H])`` of a head accuracy frame (direction 0 =
    dep2head); relations in order of first appearance. The grid must be complete."""
    missing = [c for c in ACCURACY_COLUMNS if c not in frame.columns]
    if missing:
        raise BertlookError(f"{where}: missing column(s) {', '.join(missing)}")
    if frame.empty:
        raise BertlookError(f"{where}: no rows")
    relations = list(dict.fromkeys(str(r) for r in frame["relation"]))
    r_index = {r: k for k, r in enumerate(relations)}
    layer = frame["layer"].to_numpy().astype(np.int64)  # [row]
    head = frame["head"].to_numpy().astype(np.int64)  # [row]
    if (layer < 1).any() or (head < 1).any():
        raise BertlookError(f"{where}: layers and heads are 1-indexed")
    d_index = {d: k for k, d in enumerate(DIRECTIONS)}
    bad = [d for d in dict.fromkeys(frame["direction"]) if d not in d_index]
    if bad:
        raise BertlookError(f"{where}: direction(s) {bad} not in {', '.join(DIRECTIONS)}")
    L, H, R = int(layer.max()), int(head.max()), len(relations)
    ri = np.fromiter((r_index[str(r)] for r in frame["relation"]), dtype=np.int64, count=len(frame))  # [row]
    di = np.fromiter((d_index[d] for d in frame["direction"]), dtype=np.int64, count=len(frame))  # [row]
    seen = np.zeros((R, 2, L, H), dtype=np.int64)  # [relation, direction, layer, head]: rows per cell
    np.add.at(seen, (ri, di, layer - 1, head - 1), 1)
    if (seen > 1).any():
        r, d, l, h = (int(v[0]) for v in np.nonzero(seen > 1))
        raise BertlookError(f"{where}: {relations[r]} {DIRECTIONS[d]} of head {l + 1}-{h + 1} appears more than once")
    if (seen == 0).any():
        r, d, l, h = (int(v[0]) for v in np.nonzero(seen == 0))
        n = int((seen[r, d] == 0).sum())
        raise BertlookError(f"{where}: relation {relations[r]!r} {DIRECTIONS[d]}: no row for {n} head(s) of the "
                            f"{L} x {H} grid (first: {l + 1}-{h + 1})")
    acc = np.full((R, 2, L, H), np.nan)  # [relation, direction, layer, head]
    acc[ri, di, layer - 1, head - 1] = frame["accuracy"].to_numpy().astype(np.float64)
    counts = np.zeros(R, dtype=np.int64)  # [relation]
    counts[ri] = frame["count"].to_numpy().astype(np.int64)
    return relations, counts, acc


# --------------------------------------------------------------------------------------------------
# subtypes
# --------------------------------------------------------------------------------------------------


def base_relation(relation: str) -> str:
    """``nsubj:pass`` -> ``nsubj`` (UD subtypes cut at the first ``:``); "All" stays."""
    return relation if relation == ALL else relation.split(SUBTYPE_SEPARATOR, 1)[0]


def base_relations(frame: "pd.DataFrame") -> "pd.DataFrame":
    """The frame with UD subtypes merged into their base relation (``nsubj`` + ``nsubj:pass`` -> ``nsubj``).

    A relation's accuracy is ``correct / count`` over its words, so each row's correct words are
    recovered as ``round(accuracy * count)`` and summed over the subtypes of a base relation (per
    layer, head and direction), the counts likewise; ``accuracy = sum correct / sum count``. Exact as
    long as the CSV's accuracies keep enough digits (6 significant ones: exact below ~10^5 words;
    :func:`base_relations_info` reports the largest rounding residual). Base relations in order of
    first appearance; "All" unchanged.
    """
    relations, counts, acc = _tensor(frame, "head accuracy frame")  # [R], [R, 2, L, H]
    correct = np.where(counts[:, None, None, None] > 0, np.rint(np.nan_to_num(acc) * counts[:, None, None, None]),
                       0.0)  # [relation, direction, layer, head]
    bases = list(dict.fromkeys(base_relation(r) for r in relations))
    b_index = {b: k for k, b in enumerate(bases)}
    bi = np.array([b_index[base_relation(r)] for r in relations], dtype=np.int64)  # [relation]
    B, _, L, H = len(bases), *acc.shape[1:]
    b_correct = np.zeros((B, 2, L, H))  # [base, direction, layer, head]
    np.add.at(b_correct, bi, correct)
    b_counts = np.zeros(B, dtype=np.int64)  # [base]
    np.add.at(b_counts, bi, counts)
    with np.errstate(invalid="ignore", divide="ignore"):
        b_acc = b_correct / b_counts[:, None, None, None]  # [base, direction, layer, head]
    return _frame_of(bases, b_counts, b_acc)


def base_relations_info(frame: "pd.DataFrame") -> dict[str, Any]:
    """What :func:`base_relations` merges: ``{"merged": {base: [relations]}`` (only bases with a subtype),
    ``"max_rounding_residual"``: the largest ``|accuracy * count - round(accuracy * count)|``}."""
    relations, counts, acc = _tensor(frame, "head accuracy frame")  # [R], [R, 2, L, H]
    groups: dict[str, list[str]] = {}
    for r in relations:
        groups.setdefault(base_relation(r), []).append(r)
    x = np.nan_to_num(acc) * counts[:, None, None, None]  # [relation, direction, layer, head]
    return {"merged": {b: rs for b, rs in groups.items() if rs != [b]},
            "max_rounding_residual": float(np.abs(x - np.rint(x)).max()) if x.size else 0.0}


def _frame_of(relations: list[str], counts: "np.ndarray", acc: "np.ndarray") -> "pd.DataFrame":
    """``counts [R]``, ``acc [R, 2, L, H]`` -> a head accuracy frame (columns :data:`ACCURACY_COLUMNS`)."""
    R, _, L, H = acc.shape
    # [relation, layer, head, direction] each
    ri, li, hi, di = np.meshgrid(np.arange(R), np.arange(L), np.arange(H), np.arange(2), indexing="ij")
    return pd.DataFrame({
        "relation": np.asarray(relations, dtype=object)[ri.ravel()],
        "layer": li.ravel() + 1,
        "head": hi.ravel() + 1,
        "direction": np.asarray(DIRECTIONS, dtype=object)[di.ravel()],
        "accuracy": acc[ri.ravel(), di.ravel(), li.ravel(), hi.ravel()],  # [relation*layer*head*direction]
        "count": np.asarray(counts, dtype=np.int64)[ri.ravel()],  # [relation*layer*head*direction]
    }, columns=ACCURACY_COLUMNS)


# --------------------------------------------------------------------------------------------------
# comparison
# --------------------------------------------------------------------------------------------------


def _prepare(frames: Mapping[str, "pd.DataFrame"], min_count: int):
    """Per treebank ``(relations, counts [R], acc [R, 2, L, H])``; the kept relations (>= min_count
    words, not skipped) in output order: "All" first, then by words over all treebanks, then name."""
    check_at_least("min count", min_count, 0)
    if not frames:
        raise BertlookError("no treebanks to compare")
    data = {str(label): _tensor(f, f"treebank {label!r}") for label, f in frames.items()}
    shapes = {label: d[2].shape[2:] for label, d in data.items()}
    if len(set(shapes.values())) > 1:
        raise BertlookError("the treebanks were scored with different head grids (one model expected): "
                            + ", ".join(f"{k}: {L} x {H}" for k, (L, H) in shapes.items()))
    kept: dict[str, dict[str, int]] = {}  # label -> {relation: index}
    total: dict[str, int] = {}
    for label, (relations, counts, _) in data.items():
        kept[label] = {r: k for k, r in enumerate(relations)
                       if r not in SKIP_RELATIONS and counts[k] >= max(min_count, 1)}
        for r in kept[label]:
            total[r] = total.get(r, 0) + int(counts[kept[label][r]])
    order = sorted(total, key=lambda r: (r != ALL, -total[r], r))
    return data, kept, order


def _best_two(acc_lh: "np.ndarray") -> tuple[int, int | None]:
    """Flat indices (layer-major) of the best and runner-up head of ``acc_lh [L, H]``; ties: lowest
    layer, then head (the first in layer-major order). Runner-up None with a single head."""
    flat = np.nan_to_num(np.asarray(acc_lh, dtype=np.float64).ravel(), nan=-np.inf)  # [layer*head]
    order = np.argsort(-flat, kind="stable")  # [layer*head]: best first, ties by index
    return int(order[0]), (int(order[1]) if len(order) > 1 else None)


def _label(flat: int, H: int) -> str:
    return head_label(flat // H, flat % H)


def best_heads(frames: Mapping[str, "pd.DataFrame"], *, min_count: int = DEFAULT_MIN_COUNT) -> "pd.DataFrame":
    """The best head of every relation, direction and treebank (columns :data:`BEST_COLUMNS`).

    ``frames``: treebank label -> head accuracy frame (:func:`load_head_accuracy`). One row per
    (relation, direction, treebank) for the relations with at least ``min_count`` words in that
    treebank ("All" included; root and punctuation, :data:`~bertlook.analyses.heads.SKIP_RELATIONS`,
    never). Best = highest accuracy over the ``L x H`` heads in that direction; ties: lowest layer,
    then head (as `bertlook.analyses.table1._best`); the runner-up is the best of the other heads.
    Rows: "All" first, then relations by words over all treebanks, then name; directions; treebanks
    in the given order.
    """
    data, kept, order = _prepare(frames, min_count)
    rows = []
    for rel in order:
        for d, direction in enumerate(DIRECTIONS):
            for label, (_, counts, acc) in data.items():
                k = kept[label].get(rel)
                if k is None:
                    continue
                H = acc.shape[3]
                grid = acc[k, d]  # [layer, head]
                b, s = _best_two(grid)
                rows.append({
                    "relation": rel, "direction": direction, "treebank": label,
                    "best_head": _label(b, H), "accuracy": float(grid.ravel()[b]),
                    "runner_up_head": "" if s is None else _label(s, H),
                    "runner_up_accuracy": math.nan if s is None else float(grid.ravel()[s]),
                    "count": int(counts[k]),
                })
    df = pd.DataFrame(rows, columns=BEST_COLUMNS)
    df["count"] = df["count"].astype("int64")
    return df


def spearman(x: "np.ndarray", y: "np.ndarray") -> float:
    """Spearman rank correlation of two vectors (ties: average ranks); NaN when either is constant."""
    rx = pd.Series(np.asarray(x, dtype=np.float64)).rank(method="average").to_numpy()  # [item]
    ry = pd.Series(np.asarray(y, dtype=np.float64)).rank(method="average").to_numpy()  # [item]
    rx, ry = rx - rx.mean(), ry - ry.mean()
    den = math.sqrt(float((rx * rx).sum()) * float((ry * ry).sum()))
    return math.nan if den == 0 else float((rx * ry).sum()) / den


def agreement(frames: Mapping[str, "pd.DataFrame"], *, min_count: int = DEFAULT_MIN_COUNT) -> "pd.DataFrame":
    """Per relation and direction in at least 2 treebanks (>= ``min_count`` words each), whether the
    treebanks agree on its heads (columns :data:`AGREEMENT_COLUMNS`; "All" first, order as :func:`best_heads`).

    - ``same_best_head``: every treebank has the same best head; ``n_distinct_best_heads``;
      ``modal_best_head`` / ``modal_count``: the most frequent best head (ties: lowest layer, head) and
      in how many treebanks it is best;
    - ``mean_spearman``: mean over unordered treebank pairs of the Spearman correlation of the ``L*H``
      head accuracies (pairs with a constant vector are undefined and left out; ``n_spearman_pairs``
      counts the others);
    - ``transfer``: mean over ordered pairs (A, B) of ``acc_B[best head of A] / max acc_B`` (1.0: A's
      best head is as good in B as B's own; pairs with ``max acc_B = 0`` left out, ``n_transfer_pairs``).
    """
    data, kept, order = _prepare(frames, min_count)
    rows = []
    for rel in order:
        labels = [label for label in data if rel in kept[label]]
        if len(labels) < 2:
            continue
        for d, direction in enumerate(DIRECTIONS):
            vecs = {lab: data[lab][2][kept[lab][rel], d].ravel() for lab in labels}  # label -> [layer*head]
            H = data[labels[0]][2].shape[3]
            best = {lab: _best_two(v)[0] for lab, v in vecs.items()}
            tally: dict[int, int] = {}
            for b in best.values():
                tally[b] = tally.get(b, 0) + 1
            modal = min(tally, key=lambda b: (-tally[b], b))
            rhos = [spearman(vecs[a], vecs[b]) for a, b in itertools.combinations(labels, 2)]
            rhos = [r for r in rhos if not math.isnan(r)]
            ratios = []
            for a, b in itertools.permutations(labels, 2):
                top = float(np.nanmax(vecs[b]))
                if top > 0:
                    ratios.append(float(vecs[b][best[a]]) / top)
            rows.append({
                "relation": rel, "direction": direction, "n_treebanks": len(labels), "treebanks": ";".join(labels),
                "same_best_head": len(tally) == 1, "n_distinct_best_heads": len(tally),
                "modal_best_head": _label(modal, H), "modal_count": tally[modal],
                "mean_spearman": float(np.mean(rhos)) if rhos else math.nan, "n_spearman_pairs": len(rhos),
                "transfer": float(np.mean(ratios)) if ratios else math.nan, "n_transfer_pairs": len(ratios),
            })
    df = pd.DataFrame(rows, columns=AGREEMENT_COLUMNS)
    for col in ("n_treebanks", "n_distinct_best_heads", "modal_count", "n_spearman_pairs", "n_transfer_pairs"):
        df[col] = df[col].astype("int64")
    df["same_best_head"] = df["same_best_head"].astype(bool)
    return df


# --------------------------------------------------------------------------------------------------
# summary
# --------------------------------------------------------------------------------------------------


def _num(x: Any) -> float | None:
    """A float for JSON (NaN -> None)."""
    v = float(x)
    return None if math.isnan(v) else v


def languages_summary(
    frames: Mapping[str, "pd.DataFrame"],
    best: "pd.DataFrame",
    agreement_frame: "pd.DataFrame",
    *,
    languages: Mapping[str, str],
    min_count: int = DEFAULT_MIN_COUNT,
    inputs: Mapping[str, str] | None = None,
    base_relations_infos: Mapping[str, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The summary JSON: per treebank its language, relations scored / below ``min_count`` (counted and
    listed with their word counts) / skipped; relations in only one treebank; headline numbers per
    direction (over the relations other than "All" in :func:`agreement`, and the "All" row).
    ``base_relations_infos``: label -> :func:`base_relations_info` of the frame before merging (None:
    relations compared as given)."""
    data, kept, _ = _prepare(frames, min_count)
    treebanks: dict[str, Any] = {}
    presence: dict[str, list[str]] = {}
    for label, (relations, counts, acc) in data.items():
        scored = [r for r in relations if r in kept[label] and r != ALL]
        below = {r: int(c) for r, c in zip(relations, counts) if r not in SKIP_RELATIONS and r not in kept[label]}
        for r in scored:
            presence.setdefault(r, []).append(label)
        entry: dict[str, Any] = {
            "language": str(languages.get(label, "")),
            "input": None if inputs is None else str(inputs.get(label, "")),
            "num_layers": int(acc.shape[2]), "num_heads": int(acc.shape[3]),
            "words": int(counts[relations.index(ALL)]) if ALL in relations else None,
            "n_relations": len([r for r in relations if r != ALL]),
            "n_relations_scored": len(scored),
            "relations_scored": scored,
            "n_relations_below_min_count": len(below),
            "relations_below_min_count": below,
            "skipped_relations": {r: int(c) for r, c in zip(relations, counts) if r in SKIP_RELATIONS},
        }
        rows = best[(best["treebank"] == label) & (best["relation"] == ALL)]
        entry["all_best_heads"] = {str(r.direction): {"head": str(r.best_head), "accuracy": _num(r.accuracy)}
                                   for r in rows.itertuples(index=False)}
        if base_relations_infos is not None and label in base_relations_infos:
            entry["merged_subtypes"] = base_relations_infos[label]["merged"]
            entry["max_rounding_residual"] = float(base_relations_infos[label]["max_rounding_residual"])
        treebanks[label] = entry
    headline: dict[str, Any] = {}
    for direction in DIRECTIONS:
        a = agreement_frame[(agreement_frame["direction"] == direction) & (agreement_frame["relation"] != ALL)]
        allrow = agreement_frame[(agreement_frame["direction"] == direction) & (agreement_frame["relation"] == ALL)]
        n = len(a)
        same = int(a["same_best_head"].sum()) if n else 0
        headline[direction] = {
            "n_relations": n,
            "n_same_best_head": same,
            "share_same_best_head": same / n if n else None,
            "mean_spearman": _num(a["mean_spearman"].mean()) if n else None,
            "mean_transfer": _num(a["transfer"].mean()) if n else None,
            "all": None if allrow.empty else {
                "same_best_head": bool(allrow["same_best_head"].iloc[0]),
                "n_distinct_best_heads": int(allrow["n_distinct_best_heads"].iloc[0]),
                "mean_spearman": _num(allrow["mean_spearman"].iloc[0]),
                "transfer": _num(allrow["transfer"].iloc[0]),
            },
        }
    compared = [r for r in dict.fromkeys(agreement_frame["relation"]) if r != ALL]
    return {
        "n_treebanks": len(data),
        "labels": list(data),
        "languages": {label: str(languages.get(label, "")) for label in data},
        "min_count": int(min_count),
        "base_relations": base_relations_infos is not None,
        "skip_relations": list(SKIP_RELATIONS),
        "treebanks": treebanks,
        "n_relations_compared": len(compared),
        "relations_compared": compared,
        "n_relations_in_one_treebank": sum(1 for v in presence.values() if len(v) == 1),
        "relations_in_one_treebank": {r: v[0] for r, v in presence.items() if len(v) == 1},
        "headline": headline,
    }
