"""The Table 1 twin assembled from head scores (paper Table 1; numbers only).

From the counts of :func:`bertlook.analyses.heads.score_heads`: per row (relation) the best head and the
best fixed-offset baseline with sentence-bootstrap intervals (:func:`table1`, :func:`table1_relations`,
:func:`bootstrap_ci`); beyond the paper, the held-out head choice (train scores), a 2-fold cross-fitted
choice, paired tests of the best head against the best offset baseline and the runner-up head
(:func:`mcnemar_exact`, :func:`holm`), the best head with punctuation excluded from the candidates, how
close each choice was (:func:`selection_candidates`, for the regression gate) and the summary entries
on the rows (:func:`relation_rows_summary`, :func:`statistics_summary`).

The whole ``heads`` step without the command line: :mod:`bertlook.analyses.heads_step`.

Definitions: docs/definitions.md#head-accuracy
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import pandas as pd

from bertlook.analyses.heads import (ALL, DEFAULT_OFFSETS, DIRECTIONS, FORCED_RELATIONS, PUNCT_RELATIONS, PUNCT_UPOS,
                                     SKIP_RELATIONS, HeadScores)
from bertlook.analyses.second_pass import second_pass
from bertlook.attention.store import AttentionStore, open_store
from bertlook.errors import BertlookError, check_at_least
from bertlook.naming import head_label

TABLE1_COLUMNS = [
    "relation", "best_head", "direction", "accuracy", "ci_low", "ci_high",
    "baseline_offset", "baseline_accuracy", "baseline_ci_low", "baseline_ci_high", "count", "below_min_count",
]
HELDOUT_COLUMNS = ["heldout_head", "heldout_direction", "heldout_accuracy"]
#: beyond the paper, after the paper's columns (docs/definitions.md#cross-fitted-head-choice)
CROSSFIT_COLUMNS = ["crossfit_head_a", "crossfit_direction_a", "crossfit_head_b", "crossfit_direction_b",
                    "crossfit_accuracy"]
#: paired tests (docs/definitions.md#paired-tests-of-table-1): vs the row's best offset baseline and
#: vs the runner-up head (the best (head, direction) of another layer-head)
PAIRED_FAMILIES = ("vs_baseline", "vs_runner_up")
PAIRED_STAT_SUFFIXES = ("b", "c", "diff", "diff_ci_low", "diff_ci_high", "p", "p_holm", "significant")
PAIRED_COLUMNS = ["runner_up_head", "runner_up_direction", "runner_up_accuracy",
                  *(f"{fam}_{suf}" for fam in PAIRED_FAMILIES for suf in PAIRED_STAT_SUFFIXES)]
#: the best head when punctuation is not a candidate (docs/definitions.md#candidate-sets-punctuation)
NOPUNCT_COLUMNS = ["nopunct_head", "nopunct_direction", "nopunct_accuracy", "nopunct_delta", "gold_head_punct"]
#: causal (decoder) maps (docs/definitions.md#head-accuracy, decoders): the share of words whose gold head the
#: map can see per direction, the best head's accuracy over the words visible in its direction, and the best
#: offset baseline over the dep2head-visible words
CAUSAL_COLUMNS = ["visible_dep2head", "visible_head2dep", "accuracy_visible", "baseline_offset_visible",
                  "baseline_accuracy_visible"]
DEFAULT_ALPHA = 0.05
#: candidates listed per selection of a Table 1 row (:func:`selection_candidates`): every (head, direction)
#: within this many correct words of the chosen one
SELECTION_WINDOW = 25


@dataclass(frozen=True)
class Table1Scoring:
    """How Table 1 is scored, shared by the steps that build one (``heads``: :class:`~bertlook.analyses.heads_step.
    HeadsOptions`, ``rollout``: :class:`~bertlook.analyses.rollout.RolloutTable1Options`, ``contributions``:
    :class:`~bertlook.analyses.contribution_table1.Table1Settings`), with the defaults of their flags of the same
    names: rows of at least ``min_count`` words, the ``offsets`` of the baselines, the poss switch
    (``poss_from_possessive``), bootstrap intervals (``bootstrap`` replicates, ``confidence``, ``seed``)."""

    min_count: int = 100
    offsets: Sequence[int] = DEFAULT_OFFSETS
    poss_from_possessive: bool = True
    bootstrap: int = 1000
    confidence: float = 0.95
    seed: int = 0


def _best(correct_lh2: "np.ndarray") -> tuple[int, int, int]:
    """(layer, head, direction) of the highest count; ties: lowest layer, head, dep2head first."""
    flat = int(np.argmax(correct_lh2.reshape(-1)))
    return tuple(int(v) for v in np.unravel_index(flat, correct_lh2.shape))  # type: ignore[return-value]


def table1_relations(
    scores: HeadScores, min_count: int = 100, forced: Sequence[str] = FORCED_RELATIONS
) -> list[tuple[str, bool]]:
    """Rows of Table 1 as ``(relation, below_min_count)``: "All", then relations by frequency.

    Relations with at least ``min_count`` words, skipping :data:`bertlook.analyses.heads.SKIP_RELATIONS`; the
    ``forced`` relations (the design card's rows, :data:`bertlook.analyses.heads.FORCED_BY_SCHEME`) present in the corpus are always
    included (flagged when below).
    """
    rows = [(ALL, False)]
    for r, c in zip(scores.relations, scores.word_counts):  # already by frequency
        if r in SKIP_RELATIONS or c == 0:
            continue
        if c >= min_count:
            rows.append((r, False))
        elif r in forced:
            rows.append((r, True))
    return rows


def bootstrap_ci(
    numerators: "np.ndarray",
    denominators: "np.ndarray",
    *,
    replicates: int,
    confidence: float = 0.95,
    seed: int = 0,
    chunk: int = 200,
) -> tuple["np.ndarray", "np.ndarray"]:
    """Percentile bootstrap interval of ratios ``sum(num) / sum(den)``, resampling rows (sentences).

    ``numerators [S, M]``, ``denominators [S, M]`` -> ``(low [M], high [M])``. Each replicate draws S
    sentences with replacement (multinomial weights from ``default_rng(seed)``); all M statistics
    share the same replicates. A replicate whose denominator is 0 is ignored for that statistic;
    NaN when no replicate has a value or ``replicates == 0``.
    """
    num = np.asarray(numerators, dtype=np.float64)  # [sentence, statistic]
    den = np.asarray(denominators, dtype=np.float64)  # [sentence, statistic]
    S, M = num.shape
    if not 0 < confidence < 1:
        raise BertlookError(f"confidence must be in (0, 1), got {confidence}")
    if replicates <= 0 or S == 0 or M == 0:
        return np.full(M, np.nan), np.full(M, np.nan)  # [statistic] each
    rng = np.random.default_rng(seed)
    stats = np.empty((replicates, M), dtype=np.float64)  # [replicate, statistic]
    p = np.full(S, 1.0 / S)  # [sentence]
    for start in range(0, replicates, chunk):
        b = min(chunk, replicates - start)
        w = rng.multinomial(S, p, size=b).astype(np.float64)  # [replicate, sentence]: times each sentence is drawn
        with np.errstate(invalid="ignore", divide="ignore"):
            stats[start : start + b] = (w @ num) / (w @ den)  # [replicate, statistic]
    alpha = (1.0 - confidence) / 2.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns
        low, high = np.nanpercentile(stats, [100 * alpha, 100 * (1 - alpha)], axis=0)  # [statistic] each
    return low, high


@dataclass(frozen=True)
class Table1Options:
    """The settings of :func:`table1` that its steps share (checked on creation): rows (``min_count``,
    ``forced_relations``), bootstrap intervals (``bootstrap`` replicates, ``confidence``, ``seed``) and
    the paired tests (``paired``, significance at ``alpha``)."""

    min_count: int = 100
    bootstrap: int = 1000
    confidence: float = 0.95
    seed: int = 0
    forced_relations: Sequence[str] = FORCED_RELATIONS
    paired: bool = False
    alpha: float = DEFAULT_ALPHA

    def __post_init__(self) -> None:
        check_at_least("min_count", self.min_count, 0)
        check_at_least("bootstrap", self.bootstrap, 0)
        if not 0 < self.alpha < 1:
            raise BertlookError(f"alpha must be in (0, 1), got {self.alpha}")


def table1(
    dev_scores: HeadScores,
    *,
    min_count: int = 100,
    train_scores: HeadScores | None = None,
    dev_store: "AttentionStore | str | os.PathLike | None" = None,
    bootstrap: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    forced_relations: Sequence[str] = FORCED_RELATIONS,
    paired: bool = False,
    alpha: float = DEFAULT_ALPHA,
) -> "pd.DataFrame":
    """Twin of the paper's Table 1 (definitions: docs/definitions.md#head-accuracy).

    Columns :data:`TABLE1_COLUMNS` (accuracies are fractions 0..1; ``best_head`` 1-indexed "L-H"),
    then :data:`HELDOUT_COLUMNS` when ``train_scores`` is given (head chosen on train, accuracy on
    dev). The paper's numbers are joined by :func:`bertlook.reporting.paper_join.join_table1`. The
    head CIs need a second pass over the dev
    store: ``dev_store`` (store or path), default the store ``dev_scores`` was computed from.
    Beyond the paper, in this order: :data:`CROSSFIT_COLUMNS` when ``dev_scores`` has cross-fitting
    folds; :data:`PAIRED_COLUMNS` when ``paired`` (McNemar exact tests, bootstrap intervals of the
    accuracy difference, Holm-adjusted p-values, significance at ``alpha``; needs the dev store);
    :data:`NOPUNCT_COLUMNS` when ``dev_scores`` counted both candidate sets; :data:`CAUSAL_COLUMNS` for causal
    (decoder) maps.
    """
    opts = Table1Options(min_count=min_count, bootstrap=bootstrap, confidence=confidence, seed=seed,
                         forced_relations=forced_relations, paired=paired, alpha=alpha)
    out, selections = _best_rows(dev_scores, table1_relations(dev_scores, opts.min_count, opts.forced_relations))
    runners = _runners_up(dev_scores, selections)  # the paired tests' other head
    comparisons = _comparisons(selections, runners) if opts.paired else []
    store_ref = dev_store if dev_store is not None else dev_scores.store_path
    # [sentence, selection] (None without a store), [sentence, comparison] x 2
    head_nums, b_s, c_s = _second_pass_counts(dev_scores, store_ref, selections, comparisons, opts)
    den, base_nums = _sentence_denominators(dev_scores, selections, opts)  # [sentence, selection], [[sentence]]
    if opts.bootstrap > 0:
        _fill_intervals(out, head_nums, base_nums, den, opts)

    columns = list(TABLE1_COLUMNS)
    if train_scores is not None:
        columns += HELDOUT_COLUMNS
        _fill_heldout(out, train_scores, dev_scores)
    if dev_scores.fold_correct is not None:
        columns += CROSSFIT_COLUMNS
        for row in out:
            row.update(_crossfit_row(dev_scores, row["relation"]))
    if opts.paired:
        columns += PAIRED_COLUMNS
        _paired_rows(out, selections, runners, comparisons, b_s, c_s, den, dev_scores, opts)
    if dev_scores.correct_alt is not None:
        columns += NOPUNCT_COLUMNS
        for row in out:
            row.update(_nopunct_row(dev_scores, row["relation"], row["count"]))
    if dev_scores.visible is not None:
        columns += CAUSAL_COLUMNS
        for row, sel in zip(out, selections):
            row.update(_causal_row(dev_scores, sel))
    return _table1_frame(out, columns, dev_scores, opts)


def _causal_row(scores: HeadScores, selection: tuple) -> dict[str, Any]:
    """:data:`CAUSAL_COLUMNS` of a row: visible shares, the chosen head over its visible words, the visible baseline."""
    rel, l, h, d, _ = selection
    corr, count, _ = scores.counts_for(rel)  # [layer, head, direction], int, [offset]
    visible, base_visible = scores.visible_for(rel)  # [direction], [offset]
    k = int(np.argmax(base_visible))
    share = lambda num, den: num / den if den else np.nan  # noqa: E731
    return {"visible_dep2head": share(visible[0], count), "visible_head2dep": share(visible[1], count),
            "accuracy_visible": share(corr[l, h, d], visible[d]),
            "baseline_offset_visible": int(scores.offsets[k]),
            "baseline_accuracy_visible": share(base_visible[k], visible[0])}


def _best_rows(scores: HeadScores, rows: list[tuple[str, bool]]) -> tuple[list[dict[str, Any]], list[tuple]]:
    """The paper's columns of each Table 1 row (intervals NaN until :func:`_fill_intervals`) and its
    selection ``(relation, layer, head, direction, baseline offset index)`` (0-indexed)."""
    out: list[dict[str, Any]] = []
    selections = []
    for rel, below in rows:
        corr, count, base = scores.counts_for(rel)  # [layer, head, direction], int, [offset]
        l, h, d = _best(corr)
        k = int(np.argmax(base))
        out.append({
            "relation": rel,
            "best_head": head_label(l, h),
            "direction": DIRECTIONS[d],
            "accuracy": corr[l, h, d] / count,
            "ci_low": np.nan,
            "ci_high": np.nan,
            "baseline_offset": int(scores.offsets[k]),
            "baseline_accuracy": base[k] / count,
            "baseline_ci_low": np.nan,
            "baseline_ci_high": np.nan,
            "count": int(count),
            "below_min_count": bool(below),
        })
        selections.append((rel, l, h, d, k))
    return out, selections


def _runners_up(scores: HeadScores, selections: list[tuple]) -> list[tuple[int, int, int] | None]:
    """The runner-up of each row: the best (head, direction) among the other layer-heads (None: only one)."""
    runners: list[tuple[int, int, int] | None] = []
    for (rel, l, h, d, k) in selections:
        corr = scores.counts_for(rel)[0].copy()  # [layer, head, direction]
        corr[l, h, :] = -1
        runners.append(_best(corr) if corr.size > 2 else None)
    return runners


def _comparisons(selections: list[tuple], runners: list) -> list[tuple[str, tuple, tuple]]:
    """The paired comparisons of every row (:func:`bertlook.analyses.second_pass.paired_counts`): the best head
    vs the best offset baseline, then vs the runner-up head when there is one."""
    comparisons: list[tuple[str, tuple, tuple]] = []
    for (rel, l, h, d, k), ru in zip(selections, runners):
        comparisons.append((rel, ("head", l, h, d), ("offset", k)))
        if ru is not None:
            comparisons.append((rel, ("head", l, h, d), ("head", *ru)))
    return comparisons


def _second_pass_counts(scores: HeadScores, store_ref: Any, selections: list[tuple],
                        comparisons: list[tuple[str, tuple, tuple]], opts: Table1Options) -> tuple:
    """``(head_nums [S, selection], b [S, comparison], c [S, comparison])`` of one second pass over the
    dev store (:func:`bertlook.analyses.second_pass.second_pass`): the rows' heads only with a bootstrap;
    ``(None, None, None)`` when neither intervals nor paired tests are asked for, or without a store."""
    if (opts.bootstrap > 0 or opts.paired) and store_ref is not None:
        return second_pass(open_store(store_ref, level="word"), scores,
                           [s[:4] for s in selections] if opts.bootstrap > 0 else [], comparisons)
    if opts.paired:
        raise BertlookError("table1: paired tests need the dev store (dev_store or the scores' store_path)")
    return None, None, None


def _sentence_denominators(scores: HeadScores, selections: list[tuple],
                           opts: Table1Options) -> tuple["np.ndarray | None", list | None]:
    """``(den [sentence, selection], base_nums)``: the words of each row per sentence and (``[sentence]``
    each) its baseline's correct words; ``(None, None)`` when neither intervals nor paired tests are asked for."""
    if not (opts.bootstrap > 0 or opts.paired):
        return None, None
    # [sentence, relation], [sentence, relation, offset]
    sc, sb = scores.sentence_counts, scores.sentence_baseline_correct
    if sc is None or sb is None:
        raise BertlookError("table1: bootstrap and paired tests need dev scores computed with keep_sentences=True")
    dens, base_nums = [], []
    for rel, *_, k in selections:
        r = scores.relation_index(rel) if rel != ALL else None
        dens.append(sc.sum(axis=1) if r is None else sc[:, r])  # [sentence]
        base_nums.append(sb[:, :, k].sum(axis=1) if r is None else sb[:, r, k])  # [sentence]
    return np.stack(dens, axis=1), base_nums  # [sentence, selection]


def _fill_intervals(out: list[dict[str, Any]], head_nums: "np.ndarray | None", base_nums: list,
                    den: "np.ndarray", opts: Table1Options) -> None:
    """Bootstrap intervals of each row's head and baseline accuracy (in place; NaN head intervals
    without the dev store, ``head_nums`` None)."""
    if head_nums is None:
        head_nums = np.full_like(den, np.nan, dtype=np.float64)  # [sentence, selection]
    low, high = bootstrap_ci(  # [2*selection] each: heads, then baselines
        np.concatenate([head_nums, np.stack(base_nums, axis=1)], axis=1),  # [sentence, 2*selection]
        np.concatenate([den, den], axis=1),  # [sentence, 2*selection]
        replicates=opts.bootstrap, confidence=opts.confidence, seed=opts.seed,
    )
    n = len(out)
    for i, row in enumerate(out):
        row["ci_low"], row["ci_high"] = float(low[i]), float(high[i])
        row["baseline_ci_low"], row["baseline_ci_high"] = float(low[n + i]), float(high[n + i])


def _fill_heldout(out: list[dict[str, Any]], train: HeadScores, dev: HeadScores) -> None:
    """:data:`HELDOUT_COLUMNS` of each row (in place): the head chosen on train, its accuracy on dev."""
    if (train.num_layers, train.num_heads) != (dev.num_layers, dev.num_heads):
        raise BertlookError(
            f"train scores ({train.store_path}) have {train.num_layers}x{train.num_heads} "
            f"heads, dev scores ({dev.store_path}) {dev.num_layers}x{dev.num_heads}"
        )
    for row in out:
        rel = row["relation"]
        row.update(heldout_head="", heldout_direction="", heldout_accuracy=np.nan)
        if rel != ALL and (train.relation_index(rel) is None or
                           train.word_counts[train.relation_index(rel)] == 0):
            continue  # relation absent from train: no held-out choice
        tl, th, td = _best(train.counts_for(rel)[0])
        corr, count, _ = dev.counts_for(rel)  # [layer, head, direction], int, [offset]
        row.update(heldout_head=head_label(tl, th), heldout_direction=DIRECTIONS[td],
                   heldout_accuracy=corr[tl, th, td] / count)


def _nopunct_row(scores: HeadScores, rel: str, count: int) -> dict[str, Any]:
    """:data:`NOPUNCT_COLUMNS` of a row: the best head without punctuation candidates, its accuracy and
    the change from the best head with them, and the words whose gold head is punctuation."""
    with_punct = scores.candidate_counts(rel, False)  # [layer, head, direction]
    no_punct = scores.candidate_counts(rel, True)  # [layer, head, direction]
    wl, wh, wd = _best(with_punct)
    nl, nh, nd = _best(no_punct)
    acc = no_punct[nl, nh, nd] / count
    r = None if rel == ALL else scores.relation_index(rel)
    gold_punct = scores.punct_gold_head.sum() if r is None else scores.punct_gold_head[r]
    return dict(nopunct_head=head_label(nl, nh), nopunct_direction=DIRECTIONS[nd], nopunct_accuracy=acc,
                nopunct_delta=acc - with_punct[wl, wh, wd] / count, gold_head_punct=int(gold_punct))


def _table1_frame(out: list[dict[str, Any]], columns: list[str], scores: HeadScores,
                  opts: Table1Options) -> "pd.DataFrame":
    """The rows as a frame with typed columns (nullable ints and booleans of the paired tests) and attrs."""
    df = pd.DataFrame(out, columns=columns)
    df["baseline_offset"] = df["baseline_offset"].astype("int64")
    df["count"] = df["count"].astype("int64")
    if opts.paired:
        for fam in PAIRED_FAMILIES:
            for suf in ("b", "c"):
                df[f"{fam}_{suf}"] = pd.array(df[f"{fam}_{suf}"].tolist(), dtype="Int64")
            df[f"{fam}_significant"] = pd.array(df[f"{fam}_significant"].tolist(), dtype="boolean")
    df.attrs["exclude_punct_candidates"] = bool(scores.exclude_punct_candidates)
    if opts.paired:
        df.attrs["alpha"] = float(opts.alpha)
    return df


def _crossfit_row(scores: HeadScores, rel: str) -> dict[str, Any]:
    """Cross-fitted choice of a row: the best head of fold A scored on fold B and vice versa; the
    pooled accuracy over both folds (NaN, heads empty, when a fold has no word of the relation)."""
    (corr_a, n_a), (corr_b, n_b) = scores.fold_counts_for(rel, 0), scores.fold_counts_for(rel, 1)
    if n_a == 0 or n_b == 0:
        return dict(crossfit_head_a="", crossfit_direction_a="", crossfit_head_b="", crossfit_direction_b="",
                    crossfit_accuracy=np.nan)
    la, ha_, da = _best(corr_a)
    lb, hb, db = _best(corr_b)
    return dict(crossfit_head_a=head_label(la, ha_), crossfit_direction_a=DIRECTIONS[da],
                crossfit_head_b=head_label(lb, hb), crossfit_direction_b=DIRECTIONS[db],
                crossfit_accuracy=(corr_b[la, ha_, da] + corr_a[lb, hb, db]) / (n_a + n_b))


def _paired_rows(out: list[dict[str, Any]], selections: list, runners: list, comparisons: list,
                 b_s: "np.ndarray", c_s: "np.ndarray", den: "np.ndarray", scores: HeadScores,
                 opts: Table1Options) -> None:
    """Fill :data:`PAIRED_COLUMNS` of the Table 1 rows ``out`` (in place) from the discordant counts
    of :func:`bertlook.analyses.second_pass.paired_counts` (``b_s``, ``c_s``: ``[sentence, comparison]``, in the
    order of ``comparisons``) and the per-sentence word counts ``den [sentence, row]``."""
    idx = {(cmp[0], cmp[1], cmp[2]): j for j, cmp in enumerate(comparisons)}
    diff_num = b_s - c_s  # [sentence, comparison]
    rows_of_rel = {sel[0]: i for i, sel in enumerate(selections)}
    row_of = [rows_of_rel[cmp[0]] for cmp in comparisons]  # [comparison]: its Table 1 row
    # [comparison] each; numerators and denominators [sentence, comparison]
    low, high = bootstrap_ci(diff_num, den[:, row_of], replicates=opts.bootstrap, confidence=opts.confidence,
                             seed=opts.seed)
    b_tot, c_tot = b_s.sum(axis=0), c_s.sum(axis=0)  # [comparison] each
    p = np.array([mcnemar_exact(int(b), int(c)) for b, c in zip(b_tot, c_tot)], dtype=np.float64)  # [comparison]
    fam_of = np.array([0 if cmp[2][0] == "offset" else 1 for cmp in comparisons], dtype=np.int64)  # [comparison]
    p_holm = np.full_like(p, np.nan)  # [comparison]
    for f in range(len(PAIRED_FAMILIES)):
        mask = fam_of == f  # [comparison]
        p_holm[mask] = holm(p[mask])
    for i, ((rel, l, h, d, k), ru) in enumerate(zip(selections, runners)):
        row = out[i]
        count = row["count"]
        if ru is None:
            row.update(runner_up_head="", runner_up_direction="", runner_up_accuracy=np.nan)
        else:
            corr = scores.counts_for(rel)[0]  # [layer, head, direction]
            row.update(runner_up_head=head_label(ru[0], ru[1]), runner_up_direction=DIRECTIONS[ru[2]],
                       runner_up_accuracy=corr[ru] / count)
        others = {"vs_baseline": ("offset", k), "vs_runner_up": None if ru is None else ("head", *ru)}
        for fam, other in others.items():
            j = None if other is None else idx[(rel, ("head", l, h, d), other)]
            if j is None:
                row.update({f"{fam}_{suf}": np.nan for suf in PAIRED_STAT_SUFFIXES})
                row.update({f"{fam}_b": None, f"{fam}_c": None, f"{fam}_significant": None})
                continue
            row.update({
                f"{fam}_b": int(b_tot[j]), f"{fam}_c": int(c_tot[j]),
                f"{fam}_diff": (int(b_tot[j]) - int(c_tot[j])) / count,
                f"{fam}_diff_ci_low": float(low[j]), f"{fam}_diff_ci_high": float(high[j]),
                f"{fam}_p": float(p[j]), f"{fam}_p_holm": float(p_holm[j]),
                f"{fam}_significant": bool(p_holm[j] <= opts.alpha),
            })


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value of ``b`` and ``c`` discordant pairs:
    ``min(1, 2 * BinomCDF(min(b, c); b + c, 1/2))`` (``scipy.stats.binomtest``); 1 when ``b + c == 0``."""
    from scipy.stats import binomtest  # lazy: scipy.stats (~0.5 s), only the paired tests need it

    b, c = int(b), int(c)
    if b < 0 or c < 0:
        raise BertlookError(f"mcnemar_exact: counts must be >= 0, got {b}, {c}")
    if b + c == 0:
        return 1.0
    return float(min(1.0, binomtest(min(b, c), b + c, 0.5).pvalue))


def holm(pvalues: "np.ndarray") -> "np.ndarray":
    """Holm step-down adjusted p-values ``[m]`` of ``pvalues [m]`` (NaN entries are not in the family
    and stay NaN): with ``p_(1) <= ... <= p_(m)``, ``adj_(i) = min(1, max_{j <= i} (m - j + 1) p_(j))``.

    Hand-written (five lines) rather than a new dependency: statsmodels, which has it, is not installed.
    """
    p = np.asarray(pvalues, dtype=np.float64)  # [test]
    out = np.full_like(p, np.nan)  # [test]
    ok = np.flatnonzero(~np.isnan(p))  # [finite_test]
    m = len(ok)
    if m == 0:
        return out
    order = ok[np.argsort(p[ok], kind="stable")]  # [finite_test]: ascending p
    scaled = (m - np.arange(m)) * p[order]  # [finite_test]
    out[order] = np.minimum(1.0, np.maximum.accumulate(scaled))  # [finite_test]
    return out



def _near(select: "np.ndarray", evaluate: "np.ndarray", chosen: tuple[int, int, int], window: int, n: int,
          fragile: "np.ndarray", eval_fragile: "np.ndarray") -> dict[str, Any]:
    """The (head, direction) pairs whose ``select`` count ``[L, H, 2]`` is within ``window`` of the chosen one's:
    ``{"n": words, "candidates": [{"head", "direction", "words", "fragile", "eval_words", "eval_fragile"}]}``,
    the chosen first (``fragile``: the near-tied words of the count, :func:`bertlook.analyses.heads.fragile_decisions`)."""
    top = int(select[chosen])
    idx = [tuple(int(v) for v in ix) for ix in np.argwhere(select >= top - window)]
    idx.sort(key=lambda ix: (ix != chosen, -int(select[ix]), ix))
    return {"n": int(n), "candidates": [
        {"head": head_label(l, h), "direction": DIRECTIONS[d], "words": int(select[l, h, d]),
         "fragile": int(fragile[l, h, d]), "eval_words": int(evaluate[l, h, d]),
         "eval_fragile": int(eval_fragile[l, h, d])} for l, h, d in idx]}


def selection_candidates(table: "pd.DataFrame", dev: HeadScores, train: HeadScores | None = None,
                         window: int = SELECTION_WINDOW) -> dict[str, dict[str, Any]]:
    """Per Table 1 row, how close each head choice was: for the best head (dev), the runner-up (dev, the
    best head's layer-head left out), the held-out choice (train counts, scored on dev), the cross-fitted
    choices (fold A scored on B, B on A) and the no-punctuation choice, the candidates within ``window``
    correct words of the chosen one (:func:`_near`), with the words each gets right where it is scored.

    The regression gate (:mod:`bertlook.reporting.golden`) accepts any candidate within its word tolerance
    of a choice: a choice between two heads that tie within a word or two is decided by float rounding."""
    out: dict[str, dict[str, Any]] = {}
    for rel in table["relation"]:
        corr, count, _ = dev.counts_for(rel)  # [layer, head, direction], int, [offset]
        frag = dev.fragile_for(rel)  # [layer, head, direction]
        best = _best(corr)
        sel = {"best": _near(corr, corr, best, window, count, frag, frag)}
        masked = corr.copy()
        masked[best[0], best[1], :] = -1
        if masked.size > 2:
            sel["runner_up"] = _near(masked, corr, _best(masked), window, count, frag, frag)
        if train is not None and (rel == ALL or (train.relation_index(rel) is not None
                                                 and train.word_counts[train.relation_index(rel)] > 0)):
            tcorr, tcount, _ = train.counts_for(rel)
            sel["heldout"] = _near(tcorr, corr, _best(tcorr), window, tcount, train.fragile_for(rel), frag)
        if dev.fold_correct is not None:
            (ca, na), (cb, nb) = dev.fold_counts_for(rel, 0), dev.fold_counts_for(rel, 1)
            fa, fb = dev.fragile_for(rel, 0), dev.fragile_for(rel, 1)
            if na and nb:
                sel["crossfit_a"] = _near(ca, cb, _best(ca), window, na, fa, fb)
                sel["crossfit_b"] = _near(cb, ca, _best(cb), window, nb, fb, fa)
        no_punct = dev.candidate_counts(rel, True)
        if no_punct is not None and dev.correct_alt is not None:
            sel["nopunct"] = _near(no_punct, no_punct, _best(no_punct), window, count, frag, frag)
        out[str(rel)] = sel
    return out


def relation_rows_summary(scores: HeadScores, table: "pd.DataFrame") -> dict[str, Any]:
    """The summary entries on which relations became Table 1 rows: word counts per relation, the rows
    (and those below min_count), the skipped relations and those left out below min_count."""
    counts = {r: int(c) for r, c in zip(scores.relations, scores.word_counts)}
    shown = set(table["relation"])
    return {
        "relation_counts": counts,
        "rows": list(table["relation"]),
        "rows_below_min_count": [r for r, b in zip(table["relation"], table["below_min_count"]) if b],
        "skipped_relations": {r: c for r, c in counts.items() if r in SKIP_RELATIONS},
        "relations_below_min_count": {r: c for r, c in counts.items() if r not in shown and r not in SKIP_RELATIONS},
    }


def statistics_summary(scores: HeadScores, table: "pd.DataFrame") -> dict[str, Any]:
    """The summary entries of the additions beyond the paper: punctuation counts, the cross-fitting
    folds, per paired-test family the rows whose difference is significant after Holm (better /
    worse than the comparison) and not, and the rows the punctuation switch moves."""
    out: dict[str, Any] = {}
    rows = list(table["relation"])
    if scores.punct_words is not None:
        gold_punct = {r: int(c) for r, c in zip(scores.relations, scores.punct_gold_head)}
        out["punctuation"] = {
            "definition": f"relation in {list(PUNCT_RELATIONS)} or UPOS {PUNCT_UPOS}",
            "n_punct_words": int(scores.punct_words.sum()),
            "n_words_gold_head_punct": int(scores.punct_gold_head.sum()),
            "gold_head_punct_by_row": {r: (int(scores.punct_gold_head.sum()) if r == ALL else gold_punct.get(r, 0))
                                       for r in rows},
        }
    if scores.fold_of is not None:
        out["crossfit"] = {
            "seed": scores.crossfit_seed,
            "fold_sentences": [int((scores.fold_of == f).sum()) for f in (0, 1)],
            "fold_words": [int(scores.fold_word_counts[f].sum()) for f in (0, 1)],
            "rows_without_choice": [r for r, h in zip(rows, table.get("crossfit_head_a", [""] * len(rows)))
                                    if not h],
        }
    if "vs_baseline_p_holm" in table.columns:
        paired: dict[str, Any] = {}
        for fam in PAIRED_FAMILIES:
            # per row: True / False, None when not tested (no runner-up)
            sig = [None if pd.isna(v) else bool(v) for v in table[f"{fam}_significant"]]
            diff = table[f"{fam}_diff"].to_numpy(dtype=np.float64)  # [row]
            paired[fam] = {
                "n_tests": sum(v is not None for v in sig),
                "n_significant": sum(v is True for v in sig),
                "significant_better": [r for r, v, d in zip(rows, sig, diff) if v is True and d > 0],
                "significant_worse": [r for r, v, d in zip(rows, sig, diff) if v is True and d < 0],
                "not_significant": [r for r, v in zip(rows, sig) if v is False],
            }
        out["paired"] = paired
    if "nopunct_delta" in table.columns:
        delta = table["nopunct_delta"].to_numpy(dtype=np.float64)  # [row]
        out["nopunct"] = {
            "rows_moved": [r for r, d in zip(rows, delta) if d != 0],
            "rows_head_changed": [r for r, a, b, da, db in zip(rows, table["best_head"], table["nopunct_head"],
                                                              table["direction"], table["nopunct_direction"])
                                  if (a, da) != (b, db)],
            "max_abs_delta": float(np.abs(delta).max()) if len(delta) else 0.0,
        }
    return out
