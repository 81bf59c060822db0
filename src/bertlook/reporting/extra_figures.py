"""Figures beyond the paper: norm-based attention (Kobayashi et al. 2020), attention rollout (Abnar &
Zuidema 2020), single-head trees (Htut et al. 2019), the per-head report card and the cross-language summary.

Every function reads the tables (or frames) written by its analysis step and writes one PNG atomically
through :func:`bertlook.reporting.plotting.save_png`. The paper's own figures are
:mod:`bertlook.reporting.figures` and :mod:`bertlook.reporting.example_figures`.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.lines import Line2D

from bertlook.analyses.heads import DIRECTION_ARROWS, DIRECTIONS
from bertlook.analyses.rollout import STAT_COLUMNS
from bertlook.attention.norms import TOKEN_CLASSES, reduce_norm_summaries
from bertlook.errors import BertlookError
from bertlook.io_utils import read_csv_strings
from bertlook.reporting.plotting import (
    from_zero, layer_ticks, message_panel, new_figure, plot_style, read_figure_table, read_stats_columns, save_png,
)


# ---- norm-based attention (Kobayashi et al. 2020; numbers: bertlook.attention.norms, surface-stats on the norm store)
_NORM_CLASS_LABELS = {"cls": "[CLS]", "sep": "[SEP]", "punct": ". or ,", "other": "other tokens"}


def _layer_shares(path):
    """Per-layer mean over heads of the ``cls``, ``sep``, ``punct`` shares of a stats table, and
    ``other`` = 1 - their sum (the shares are per-row means of distributions: they add up to 1)."""
    df = read_stats_columns(path, ("cls", "sep", "punct"))
    means = df.groupby("layer")[["cls", "sep", "punct"]].mean().sort_index()  # [layer, 3]
    means["other"] = 1.0 - means[["cls", "sep", "punct"]].sum(axis=1)
    return df, means


def fig_norms(stats_csv: str | os.PathLike, norm_stats_csv: str | os.PathLike,
              summaries: Sequence[str | os.PathLike], out_png: str | os.PathLike) -> Path:
    """Attention weights vs norm-based maps (Kobayashi et al. 2020) by layer, from the surface
    statistics of the attention store (``stats_csv``) and of the norm store (``norm_stats_csv``, the
    same columns) and the extraction summaries' ``norms`` sums (``summaries``: one, or every shard's
    in order; reduced by :func:`bertlook.attention.norms.reduce_norm_summaries`).

    Left: per layer (mean over heads) the share of each row given to [CLS], [SEP], ". ," and other
    tokens under attention (solid) and under the row-normalised norm map (dashed). Middle (the Fig 4
    twin, side by side): per layer the mean row entropy and [CLS]-row entropy (nats, mean over heads),
    attention (solid) vs norm (dashed). Right: the mean
    ``|| f(x) ||`` (averaged over heads) of tokens of each class, per layer. Mismatched inputs (other
    heads, other layer counts) are an error naming the files.
    """
    att_df, att = _layer_shares(stats_csv)
    norm_df, nrm = _layer_shares(norm_stats_csv)
    att_heads = set(zip(att_df["layer"], att_df["head"]))
    norm_heads = set(zip(norm_df["layer"], norm_df["head"]))
    if att_heads != norm_heads:
        raise BertlookError(
            f"{norm_stats_csv}: its heads ({len(norm_heads)}, layers 1..{int(norm_df['layer'].max())}) are not those "
            f"of {stats_csv} ({len(att_heads)}, layers 1..{int(att_df['layer'].max())}): tables of different models?"
        )
    reduced = reduce_norm_summaries(list(summaries))
    num_layers = int(att_df["layer"].max())
    if reduced["num_layers"] != num_layers or sorted(att.index) != list(range(1, num_layers + 1)):
        raise BertlookError(
            f"{', '.join(str(p) for p in summaries)}: norms of {reduced['num_layers']} layers, but {stats_csv} "
            f"has layers {sorted(int(x) for x in att.index)}: inputs of different models?"
        )
    means = reduced["means"]  # [layer, class]
    layers = list(range(1, num_layers + 1))
    pal = sns.color_palette("colorblind", 10)
    colors = {"cls": pal[0], "sep": pal[4], "punct": pal[1], "other": (0.45, 0.45, 0.45)}
    markers = {"cls": "D", "sep": "o", "punct": "s", "other": "^"}
    with plot_style():
        fig = new_figure(figsize=(max(13.5, 4.6 * 3 * max(1.0, num_layers / 12) ** 0.5), 3.9))
        ax_s, ax_e, ax_n = fig.subplots(1, 3)
        att_ent = read_stats_columns(stats_csv, ("entropy", "cls_entropy")).groupby("layer").mean()  # [layer, stat]
        # [layer, stat]
        norm_ent = read_stats_columns(norm_stats_csv, ("entropy", "cls_entropy")).groupby("layer").mean()
        for col, color, what in (("entropy", "0.2", "all rows"), ("cls_entropy", pal[0], "[CLS] row")):
            a_e, n_e = att_ent[col], norm_ent[col]  # [layer]
            ax_e.plot(a_e.index, a_e.to_numpy(), color=color, marker="o", ms=4, lw=1.8, label=what)
            ax_e.plot(n_e.index, n_e.to_numpy(), color=color, marker="o", ms=4, lw=1.8, ls="--",
                      markerfacecolor="white")
        ax_e.set_title("Entropy: attention (solid) vs norm (dashed)")
        ax_e.set_ylabel("Avg. entropy (nats)")
        from_zero(ax_e)
        ax_e.legend(frameon=False, fontsize="small")
        for c in TOKEN_CLASSES:
            ax_s.plot(att.index, att[c], color=colors[c], marker=markers[c], ms=5, lw=1.8,
                      label=_NORM_CLASS_LABELS[c])
            ax_s.plot(nrm.index, nrm[c], color=colors[c], marker=markers[c], ms=5, lw=1.8, ls="--",
                      markerfacecolor="white")
            k = TOKEN_CLASSES.index(c)
            ax_n.plot(layers, means[:, k], color=colors[c], marker=markers[c], ms=5, lw=1.8)
        ax_s.set_title("Share of each row: attention (solid) vs norm (dashed)")
        ax_s.set_ylabel("Avg. share (fraction per token)")
        ax_s.set_ylim(-0.03, 1.03)
        counts = reduced["counts"]
        ax_n.set_title("Mean ||f(x)|| of the attended token")
        ax_n.set_ylabel("||f(x)|| (mean over heads)")
        from_zero(ax_n)
        ax_n.text(0.99, 0.98, "tokens: " + ", ".join(f"{_NORM_CLASS_LABELS[c]} {int(counts[k])}"
                                                        for k, c in enumerate(TOKEN_CLASSES)),
                  transform=ax_n.transAxes, ha="right", va="top", fontsize="x-small", color="0.3")
        for ax in (ax_s, ax_e, ax_n):
            ax.set_xlabel("Layer")
            layer_ticks(ax, num_layers)
        handles, labels = ax_s.get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside lower center", ncol=4, frameon=False, title="Attended token")
        return save_png(fig, out_png)


# ---- Attention rollout (Abnar & Zuidema 2020; numbers: bertlook.analyses.rollout)
def fig_rollout(rollout_csv: str | os.PathLike, out_png: str | os.PathLike) -> Path:
    """Per-layer attention rollout from ``rollout_stats.csv``.

    Left: share of rollout to [CLS], [SEP], ". ," and other tokens per layer; right: rollout entropy
    per layer, dashed: the entropy of uniform attention (mean ln n, column ``uniform_entropy``).
    """
    df = read_figure_table(rollout_csv, int_cols=("layer",), float_cols=(*STAT_COLUMNS, "uniform_entropy"))
    dup = df.duplicated(subset=["layer"])
    if dup.any():
        i = int(dup.to_numpy().nonzero()[0][0])
        raise BertlookError(f"{rollout_csv}:{i + 2}: layer {df['layer'].iloc[i]} appears more than once")
    df = df.sort_values("layer")
    num_layers = int(df["layer"].max())
    pal = sns.color_palette("colorblind", 10)
    shares = (("cls", "[CLS]", pal[0], "o"), ("sep", "[SEP]", pal[4], "s"), ("punct", ". or ,", pal[1], "^"),
              ("other", "other tokens", (0.45, 0.45, 0.45), "D"))
    uniform = float(df["uniform_entropy"].iloc[0])
    with plot_style():
        fig = new_figure(figsize=(max(9.5, 4.8 * 2 * max(1.0, num_layers / 12) ** 0.5), 3.7))
        ax_s, ax_e = fig.subplots(1, 2)
        for col, label, color, marker in shares:
            ax_s.plot(df["layer"], df[col], color=color, marker=marker, ms=5, lw=1.8, label=label)
        ax_s.set_title("Avg. rollout to target")
        ax_s.set_ylabel("Rollout (fraction per token)")
        ax_s.set_ylim(-0.03, 1.03)
        ax_e.plot(df["layer"], df["entropy"], color=pal[2], marker="o", ms=5, lw=1.8)
        ax_e.axhline(uniform, color="0.25", ls="--", lw=1.3, zorder=1)
        ax_e.set_title("Avg. rollout entropy")
        ax_e.set_ylabel("Entropy (nats)")
        top = max(uniform, float(df["entropy"].max()) if df["entropy"].notna().any() else 0.0)
        from_zero(ax_e, top * 1.08 + 0.05)
        for ax in (ax_s, ax_e):
            ax.set_xlabel("Layer")
            layer_ticks(ax, num_layers)
        handles, labels = ax_s.get_legend_handles_labels()
        handles.append(Line2D([], [], color="0.25", ls="--", lw=1.3))
        labels.append(f"uniform: mean ln n = {uniform:.2f} nats")
        fig.legend(handles, labels, loc="outside lower center", ncol=5, frameon=False,
                   title="Rollout to (left); entropy reference (right)")
        return save_png(fig, out_png)


# ---- Single-head trees (Htut et al. 2019; numbers: bertlook.analyses.tree_heads)
def fig_tree_heads(per_head_csv: str | os.PathLike, best_csv: str | os.PathLike, out_png: str | os.PathLike) -> Path:
    """Trees decoded from single heads, from ``tree_heads.csv`` and ``tree_heads_best.csv``.

    Left: per layer, the best head's UAS (gold-root Chu-Liu-Edmonds, the better direction) and UUAS
    (undirected maximum spanning tree), dashed: the baselines (right-branching UAS, adjacent-chain
    UUAS). Middle and right: every head's UAS (the better direction) and UUAS, layer x head heatmaps.
    """
    df = read_figure_table(per_head_csv, int_cols=("layer", "head"),
                           float_cols=("uas_dep2head", "uas_head2dep", "uuas"))
    best = read_figure_table(best_csv, float_cols=("uas", "uuas"), str_cols=("row",)).set_index("row")
    for name in ("right_branching", "adjacent_chain"):
        if name not in best.index:
            raise BertlookError(f"{best_csv}: no {name!r} row (the baselines)")
    L, H = int(df["layer"].max()), int(df["head"].max())
    if len(df) != L * H:
        raise BertlookError(f"{per_head_csv}: {len(df)} rows, expected one per head of the {L} x {H} grid")
    li, hi = df["layer"].to_numpy() - 1, df["head"].to_numpy() - 1  # [layer*head] each
    uas = np.full((L, H), np.nan)  # [layer, head]
    uas[li, hi] = np.fmax(df["uas_dep2head"].to_numpy(), df["uas_head2dep"].to_numpy())
    uuas = np.full((L, H), np.nan)  # [layer, head]
    uuas[li, hi] = df["uuas"].to_numpy()
    layers = np.arange(1, L + 1)  # [layer]
    pal = sns.color_palette("colorblind", 10)
    rb_uas, chain_uuas = float(best.loc["right_branching", "uas"]), float(best.loc["adjacent_chain", "uuas"])
    annotate = L <= 16 and H <= 16
    cell = 0.42 if annotate else 0.2
    with plot_style():
        fig = new_figure(figsize=(4.6 + 2 * max(3.4, H * cell + 1.4), max(3.6, L * cell + 1.3)))
        ax, ax_u, ax_uu = fig.subplots(1, 3, width_ratios=[1.1, 1, 1])
        ax.plot(layers, np.nanmax(uas, axis=1), color=pal[0], marker="o", ms=5, lw=1.8, label="best head: UAS")
        ax.plot(layers, np.nanmax(uuas, axis=1), color=pal[1], marker="s", ms=5, lw=1.8, label="best head: UUAS")
        ax.axhline(rb_uas, color=pal[0], ls="--", lw=1.2, label="right-branching: UAS")
        ax.axhline(chain_uuas, color=pal[1], ls="--", lw=1.2, label="adjacent chain: UUAS")
        ax.set_xlabel("Layer")
        ax.set_ylabel("Fraction of scored words")
        ax.set_ylim(0.0, 1.0)
        ax.set_title("Best single-head tree per layer")
        layer_ticks(ax, L)
        ax.legend(fontsize=7, loc="upper right")
        for a, grid, title in ((ax_u, uas, "UAS (gold root; better direction)"), (ax_uu, uuas, "UUAS (undirected MST)")):
            a.grid(False)
            im = a.imshow(grid, cmap="viridis", vmin=0.0, vmax=max(0.05, float(np.nanmax(grid))), aspect="auto")
            fig.colorbar(im, ax=a, shrink=0.85)
            a.set_title(title, fontsize=9)
            a.set_xlabel("head")
            a.set_ylabel("layer")
            a.set_xticks(range(H), [str(h + 1) for h in range(H)], fontsize=7)
            a.set_yticks(range(L), [str(layer + 1) for layer in range(L)], fontsize=7)
            if annotate:
                mid = float(np.nanmax(grid)) / 2
                for y in range(L):
                    for x in range(H):
                        if not np.isnan(grid[y, x]):
                            a.text(x, y, f"{100 * grid[y, x]:.0f}", ha="center", va="center", fontsize=5.5,
                                   color="white" if grid[y, x] < mid else "black")
        return save_png(fig, out_png)


# --------------------------------------------------------------------------------------------------
# per-head report card
# --------------------------------------------------------------------------------------------------

#: (column of head_report.csv, panel title, colour map) of :func:`fig_head_report`, in panel order
HEAD_REPORT_PANELS = (
    ("importance", "importance (Michel et al. 2019)\nmean |dL/d gate|, l2-normalised per layer", "viridis"),
    ("confidence", "confidence (Voita et al. 2019)\nmean largest weight of a row", "viridis"),
    ("positional_fraction", "positional fraction\nrows whose argmax is at the usual offset", "viridis"),
    ("positional_offset", "positional offset\nmost frequent argmax_j - i (colours clipped at +-4)", "RdBu_r"),
    ("sink", "sink (Gu et al. 2025)\nmean attention to the first token ([CLS])", "viridis"),
    ("entropy", "entropy (nats)\nmean entropy of a row", "viridis"),
    ("best_accuracy", "best relation accuracy\n(relation printed in the cell)", "viridis"),
    ("coref_accuracy", "coreference accuracy\n(antecedent selection, all mentions)", "viridis"),
    ("prev_token", "previous-token score\nmean attention to i - 1 (repeated tokens)", "viridis"),
    ("duplicate_token", "duplicate-token score\nmean attention to the earlier occurrence", "viridis"),
    ("induction", "induction score (Olsson et al. 2022)\nattention to the token after it", "viridis"),
    ("alti_sink", "ALTI sink (Ferrando et al. 2022)\nper-head ALTI share of the first token", "viridis"),
    ("alti_sep", "ALTI [SEP] share\nper-head ALTI share of [SEP]", "viridis"),
    ("ablation_loss", "head ablation\nloss change when the head is removed", "RdBu_r"),
)


def fig_head_report(csv: str | os.PathLike, out_png: str | os.PathLike) -> Path:
    """The per-head report card (``head_report.csv``) as one layer x head heatmap per numeric column.

    Rows = layers, columns = heads (1-indexed); values printed in the cells when the model has at most
    16 x 16 heads (the best relation's name in the ``best_accuracy`` panel). A column without any value
    (optional input not run or not given) gets a panel saying so.
    """
    cols = [c for c, _, _ in HEAD_REPORT_PANELS]
    df = read_figure_table(csv, int_cols=("layer", "head"), float_cols=cols)
    relations = read_csv_strings(csv, required=("best_relation",))["best_relation"].str.strip()
    L, H = int(df["layer"].max()), int(df["head"].max())
    if len(df) != L * H:
        raise BertlookError(f"{csv}: {len(df)} rows, expected one per head of the {L} x {H} grid")
    li, hi = df["layer"].to_numpy() - 1, df["head"].to_numpy() - 1  # [layer*head] each
    annotate = L <= 16 and H <= 16
    ncols = 4
    nrows = math.ceil(len(HEAD_REPORT_PANELS) / ncols)
    cell = 0.42 if annotate else 0.2
    panel_w, panel_h = max(3.4, H * cell + 1.4), max(2.8, L * cell + 1.3)
    with plot_style():
        fig = new_figure(figsize=(panel_w * ncols, panel_h * nrows))
        axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
        for ax, (col, title, cmap) in zip(axes, HEAD_REPORT_PANELS):
            grid = np.full((L, H), np.nan)  # [layer, head]
            grid[li, hi] = df[col].to_numpy()
            if np.isnan(grid).all():
                message_panel(ax, title, "no values\n(input not run or not given;\nsee the summary JSON)")
                continue
            ax.grid(False)
            if col == "positional_offset":
                vmax = min(4.0, max(1.0, float(np.nanmax(np.abs(grid)))))  # colours clipped at +-4
                im = ax.imshow(grid, cmap=cmap, vmin=-vmax, vmax=vmax, aspect="auto")
            else:
                im = ax.imshow(grid, cmap=cmap, aspect="auto")
            fig.colorbar(im, ax=ax, shrink=0.85)
            ax.set_title(title, fontsize=9)
            ax.set_xlabel("head")
            ax.set_ylabel("layer")
            ax.set_xticks(range(H), [str(h + 1) for h in range(H)], fontsize=7)
            ax.set_yticks(range(L), [str(layer + 1) for layer in range(L)], fontsize=7)
            if annotate:
                rel = np.full((L, H), "", dtype=object)  # [layer, head]
                rel[li, hi] = relations.to_numpy()
                lo, hi_v = np.nanmin(grid), np.nanmax(grid)
                for y in range(L):
                    for x in range(H):
                        v = grid[y, x]
                        if np.isnan(v):
                            continue
                        text = f"{int(v):+d}" if col == "positional_offset" else f"{v:.2f}"
                        if col == "best_accuracy" and rel[y, x]:
                            text = f"{rel[y, x][:6]}\n{v:.2f}"
                        mid = (lo + hi_v) / 2 if col != "positional_offset" else 0.0
                        dark = v < mid if cmap == "viridis" else abs(v) > vmax / 2
                        ax.text(x, y, text, ha="center", va="center", fontsize=5.5,
                                color="white" if dark else "black")
        for ax in axes[len(HEAD_REPORT_PANELS):]:
            ax.set_axis_off()
        fig.suptitle(f"Per-head report card ({L} layers x {H} heads)", fontsize=11)
        return save_png(fig, out_png)


def fig_languages(best: "pd.DataFrame", agreement: "pd.DataFrame", out_png: str | os.PathLike) -> Path:
    """Cross-language summary (:mod:`bertlook.analyses.languages`): one heatmap per direction, relations
    (rows, in the order of ``best``) x treebanks (columns, in order of appearance).

    A cell shows the best head of the relation in that treebank and its accuracy (colour = accuracy,
    0..1, viridis); a grey "–" cell: fewer words than the minimum count. The last column, "shared",
    says whether every treebank with the relation has the same best head ("same"), how many distinct
    best heads they have ("k heads"), or nothing when only one treebank has the relation.
    """
    if best.empty:
        raise BertlookError(f"{out_png}: no best heads to draw (no relation reaches the minimum count)")
    relations = list(dict.fromkeys(str(r) for r in best["relation"]))
    labels = list(dict.fromkeys(str(t) for t in best["treebank"]))
    directions = [d for d in DIRECTIONS if (best["direction"] == d).any()]
    R, T = len(relations), len(labels)
    r_index = {r: k for k, r in enumerate(relations)}
    t_index = {t: k for k, t in enumerate(labels)}
    cell_w, cell_h = 0.95, 0.36
    with plot_style():
        fig = new_figure(figsize=(len(directions) * ((T + 1) * cell_w + 1.8) + 1.0, R * cell_h + 1.6))
        axes = fig.subplots(1, len(directions), squeeze=False).ravel()
        im = None
        for ax, direction in zip(axes, directions):
            grid = np.full((R, T), np.nan)  # [relation, treebank]: accuracy of the best head
            text = np.full((R, T), "\u2013", dtype=object)  # [relation, treebank]
            for row in best[best["direction"] == direction].itertuples(index=False):
                y, x = r_index[str(row.relation)], t_index[str(row.treebank)]
                grid[y, x] = float(row.accuracy)
                text[y, x] = f"{row.best_head}\n{100 * float(row.accuracy):.0f}%"
            ax.grid(False)
            ax.set_facecolor("#e6e6e6")
            im = ax.imshow(np.ma.masked_invalid(grid), cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto",
                           extent=(-0.5, T - 0.5, R - 0.5, -0.5))
            for y in range(R):
                for x in range(T):
                    v = grid[y, x]
                    ax.text(x, y, text[y, x], ha="center", va="center", fontsize=5.5,
                            color="black" if np.isnan(v) or v >= 0.5 else "white")
            shared = agreement[agreement["direction"] == direction]
            for row in shared.itertuples(index=False):
                y = r_index.get(str(row.relation))
                if y is None:
                    continue
                same = bool(row.same_best_head)
                ax.text(T, y, "same" if same else f"{int(row.n_distinct_best_heads)} heads", ha="center",
                        va="center", fontsize=6, fontweight="bold" if same else "normal",
                        color="#1a7f37" if same else "#9a3412")
            ax.set_xlim(-0.5, T + 0.5)
            ax.set_ylim(R - 0.5, -0.5)
            ax.axvspan(T - 0.5, T + 0.5, color="white", zorder=0)
            ax.axvline(T - 0.5, color="black", linewidth=0.8)
            ax.set_xticks(range(T + 1), [*labels, "shared"], fontsize=7, rotation=45, ha="right")
            ax.set_yticks(range(R), relations, fontsize=7)
            ax.set_title(f"best head per treebank, {DIRECTION_ARROWS.get(direction, direction)}", fontsize=9)
        if im is not None:
            fig.colorbar(im, ax=list(axes), shrink=0.8, label="accuracy of the best head")
        fig.suptitle(f"Cross-language summary: {T} treebanks, {R} relations", fontsize=10)
        return save_png(fig, out_png)
