"""The paper's figure facts measured on a run's per-head statistics (``tables/attention_stats.csv`` as typed by
:func:`bertlook.reporting.run_files.read_run_stats`): the run's number for a fact's metric
(:func:`fact_value`), whether it passes the fact's comparison relaxed by its tolerance (:func:`fact_passes`)
and that condition in words (:func:`passes_when`). The facts themselves are
:func:`bertlook.reporting.paper_reference.figure_facts`; their rows of the comparison are
:mod:`bertlook.reporting.compare`'s.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from bertlook.errors import BertlookError
from bertlook.reporting.run_files import STATS_CSV

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd


def _layer_selection(layers: Any, num_layers: int) -> tuple[list[int] | None, str]:
    if layers is None:
        return list(range(1, num_layers + 1)), f"all {num_layers} layers"
    if layers == "last":
        return [num_layers], f"layer {num_layers} (the last)"
    lo, hi = int(layers[0]), int(layers[1])
    if lo > num_layers:
        return None, f"the model has {num_layers} layers; the paper's fact is about layers {lo}-{hi}"
    top = min(hi, num_layers)
    desc = f"layers {lo}-{top}" if lo != top else f"layer {lo}"
    if top < hi:
        desc += f" (the paper's {lo}-{hi}; the model has {num_layers} layers)"
    return list(range(lo, top + 1)), desc


_FILTER = {">": lambda a, b: a > b, ">=": lambda a, b: a >= b, "<": lambda a, b: a < b, "<=": lambda a, b: a <= b}


def fact_value(stats: "pd.DataFrame", metric: dict[str, Any], *, layers: Any = "metric") -> tuple[float | None, str]:
    """The run's number for a figure fact's ``metric`` from the per-head statistics, and a note.

    ``(None, reason)`` when it cannot be measured (column absent, no layer or head selected).
    ``layers`` overrides ``metric["layers"]`` (used for ``reference_layers``).
    """
    stat = str(metric["stat"])
    if stat not in stats.columns:
        return None, (f"{STATS_CSV} has no `{stat}` column: the pipeline does not measure it "
                      "(not invented here)")
    num_layers = int(stats["layer"].max())
    sel, desc = _layer_selection(metric.get("layers") if layers == "metric" else layers, num_layers)
    if sel is None:
        return None, desc
    df = stats[stats["layer"].isin(sel)]
    flt = metric.get("where")
    if flt:
        if flt["stat"] not in stats.columns:
            return None, f"{STATS_CSV} has no `{flt['stat']}` column"
        df = df[_FILTER[flt["op"]](df[flt["stat"]], float(flt["value"]))]
        desc += f", heads with {flt['stat']} {flt['op']} {flt['value']}"
    values = df[stat].dropna()
    agg = metric["aggregate"]
    if agg == "count_above":
        thr = float(metric["threshold"])
        above = df[df[stat] > thr]
        heads = ", ".join(f"{int(a.layer)}-{int(a.head)} ({getattr(a, stat):.2f})" for a in above.itertuples())
        return float(len(above)), f"heads with {stat} > {thr:g} in {desc}: {heads or 'none'}"
    if values.empty:
        return None, f"no head selected ({desc})"
    value = float({"mean": values.mean, "max": values.max, "min": values.min}[agg]())
    return value, f"{agg} of {stat} over {len(values)} heads of {desc}"


def fact_passes(x: float, op: str, value: float, tolerance: float) -> bool:
    """Whether the run's number ``x`` satisfies ``op value``, relaxed by ``tolerance`` (see paper_reference)."""
    t = float(tolerance) + 1e-12
    if op == ">":
        return x > value - t
    if op == ">=":
        return x >= value - t
    if op == "<":
        return x < value + t
    if op == "<=":
        return x <= value + t
    if op == "==":
        return abs(x - value) <= t
    raise BertlookError(f"unknown comparison {op!r}")


def passes_when(op: str, value: float, tol: float) -> str:
    """The condition :func:`fact_passes` applies, in words: ``x > 0.48``, ``x in [4, 6]``."""
    if op == "==":
        return f"x in [{value - tol:g}, {value + tol:g}]"
    bound = value - tol if op.startswith(">") else value + tol
    return f"x {op} {bound:g}"
