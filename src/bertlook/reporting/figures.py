"""PNG twins of the paper's figures (Clark et al. 2019, Figs 1-6).

Every function reads the tables written by earlier steps, draws with matplotlib/seaborn on the
non-interactive Agg backend and writes one PNG atomically (:func:`bertlook.reporting.plotting.save_png`:
a temporary ``.NAME.*.tmp.png`` beside the target, renamed into place), so an interrupted run never
leaves a half-written figure. Figures beyond the paper are :mod:`bertlook.reporting.extra_figures`.

Inputs
------
- ``attention_stats.csv`` (``surface_stats``): one row per head, ``layer,head`` (1-indexed) and
  ``cls,sep,punct,self,prev,next,sep_sep,rest_sep`` (mean attention mass per from-token, 0..1),
  ``entropy,cls_entropy`` (nats).
- stats summary JSON: ``{"n_examples", "uniform_entropy" (mean ln n, nats), "mean_tokens"}``.
- ``head_clusters.csv`` (``clustering``): ``layer,head,x,y,behavior``.
- an attention store directory (``attention_store``) for the example heads of Fig 1, or the Fig 1
  example files of a sharded run (:func:`fig1_example_partial`, :func:`load_fig1_example`).
- ``sep_gradients.csv`` (``gradients``) for Fig 3; Table 1 and a word-level store for Fig 5 (its numbers:
  :func:`bertlook.analyses.syntax_heads.syntax_head_panels`).

Figures
-------
- :func:`fig1_example_heads` -- Fig 1: one example's attention for a few heads, drawn as lines between
  a "from" column and a "to" column of tokens.
- :func:`fig2_special_tokens` -- Fig 2: per-head attention to [CLS], [SEP] and ". ," by layer.
- :func:`fig3_sep_gradients` -- Fig 3: attention to and gradient importance of [SEP], ". ," and other tokens.
- :func:`fig4_entropy` -- Fig 4: per-head attention entropy and [CLS] entropy by layer.
- :func:`fig5_syntax_heads` -- Fig 5: the best head of a few relations on one sentence each.
- :func:`fig6_head_clusters` -- Fig 6: the 2-D MDS embedding of the heads, by layer and by behaviour.

Heavy imports (matplotlib, seaborn, pandas) happen inside the functions.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, NamedTuple, Sequence

from bertlook.errors import BertlookError
from bertlook.naming import head_label, parse_head_label
from bertlook.reporting.plotting import (
    from_zero, layer_ticks, message_panel, new_figure, plot_style, read_figure_table, read_stats_columns, save_png,
)

if TYPE_CHECKING:
    import pandas as pd


#: Behaviour labels of ``head_clusters.csv`` in legend order ("other" last, drawn underneath).
BEHAVIOURS = ("next token", "previous token", "broad", "[CLS]", "[SEP]", "punctuation", "other")

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
    from bertlook.analyses.behaviours import NEXT_THRESHOLD, PUNCT_THRESHOLD, SEP_THRESHOLD

    return {"next": NEXT_THRESHOLD, "sep": SEP_THRESHOLD, "punct": PUNCT_THRESHOLD}


class ExampleHead(NamedTuple):
    """One panel of Fig 1: the behaviour's best head, its title line, and whether it is drawn
    (``shown``; False: the behaviour is absent from the model and the panel says so instead)."""

    layer: int
    head: int
    label: str
    shown: bool = True


FIGURE_FILES = {
    "fig1": "fig1_example_heads.png",
    "fig2": "fig2_special_tokens.png",
    "fig4": "fig4_entropy.png",
    "fig6": "fig6_head_clusters.png",
}

_MIN_WEIGHT = 0.01  # Figs 1 and 5: attention weights below this are not drawn


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
    import numpy as np

    return np.random.default_rng(seed).uniform(-width, width, size=n)


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
    import pandas as pd

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
    import numpy as np
    from matplotlib.collections import LineCollection

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
    from bertlook.attention.store import open_store

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


FIG1_WINDOW = 30  # tokens drawn per panel: a 128-token segment's lines are too dense to read


def fig1_special(special_tokens: Iterable[Any]) -> set[str]:
    """The tokens Fig 1 (and its windows) treat as special: [CLS], [SEP] and the model's own ``special_tokens``
    (values of a store's ``meta["special_tokens"]``; None skipped: a decoder has no [CLS])."""
    return {"[CLS]", "[SEP]", *(str(v) for v in special_tokens if v is not None)}


def fig1_window(tokens: Sequence[str], special: set[str], size: int = FIG1_WINDOW) -> list[int]:
    """The token positions Fig 1 draws: all of a short example; of a longer one, its first token ([CLS]) and the
    ``size - 1`` tokens up to and including the first separator ([SEP]; without one, the tokens after the first),
    so that attention to [CLS], to [SEP], to the previous and the next token all show."""
    n = len(tokens)
    if n <= size:
        return list(range(n))
    sep = next((i for i, t in enumerate(tokens) if i > 0 and str(t) in special), None)
    end = max(size - 1, sep if sep is not None else size - 1)
    return [0, *range(end - (size - 2), end + 1)]


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
    import numpy as np
    import seaborn as sns

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


# The Fig 1 example of a sharded run: `figures.example_index` counts in the order of the unsharded
# store (length-sorted, longest first, ties by id, over-long segments excluded), which every shard can
# work out from the segments file; the shard holding the example saves its map (bertlook fig1-example).
FIG1_KIND = "fig1-example"


def example_id_from_segments(segments_path, example_index: int, max_seq_len: int | None) -> tuple[Any, int]:
    """``(id, n)``: the id of the ``example_index``-th example of an unsharded store of these segments
    (storage order: longest first, ties by id; segments over ``max_seq_len`` excluded) and ``n``, the
    number of examples such a store holds. Out of range is an error."""
    from bertlook.data.segments import read_segments
    from bertlook.attention.store import id_sort_key

    kept = [s for s in read_segments(segments_path) if max_seq_len is None or len(s["tokens"]) <= int(max_seq_len)]
    kept.sort(key=lambda s: (-len(s["tokens"]), id_sort_key(s["id"])))
    if not 0 <= int(example_index) < len(kept):
        raise BertlookError(
            f"{segments_path}: example index {example_index} out of range (the store holds {len(kept)} examples)"
        )
    return kept[int(example_index)]["id"], len(kept)


def fig1_example_partial(store_path, segments_path, example_index: int = 0):
    """``(meta, arrays)``: the Fig 1 example if the (shard) store holds it, else ``found: false``."""
    from bertlook.attention.store import open_store

    store = open_store(store_path, level="token")
    target, n_total = example_id_from_segments(segments_path, example_index, store.meta.get("max_seq_len"))
    k = next((k for k, rec in enumerate(store.records) if rec["id"] == target), None)
    return fig1_partial(where=store_path, example_index=example_index, target=target, n_total=n_total,
                        num_layers=store.num_layers, num_heads=store.num_heads,
                        special_tokens=store.meta.get("special_tokens") or {},
                        record=None if k is None else store.records[k], attn=None if k is None else store.get(k))


def fig1_partial(*, where, example_index: int, target, n_total: int, num_layers: int, num_heads: int,
                 special_tokens: dict, record: dict | None = None, attn=None):
    """``(meta, arrays)`` of a Fig 1 example file: ``record`` / ``attn`` ``[layer, head, n, n]`` of the example
    when this shard (or the extraction stream) holds it, else None (``found: false``)."""
    import numpy as np

    meta = {"attention": str(where), "example_index": int(example_index), "id": target,
            "n_examples_total": int(n_total), "num_layers": int(num_layers), "num_heads": int(num_heads),
            "special_tokens": dict(special_tokens), "found": record is not None}
    if record is None:
        return meta, {"attn": np.zeros((0,), dtype=np.float16)}
    meta["tokens"] = list(record["tokens"])
    return meta, {"attn": np.asarray(attn, dtype=np.float16)}


def load_fig1_example(paths: Sequence[Any]):
    """``(meta, attn)`` of the one file (of the shards' ``fig1-example`` files) that holds the example."""
    from bertlook.pipeline.sharding import load_partial

    found = []
    for path in paths:
        meta, arrays = load_partial(path, FIG1_KIND)
        if meta.get("found"):
            found.append((path, meta, arrays["attn"]))
    if len(found) != 1:
        listed = ", ".join(str(p) for p in paths)
        raise BertlookError(f"{listed}: {len(found)} of the Fig 1 example files hold the example (expected one; "
                            "give every shard's file of the same run)")
    path, meta, attn = found[0]
    L, H, n = meta["num_layers"], meta["num_heads"], len(meta["tokens"])
    if tuple(attn.shape) != (L, H, n, n):
        raise BertlookError(f"{path}: example map of shape {list(attn.shape)}, expected {[L, H, n, n]}")
    return meta, attn


# --------------------------------------------------------------------------------------------------
# Fig 2
# --------------------------------------------------------------------------------------------------


def _layer_strip(ax, df, col: str, color, *, seed: int = 0, point_label: str = "head",
                 mean_label: str = "layer mean") -> None:
    """Per-head points (deterministic jitter) at x = layer, plus the per-layer mean as a line."""
    import seaborn as sns

    d = df[["layer", col]].dropna()
    ax.scatter(d["layer"] + _jitter(len(d), seed=seed), d[col], s=16, color=color, alpha=0.6,
               edgecolors="none", label=point_label, zorder=2)
    means = d.groupby("layer")[col].mean()
    dark = sns.dark_palette(color, 4)[1]
    ax.plot(means.index, means.to_numpy(), color=dark, lw=1.8, marker="o", ms=4, label=mean_label, zorder=3)


def _strip_legend_handles() -> list:
    """Colour-neutral legend entries for :func:`_layer_strip` panels."""
    from matplotlib.lines import Line2D

    return [
        Line2D([], [], ls="", marker="o", ms=5, color="0.55", alpha=0.7, label="one head"),
        Line2D([], [], color="0.2", lw=1.8, marker="o", ms=4, label="layer mean"),
    ]


def fig2_special_tokens(stats_csv: str | os.PathLike, out_png: str | os.PathLike) -> Path:
    """Twin of the paper's Fig 2: average attention to [CLS], [SEP] and ". ," per head, by layer."""
    import seaborn as sns

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
    import numpy as np
    import seaborn as sns
    from matplotlib.lines import Line2D

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
    import numpy as np
    import seaborn as sns
    from matplotlib.colors import BoundaryNorm, ListedColormap
    from matplotlib.lines import Line2D

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
    import seaborn as sns

    pal = sns.color_palette("colorblind", 10)
    return {"[SEP]": pal[4], "first token": pal[4], ". ,": pal[1], "other": (0.45, 0.45, 0.45)}


def _read_gradient_table(path):
    """``(frame, note)``: the typed table, or ``(None, note)`` for a not-run table."""
    import pandas as pd

    from bertlook.analyses.gradients import COLUMNS, DECODER_TARGETS, TARGETS

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
    import textwrap

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
    from bertlook.analyses.gradients import DECODER_TARGETS, TARGETS

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
    import seaborn as sns

    from bertlook.analyses.syntax_heads import syntax_head_panels

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
    import numpy as np
    from matplotlib.collections import LineCollection

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
