"""Figure and Markdown of the ``contributions`` step (ALTI and value zeroing beside attention, norms and rollout).

:func:`fig_contributions` draws the per-layer profiles of Fig 2 ([CLS], [SEP] and ". ," shares per layer) for
each map kind of ``contribution_stats.csv`` side by side; :func:`table1_contributions_markdown` writes
``table1_contributions.md``. Numbers: :mod:`bertlook.analyses.contribution_stats`.
"""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd
import seaborn as sns

from bertlook.errors import BertlookError
from bertlook.reporting.plotting import layer_ticks, new_figure, plot_style, read_figure_table, save_png

#: how the figure and the tables name each kind
KIND_TITLES = {
    "attention": "attention (head mean)", "norm": "norm-based (head mean)", "rollout": "attention rollout",
    "alti": "ALTI", "alti_heads": "ALTI per head (head mean)", "alti_rollout": "ALTI over layers",
    "value_zeroing": "value zeroing",
}


def fig_contributions(stats_csv: "str | os.PathLike | pd.DataFrame", out_png: str | os.PathLike) -> Path:
    """One panel per kind of ``contribution_stats.csv`` (a path, or the frame itself): the share of [CLS], [SEP] and
    ". ," per layer (Fig 2's profiles), the kinds in the table's order."""
    if isinstance(stats_csv, pd.DataFrame):
        df, stats_csv = stats_csv, "contribution statistics"
    else:
        df = read_figure_table(stats_csv, int_cols=("layer",), float_cols=("cls", "sep", "punct"), str_cols=("kind",))
    if df.empty:
        raise BertlookError(f"{stats_csv}: no data rows")
    if df.duplicated(subset=["kind", "layer"]).any():
        raise BertlookError(f"{stats_csv}: a (kind, layer) row appears more than once")
    kinds = list(dict.fromkeys(df["kind"]))
    num_layers = int(df["layer"].max())
    pal = sns.color_palette("colorblind", 10)
    shares = (("cls", "[CLS]", pal[0], "o"), ("sep", "[SEP]", pal[4], "s"), ("punct", ". or ,", pal[1], "^"))
    with plot_style():
        fig = new_figure(figsize=(2.6 * len(kinds) + 1.0, 3.4))
        axes = fig.subplots(1, len(kinds), sharey=True, squeeze=False)[0]
        for ax, kind in zip(axes, kinds):
            part = df[df["kind"] == kind].sort_values("layer")
            for col, label, color, marker in shares:
                ax.plot(part["layer"], part[col], color=color, marker=marker, ms=4, lw=1.6, label=label)
            ax.set_title(KIND_TITLES.get(kind, kind), fontsize=9)
            ax.set_xlabel("Layer")
            ax.set_ylim(-0.03, 1.03)
            layer_ticks(ax, num_layers)
        axes[0].set_ylabel("Share (fraction per token)")
        handles, labels = axes[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside lower center", ncol=3, frameon=False,
                   title="Share of each map's rows going to")
        return save_png(fig, out_png)
