"""The faithfulness figure ("Which measure to trust"; numbers: bertlook.analyses.faithfulness).

:func:`fig_faithfulness` draws, per ground truth (the representation change and the loss change of removing a
token), each measure's mean Spearman correlation with its 95% bootstrap interval; a ground truth without numbers (a
model without its pre-training head: the loss) is a panel that says why. Written atomically
(:func:`bertlook.reporting.plotting.save_png`).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import seaborn as sns

from bertlook.reporting.plotting import message_panel, new_figure, plot_style, read_figure_table, save_png

_TITLES = {"representation_change": "Representation change (1 - cos)", "loss_change": "Loss change (|dLoss|)"}


def fig_faithfulness(table_csv: str | os.PathLike, out_png: str | os.PathLike) -> Path:
    """One panel per ground truth of ``table_csv`` (faithfulness.csv): a point per measure at its mean Spearman
    correlation, a bar for its interval, the zero line dashed."""
    table = read_figure_table(table_csv, float_cols=("spearman", "ci_low", "ci_high"),
                              str_cols=("measure", "ground_truth", "note"))
    truths = list(dict.fromkeys(table["ground_truth"]))
    measures = list(dict.fromkeys(table["measure"]))
    pal = sns.color_palette("colorblind", 10)
    with plot_style():
        fig = new_figure(figsize=(5.2 * len(truths), 0.36 * len(measures) + 1.8))
        axes = np.atleast_1d(fig.subplots(1, len(truths), sharey=True))
        for ax, gt, color in zip(axes, truths, (pal[0], pal[1])):
            part = table[table["ground_truth"] == gt].set_index("measure").reindex(measures)
            rho = part["spearman"].to_numpy(dtype=float)
            if not np.isfinite(rho).any():
                notes = [n for n in part["note"] if isinstance(n, str) and n.lower() not in ("", "nan")]
                message_panel(ax, _TITLES.get(gt, gt), notes[0] if notes else "no numbers")
                continue
            lo, hi = part["ci_low"].to_numpy(dtype=float), part["ci_high"].to_numpy(dtype=float)
            y = np.arange(len(measures))
            err = np.vstack([np.where(np.isfinite(lo), rho - lo, 0.0), np.where(np.isfinite(hi), hi - rho, 0.0)])
            ok = np.isfinite(rho)
            ax.errorbar(rho[ok], y[ok], xerr=err[:, ok], fmt="o", color=color, ms=5, capsize=3, lw=1.5)
            ax.axvline(0.0, color="0.3", ls="--", lw=1.0)
            ax.set_xlim(-1.05, 1.05)
            ax.set_yticks(y, measures)
            ax.invert_yaxis()
            ax.set_xlabel("Spearman rank correlation (95% bootstrap interval)")
            ax.set_title(_TITLES.get(gt, gt))
        fig.suptitle("Which measure to trust: agreement with removing a token")
        return save_png(fig, out_png)
