"""PNG twins of the paper's Figs 1 and 5: one example's attention drawn as lines between a "from" column and a
"to" column of its tokens (written like every figure: :func:`bertlook.reporting.plotting.save_png`).

- :func:`fig1_example_heads` / :func:`draw_fig1` -- Fig 1: one example's attention for a few heads, the heads
  chosen from ``attention_stats.csv`` by :func:`choose_example_heads`; the example comes from an attention
  store or from the Fig 1 example files of a sharded run (:mod:`bertlook.attention.fig1_example`).
- :func:`fig5_syntax_heads` -- Fig 5: the best head of a few relations on one sentence each (its numbers:
  :func:`bertlook.analyses.syntax_heads.syntax_head_panels`).

The per-head summaries (Figs 2, 3, 4, 6) are :mod:`bertlook.reporting.figures`.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Iterable, NamedTuple, Sequence

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.collections import LineCollection

from bertlook.analyses.behaviours import NEXT_THRESHOLD, PUNCT_THRESHOLD, SEP_THRESHOLD
from bertlook.analyses.syntax_heads import syntax_head_panels
from bertlook.attention.fig1_example import FIG1_WINDOW, fig1_special, fig1_window
from bertlook.attention.store import open_store
from bertlook.errors import BertlookError
from bertlook.naming import head_label, parse_head_label
from bertlook.reporting.plotting import message_panel, new_figure, plot_style, save_png

#: (stats column, label) for the example heads of Fig 1, in the order they are chosen.
EXAMPLE_BEHAVIOURS = (
    ("entropy", "broadest attention"),
    ("next", "most attention to next token"),
    ("sep", "most attention to [SEP]"),
    ("punct", "most attention to . and ,"),
)
# The statistic behind each label is printed with it ("entropy 4.68 nats", "mean 0.66").
_EXAMPLE_UNITS = {"entropy": "entropy {:.2f} nats"}
#: What each attention-mass behaviour of Fig 1 is called in a panel that says it is absent.
_EXAMPLE_TARGETS = {"next": "the next token", "sep": "[SEP]", "punct": ". and ,"}


def example_thresholds() -> dict[str, float]:
    """Fig 1: a behaviour is shown only when its best head's mean share EXCEEDS this (strict ``>``):
    the thresholds of Fig 6's behaviour labels (the authors' released ones, ``analyses.behaviours``),
    so that Fig 1 draws a "[SEP] head" exactly when some head is [SEP]-heavy enough for that label.
    The broadest head (entropy) has no threshold: some head is always the broadest."""
    return {"next": NEXT_THRESHOLD, "sep": SEP_THRESHOLD, "punct": PUNCT_THRESHOLD}


class ExampleHead(NamedTuple):
    """One panel of Fig 1: the behaviour's best head, its title line, and whether it is drawn
    (``shown``; False: the behaviour is absent from the model and the panel says so instead)."""

    layer: int
    head: int
    label: str
    shown: bool = True


_MIN_WEIGHT = 0.01  # Figs 1 and 5: attention weights below this are not drawn


# --------------------------------------------------------------------------------------------------
# head labels
# --------------------------------------------------------------------------------------------------


def choose_example_heads(stats_df) -> list[ExampleHead]:
    """One characteristic head per behaviour, as in the paper's Fig 1: ``[(layer, head, label, shown)]``.

    In order: highest ``entropy``, highest ``next``, highest ``sep``, highest ``punct``; each label
    carries the head's value, e.g. "most attention to next token (mean 0.66)". Each head is used
    once: a behaviour whose best head was already taken gets its best remaining head. Ties go to the
    lowest layer, then head. Fewer than four entries only if the table has fewer heads.

    A behaviour that no head shows (its best remaining head's mean share is not above
    :func:`example_thresholds`, e.g. MiniLM's best [SEP] head at 0.07) gets ``shown=False`` and a
    label that says so, "no head attends mostly to [SEP] (best: 1-6, mean 0.07; a [SEP] head: > 0.60)";
    its head is not taken, so a later behaviour may still use it.
    """
    needed = ["layer", "head", *(c for c, _ in EXAMPLE_BEHAVIOURS)]
    missing = [c for c in needed if c not in stats_df.columns]
    if missing:
        raise BertlookError(f"attention stats: missing column(s) {', '.join(missing)}")
    df = stats_df[needed].copy()
    df["layer"] = df["layer"].astype(int)
    df["head"] = df["head"].astype(int)
    df = df.sort_values(["layer", "head"], kind="mergesort").reset_index(drop=True)
    thresholds = example_thresholds()
    chosen: list[ExampleHead] = []
    taken: set[tuple[int, int]] = set()
    for col, label in EXAMPLE_BEHAVIOURS:
        vals = pd.to_numeric(df[col], errors="coerce")
        order = vals.dropna().sort_values(ascending=False, kind="mergesort").index
        for idx in order:
            key = (int(df.at[idx, "layer"]), int(df.at[idx, "head"]))
            if key not in taken:
                value = float(vals[idx])
                text = _EXAMPLE_UNITS.get(col, "mean {:.2f}").format(value)
                if col in thresholds and not value > thresholds[col]:
                    chosen.append(ExampleHead(*key, f"no head attends mostly to {_EXAMPLE_TARGETS[col]} "
                                                    f"(best: {key[0]}-{key[1]}, {text}; needs > "
                                                    f"{thresholds[col]:.2f})", False))
                    break
                taken.add(key)
                chosen.append(ExampleHead(*key, f"{label} ({text})"))
                break
    return chosen


# --------------------------------------------------------------------------------------------------
# Fig 1
# --------------------------------------------------------------------------------------------------


def _short_token(tok: str, max_chars: int = 14) -> str:
    tok = str(tok)
    return tok if len(tok) <= max_chars else tok[: max_chars - 1] + "\u2026"


def _attention_lines(ax, a, ys, color) -> None:
    """One head's map ``a [n, n]`` (float32) as lines from the "from" column (x = 0) to the "to" column
    (x = 1) at the token rows ``ys``: opacity and width by weight, weights below 0.01 not drawn,
    strongest lines on top (Figs 1 and 5)."""
    i_idx, j_idx = np.nonzero(a >= _MIN_WEIGHT)
    w = np.clip(a[i_idx, j_idx], 0.0, 1.0)
    order = np.argsort(w, kind="stable")  # strongest lines on top
    i_idx, j_idx, w = i_idx[order], j_idx[order], w[order]
    segs = np.stack([np.stack([np.zeros_like(w), ys[i_idx]], 1), np.stack([np.ones_like(w), ys[j_idx]], 1)], 1)
    rgba = np.tile(np.array([*color, 1.0]), (len(w), 1))
    rgba[:, 3] = w
    ax.add_collection(LineCollection(segs, colors=rgba, linewidths=0.4 + 2.2 * w, capstyle="round"))


def fig1_example_heads(
    store_path: str | os.PathLike,
    heads: Sequence[tuple[int, int]],
    out_png: str | os.PathLike,
    *,
    example_index: int = 0,
    labels: Sequence[str | None] | None = None,
    shown: Sequence[bool] | None = None,
) -> Path:
    """Twin of the paper's Fig 1: one example's attention for each head in ``heads`` (1-indexed).

    Each panel lists the example's tokens twice (left = attention FROM, right = attention TO) and
    draws a line from token i to token j with opacity and width proportional to ``a_ij``; weights
    below 0.01 are not drawn. Panel titles read "Head L-H" plus ``labels[k]`` when given. A panel
    whose ``shown[k]`` is False draws no head: it states ``labels[k]`` (a behaviour absent from the model).
    """
    heads = [(int(l), int(h)) for l, h in heads]
    if not heads:
        raise BertlookError("fig1_example_heads: no heads given")
    if labels is not None and len(labels) != len(heads):
        raise BertlookError(f"fig1_example_heads: {len(labels)} labels for {len(heads)} heads")
    store = open_store(store_path)
    for layer, head in heads:
        parse_head_label(f"{layer}-{head}", store.num_layers, store.num_heads)
    if len(store) == 0:
        raise BertlookError(f"{store_path}: the attention store holds no examples")
    if not 0 <= int(example_index) < len(store):
        raise BertlookError(
            f"{store_path}: example index {example_index} out of range (the store holds {len(store)} examples)"
        )
    rec = store.records[int(example_index)]
    return draw_fig1(rec["tokens"], store.get(int(example_index)), heads, out_png, labels=labels, shown=shown,
                     special_tokens=(store.meta.get("special_tokens") or {}).values())


def draw_fig1(
    record_tokens: Sequence[str],
    attn,
    heads: Sequence[tuple[int, int]],
    out_png: str | os.PathLike,
    *,
    labels: Sequence[str | None] | None = None,
    shown: Sequence[bool] | None = None,
    special_tokens: Iterable[str] = (),
    window: int | None = FIG1_WINDOW,
) -> Path:
    """Draw Fig 1 for one example: its tokens and its map ``attn[L, H, n, n]`` (see :func:`fig1_example_heads`);
    ``window``: the tokens of :func:`fig1_window` only (None: every token), a gap marked after [CLS]."""
    heads = [(int(l), int(h)) for l, h in heads]
    if labels is not None and len(labels) != len(heads):
        raise BertlookError(f"fig1_example_heads: {len(labels)} labels for {len(heads)} heads")
    shown = [True] * len(heads) if shown is None else [bool(v) for v in shown]
    if len(shown) != len(heads):
        raise BertlookError(f"fig1_example_heads: {len(shown)} shown flags for {len(heads)} heads")
    if not all(shown) and (labels is None or not all(lab for lab, ok in zip(labels, shown) if not ok)):
        raise BertlookError("fig1_example_heads: a panel that draws no head needs a label saying why")
    special = fig1_special(special_tokens)
    keep = fig1_window(record_tokens, special, window) if window else list(range(len(record_tokens)))
    gap = len(keep) > 1 and keep[1] != 1  # positions 1 .. keep[1] - 1 are not drawn
    attn = np.asarray(attn)[:, :, keep][:, :, :, keep]  # [layer, head, window, window]
    is_special = [str(record_tokens[i]) in special for i in keep]
    tokens = [_short_token(record_tokens[i]) for i in keep]
    n = len(tokens)

    fontsize = 9.0 if n <= 32 else 7.5 if n <= 64 else 6.0
    row_in = fontsize * 1.45 / 72.0  # inches per token row
    ncols = min(len(heads), 4)
    nrows = math.ceil(len(heads) / ncols)
    panel_w, panel_h = 2.9 + 0.012 * n, max(2.0, (n + 1.5) * row_in + 0.3)
    colors = sns.color_palette("colorblind", len(heads))

    with plot_style():
        fig = new_figure(figsize=(panel_w * ncols, panel_h * nrows + 0.5 * nrows))
        axes = fig.subplots(nrows, ncols, squeeze=False)
        ys = -np.arange(n, dtype=float)
        for k, ax in enumerate(axes.flat):
            ax.set_axis_off()
            if k >= len(heads):
                continue
            layer, head = heads[k]
            if not shown[k]:  # the behaviour is absent from the model: say so, draw no head
                title, sep, why = str(labels[k]).partition(" (")
                ax.set_title(f"{title}\n{sep.strip()}{why}" if why else title, fontsize=11)
                ax.text(0.5, 0.97, "not drawn: no head of this model\nshows this behaviour", ha="center",
                        va="top", fontsize=10, color="0.3", transform=ax.transAxes)
                continue
            _attention_lines(ax, np.asarray(attn[layer - 1, head - 1], dtype=np.float32), ys, colors[k])
            for y, tok, spec in zip(ys, tokens, is_special):
                weight = "bold" if spec else "normal"
                ax.text(-0.04, y, tok, ha="right", va="center", fontsize=fontsize, fontweight=weight, parse_math=False)
                ax.text(1.04, y, tok, ha="left", va="center", fontsize=fontsize, fontweight=weight, parse_math=False)
            ax.text(-0.04, 1.1, "from", ha="right", va="center", fontsize=fontsize * 0.9, style="italic",
                    color="0.4")
            ax.text(1.04, 1.1, "to", ha="left", va="center", fontsize=fontsize * 0.9, style="italic", color="0.4")
            if gap:  # the tokens between [CLS] and the window are not drawn
                ax.text(0.5, -0.5, f"(tokens 2-{keep[1]} not drawn)", ha="center", va="center",
                        fontsize=fontsize * 0.8, color="0.45", style="italic")
            ax.set_xlim(-0.55, 1.55)
            ax.set_ylim(-n + 0.5, 1.6)
            title = f"Head {layer}-{head}"
            label = labels[k] if labels is not None else None
            if label:
                title += f"\n{label}"
            ax.set_title(title, fontsize=11)
        return save_png(fig, out_png)


# --------------------------------------------------------------------------------------------------
# Fig 5 (best syntax head per relation; numbers: bertlook.analyses.syntax_heads)
# --------------------------------------------------------------------------------------------------

def fig5_relations(forced: Sequence[str]) -> tuple[str, ...]:
    """Fig 5 panel order det, dobj-like, pobj-like from a scheme's forced rows."""
    obj, det, pobj = forced
    return (det, obj, pobj)


def fig5_syntax_heads(
    dev_store_path: str | os.PathLike,
    table1_df: "pd.DataFrame",
    out_png: str | os.PathLike,
    *,
    relations: Sequence[str] = ("det", "dobj", "pobj"),
    example_index: int | None = None,
) -> Path:
    """Twin of the paper's Fig 5: the best head of each relation on one sentence containing it.

    One panel per relation: the head (``best_head``/``direction`` of its Table 1 row) drawn like Fig 1
    (words listed twice, left = attention FROM, right = TO, line opacity/width = weight, weights below
    0.01 not drawn), with the relation's gold arcs in red, drawn the way the head should attend
    (dep2head: dependent -> head; head2dep: head -> dependent). The sentence is the first one holding
    the relation, or ``example_index`` for every panel. A relation without a Table 1 row or without a
    sentence gets a panel that says so. The panels' numbers (maps, arcs, correct arcs) come from
    :func:`bertlook.analyses.syntax_heads.syntax_head_panels`.
    """
    panels = syntax_head_panels(dev_store_path, table1_df, relations, example_index=example_index)
    max_n = max((p.n_tokens for p in panels if p.attn is not None), default=8)
    fontsize = 9.0 if max_n <= 32 else 7.5 if max_n <= 64 else 6.0
    row_in = fontsize * 1.45 / 72.0
    panel_w, panel_h = 3.2 + 0.012 * max_n, max(2.4, (max_n + 1.5) * row_in + 0.6)
    colors = sns.color_palette("colorblind", len(panels))
    gold_color = sns.color_palette("deep")[3]

    with plot_style():
        fig = new_figure(figsize=(panel_w * len(panels), panel_h))
        axes = fig.subplots(1, len(panels), squeeze=False)[0]
        for ax, p, color in zip(axes, panels, colors):
            if p.attn is None:
                message_panel(ax, f"{p.relation}", p.message)
                continue
            _draw_fig5_panel(ax, p, color, gold_color, fontsize=fontsize, max_n=max_n)
        fig.suptitle("Best head per relation; red dashed = gold arc in the head's direction", fontsize=10)
        return save_png(fig, out_png)


def _draw_fig5_panel(ax, p, color, gold_color, *, fontsize: float, max_n: int) -> None:
    """One drawn panel of Fig 5: a :class:`bertlook.analyses.syntax_heads.SyntaxHeadPanel`'s map and gold arcs."""
    ax.set_axis_off()
    tokens = [_short_token(t) for t in p.tokens]
    n = len(tokens)
    ys = -np.arange(n, dtype=float)
    _attention_lines(ax, p.attn, ys, color)
    gold_segs = [[(0.0, ys[src_row]), (1.0, ys[dst_row])] for src_row, dst_row in p.arcs]
    left_hi = {src_row for src_row, _ in p.arcs}
    right_hi = {dst_row for _, dst_row in p.arcs}
    ax.add_collection(LineCollection(gold_segs, colors=[(*gold_color, 0.9)], linewidths=1.6,
                                     linestyles="--", zorder=3))
    for t, (y, tok) in enumerate(zip(ys, tokens)):
        special = t in (0, n - 1)
        for x, ha, hi in ((-0.04, "right", left_hi), (1.04, "left", right_hi)):
            ax.text(x, y, tok, ha=ha, va="center", fontsize=fontsize, parse_math=False,
                    fontweight="bold" if special or t in hi else "normal",
                    color=gold_color if t in hi else "black")
    ax.text(-0.04, 1.1, "from", ha="right", va="center", fontsize=fontsize * 0.9, style="italic", color="0.4")
    ax.text(1.04, 1.1, "to", ha="left", va="center", fontsize=fontsize * 0.9, style="italic", color="0.4")
    ax.set_xlim(-0.6, 1.6)
    ax.set_ylim(-max_n + 0.5, 1.6)
    arrow = "dependent \u2192 head" if p.direction == 0 else "head \u2192 dependent"
    ax.set_title(
        f"{p.relation}: head {head_label(p.layer, p.head)} ({arrow})\n"
        f"sentence {p.sentence_id}: {p.n_correct}/{len(p.arcs)} {p.relation} arcs right",
        fontsize=10,
    )