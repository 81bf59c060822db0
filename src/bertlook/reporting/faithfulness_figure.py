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
import pandas as pd
import seaborn as sns

from bertlook.errors import BertlookError
from bertlook.reporting.plotting import message_panel, new_figure, plot_style, save_png

_TITLES = {"representation_change": "Representation change (1 - cos)", "loss_change": "Loss change (|dLoss|)"}


def fig_faithfulness(table: pd.DataFrame, out_png: str | os.PathLike) -> Path:
    """One panel per ground truth of ``table`` (faithfulness.csv's columns): a point per measure at its mean
    Spearman correlation, a bar for its interval, the zero line dashed."""
    need = {"measure", "ground_truth", "spearman", "ci_low", "ci_high", "note"}
    if not need <= set(table.columns):
        raise BertlookError(f"faithfulness figure: columns {sorted(need - set(table.columns))} missing")
    truths = list(dict.fromkeys(table["ground_truth"]))
    measures = list(dict.fromkeys(table["measure"]))
    pal = sns.color_palette("colorblind", 10)
    with plot_style():
        fig = new_figure(figsize=(5.2 * len(truths), 0.36 * len(measures) + 1.8))
        axes = np.atleast_1d(fig.subplots(1, len(truths), sharey=True))
        for ax, gt, color in zip(axes, truths, (pal[0], pal[1])):
            part = table[table["ground_truth"] == gt].set_index("measure").reindex(measures)
            rho = pd.to_numeric(part["spearman"], errors="coerce").to_numpy(dtype=float)
            if not np.isfinite(rho).any():
                notes = [str(n) for n in part["note"] if isinstance(n, str) and n]
                message_panel(ax, _TITLES.get(gt, gt), notes[0] if notes else "no numbers")
                continue
            lo = pd.to_numeric(part["ci_low"], errors="coerce").to_numpy(dtype=float)
            hi = pd.to_numeric(part["ci_high"], errors="coerce").to_numpy(dtype=float)
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
