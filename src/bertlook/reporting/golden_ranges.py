"""What each number of the regression gate may become on another machine, derived from the computation.

:func:`bertlook.reporting.golden_rules.add_ranges` turns a run's plain golden values
(:func:`bertlook.reporting.golden.run_values`) into checks, given the word tolerances ``k`` of
:class:`bertlook.reporting.golden.Tolerances`:

* an argmax-based accuracy ``c / n`` (Table 1, head accuracy, rollout, norm twins) may move by ``k`` words,
  ``k`` = :meth:`~bertlook.reporting.golden.Tolerances.k_argmax` of its own near-tied words (``fragile``,
  counted by the heads step): ``[c - k, c + k] / n``; a bootstrap bound of it by ``k`` words times the largest weight a sentence has in
  a replicate, over half the words (:func:`bootstrap_weight_bound`); a paired-test count ``b`` / ``c`` by
  ``k`` in all (a flipped word moves one of them by one), its exact McNemar p-value over every such
  ``(b, c)`` (:func:`mcnemar_range`), the Holm-adjusted p-value between Holm of the family's lower and
  upper bounds (Holm is monotone in each p-value), the significance flag either way when that interval
  straddles alpha;
* a head chosen by such counts (best, runner-up, held-out, cross-fitted, no-punctuation) may be any
  candidate within ``k(chosen) + k(candidate)`` words of the chosen one (the candidates are in the heads step's summary,
  ``selections``: :func:`bertlook.analyses.table1.selection_candidates`), and the accuracy of the chosen head
  any of theirs, plus or minus ``k``; a comparison against a runner-up that is near-tied is not checked (it
  may be another head);
* single-head trees: :meth:`~bertlook.reporting.golden.Tolerances.k_tree` of the head's near-tied words;
  trained probes: ``k_probe`` words of one seed's dev UAS (the mean
  moves by at most that, the sample sd by ``sqrt(s / (s - 1))`` times it, a difference of two means by twice);
* the positional statistics: ``k_rows`` argmax rows per head, ``k_rows`` the Poisson quantile of the
  measured flip rate per row times the run's rows (:func:`poisson_k`); the mode offset any offset within
  ``2 k_rows`` rows of it;
* threshold labels (behaviour, sink head, positional head): either label when the statistic lies within the
  group's rounding tolerance (or the argmax range) of the threshold.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

from bertlook.reporting.run_files import read_json_file

FAMILY_RISK = 1e-6
#: a bootstrap replicate's words are at least this share of the relation's words (for the CI ranges)
MIN_REPLICATE_SHARE = 0.5


def poisson_k(lam: float, risk: float = FAMILY_RISK) -> int:
    """Smallest k with P(Poisson(lam) > k) <= risk (0 for lam = 0)."""
    if lam <= 0:
        return 0
    k, term = 0, math.exp(-lam)
    cdf = term
    while 1.0 - cdf > risk:
        k += 1
        term *= lam / k
        cdf += term
    return k


@functools.lru_cache(maxsize=32)
def bootstrap_weight_bound(n_sentences: int, replicates: int, seed: int, chunk: int = 200) -> int:
    """The largest number of times one sentence is drawn in one replicate of
    :func:`bertlook.analyses.table1.bootstrap_ci` (the same draws: ``default_rng(seed)``, chunks of 200)."""
    if n_sentences <= 0 or replicates <= 0:
        return 0
    rng = np.random.default_rng(seed)
    p = np.full(n_sentences, 1.0 / n_sentences)  # [sentence]
    worst = 0
    for start in range(0, replicates, chunk):
        b = min(chunk, replicates - start)
        worst = max(worst, int(rng.multinomial(n_sentences, p, size=b).max()))
    return worst


def mcnemar_range(b: int, c: int, k: int) -> tuple[float, float]:
    """(lowest, highest) exact McNemar p-value (:func:`bertlook.analyses.table1.mcnemar_exact`:
    ``min(1, 2 BinomCDF(min(b, c); b + c, 1/2))``) over every ``(b', c') >= 0`` with ``|b' - b| + |c' - c| <= k``
    (vectorised; the ends widened by 1e-9 relative for the rounding of another CDF routine)."""
    from scipy.stats import binom  # lazy: scipy.stats takes 0.5 s to import; check-regression needs it only here
    db = np.array([d for d in range(-k, k + 1) for _ in range(-(k - abs(d)), k - abs(d) + 1)])  # [pair]
    dc = np.array([e for d in range(-k, k + 1) for e in range(-(k - abs(d)), k - abs(d) + 1)])  # [pair]
    bb, cc = b + db, c + dc  # [pair]
    ok = (bb >= 0) & (cc >= 0)  # [pair]
    bb, cc = bb[ok], cc[ok]
    n = bb + cc  # [pair]
    p = np.where(n == 0, 1.0, np.minimum(1.0, 2.0 * binom.cdf(np.minimum(bb, cc), n, 0.5)))  # [pair]
    return float(p.min()) * (1 - 1e-9), min(1.0, float(p.max()) * (1 + 1e-9))


# ----------------------------------------------------------------------------------------- checks
def num_or_none(v: Any) -> float | None:
    """A golden value as a float (None for null, strings and booleans)."""
    return None if v is None or isinstance(v, (str, bool)) else float(v)


def between(value: Any, lo: float, hi: float) -> Any:
    """``{"value", "min", "max"}`` (the value itself when it is not a number)."""
    v = num_or_none(value)
    if v is None or (lo >= v and hi <= v):  # nothing but the value itself: a plain value
        return value
    return {"value": value, "min": float(min(lo, v)), "max": float(max(hi, v))}


def within(value: Any, delta: float) -> Any:
    v = num_or_none(value)
    return value if v is None or delta <= 0 else between(value, v - delta, v + delta)


def any_of(value: Any, options) -> Any:
    opts = [value] + [o for o in dict.fromkeys(options) if o != value]
    return value if len(opts) == 1 else {"value": value, "any_of": opts}


def unchecked(value: Any, why: str) -> Any:
    return {"value": value, "unchecked": why}


class RunFiles:
    """Lazy, cached reads of the side files of a run that the ranges are made from."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = Path(run_dir)
        self._cache: dict[str, Any] = {}

    def summary(self, rel: str) -> dict[str, Any]:
        if rel not in self._cache:
            path = self.run_dir / rel
            self._cache[rel] = read_json_file(path, "step summary") if path.is_file() else {}
        return self._cache[rel]

    def table(self, rel: str):
        if rel not in self._cache:
            path = self.run_dir / rel
            self._cache[rel] = pd.read_csv(path) if path.is_file() else None
        return self._cache[rel]


# ------------------------------------------------------------------------------------ head choices
def near_tied(selection: dict[str, Any] | None, k_of: Callable[[int], int]) -> list[dict[str, Any]]:
    """The candidates of a selection (:func:`bertlook.analyses.table1.selection_candidates`) that may be chosen
    on another machine: those whose count is within ``k(chosen) + k(candidate)`` words of the chosen one's
    (``k_of(fragile words)``), the chosen one first."""
    if not selection or not selection.get("candidates"):
        return []
    cand = selection["candidates"]
    top, k_top = int(cand[0]["words"]), k_of(int(cand[0].get("fragile", 0)))
    return [c for c in cand if int(c["words"]) >= top - k_top - k_of(int(c.get("fragile", 0)))]


def choice(values: dict[str, Any], head_key: str, dir_key: str, alts: list[dict[str, Any]]) -> None:
    if alts and head_key in values:
        values[head_key] = any_of(values[head_key], [a["head"] for a in alts])
    if alts and dir_key in values:
        values[dir_key] = any_of(values[dir_key], [a["direction"] for a in alts])


def eval_range(alts: list[dict[str, Any]], k_of: Callable[[int], int], n: int) -> tuple[float, float] | None:
    """(lowest, highest) accuracy of the chosen head when it may be any of ``alts``, each off by its own
    ``k_of(eval_fragile)`` words; ``n`` the words of the accuracy (1: in words)."""
    if not alts or not n:
        return None
    lo = [int(a["eval_words"]) - k_of(int(a.get("eval_fragile", 0))) for a in alts]
    hi = [int(a["eval_words"]) + k_of(int(a.get("eval_fragile", 0))) for a in alts]
    return min(lo) / n, max(hi) / n


def set_range(values: dict[str, Any], key: str, rng: tuple[float, float] | None) -> None:
    if rng is not None and key in values:
        values[key] = between(values[key], *rng)


# ------------------------------------------------------------------------------------------- registry
Ranger = Callable[[dict[str, Any], RunFiles, Any], str]
RANGERS: dict[str, Ranger] = {}


def ranger(*names: str):
    def deco(fn: Ranger) -> Ranger:
        for n in names:
            RANGERS[n] = fn
        return fn
    return deco
