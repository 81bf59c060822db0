"""Rank agreement of a measure with a ground truth (the faithfulness table's numbers; numpy only).

:func:`spearman` is Spearman's rank correlation with average ranks for ties (NaN when either side is constant or
has fewer than :data:`MIN_POINTS` points); :func:`segment_agreement` averages the correlations of the
columns of all segments and gives a percentile bootstrap interval over segments (:func:`bootstrap_indices`:
the same seeded resamples for every measure, so the intervals of two measures are paired);
:func:`heads_agreement` correlates two per-head quantities across heads, bootstrapping the segments they are
averaged over. Used by :mod:`bertlook.analyses.faithfulness`.

Definitions: docs/definitions.md#which-measure-to-trust-faithfulness
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from bertlook.errors import BertlookError

#: fewer points than this: no correlation (NaN)
MIN_POINTS = 3
#: two-sided level of the percentile intervals
CONFIDENCE = 0.95


def ranks(x: np.ndarray) -> np.ndarray:
    """Ranks 1..n of ``x`` [n] (float64), tied values getting the mean of their ranks."""
    x = np.asarray(x, dtype=np.float64)
    order = np.argsort(x, kind="stable")
    sx = x[order]
    r = np.empty(len(x), dtype=np.float64)
    start = 0
    for stop in range(1, len(x) + 1):  # runs of equal values share their mean rank
        if stop == len(x) or sx[stop] != sx[start]:
            r[order[start:stop]] = 0.5 * (start + stop - 1) + 1.0
            start = stop
    return r


def spearman(x: np.ndarray, y: np.ndarray) -> float:
    """Spearman's rho of ``x`` and ``y`` [n]: Pearson's correlation of their ranks (ties: mean ranks); NaN with
    fewer than :data:`MIN_POINTS` points, a constant side or a non-finite value."""
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1:
        raise BertlookError(f"spearman: shapes {list(x.shape)} and {list(y.shape)} differ or are not 1-d")
    if len(x) < MIN_POINTS or not (np.isfinite(x).all() and np.isfinite(y).all()):
        return float("nan")
    rx, ry = ranks(x), ranks(y)
    rx -= rx.mean()
    ry -= ry.mean()
    den = float(np.sqrt((rx * rx).sum() * (ry * ry).sum()))
    if den <= 0.0:
        return float("nan")
    return float(np.clip((rx * ry).sum() / den, -1.0, 1.0))


def bootstrap_indices(n_segments: int, resamples: int, seed: int) -> np.ndarray:
    """``[resamples, n_segments]`` segment indices drawn with replacement by ``numpy.random.default_rng(seed)``
    (the same for every measure of a run: paired intervals)."""
    if resamples < 1 or n_segments < 1:
        raise BertlookError(f"bootstrap: {resamples} resamples of {n_segments} segments")
    return np.random.default_rng(seed).integers(0, n_segments, size=(int(resamples), int(n_segments)))


def percentile_interval(values: np.ndarray, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The central ``confidence`` percentile interval of the finite ``values`` (NaN, NaN when none)."""
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if not len(v):
        return float("nan"), float("nan")
    tail = 100.0 * (1.0 - confidence) / 2.0
    lo, hi = np.percentile(v, [tail, 100.0 - tail])
    return float(lo), float(hi)


@dataclass(frozen=True)
class Agreement:
    """One row's numbers: the mean correlation, its interval, segments and points used, columns without a
    correlation (constant or too short)."""

    spearman: float
    ci_low: float
    ci_high: float
    n_segments: int
    n_columns: int
    n_undefined: int


def segment_agreement(per_segment: Sequence[Sequence[float]], indices: np.ndarray | None,
                      confidence: float = CONFIDENCE) -> Agreement:
    """The mean of the correlations of every column of every segment (``per_segment[s]``: segment ``s``'s
    column correlations, NaN = undefined, left out and counted), with the percentile interval of that mean over
    the segment resamples ``indices`` [resamples, segments] (:func:`bootstrap_indices`; None: no interval).
    A segment without a defined correlation does not count as used."""
    sums = np.array([np.nansum(np.asarray(c, dtype=np.float64)) for c in per_segment], dtype=np.float64)
    counts = np.array([np.isfinite(np.asarray(c, dtype=np.float64)).sum() for c in per_segment], dtype=np.float64)
    total = int(sum(len(c) for c in per_segment))
    used = int((counts > 0).sum())
    if counts.sum() == 0:
        return Agreement(float("nan"), float("nan"), float("nan"), 0, 0, total)
    estimate = float(sums.sum() / counts.sum())
    lo = hi = float("nan")
    if indices is not None and used > 1:
        if indices.shape[1] != len(per_segment):
            raise BertlookError(f"bootstrap: indices for {indices.shape[1]} segments, {len(per_segment)} given")
        s, c = sums[indices].sum(axis=1), counts[indices].sum(axis=1)  # [resamples] each
        with np.errstate(invalid="ignore", divide="ignore"):
            lo, hi = percentile_interval(np.where(c > 0, s / c, np.nan), confidence)
    return Agreement(estimate, lo, hi, used, int(counts.sum()), total - int(counts.sum()))


def heads_agreement(effect: np.ndarray, score: np.ndarray, indices: np.ndarray | None,
                    transform: Callable[[np.ndarray], np.ndarray] | None = None,
                    confidence: float = CONFIDENCE) -> tuple[float, float, float]:
    """Spearman's rho across heads of the segment means of ``effect`` and ``score`` (both ``[segment, head]``),
    with its percentile interval over the segment resamples ``indices`` (None: no interval). ``transform``: applied
    to the mean ``score`` [head] before ranking (e.g. the head report's per-layer normalisation)."""
    effect, score = np.asarray(effect, dtype=np.float64), np.asarray(score, dtype=np.float64)
    if effect.shape != score.shape or effect.ndim != 2:
        raise BertlookError(f"heads agreement: shapes {list(effect.shape)} and {list(score.shape)} differ")
    tf = transform or (lambda v: v)
    rho = spearman(effect.mean(axis=0), tf(score.mean(axis=0)))
    lo = hi = float("nan")
    if indices is not None and effect.shape[0] > 1:
        reps = [spearman(effect[idx].mean(axis=0), tf(score[idx].mean(axis=0))) for idx in indices]
        lo, hi = percentile_interval(np.asarray(reps), confidence)
    return rho, lo, hi
