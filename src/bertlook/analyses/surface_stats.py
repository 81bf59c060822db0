"""Per-head surface statistics of token-level attention maps (paper Figs 2 and 4; ``bertlook surface-stats``).

:func:`example_stats` (with :func:`row_entropy`) gives one example's columns :data:`STAT_COLUMNS`
(attention to [CLS], [SEP], ". ,", self, prev, next; ``sep_sep``, ``rest_sep``, ``entropy``,
``cls_entropy``, ``max_attention``); :func:`compute_surface_stats` averages them over examples.
:func:`argmax_offset_counts` counts each head's argmax offsets ``argmax_j a[i, j] - i`` and
:func:`positional_offsets` takes their mode (columns :data:`POSITIONAL_COLUMNS`, appended last).
Sharded runs: :func:`surface_stats_partial` writes sums and counts (``surface-stats --out-partial``),
:func:`reduce_surface_stats` adds them and divides once (``surface-stats --partial``).

Definitions: docs/definitions.md#surface-statistics (sharding: docs/definitions.md#sharded-reductions)
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from bertlook.attention.store import AttentionStore
from bertlook.errors import BertlookError
from bertlook.pipeline.sharding import same_value, select_examples

STAT_COLUMNS = [
    "cls", "sep", "punct", "self", "prev", "next",
    "sep_sep", "rest_sep", "entropy", "cls_entropy", "max_attention",
]
#: the most frequent argmax offset of a head and the fraction of rows at it (after STAT_COLUMNS)
POSITIONAL_COLUMNS = ["positional_offset", "positional_fraction"]
COLUMNS = ["layer", "head", *STAT_COLUMNS, *POSITIONAL_COLUMNS]
PUNCT_TOKENS = (".", ",")
DEFAULT_SPECIAL_TOKENS = {"cls": "[CLS]", "sep": "[SEP]"}
ENTROPY_SMOOTHING = 1e-4  # a~ = (1 - s) * a + s / n


def special_tokens(store: "AttentionStore") -> tuple[str, str]:
    """The (CLS, SEP) token strings of a store (``meta["special_tokens"]``, default [CLS]/[SEP])."""
    spec = dict(DEFAULT_SPECIAL_TOKENS)
    spec.update(store.meta.get("special_tokens") or {})
    return str(spec["cls"]), str(spec["sep"])


def row_entropy(attn: "np.ndarray", smoothing: float = ENTROPY_SMOOTHING) -> "np.ndarray":
    """Entropy (nats) of each smoothed row of ``attn[..., n, n]`` -> ``[..., n]`` (float64)."""
    a = np.asarray(attn, dtype=np.float64)
    n = a.shape[-1]
    p = (1.0 - smoothing) * a + smoothing / n  # [..., query_pos, key_pos]
    return -(p * np.log(p)).sum(axis=-1)  # [..., query_pos]


def example_stats(
    attn: "np.ndarray", tokens: list[str], *, cls_token: str = "[CLS]", sep_token: str = "[SEP]"
) -> dict[str, "np.ndarray"]:
    """Statistics of one example, each a ``[layers, heads]`` float64 array (NaN where undefined)."""
    a = np.asarray(attn, dtype=np.float64)
    L, H, n, _ = a.shape
    toks = np.asarray(tokens, dtype=object)  # [key_pos]
    is_cls = toks == cls_token
    is_sep = toks == sep_token
    is_punct = np.isin(toks, PUNCT_TOKENS)
    nan = np.full((L, H), np.nan)  # [layer, head]

    col_sep = a[..., is_sep].sum(axis=-1)  # [layer, head, query_pos]: attention of each row to [SEP] columns
    n_sep = int(is_sep.sum())
    out = {
        "cls": a[..., is_cls].sum(axis=(-1, -2)) / n,
        "sep": col_sep.sum(axis=-1) / n,
        "punct": a[..., is_punct].sum(axis=(-1, -2)) / n,
        "self": np.diagonal(a, offset=0, axis1=2, axis2=3).sum(axis=-1) / n,
        "next": np.diagonal(a, offset=1, axis1=2, axis2=3).sum(axis=-1) / n,
        "prev": np.diagonal(a, offset=-1, axis1=2, axis2=3).sum(axis=-1) / n,
        "sep_sep": col_sep[..., is_sep].sum(axis=-1) / n_sep if n_sep > 0 else nan,
        "rest_sep": col_sep[..., ~is_sep].sum(axis=-1) / (n - n_sep) if n_sep < n else nan,
    }
    ent = row_entropy(a)  # [layer, head, query_pos]
    out["entropy"] = ent.mean(axis=-1)
    cls_pos = np.flatnonzero(is_cls)
    out["cls_entropy"] = ent[..., cls_pos[0]] if cls_pos.size else nan
    out["max_attention"] = a.max(axis=-1).mean(axis=-1)  # [layer, head]
    return out


PARTIAL_KIND = "surface-stats"
#: version of the surface-stats partial layout: 2 added ``offset_counts`` (positional columns)
PARTIAL_VERSION = 2


def argmax_offset_counts(attn: "np.ndarray") -> "np.ndarray":
    """Per head, how many rows i have ``argmax_j a[i, j] - i == k``, for k = -(n-1) .. n-1.

    ``attn[layer, head, n, n]`` -> int64 ``[layer, head, 2*n-1]``, index ``k + n - 1``; ties in a row
    go to the lowest column (``np.argmax``).
    """
    a = np.asarray(attn)
    L, H, n, _ = a.shape
    width = 2 * n - 1
    offsets = a.argmax(axis=-1) - np.arange(n)  # [layer, head, query_pos]: key_pos - query_pos
    flat = (np.arange(L * H).reshape(L, H, 1) * width + offsets + (n - 1)).ravel()  # [layer*head*query_pos]
    return np.bincount(flat, minlength=L * H * width).reshape(L, H, width).astype(np.int64)  # [layer, head, 2*n-1]


def add_centered(total: "np.ndarray", part: "np.ndarray") -> "np.ndarray":
    """``total + part`` for offset histograms ``[..., 2*m-1]`` of different widths, aligned on offset 0."""
    wt, wp = total.shape[-1], part.shape[-1]
    if wt < wp:
        total, part = part, total
        wt, wp = wp, wt
    out = total.copy()  # [..., 2*max_n-1]
    lo = (wt - wp) // 2
    out[..., lo:lo + wp] += part
    return out


def positional_offsets(counts: "np.ndarray") -> tuple["np.ndarray", "np.ndarray"]:
    """Mode of each head's argmax offsets: ``(offset [layer, head] int64, fraction [layer, head])``.

    ``counts[layer, head, 2*m-1]`` (index ``k + m - 1``, :func:`argmax_offset_counts`). Ties: the
    smallest ``|k|``, then the smaller k. Fraction = rows at the mode / all rows (NaN without rows).
    """
    c = np.asarray(counts, dtype=np.int64)  # [layer, head, 2*m-1]
    m = (c.shape[-1] + 1) // 2
    k = np.arange(-(m - 1), m)  # [2*m-1]
    order = 2 * np.abs(k) + (k > 0)  # [2*m-1]: 0, -1, +1, -2, +2, ...
    best = c.max(axis=-1, keepdims=True)  # [layer, head, 1]
    key = np.where(c == best, order, np.iinfo(np.int64).max)  # [layer, head, 2*m-1]
    idx = key.argmin(axis=-1)  # [layer, head]
    rows = c.sum(axis=-1)  # [layer, head]
    with np.errstate(invalid="ignore", divide="ignore"):
        fraction = np.where(rows > 0, best[..., 0] / np.where(rows > 0, rows, 1), np.nan)  # [layer, head]
    return k[idx].astype(np.int64), fraction.astype(np.float64)


def surface_stats_partial(
    store: "AttentionStore", *, max_examples: int | None = None, segments=None
) -> tuple[dict[str, Any], dict[str, "np.ndarray"]]:
    """Sums and counts of the statistics over the selected examples of one store: ``(meta, arrays)``.

    Selection (:func:`bertlook.pipeline.sharding.select_examples`): all examples, or with ``max_examples`` the
    first N segments of the ``segments`` file (without it: the first N of the store). ``arrays``:
    ``sums`` ``[columns, layers, heads]`` (float64, in :data:`STAT_COLUMNS` order), ``sum_log_n``,
    ``offset_counts`` ``[layers, heads, 2*max_n-1]`` (int64, :func:`argmax_offset_counts` summed,
    aligned on offset 0; ``max_n`` = the longest example, 1 without examples);
    ``meta``: ``partial_version`` (:data:`PARTIAL_VERSION`), layout, special tokens, ``n_examples``,
    ``counts`` per column, ``sum_n``, ``n_examples_in_store``. Reduce with :func:`reduce_surface_stats`.
    """
    if max_examples is not None and max_examples < 0:
        raise BertlookError(f"max_examples must be >= 0, got {max_examples}")
    cls_token, sep_token = special_tokens(store)
    L, H = store.num_layers, store.num_heads
    sums = {c: np.zeros((L, H)) for c in STAT_COLUMNS}  # stat -> [layer, head]
    counts = {c: 0 for c in STAT_COLUMNS}
    offset_counts = np.zeros((L, H, 1), dtype=np.int64)  # [layer, head, 2*max_n-1]
    n_examples = 0
    sum_log_n = 0.0
    sum_n = 0
    for k in select_examples(store, max_examples, segments):
        rec, attn = store.records[k], store.get(k)
        n = int(attn.shape[-1])
        ex_id = rec.get("id", n_examples)
        if n < 1:
            raise BertlookError(f"{store.path}: example {ex_id!r} has no tokens")
        a = np.asarray(attn, dtype=np.float64)  # [layer, head, query_pos, key_pos]
        if not np.isfinite(a).all():
            raise BertlookError(f"{store.path}: example {ex_id!r} has non-finite attention values")
        stats = example_stats(a, rec["tokens"], cls_token=cls_token, sep_token=sep_token)
        for c in STAT_COLUMNS:
            v = stats[c]
            if not np.isnan(v).any():
                sums[c] += v
                counts[c] += 1
        offset_counts = add_centered(offset_counts, argmax_offset_counts(a))  # [layer, head, 2*max_n-1]
        n_examples += 1
        sum_log_n += math.log(n)
        sum_n += n
    meta = {
        "partial_version": PARTIAL_VERSION,
        "attention": str(store.path),
        "num_layers": L,
        "num_heads": H,
        "special_tokens": {"cls": cls_token, "sep": sep_token},
        "n_examples": n_examples,
        "n_examples_in_store": len(store),
        "max_examples": max_examples,
        "sum_n": sum_n,
        "counts": counts,
    }
    arrays = {"sums": np.stack([sums[c] for c in STAT_COLUMNS]),  # [stat, layer, head]
              "sum_log_n": np.float64(sum_log_n),
              "offset_counts": offset_counts}  # [layer, head, 2*max_n-1]
    return meta, arrays


def reduce_surface_stats(
    partials: "list[tuple[dict[str, Any], dict[str, np.ndarray]]]", *, where: "list[Any] | None" = None
) -> tuple["pd.DataFrame", dict[str, Any]]:
    """Add partial sums (:func:`surface_stats_partial`, in shard order) and divide once -> ``(frame, summary)``.

    One partial gives exactly :func:`compute_surface_stats` of its store (sums added to zeros).
    """
    if not partials:
        raise BertlookError("no partial statistics to reduce")
    where = list(where) if where is not None else [m.get("attention") for m, _ in partials]
    metas = [m for m, _ in partials]
    for m, w in zip(metas, where):
        if m.get("partial_version") != PARTIAL_VERSION:
            raise BertlookError(f"{w}: surface-stats partial version {m.get('partial_version')!r}, expected "
                                f"{PARTIAL_VERSION} (written by another bertlook version: rerun surface-stats --out-partial)")
    L = same_value([m["num_layers"] for m in metas], "num_layers", where)
    H = same_value([m["num_heads"] for m in metas], "num_heads", where)
    tokens = same_value([m["special_tokens"] for m in metas], "special tokens", where)
    cls_token, sep_token = tokens["cls"], tokens["sep"]
    max_examples = same_value([m.get("max_examples") for m in metas], "max_examples", where)
    stacked = np.zeros((len(STAT_COLUMNS), L, H))  # [stat, layer, head]
    counts = {c: 0 for c in STAT_COLUMNS}
    offset_counts = np.zeros((L, H, 1), dtype=np.int64)  # [layer, head, 2*max_n-1]
    n_examples = 0
    sum_log_n = 0.0
    sum_n = 0
    for (meta, arrays), w in zip(partials, where):
        part = np.asarray(arrays["sums"], dtype=np.float64)  # [stat, layer, head]
        if part.shape != stacked.shape:
            raise BertlookError(f"{w}: partial sums of shape {list(part.shape)}, expected {list(stacked.shape)}")
        stacked += part
        offs = np.asarray(arrays["offset_counts"])  # [layer, head, 2*max_n-1]
        if (offs.ndim != 3 or offs.shape[:2] != (L, H) or offs.shape[2] % 2 != 1
                or not np.issubdtype(offs.dtype, np.integer) or (offs < 0).any()):
            raise BertlookError(f"{w}: offset_counts of shape {list(offs.shape)} ({offs.dtype}), expected "
                                f"non-negative integers [{L}, {H}, 2*max_n-1]")
        if int(offs.sum()) != int(meta["sum_n"]) * L * H:
            raise BertlookError(f"{w}: offset_counts hold {int(offs.sum())} rows, expected sum_n x heads = "
                                f"{int(meta['sum_n']) * L * H}")
        offset_counts = add_centered(offset_counts, offs.astype(np.int64))  # [layer, head, 2*max_n-1]
        for c in STAT_COLUMNS:
            counts[c] += int(meta["counts"][c])
        n_examples += int(meta["n_examples"])
        sum_log_n += float(arrays["sum_log_n"])
        sum_n += int(meta["sum_n"])
    sums = {c: stacked[i] for i, c in enumerate(STAT_COLUMNS)}
    if n_examples == 0:
        where_txt = where[0] if len(where) == 1 else ", ".join(map(str, where))
        raise BertlookError(f"{where_txt}: no examples to compute statistics on")

    layer_idx, head_idx = np.meshgrid(np.arange(1, L + 1), np.arange(1, H + 1), indexing="ij")  # [layer, head] each
    data: dict[str, Any] = {"layer": layer_idx.ravel(), "head": head_idx.ravel()}
    for c in STAT_COLUMNS:
        data[c] = (sums[c] / counts[c]).ravel() if counts[c] else np.full(L * H, np.nan)
    offset, fraction = positional_offsets(offset_counts)  # [layer, head] each
    data["positional_offset"] = offset.ravel()
    data["positional_fraction"] = fraction.ravel()
    frame = pd.DataFrame(data, columns=COLUMNS)
    summary: dict[str, Any] = {
        "n_examples": n_examples,
        "n_examples_in_store": sum(int(m["n_examples_in_store"]) for m in metas),
        "max_examples": max_examples,
        "uniform_entropy": sum_log_n / n_examples,
        "mean_tokens": sum_n / n_examples,
        "num_layers": L,
        "num_heads": H,
        "special_tokens": {"cls": cls_token, "sep": sep_token},
        "punct_tokens": list(PUNCT_TOKENS),
        "excluded_from_column": {
            "sep_sep (no [SEP] token)": n_examples - counts["sep_sep"],
            "rest_sep (only [SEP] tokens)": n_examples - counts["rest_sep"],
            "cls_entropy (no [CLS] token)": n_examples - counts["cls_entropy"],
        },
    }
    return frame, summary


def compute_surface_stats(
    store: "AttentionStore", *, max_examples: int | None = None, segments=None
) -> tuple["pd.DataFrame", dict[str, Any]]:
    """Per-head surface statistics over (the first ``max_examples``) examples of ``store``.

    Returns ``(frame, summary)``: ``frame`` has one row per head and columns :data:`COLUMNS`
    (``layer``/``head`` 1-indexed); ``summary`` holds ``n_examples``, ``uniform_entropy`` (mean of
    ``ln n``), ``mean_tokens`` and the counts of examples left out of the undefined columns.
    ``max_examples`` with ``segments``: the first N segments of that file, else the first N of the store.
    """
    return reduce_surface_stats([surface_stats_partial(store, max_examples=max_examples, segments=segments)],
                                where=[store.path])
