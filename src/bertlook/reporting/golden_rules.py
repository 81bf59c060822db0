"""The range rule of each golden group (registered in :data:`bertlook.reporting.golden_ranges.RANGERS`).

:func:`add_ranges` applies them. Each rule gets the group's plain values (keys ``row/column``), the run's
side files and the tolerances, replaces values by checks (:mod:`bertlook.reporting.golden_ranges` documents
every rule) and returns the group's ``tolerance`` text. ``k(f)``:
:meth:`bertlook.reporting.golden.Tolerances.k_argmax` of ``f`` near-tied words.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from bertlook.analyses.cluster_heads import LABEL_COLUMNS, behaviour_labels
from bertlook.analyses.head_report import POSITIONAL_THRESHOLD, SINK_THRESHOLD
from bertlook.analyses.heads import SKIP_RELATIONS
from bertlook.analyses.table1 import holm
from bertlook.errors import BertlookError
from bertlook.reporting.golden_ranges import (
    MIN_REPLICATE_SHARE, RANGERS, RunFiles, any_of, between, bootstrap_weight_bound, choice, eval_range, mcnemar_range,
    near_tied, num_or_none, poisson_k, ranger, set_range, unchecked, within,
)

HEADS_SUMMARY = {"table1": "tables/head_accuracy.summary.json", "table1_stats": "tables/head_accuracy.summary.json",
                 "table1_norm": "tables/head_accuracy_norm.summary.json",
                 "table1_norm_stats": "tables/head_accuracy_norm.summary.json",
                 "table1_rollout": "tables/table1_rollout.summary.json"}
ROUNDING = 1e-5  # relative: the 6 printed digits, and far above the float noise of a continuous statistic
K_RULE = ("k(f) = the Poisson quantile at 1 - risk of f x argmax_lambda, f = the number's words on a float16 "
          "near-tie (`fragile`)")


def _rows(values: dict[str, Any]) -> list[str]:
    """The row keys of a group (keys are ``row/column``; a row key may hold a ``/`` itself: ``keep/3``)."""
    return list(dict.fromkeys(k.rsplit("/", 1)[0] for k in values if "/" in k))


def _plain(entry: Any) -> Any:
    return entry["value"] if isinstance(entry, dict) else entry


def _ci_delta(summary: dict[str, Any], k: int, n: int) -> float:
    """How far a bootstrap bound of a count over ``n`` words may move when ``k`` of them flip."""
    w = bootstrap_weight_bound(int(summary.get("n_sentences") or 0), int(summary.get("bootstrap") or 0),
                               int(summary.get("seed") or 0))
    return k * w / (MIN_REPLICATE_SHARE * n) if n else 0.0


def _chosen_fragile(sel: dict[str, Any], name: str) -> int:
    cand = (sel.get(name) or {}).get("candidates") or [{}]
    return int(cand[0].get("fragile", 0))


@ranger("table1", "table1_norm", "table1_rollout")
def table1_rule(values: dict[str, Any], files: RunFiles, tol, *, name: str, groups) -> str:
    summary = files.summary(HEADS_SUMMARY[name])
    sel = summary.get("selections") or {}
    for rel in _rows(values):
        n = values.get(f"{rel}/count")
        if not isinstance(n, int) or n <= 0:
            continue
        s = sel.get(rel, {})
        k = tol.k_argmax(_chosen_fragile(s, "best"))
        values[f"{rel}/accuracy"] = within(values[f"{rel}/accuracy"], k / n)
        for c in ("ci_low", "ci_high"):
            if f"{rel}/{c}" in values:
                values[f"{rel}/{c}"] = within(values[f"{rel}/{c}"], _ci_delta(summary, k, n))
        choice(values, f"{rel}/best_head", f"{rel}/direction", near_tied(s.get("best"), tol.k_argmax))
        if "heldout" in s:
            alts = near_tied(s["heldout"], tol.k_argmax)
            choice(values, f"{rel}/heldout_head", f"{rel}/heldout_direction", alts)
            set_range(values, f"{rel}/heldout_accuracy", eval_range(alts, tol.k_argmax, n))
    return (f"accuracies: +-k(f) words of the row's count, {K_RULE}; CI bounds: +-k words x the largest weight of a "
            "sentence in a bootstrap replicate / (half the count); best and held-out heads: any head within "
            "k(chosen) + k(head) words of the chosen one (the heads summary's `selections`), its accuracy +-its k")


@ranger("table1_stats", "table1_norm_stats")
def table1_stats_rule(values: dict[str, Any], files: RunFiles, tol, *, name: str, groups) -> str:
    summary = files.summary(HEADS_SUMMARY[name])
    sel = summary.get("selections") or {}
    counts = groups[name.replace("_stats", "")]["values"]
    rows = [r for r in _rows(values) if isinstance(counts.get(f"{r}/count"), int)]
    for rel in rows:
        n, s = counts[f"{rel}/count"], sel.get(rel, {})
        k = tol.k_argmax(_chosen_fragile(s, "best"))
        _crossfit(values, rel, s, tol)
        _nopunct(values, counts, rel, s, tol, n)
        ru = near_tied(s.get("runner_up"), tol.k_argmax)
        choice(values, f"{rel}/runner_up_head", f"{rel}/runner_up_direction", ru)
        set_range(values, f"{rel}/runner_up_accuracy", eval_range(ru, tol.k_argmax, n))
        _paired(values, rel, "vs_baseline", k, n, summary)
        if len(ru) > 1:
            why = f"the runner-up is one of {len(ru)} near-tied heads: the comparison may be with another"
            for key in [x for x in values if x.startswith(f"{rel}/vs_runner_up_")]:
                values[key] = unchecked(values[key], why)
        else:
            _paired(values, rel, "vs_runner_up", k + tol.k_argmax(_chosen_fragile(s, "runner_up")), n, summary)
    for fam in ("vs_baseline", "vs_runner_up"):
        _holm(values, rows, fam, float(summary.get("alpha") or 0.05))
    return (f"paired counts b, c: +-k words in all (k of the best head; vs the runner-up k of both heads), {K_RULE}; "
            "differences likewise; p-values: the exact McNemar p over every such (b, c); Holm p-values: Holm of "
            "the family's bounds; significance: either way when the Holm interval straddles alpha; head choices "
            "(runner-up, cross-fitted, no-punctuation): any near-tied head, accuracies over the candidates; a "
            "comparison with a near-tied runner-up is not checked")


def _crossfit(values, rel: str, s: dict[str, Any], tol) -> None:
    if "crossfit_a" not in s or "crossfit_b" not in s:
        return
    alts_a, alts_b = near_tied(s["crossfit_a"], tol.k_argmax), near_tied(s["crossfit_b"], tol.k_argmax)
    choice(values, f"{rel}/crossfit_head_a", f"{rel}/crossfit_direction_a", alts_a)
    choice(values, f"{rel}/crossfit_head_b", f"{rel}/crossfit_direction_b", alts_b)
    ra, rb = eval_range(alts_a, tol.k_argmax, 1), eval_range(alts_b, tol.k_argmax, 1)  # in words
    if ra and rb:
        n = s["crossfit_a"]["n"] + s["crossfit_b"]["n"]
        set_range(values, f"{rel}/crossfit_accuracy", ((ra[0] + rb[0]) / n, (ra[1] + rb[1]) / n))


def _nopunct(values, counts, rel: str, s: dict[str, Any], tol, n: int) -> None:
    alts = near_tied(s.get("nopunct"), tol.k_argmax)
    choice(values, f"{rel}/nopunct_head", f"{rel}/nopunct_direction", alts)
    rng = eval_range(alts, tol.k_argmax, n)
    set_range(values, f"{rel}/nopunct_accuracy", rng)
    best = counts.get(f"{rel}/accuracy")
    if rng and best is not None and f"{rel}/nopunct_delta" in values:
        lo_b, hi_b = (best["min"], best["max"]) if isinstance(best, dict) else (best, best)
        set_range(values, f"{rel}/nopunct_delta", (rng[0] - hi_b, rng[1] - lo_b))


def _paired(values, rel: str, fam: str, k: int, n: int, summary) -> None:
    key = lambda suf: f"{rel}/{fam}_{suf}"  # noqa: E731
    b, c = values.get(key("b")), values.get(key("c"))
    if not isinstance(b, int) or not isinstance(c, int):
        return
    values[key("b")] = between(b, max(0, b - k), b + k)
    values[key("c")] = between(c, max(0, c - k), c + k)
    if key("diff") in values:
        values[key("diff")] = within(values[key("diff")], k / n)
    for suf in ("diff_ci_low", "diff_ci_high"):
        if key(suf) in values:
            values[key(suf)] = within(values[key(suf)], _ci_delta(summary, k, n))
    if key("p") in values and k > 0:
        values[key("p")] = between(values[key("p")], *mcnemar_range(b, c, k))


def _holm(values, rows: list[str], fam: str, alpha: float) -> None:
    keys = [f"{r}/{fam}_p" for r in rows if num_or_none(_plain(values.get(f"{r}/{fam}_p"))) is not None]
    if not keys:
        return
    lo = np.array([_bound(values[x], "min") for x in keys])  # [row]
    hi = np.array([_bound(values[x], "max") for x in keys])  # [row]
    for x, a, b in zip(keys, holm(lo), holm(hi)):
        rel = x.split("/")[0]
        hk, sk = f"{rel}/{fam}_p_holm", f"{rel}/{fam}_significant"
        if hk in values and not isinstance(values[hk], dict):
            values[hk] = between(values[hk], float(a), float(b))
        if sk in values and not isinstance(values[sk], dict):
            values[sk] = any_of(values[sk], [str(bool(a <= alpha)), str(bool(b <= alpha))])


def _bound(entry: Any, side: str) -> float:
    if isinstance(entry, dict):
        if "unchecked" in entry:
            return 0.0 if side == "min" else 1.0
        return float(entry.get(side, entry["value"]))
    return float(entry)


def _accuracy_fragile(files: RunFiles, rel_name: str = "tables/head_accuracy.csv") -> dict[tuple, int]:
    acc = files.table(rel_name)
    if acc is None or "fragile" not in acc.columns:
        return {}
    return {(r, f"{l}-{h}", d): int(f) for r, l, h, d, f in
            zip(acc["relation"], acc["layer"], acc["head"], acc["direction"], acc["fragile"])}


@ranger("head_accuracy_all")
def head_accuracy_rule(values: dict[str, Any], files: RunFiles, tol, *, name: str, groups) -> str:
    n = int(files.summary("tables/head_accuracy.summary.json").get("n_words") or 0)
    fragile = _accuracy_fragile(files)
    for key in values:
        rel, head, d = key.split("/")
        k = tol.k_argmax(fragile.get((rel, head, d), 0))
        values[key] = within(values[key], k / n if n else 0.0)
    return f"+-k(f) words of the dev set's {n}, {K_RULE} (head_accuracy.csv's fragile column)"


# ------------------------------------------------------------------------------------------ probes
def _probe_n(files: RunFiles, summary_rel: str) -> int:
    data = files.summary(summary_rel).get("data") or {}
    return int((data.get("dev") or {}).get("n_eval_words") or 0)


@ranger("table3", "table3_norm", "probe_ablations")
def probes_rule(values: dict[str, Any], files: RunFiles, tol, *, name: str, groups) -> str:
    summary_rel = {"table3": "tables/table3.summary.json", "table3_norm": "tables/table3_norm.summary.json",
                   "probe_ablations": "tables/probe_ablations.summary.json"}[name]
    n, k = _probe_n(files, summary_rel), tol.probe_words
    if not n:
        return ""
    for row in _rows(values):
        if row == "right_branching":
            continue  # no training: exact
        seeds = values.get(f"{row}/n_seeds")
        seeds = int(seeds) if isinstance(seeds, (int, float)) and seeds == seeds else 0
        sd_factor = math.sqrt(seeds / (seeds - 1)) if seeds > 1 else 1.0
        for col, factor in (("uas_mean", 1.0), ("uas_mst_mean", 1.0), ("uas_sd", sd_factor), ("uas_mst_sd", sd_factor),
                            ("delta_uas", 2.0), ("delta_uas_mst", 2.0)):
            if f"{row}/{col}" in values:
                values[f"{row}/{col}"] = within(values[f"{row}/{col}"], factor * k / n)
    return (f"trained probes: a seed's dev UAS +-{k} words of {n} (probe words, measured across thread counts and CPU "
            "code paths); means +-that, sample sds +-sqrt(s/(s-1)) times it, differences of means twice")


# ------------------------------------------------------------------------------------------ trees
def _tree_k(tol, row: dict[str, Any]) -> tuple[int, int, int]:
    """(k dep2head, k head2dep, k uuas) of a tree_heads.csv row (pandas row or a dict)."""
    k1, k2 = tol.k_tree(int(row.get("fragile_dep2head", 0) or 0)), tol.k_tree(int(row.get("fragile_head2dep", 0) or 0))
    return k1, k2, max(k1, k2)


@ranger("tree_heads")
def tree_heads_rule(values: dict[str, Any], files: RunFiles, tol, *, name: str, groups) -> str:
    per = files.table("tables/tree_heads.csv")
    frag = {f"{r.layer}/{r.head}": r._asdict() for r in per.itertuples(index=False)} if per is not None else {}
    for row in _rows(values):
        n = values.get(f"{row}/n_words")
        if not isinstance(n, (int, float)) or not n:
            continue
        for col, k in zip(("uas_dep2head", "uas_head2dep", "uuas"), _tree_k(tol, frag.get(row, {}))):
            if f"{row}/{col}" in values:
                values[f"{row}/{col}"] = within(values[f"{row}/{col}"], k / n)
    return (f"+-{tol.tree_factor} x k(f) words (a flipped edge can re-route a spanning tree), f = the head's scored words "
            f"on a float16 near-tie in that direction (tree_heads.csv); {K_RULE}")


@ranger("tree_heads_best")
def tree_heads_best_rule(values: dict[str, Any], files: RunFiles, tol, *, name: str, groups) -> str:
    per = files.table("tables/tree_heads.csv")
    if per is None:
        return ""
    for row in _rows(values):
        n = values.get(f"{row}/n_words")
        if not row.startswith(("layer ", "all layers")) or not n:
            continue
        heads = per if row == "all layers" else per[per["layer"] == int(row.split()[1])]
        rows = [r._asdict() for r in heads.itertuples(index=False)]
        ks = [_tree_k(tol, r) for r in rows]
        uas = [(max(r["uas_dep2head"], r["uas_head2dep"]) * n, k[0] if r["uas_dep2head"] >= r["uas_head2dep"] else k[1],
                f"{r['layer']}-{r['head']}", "dep2head" if r["uas_dep2head"] >= r["uas_head2dep"] else "head2dep")
               for r, k in zip(rows, ks)]
        top = max(uas)
        near = [u for u in uas if u[0] >= top[0] - top[1] - u[1]]
        values[f"{row}/uas_head"] = any_of(values[f"{row}/uas_head"], [u[2] for u in near])
        values[f"{row}/uas_direction"] = any_of(values[f"{row}/uas_direction"], [u[3] for u in near])
        values[f"{row}/uas"] = within(values[f"{row}/uas"], max(u[1] for u in near) / n)
        uu = [(r["uuas"] * n, k[2], f"{r['layer']}-{r['head']}") for r, k in zip(rows, ks)]
        top = max(uu)
        near = [u for u in uu if u[0] >= top[0] - top[1] - u[1]]
        values[f"{row}/uuas_head"] = any_of(values[f"{row}/uuas_head"], [u[2] for u in near])
        values[f"{row}/uuas"] = within(values[f"{row}/uuas"], max(u[1] for u in near) / n)
    return "best heads per layer: any head within the sum of both heads' tree tolerances; their UAS / UUAS likewise"


# ------------------------------------------------------------------------- positional, labels, report
def _k_rows(files: RunFiles, summary_rel: str, tol) -> tuple[int, int, dict[str, Any]]:
    s = files.summary(summary_rel)
    rows = int(s.get("rows") or 0)
    return poisson_k(tol.positional_lambda_per_row * rows, tol.risk), rows, s.get("positional_candidates") or {}


def _positional(values: dict[str, Any], row: str, k: int, rows: int, near: list | None) -> None:
    if f"{row}/positional_fraction" in values and rows:
        values[f"{row}/positional_fraction"] = within(values[f"{row}/positional_fraction"], k / rows)
    if near and f"{row}/positional_offset" in values:
        top = near[0][1]
        values[f"{row}/positional_offset"] = any_of(values[f"{row}/positional_offset"],
                                                    [float(o) for o, c in near if c >= top - 2 * k])


@ranger("attention_stats", "attention_stats_norm")
def stats_rule(values: dict[str, Any], files: RunFiles, tol, *, name: str, groups) -> str:
    summary_rel = "tables/attention_stats.summary.json" if name == "attention_stats" else \
        "tables/attention_stats_norm.summary.json"
    k, rows, cand = _k_rows(files, summary_rel, tol)
    for head in _rows(values):
        _positional(values, head, k, rows, cand.get(head))
    return (f"positional columns: +-{k} argmax rows of the {rows} per head (Poisson quantile of the measured flip "
            f"rate per row x the rows); the mode offset: any offset within {2 * k} rows of it")


def _label_options(stats, rtol: float = ROUNDING) -> list[set[str]]:
    """Per head, the behaviour labels its statistics give when one of them moves by ``rtol`` either way."""
    options = [{lab} for lab in behaviour_labels(stats)]
    for col in LABEL_COLUMNS:
        for sign in (-1.0, 1.0):
            moved = stats.copy()
            moved[col] = moved[col] * (1.0 + sign * rtol) + sign * 1e-9
            for opts, lab in zip(options, behaviour_labels(moved)):
                opts.add(lab)
    return options


@ranger("head_clusters", "head_clusters_norm")
def labels_rule(values: dict[str, Any], files: RunFiles, tol, *, name: str, groups) -> str:
    stats = files.table("tables/attention_stats.csv" if name == "head_clusters" else "tables/attention_stats_norm.csv")
    if stats is None:
        return ""
    for (l, h), opts in zip(zip(stats["layer"], stats["head"]), _label_options(stats)):
        key = f"{l}-{h}"
        if key in values and len(opts) > 1:
            values[key] = any_of(values[key], sorted(opts))
    return f"a label may go either way when a statistic lies within {ROUNDING:g} (relative) of its threshold"


@ranger("head_report")
def head_report_rule(values: dict[str, Any], files: RunFiles, tol, *, name: str, groups) -> str:
    k_rows, rows, cand = _k_rows(files, "tables/attention_stats.summary.json", tol)
    stats = files.table("tables/attention_stats.csv")
    labels = dict(zip(stats["layer"].astype(str) + "-" + stats["head"].astype(str), _label_options(stats))) \
        if stats is not None else {}
    best = _best_relations(files, tol)
    for row in _rows(values):  # "layer/head"
        head = row.replace("/", "-")
        _positional(values, row, k_rows, rows, cand.get(head))
        frac = values.get(f"{row}/positional_fraction")
        if isinstance(frac, dict) and f"{row}/positional" in values:
            values[f"{row}/positional"] = any_of(values[f"{row}/positional"], [
                str(bool(frac["min"] >= POSITIONAL_THRESHOLD)), str(bool(frac["max"] >= POSITIONAL_THRESHOLD))])
        sink = num_or_none(values.get(f"{row}/sink"))
        if sink is not None and abs(sink - SINK_THRESHOLD) <= ROUNDING * SINK_THRESHOLD:
            values[f"{row}/sink_head"] = any_of(values[f"{row}/sink_head"], ["True", "False"])
        if head in labels and len(labels[head]) > 1 and f"{row}/behaviour" in values:
            values[f"{row}/behaviour"] = any_of(values[f"{row}/behaviour"], sorted(labels[head]))
        if head in best and f"{row}/best_relation" in values:
            rels, dirs, rng = best[head]
            values[f"{row}/best_relation"] = any_of(values[f"{row}/best_relation"], rels)
            values[f"{row}/best_direction"] = any_of(values[f"{row}/best_direction"], dirs)
            set_range(values, f"{row}/best_accuracy", rng)
        for col, atol in (("alti_sink", tol.contribution_atol), ("alti_sep", tol.contribution_atol),
                          ("ablation_loss", tol.faithfulness_atol)):  # from the contributions / faithfulness steps
            if f"{row}/{col}" in values:
                values[f"{row}/{col}"] = within(values[f"{row}/{col}"], atol)
    return (f"positional columns as attention_stats (+-{k_rows} rows); best relation: any relation whose accuracy may "
            "be the highest when each moves by its k(f) words; labels and flags either way near their thresholds; "
            "ALTI and head-ablation columns as the contributions tables")


def _best_relations(files: RunFiles, tol) -> dict[str, tuple[list[str], list[str], tuple[float, float]]]:
    """Per head, the relations (and directions) that may be its best one and the range of the best accuracy."""
    acc = files.table("tables/head_accuracy.csv")
    report = files.summary("tables/head_report.summary.json")
    min_count = int((report.get("thresholds") or {}).get("min_count") or 0)
    if acc is None:
        return {}

    cand = acc[(acc["relation"] != "All") & ~acc["relation"].isin(SKIP_RELATIONS) & (acc["count"] >= min_count)]
    frag = cand["fragile"] if "fragile" in cand.columns else np.zeros(len(cand), dtype=np.int64)
    k = np.array([tol.k_argmax(int(f)) for f in frag], dtype=np.float64)  # [candidate]
    cand = cand.assign(lo=cand["accuracy"] - k / cand["count"], hi=cand["accuracy"] + k / cand["count"])
    out = {}
    for (l, h), g in cand.groupby(["layer", "head"]):
        floor = g["lo"].max()
        near = g[g["hi"] >= floor]
        out[f"{l}-{h}"] = (list(near["relation"]), list(near["direction"]), (float(floor), float(g["hi"].max())))
    return out


@ranger("counts")
def counts_rule(values: dict[str, Any], files: RunFiles, tol, *, name: str, groups) -> str:
    for fam in ("vs_baseline", "vs_runner_up"):
        key = f"heads/paired/{fam}/n_significant"
        stats = groups.get("table1_stats", {}).get("values", {})
        flags = [v for x, v in stats.items() if x.endswith(f"/{fam}_significant")]
        if key not in values or not flags:
            continue
        sure = sum(1 for v in flags if not isinstance(v, dict) and v == "True")
        maybe = sum(1 for v in flags if isinstance(v, dict) and ("unchecked" in v or "True" in v.get("any_of", [])))
        values[key] = between(values[key], sure, sure + maybe)
    return "exact, but the counts of significant rows: between the rows that must and that may be significant"


def add_ranges(run_dir: Path, groups: dict[str, dict[str, Any]], tolerances) -> None:
    """Replace the values of ``groups`` (in place) by their checks; each group that got ranges gains
    ``tolerance``: how they were set."""
    files = RunFiles(Path(run_dir))
    for name, fn in RANGERS.items():
        g = groups.get(name)
        if g is None or g["values"].get("status") in ("absent", "not run"):
            continue
        try:
            why = fn(g["values"], files, tolerances, name=name, groups=groups)
        except (KeyError, TypeError, ValueError) as err:
            raise BertlookError(f"{run_dir}: group {name}: cannot set its ranges "
                                f"({type(err).__name__}: {err})") from None
        if why:
            g["tolerance"] = why


# ------------------------------------------------------------------------------- ALTI, value zeroing, faithfulness
#: attention_stats_alti: ALTI per layer read in the extraction stream, the same kernels as contribution_stats
CONTRIBUTION_GROUPS = ("contribution_stats", "contribution_heads", "faithfulness", "head_ablation",
                       "attention_stats_alti")


@ranger(*CONTRIBUTION_GROUPS)
def contribution_rule(values: dict[str, Any], files: RunFiles, tol, *, name: str, groups) -> str:
    """Every number within the measured spread of the contributions and faithfulness steps across thread counts
    and CPU code paths (``scripts/contribution_spread.py``: x 10); strings and counts exact."""
    atol = tol.faithfulness_atol if name in ("faithfulness", "head_ablation") else tol.contribution_atol
    for key, value in list(values.items()):
        if key != "status" and not key.endswith(("/n_examples", "/n_segments", "/n_pairs")):
            values[key] = within(value, atol)
    return f"+-{atol:.3g} (10 x the largest change measured across thread counts and CPU code paths)" if atol else ""


@ranger("table1_contributions")
def table1_contributions_rule(values: dict[str, Any], files: RunFiles, tol, *, name: str, groups) -> str:
    """Table 1 per map kind: an accuracy (and its interval, its baseline) within ``contribution_words`` words of the
    row's count (argmax-based: measured flips across thread counts and code paths x 4, at least 4); the chosen head
    / layer and offset exact."""
    k = tol.contribution_words
    for row in _rows(values):
        n = num_or_none(values.get(f"{row}/count"))  # a number of the table: a float
        if n is None or n <= 0:
            continue
        for col in ("accuracy", "ci_low", "ci_high", "baseline_accuracy"):
            if f"{row}/{col}" in values:
                values[f"{row}/{col}"] = within(values[f"{row}/{col}"], k / n)
    return f"accuracies +-{k} words of the row's count (measured argmax flips x 4, at least 4)" if k else ""
