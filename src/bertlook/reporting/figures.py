"""PNG twins of the paper's per-head figures (Clark et al. 2019, Figs 2, 3, 4 and 6).

Every function reads the tables written by earlier steps, draws with matplotlib/seaborn on the
non-interactive Agg backend and writes one PNG atomically (:func:`bertlook.reporting.plotting.save_png`:
a temporary ``.NAME.*.tmp.png`` beside the target, renamed into place), so an interrupted run never
leaves a half-written figure. Figs 1 and 5 (one example's attention as lines between tokens) are
:mod:`bertlook.reporting.example_figures`; figures beyond the paper are :mod:`bertlook.reporting.extra_figures`.

Inputs
------
- ``attention_stats.csv`` (``surface_stats``): one row per head, ``layer,head`` (1-indexed) and
  ``cls,sep,punct,self,prev,next,sep_sep,rest_sep`` (mean attention mass per from-token, 0..1),
  ``entropy,cls_entropy`` (nats).
- stats summary JSON: ``{"n_examples", "uniform_entropy" (mean ln n, nats), "mean_tokens"}``.
- ``head_clusters.csv`` (``clustering``): ``layer,head,x,y,behavior``.
- ``sep_gradients.csv`` (``gradients``) for Fig 3.

Figures
-------
- :func:`fig2_special_tokens` -- Fig 2: per-head attention to [CLS], [SEP] and ". ," by layer.
- :func:`fig3_sep_gradients` -- Fig 3: attention to and gradient importance of [SEP], ". ," and other tokens.
- :func:`fig4_entropy` -- Fig 4: per-head attention entropy and [CLS] entropy by layer.
- :func:`fig6_head_clusters` -- Fig 6: the 2-D MDS embedding of the heads, by layer and by behaviour.
"""

from __future__ import annotations

import json
import math
import os
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.colors import BoundaryNorm, ListedColormap
from matplotlib.lines import Line2D

from bertlook.analyses.gradients import COLUMNS, DECODER_TARGETS, TARGETS
from bertlook.errors import BertlookError
from bertlook.reporting.plotting import (
    from_zero, layer_ticks, new_figure, plot_style, read_figure_table, read_stats_columns, save_png,
)


#: Behaviour labels of ``head_clusters.csv`` in legend order ("other" last, drawn underneath).
BEHAVIOURS = ("next token", "previous token", "broad", "[CLS]", "[SEP]", "punctuation", "other")


FIGURE_FILES = {
    "fig1": "fig1_example_heads.png",
    "fig2": "fig2_special_tokens.png",
    "fig4": "fig4_entropy.png",
    "fig6": "fig6_head_clusters.png",
}


# --------------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------------


def _read_summary(path: str | os.PathLike) -> dict[str, Any]:
    path = Path(path)
    if not path.is_file():
        raise BertlookError(f"{path}: file not found")
    try:
        with open(path, encoding="utf-8") as fh:
            summary = json.load(fh)
    except json.JSONDecodeError as err:
        raise BertlookError(f"{path}:{err.lineno}: invalid JSON: {err.msg}") from None
    if not isinstance(summary, dict):
        raise BertlookError(f"{path}: expected a JSON object")
    for key in ("n_examples", "uniform_entropy"):
        if key not in summary:
            raise BertlookError(f"{path}: missing key {key!r}")
    try:
        ue = float(summary["uniform_entropy"])
    except (TypeError, ValueError):
        raise BertlookError(f"{path}: 'uniform_entropy' is not a number: {summary['uniform_entropy']!r}") from None
    if not math.isfinite(ue):
        raise BertlookError(f"{path}: 'uniform_entropy' is not finite: {ue}")
    return summary


def _jitter(n: int, width: float = 0.28, seed: int = 0):
    return np.random.default_rng(seed).uniform(-width, width, size=n)


# Fig 2
# --------------------------------------------------------------------------------------------------


def _layer_strip(ax, df, col: str, color, *, seed: int = 0, point_label: str = "head",
                 mean_label: str = "layer mean") -> None:
    """Per-head points (deterministic jitter) at x = layer, plus the per-layer mean as a line."""
    d = df[["layer", col]].dropna()
    ax.scatter(d["layer"] + _jitter(len(d), seed=seed), d[col], s=16, color=color, alpha=0.6,
               edgecolors="none", label=point_label, zorder=2)
    means = d.groupby("layer")[col].mean()
    dark = sns.dark_palette(color, 4)[1]
    ax.plot(means.index, means.to_numpy(), color=dark, lw=1.8, marker="o", ms=4, label=mean_label, zorder=3)


def _strip_legend_handles() -> list:
    """Colour-neutral legend entries for :func:`_layer_strip` panels."""
    return [
        Line2D([], [], ls="", marker="o", ms=5, color="0.55", alpha=0.7, label="one head"),
        Line2D([], [], color="0.2", lw=1.8, marker="o", ms=4, label="layer mean"),
    ]


def fig2_special_tokens(stats_csv: str | os.PathLike, out_png: str | os.PathLike) -> Path:
    """Twin of the paper's Fig 2: average attention to [CLS], [SEP] and ". ," per head, by layer."""
    panels = (("cls", "[CLS]"), ("sep", "[SEP]"), ("punct", ". or ,"))
    df = read_stats_columns(stats_csv, [c for c, _ in panels])
    num_layers = int(df["layer"].max())
    colors = sns.color_palette("deep", 3)
    with plot_style():
        fig = new_figure(figsize=(max(10.0, 3.6 * 3 * max(1.0, num_layers / 12) ** 0.5), 3.4))
        axes = fig.subplots(1, 3, sharey=True)
        for k, (ax, (col, title)) in enumerate(zip(axes, panels)):
            _layer_strip(ax, df, col, colors[k], seed=k)
            ax.set_title(f"Attention to {title}")
            ax.set_xlabel("Layer")
            layer_ticks(ax, num_layers)
            ax.set_ylim(-0.03, 1.03)
        axes[0].set_ylabel("Avg. attention (fraction)")
        fig.legend(handles=_strip_legend_handles(), loc="outside lower center", ncol=2, frameon=False)
        return save_png(fig, out_png)


# --------------------------------------------------------------------------------------------------
# Fig 4
# --------------------------------------------------------------------------------------------------


def fig4_entropy(
    stats_csv: str | os.PathLike, stats_summary_json: str | os.PathLike, out_png: str | os.PathLike
) -> Path:
    """Twin of the paper's Fig 4: per-head attention entropy, and entropy of the [CLS] row, by layer.

    The dashed line is the entropy of uniform attention, the mean over examples of ln n (nats); of a decoder's
    causal maps, the mean over rows of ln(i+1) (the summary's ``causal``).
    """
    df = read_stats_columns(stats_csv, ["entropy", "cls_entropy"])
    summary = _read_summary(stats_summary_json)
    uniform = float(summary["uniform_entropy"])
    num_layers = int(df["layer"].max())
    colors = sns.color_palette("deep", 6)
    panels = (("entropy", "Attention entropy (all tokens)", colors[0]),
              ("cls_entropy", "Attention entropy from [CLS]", colors[4]))
    with plot_style():
        fig = new_figure(figsize=(max(9.0, 4.6 * 2 * max(1.0, num_layers / 12) ** 0.5), 3.6))
        axes = fig.subplots(1, 2, sharey=True)
        for k, (ax, (col, title, color)) in enumerate(zip(axes, panels)):
            _layer_strip(ax, df, col, color, seed=10 + k)
            ax.axhline(uniform, color="0.25", ls="--", lw=1.3, zorder=1)
            ax.set_title(title)
            ax.set_xlabel("Layer")
            layer_ticks(ax, num_layers)
        values = df[["entropy", "cls_entropy"]].to_numpy(dtype=float)
        finite = values[np.isfinite(values)]
        top = max(uniform, float(finite.max()) if finite.size else 0.0)
        from_zero(axes[0], top * 1.08 + 0.05)
        axes[0].set_ylabel("Avg. attention entropy (nats)")
        n_ex = summary.get("n_examples")
        mean_tokens = summary.get("mean_tokens")
        reference = "mean ln(i+1), causal rows" if summary.get("causal") else "mean ln n"
        note = f"uniform attention: {reference} = {uniform:.2f} nats ({n_ex} examples"
        if isinstance(mean_tokens, (int, float)) and not isinstance(mean_tokens, bool) and math.isfinite(mean_tokens):
            note += f", mean length {mean_tokens:.1f} tokens"
        note += ")"
        handles = _strip_legend_handles()
        handles.append(Line2D([], [], color="0.25", ls="--", lw=1.3, label=note))
        fig.legend(handles=handles, loc="outside lower center", ncol=3, frameon=False)
        return save_png(fig, out_png)


# --------------------------------------------------------------------------------------------------
# Fig 6
# --------------------------------------------------------------------------------------------------


def fig6_head_clusters(clusters_csv: str | os.PathLike, out_png: str | os.PathLike) -> Path:
    """Twin of the paper's Fig 6: the heads' 2-D MDS embedding coloured by layer and by behaviour."""
    df = read_figure_table(clusters_csv, int_cols=("layer", "head"), float_cols=("x", "y"), str_cols=("behavior",))
    bad = ~df["behavior"].isin(BEHAVIOURS)
    if bad.any():
        i = int(bad.to_numpy().nonzero()[0][0])
        raise BertlookError(
            f"{clusters_csv}:{i + 2}: unknown behavior {df['behavior'].iloc[i]!r} "
            f"(expected one of: {', '.join(BEHAVIOURS)})"
        )
    nan = df[["x", "y"]].isna().any(axis=1)
    if nan.any():
        i = int(nan.to_numpy().nonzero()[0][0])
        raise BertlookError(f"{clusters_csv}:{i + 2}: missing x/y coordinate")
    num_layers = int(df["layer"].max())
    layer_cmap = ListedColormap(sns.color_palette("viridis", num_layers))
    norm = BoundaryNorm(np.arange(0.5, num_layers + 1.5), layer_cmap.N)
    pal = sns.color_palette("colorblind", 10)
    # next/previous token: dark/light blue; broad: green; [CLS]: vermilion; [SEP]: purple; punct: orange
    beh_color = dict(zip(BEHAVIOURS, [pal[0], pal[9], pal[2], pal[3], pal[4], pal[1], (0.78, 0.78, 0.78)]))

    with plot_style():
        fig = new_figure(figsize=(11.5, 4.8))
        ax_l, ax_b = fig.subplots(1, 2)
        sc = ax_l.scatter(df["x"], df["y"], c=df["layer"], cmap=layer_cmap, norm=norm, s=34,
                          edgecolors="white", linewidths=0.4)
        cb = fig.colorbar(sc, ax=ax_l, pad=0.02, fraction=0.05)
        cb.set_label("Layer")
        step = 1 if num_layers <= 12 else 2 if num_layers <= 24 else max(1, num_layers // 12)
        cb.set_ticks(list(range(1, num_layers + 1, step)))
        cb.ax.minorticks_off()
        ax_l.set_title("Heads coloured by layer")

        handles = []
        for beh in reversed(BEHAVIOURS):  # "other" first, underneath
            d = df[df["behavior"] == beh]
            if d.empty:
                continue
            is_other = beh == "other"
            ax_b.scatter(d["x"], d["y"], color=beh_color[beh], s=22 if is_other else 40,
                         edgecolors="white", linewidths=0.4, zorder=1 if is_other else 2)
        for beh in BEHAVIOURS:
            count = int((df["behavior"] == beh).sum())
            if count:
                handles.append(Line2D([], [], ls="", marker="o", ms=7, color=beh_color[beh],
                                      label=f"{beh} ({count})"))
        ax_b.legend(handles=handles, title="Behaviour (heads)", loc="upper left", bbox_to_anchor=(1.01, 1.0),
                    frameon=False, fontsize="small", title_fontsize="small")
        ax_b.set_title("Heads coloured by behaviour")
        for ax in (ax_l, ax_b):
            ax.set_aspect("equal", adjustable="datalim")
            ax.set_xticks([])  # MDS coordinates carry no units: no ticks, no grid
            ax.set_yticks([])
            ax.set_xlabel("MDS dimension 1")
            ax.set_ylabel("MDS dimension 2")
        return save_png(fig, out_png)


# --------------------------------------------------------------------------------------------------
# Fig 3 (gradients of the MLM loss w.r.t. attention; numbers: bertlook.analyses.gradients)
# --------------------------------------------------------------------------------------------------

_TARGET_LABELS = {"[SEP]": "[SEP]", "first token": "first token (sink)", ". ,": ". or ,", "other": "other tokens"}


def _target_colors():
    pal = sns.color_palette("colorblind", 10)
    return {"[SEP]": pal[4], "first token": pal[4], ". ,": pal[1], "other": (0.45, 0.45, 0.45)}


def _read_gradient_table(path):
    """``(frame, note)``: the typed table, or ``(None, note)`` for a not-run table."""
    raw = read_figure_table(path, str_cols=tuple(COLUMNS))
    header = list(pd.read_csv(path, nrows=0).columns)
    if "note" in header:
        notes = pd.read_csv(path, dtype=str, keep_default_na=False)["note"].str.strip()
        if (raw["mean_abs_grad"] == "").all() and (raw["attention_mass"] == "").all():
            note = next((t for t in notes if t), "not run")
            return None, note
    df = read_figure_table(path, int_cols=("layer",), float_cols=("mean_abs_grad", "attention_mass"),
                           str_cols=("target",))
    known = TARGETS if "first token" not in set(df["target"]) else DECODER_TARGETS  # an encoder's or a decoder's
    bad = ~df["target"].isin(known)
    if bad.any():
        i = int(bad.to_numpy().nonzero()[0][0])
        raise BertlookError(f"{path}:{i + 2}: unknown target {df['target'].iloc[i]!r} (expected one of: {', '.join(known)})")
    dup = df.duplicated(subset=["layer", "target"])
    if dup.any():
        i = int(dup.to_numpy().nonzero()[0][0])
        raise BertlookError(f"{path}:{i + 2}: layer {df['layer'].iloc[i]}, target {df['target'].iloc[i]!r} appears twice")
    return df, None


def _fig3_note_figure(note: str, out_png):
    with plot_style():
        fig = new_figure(figsize=(8.0, 3.0))
        ax = fig.subplots()
        ax.set_axis_off()
        ax.set_title("Gradient importance of attention to [SEP] (Fig. 3 twin)", fontsize="large")
        ax.text(0.5, 0.5, "\n".join(textwrap.wrap(note, 70, break_on_hyphens=False)), ha="center", va="center", transform=ax.transAxes,
                parse_math=False,  # the note holds the model path: a "$" is text, never mathtext
                fontsize="medium", color="0.15",
                bbox=dict(boxstyle="round,pad=0.6", facecolor=(1.0, 0.96, 0.88), edgecolor=(0.85, 0.6, 0.2)))
        return save_png(fig, out_png)


def fig3_sep_gradients(csv: str | os.PathLike, out_png: str | os.PathLike) -> Path:
    """Twin of the paper's Fig 3 from ``sep_gradients.csv``.

    Left: average attention mass per layer to [SEP], ". ," and other tokens; right: the average
    gradient magnitude ``|dL/dA|`` of attention to the same targets. A not-run table (``note`` column,
    empty numbers) gives a figure that shows the note.
    """
    df, note = _read_gradient_table(csv)
    if df is None:
        return _fig3_note_figure(note, out_png)
    colors = _target_colors()
    num_layers = int(df["layer"].max())
    top = float(df["mean_abs_grad"].abs().max()) if df["mean_abs_grad"].notna().any() else 0.0
    exponent = int(math.floor(math.log10(top))) if top > 0 and math.isfinite(top) else 0
    exponent = exponent if exponent < -2 or exponent > 3 else 0
    scale = 10.0 ** -exponent  # gradients are drawn as value x 10^-exponent, the unit goes to the label
    markers = {"[SEP]": "o", "first token": "o", ". ,": "s", "other": "^"}
    targets = DECODER_TARGETS if "first token" in set(df["target"]) else TARGETS  # a decoder: its sink
    with plot_style():
        fig = new_figure(figsize=(max(9.5, 4.8 * 2 * max(1.0, num_layers / 12) ** 0.5), 3.7))
        ax_a, ax_g = fig.subplots(1, 2)
        for target in targets:
            d = df[df["target"] == target].sort_values("layer")
            if d.empty:
                continue
            lw, z = (2.2, 3) if target == targets[0] else (1.5, 2)
            for ax, col, k in ((ax_a, "attention_mass", 1.0), (ax_g, "mean_abs_grad", scale)):
                ax.plot(d["layer"], d[col] * k, color=colors[target], marker=markers[target], ms=5, lw=lw,
                        zorder=z, label=_TARGET_LABELS[target])
        ax_a.set_title("Avg. attention to target")
        ax_a.set_ylabel("Attention (fraction per token)")
        ax_a.set_ylim(-0.03, 1.03)
        ax_g.set_title("Avg. gradient magnitude |dL/d attention|")
        unit = f" ($\\times 10^{{{exponent}}}$)" if exponent else ""
        ax_g.set_ylabel(f"Mean |gradient| per weight{unit}")
        from_zero(ax_g)
        for ax in (ax_a, ax_g):
            ax.set_xlabel("Layer")
            layer_ticks(ax, num_layers)
        handles, labels = ax_a.get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside lower center", ncol=3, frameon=False, title="Attention to")
        return save_png(fig, out_png)
