"""Shared plotting helpers of the figure modules: the style, pyplot-free figures, atomic PNG writes, typed
reading of the tables they draw, and a few axis helpers.

Used by :mod:`bertlook.reporting.figures` (the paper's figures), :mod:`bertlook.reporting.extra_figures`
(figures beyond the paper) and :mod:`bertlook.reporting.models_summary`. Light at the top (matplotlib,
seaborn and pandas imported inside the functions): :mod:`bertlook.reporting.run_files` reads tables with
:func:`read_figure_table`, and the workflow imports that when it builds the DAG.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Sequence

from bertlook.errors import BertlookError
from bertlook.io_utils import atomic_path, read_csv_strings

#: resolution of every PNG
DPI = 150


def _agg() -> None:
    import matplotlib  # lazy: not needed at DAG build (see the module docstring)

    matplotlib.use("Agg")


def plot_style():
    """A seaborn style + context applied only inside a ``with`` block (no global rcParams change)."""
    import seaborn as sns  # lazy: not needed at DAG build

    stack = contextlib.ExitStack()
    stack.enter_context(sns.axes_style("whitegrid"))
    stack.enter_context(sns.plotting_context("paper", font_scale=1.25))
    return stack


def new_figure(**kwargs):
    """A pyplot-free Figure (no global figure registry; nothing to close)."""
    _agg()
    from matplotlib.figure import Figure  # lazy: not needed at DAG build

    kwargs.setdefault("layout", "constrained")
    return Figure(**kwargs)


def save_png(fig, out_png: str | os.PathLike) -> Path:
    """Save ``fig`` as PNG to a temporary sibling of ``out_png`` and rename it into place."""
    with atomic_path(out_png) as tmp:
        fig.savefig(tmp, dpi=DPI, bbox_inches="tight", format="png", facecolor="white")
    return Path(out_png)


def from_zero(ax, top: float | None = None) -> None:
    """y from just below 0 to ``top`` (default: the autoscaled top): a margin of 3% of the range below
    0, as the fraction panels' -0.03, so that points at 0 (a head with entropy ~0, gradients ~0) are
    drawn whole instead of cut in half by the axis."""
    hi = float(ax.get_ylim()[1]) if top is None else float(top)
    ax.set_ylim(-0.03 * hi, hi)


def layer_ticks(ax, num_layers: int, axis: str = "x") -> None:
    """Layer ticks 1..``num_layers`` (every layer up to 16, then every 2nd, ...) on the x (with limits)
    or y axis."""
    step = 1 if num_layers <= 16 else 2 if num_layers <= 32 else max(1, num_layers // 12)
    ticks = list(range(1, num_layers + 1, step))
    if axis == "x":
        ax.set_xticks(ticks)
        ax.set_xlim(0.4, num_layers + 0.6)
    else:
        ax.set_yticks(ticks)


def message_panel(ax, title: str, text: str) -> None:
    """A panel without axes that says ``text`` under ``title`` (an input absent, nothing to draw)."""
    ax.set_axis_off()
    ax.set_title(title, fontsize=11)
    ax.text(0.5, 0.5, text, ha="center", va="center", fontsize=10, wrap=True, color="0.3", parse_math=False,
            transform=ax.transAxes)


def read_figure_table(
    path: str | os.PathLike,
    *,
    int_cols: Sequence[str] = (),
    float_cols: Sequence[str] = (),
    str_cols: Sequence[str] = (),
):
    """Read a CSV, check the named columns exist and parse; errors name the file and line."""
    import pandas as pd  # lazy: not needed at DAG build

    path = Path(path)
    raw = read_csv_strings(path, required=[*int_cols, *float_cols, *str_cols])
    if raw.empty:
        raise BertlookError(f"{path}: no data rows")
    out = pd.DataFrame(index=raw.index)
    for col in int_cols:
        text = raw[col].astype(str).str.strip()
        vals = pd.to_numeric(text, errors="coerce")
        bad = vals.isna() | (vals.fillna(0) != vals.fillna(0).round()) | (vals.fillna(0) < 1)
        if bad.any():
            i = int(bad.to_numpy().nonzero()[0][0])
            raise BertlookError(
                f"{path}:{i + 2}: column {col!r}: expected a positive integer (1-indexed), got {text.iloc[i]!r}"
            )
        out[col] = vals.astype("int64")
    for col in float_cols:
        text = raw[col].astype(str).str.strip()
        vals = pd.to_numeric(text, errors="coerce")
        bad = vals.isna() & ~text.str.lower().isin(["", "nan", "na"])
        if bad.any():
            i = int(bad.to_numpy().nonzero()[0][0])
            raise BertlookError(f"{path}:{i + 2}: column {col!r}: expected a number, got {text.iloc[i]!r}")
        out[col] = vals.astype("float64")
    for col in str_cols:
        out[col] = raw[col].astype(str).str.strip()
    if "layer" in out.columns and "head" in out.columns:
        dup = out.duplicated(subset=["layer", "head"])
        if dup.any():
            i = int(dup.to_numpy().nonzero()[0][0])
            raise BertlookError(
                f"{path}:{i + 2}: head {out['layer'].iloc[i]}-{out['head'].iloc[i]} appears more than once"
            )
    return out


def read_stats_columns(path: str | os.PathLike, columns: Sequence[str]):
    """``layer``, ``head`` and the float ``columns`` of a statistics CSV."""
    return read_figure_table(path, int_cols=("layer", "head"), float_cols=columns)
