"""Per-head surface statistics of token-level attention maps (paper Figs 2 and 4; ``bertlook surface-stats``).

:func:`example_stats` (with :func:`row_entropy`) gives one example's columns :data:`STAT_COLUMNS`
(attention to [CLS], [SEP], ". ,", self, prev, next; ``sep_sep``, ``rest_sep``, ``entropy``,
``cls_entropy``, ``max_attention``); :func:`compute_surface_stats` averages them over examples.
:func:`argmax_offset_counts` counts each head's argmax offsets ``argmax_j a[i, j] - i`` and
:func:`positional_offsets` takes their mode (columns :data:`POSITIONAL_COLUMNS`, appended last).
Sharded runs: :func:`surface_stats_partial` writes sums and counts (``surface-stats --out-partial``),
:func:`reduce_surface_stats` adds them and divides once (``surface-stats --partial``).
:func:`run_surface_stats_step` is the step without the command line: the table and the summary JSON of a store
or of partial files (:class:`SurfaceStatsStepResult`, which describes both).

Definitions: docs/definitions.md#surface-statistics (sharding: docs/definitions.md#sharded-reductions)
"""

from __future__ import annotations

import functools
import math
from typing import Any, NamedTuple, Sequence

import numpy as np
import pandas as pd

from bertlook.analyses.token_roles import describe_roles, is_causal, role_masks
from bertlook.attention.store import AttentionStore, open_store
from bertlook.errors import BertlookError
from bertlook.naming import head_label
from bertlook.attention.shards import select_examples
from bertlook.pipeline.sharding import load_partial, partial_metas, same_value

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


def special_tokens(store: "AttentionStore") -> tuple[str | None, str | None]:
    """The (CLS, SEP) token strings of a store (``meta["special_tokens"]``, default [CLS]/[SEP]); a decoder's
    store: CLS None (the first token) and SEP its EOS token or None (:mod:`bertlook.analyses.token_roles`)."""
    spec = dict(DEFAULT_SPECIAL_TOKENS)
    spec.update(store.meta.get("special_tokens") or {})
    if is_causal(store.meta):
        return (None if spec["cls"] is None else str(spec["cls"])), (None if spec["sep"] is None else str(spec["sep"]))
    return str(spec["cls"]), str(spec["sep"])


def causal_row_entropy(attn: "np.ndarray", smoothing: float = ENTROPY_SMOOTHING) -> "np.ndarray":
    """Entropy (nats) of each row of a causal map ``attn[..., n, n]`` over the keys it sees -> ``[..., n]``:
    row i is smoothed over its ``i + 1`` visible keys, ``p = (1 - s) a + s / (i + 1)``, and compared with
    ``ln(i + 1)`` (not ``ln n``)."""
    a = np.asarray(attn, dtype=np.float64)  # [..., query_pos, key_pos]
    n = a.shape[-1]
    visible = np.tril(np.ones((n, n), dtype=bool))  # [query_pos, key_pos]
    k = np.arange(1, n + 1, dtype=np.float64)[:, None]  # [query_pos, 1]: keys row i sees
    p = np.where(visible, (1.0 - smoothing) * a + smoothing / k, 1.0)  # [..., query_pos, key_pos]
    return -(p * np.log(p)).sum(axis=-1)  # [..., query_pos]


def row_entropy(attn: "np.ndarray", smoothing: float = ENTROPY_SMOOTHING) -> "np.ndarray":
    """Entropy (nats) of each smoothed row of ``attn[..., n, n]`` -> ``[..., n]`` (float64).

    A float16 map takes the same values through :func:`xlogx_table` (every float16 value's smoothed
    ``p ln p`` computed once, in float64), added by :func:`bertlook.analyses.map_kernels.table_row_sums` in
    numpy's order: the same products and the same sums, bit for bit, 20x faster.
    """
    a = np.asarray(attn)
    n = a.shape[-1]
    if a.dtype == np.float16:
        from bertlook.analyses.map_kernels import table_row_sums  # lazy: numba, compiled once, loaded from its cache

        return -table_row_sums(xlogx_table(n, smoothing), a.view(np.uint16))  # [..., query_pos]
    a = np.asarray(a, dtype=np.float64)
    p = (1.0 - smoothing) * a + smoothing / n  # [..., query_pos, key_pos]
    return -(p * np.log(p)).sum(axis=-1)  # [..., query_pos]


@functools.lru_cache(maxsize=64)
def xlogx_table(n: int, smoothing: float = ENTROPY_SMOOTHING) -> "np.ndarray":
    """``p ln p`` with ``p = (1 - smoothing) a + smoothing / n`` for every float16 bit pattern ``a`` (float64,
    ``[65536]``; NaN for the patterns no attention value has: negative, infinite, NaN)."""
    from bertlook.analyses.map_kernels import float16_values  # lazy: numba, as in row_entropy (the float16 values)

    a = float16_values()  # [float16 bits]
    with np.errstate(invalid="ignore", divide="ignore"):
        p = (1.0 - smoothing) * a + smoothing / n  # [float16 bits]
        table = p * np.log(p)  # [float16 bits]
    table[~np.isfinite(a) | (a < 0)] = np.nan
    table.setflags(write=False)
    return table


def example_stats(
    attn: "np.ndarray", tokens: list[str], *, cls_token: str | None = "[CLS]", sep_token: str | None = "[SEP]",
    causal: bool = False,
) -> dict[str, "np.ndarray"]:
    """Statistics of one example, each a ``[layers, heads]`` float64 array (NaN where undefined).

    ``attn``: float16 (as stored: the whole map is never converted, only the columns and diagonals each
    statistic reads) or any float type (converted to float64); the results are the same either way.
    ``cls_token`` None: the first token plays [CLS]; ``sep_token`` None: no token plays [SEP]
    (:mod:`bertlook.analyses.token_roles`). ``causal`` (a decoder's map): the row entropies over the visible
    keys (:func:`causal_row_entropy`), and no ``cls_entropy`` (the first row sees itself alone).
    """
    a = np.asarray(attn)
    if a.dtype != np.float16:
        a = np.asarray(a, dtype=np.float64)
    f64 = lambda x: np.asarray(x, dtype=np.float64)  # noqa: E731
    L, H, n, _ = a.shape
    toks = np.asarray(tokens, dtype=object)  # [key_pos]
    is_cls, is_sep = role_masks(tokens, cls_token, sep_token)  # [key_pos] each
    is_punct = np.isin(toks, PUNCT_TOKENS)
    nan = np.full((L, H), np.nan)  # [layer, head]

    col_sep = f64(a[..., is_sep]).sum(axis=-1)  # [layer, head, query_pos]: attention of each row to [SEP] columns
    n_sep = int(is_sep.sum())
    out = {
        "cls": f64(a[..., is_cls]).sum(axis=(-1, -2)) / n,
        "sep": col_sep.sum(axis=-1) / n,
        "punct": f64(a[..., is_punct]).sum(axis=(-1, -2)) / n,
        "self": f64(np.diagonal(a, offset=0, axis1=2, axis2=3)).sum(axis=-1) / n,
        "next": f64(np.diagonal(a, offset=1, axis1=2, axis2=3)).sum(axis=-1) / n,
        "prev": f64(np.diagonal(a, offset=-1, axis1=2, axis2=3)).sum(axis=-1) / n,
        "sep_sep": col_sep[..., is_sep].sum(axis=-1) / n_sep if n_sep > 0 else nan,
        "rest_sep": col_sep[..., ~is_sep].sum(axis=-1) / (n - n_sep) if n_sep < n else nan,
    }
    ent = causal_row_entropy(a) if causal else row_entropy(a)  # [layer, head, query_pos]
    out["entropy"] = ent.mean(axis=-1)
    cls_pos = np.flatnonzero(is_cls)
    out["cls_entropy"] = ent[..., cls_pos[0]] if cls_pos.size and not causal else nan
    out["max_attention"] = f64(_row_max(a)).mean(axis=-1)  # [layer, head]
    return out


def _row_max(a: "np.ndarray") -> "np.ndarray":
    """``a.max(axis=-1)``; for float16 through the bit patterns (non-negative float16 values sort like their
    bits read as integers; numpy's float16 max is emulated and slow). ``a`` must hold no negative value but -0."""
    if a.dtype != np.float16:
        return a.max(axis=-1)
    bits = a.view(np.uint16)  # [..., query_pos, key_pos]
    if bits.size and bits.max() >= 0x8000:  # -0.0 (or a negative value: the caller's checks refuse those)
        return a.max(axis=-1)
    return bits.max(axis=-1).view(np.float16)  # [..., query_pos]


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
    if a.dtype == np.float16 and not (a.size and int(a.view(np.uint16).max()) >= 0x8000):
        a = a.view(np.uint16)  # non-negative float16 values sort like their bits (equal values, equal bits)
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


class SurfaceStatsAccumulator:
    """Sums and counts of the statistics, one example at a time: the per-example work of
    :func:`surface_stats_partial`, also a reader of the extraction stream (:class:`bertlook.attention.stream.PerExample`).

    Layer by layer (the stream's forward hooks): ``add_layer(record, layer, a)`` for layers 0 .. L-1, ``a`` the
    example's maps of that layer ``[head, n, n]`` (a numpy array or a torch tensor, float16 as stored), then
    ``end_example(record)``; ``add(record, attn)`` does the same from a whole map ``[layer, head, n, n]``.
    A float16 map on the CPU goes through the numba kernel (:func:`bertlook.analyses.layer_stats.layer_stats_cpu`,
    ``num_threads`` threads: today's numbers bit for bit for encoders), a tensor on another device through the
    torch kernel (:func:`~bertlook.analyses.layer_stats.layer_stats_torch`: sums kept on the device, no
    synchronisation per example, a non-finite map refused in :meth:`partial`), another dtype on the CPU through
    :func:`example_stats`; ``kernel="torch"``: the torch kernel and device sums for CPU tensors too (the tests). :meth:`partial` gives ``(meta, arrays)``."""

    def __init__(self, num_layers: int, num_heads: int, *, cls_token: str | None = "[CLS]",
                 sep_token: str | None = "[SEP]", causal: bool = False, where: Any = "attention",
                 num_threads: int = 1, kernel: str = "auto") -> None:
        L, H = int(num_layers), int(num_heads)
        if kernel not in ("auto", "torch"):
            raise ValueError(f"kernel: 'auto' or 'torch', got {kernel!r}")
        self.kernel = kernel
        self.num_layers, self.num_heads, self.where, self.causal = L, H, where, bool(causal)
        self.num_threads = max(1, int(num_threads))
        self.cls_token = None if cls_token is None else str(cls_token)
        self.sep_token = None if sep_token is None else str(sep_token)
        self.sums = {c: np.zeros((L, H)) for c in STAT_COLUMNS}  # stat -> [layer, head]
        self.counts = {c: 0 for c in STAT_COLUMNS}
        self.offset_counts = np.zeros((L, H, 1), dtype=np.int64)  # [layer, head, 2*max_n-1]
        self.n_examples = 0
        self.sum_log_n = 0.0
        self.sum_n = 0
        self._open: dict[int, dict[str, Any]] = {}  # the examples between layer 0 and end_example (by record)
        self._dev: dict[str, Any] | None = None  # device sums (the torch kernel)

    def add(self, record: dict[str, Any], attn: "np.ndarray") -> None:
        """Add one example: its record (``tokens``, ``id``) and map ``[layer, head, n, n]`` (float16 or float)."""
        a = np.asarray(attn)  # [layer, head, query_pos, key_pos]
        if a.shape[-1] < 1:
            raise BertlookError(f"{self.where}: example {record.get('id', self.n_examples)!r} has no tokens")
        for layer in range(a.shape[0]):
            self.add_layer(record, layer, a[layer])
        self.end_example(record)

    def _begin(self, record: dict[str, Any], n: int, like: Any) -> dict[str, Any]:
        """A new example of ``n`` tokens; ``like``: a tensor of its maps for the torch kernel, else None."""
        from bertlook.analyses import layer_stats  # lazy: numba (compiled once, loaded from its cache)

        ex_id = record.get("id", self.n_examples)
        if n < 1:
            raise BertlookError(f"{self.where}: example {ex_id!r} has no tokens")
        is_cls, is_sep = role_masks(record["tokens"], self.cls_token, self.sep_token)  # [key_pos] each
        roles = layer_stats.Roles(is_cls, is_sep, np.isin(np.asarray(record["tokens"], dtype=object), PUNCT_TOKENS))
        L, H = self.num_layers, self.num_heads
        ex = {"id": ex_id, "n": n, "roles": roles, "layers": 0, "device": None if like is None else like.device,
              "table": None if self.causal else xlogx_table(n)}
        if like is None:
            ex["stats"] = {c: np.full((L, H), np.nan) for c in STAT_COLUMNS}  # stat -> [layer, head]
            ex["offsets"] = np.zeros((L, H, 2 * n - 1), dtype=np.int64)  # [layer, head, 2*n-1]
        else:
            torch = layer_stats.torch_of(like)
            ex["stats"] = torch.full((len(STAT_COLUMNS), L, H), float("nan"), dtype=torch.float64, device=like.device)
            ex["offsets"] = torch.zeros((L, H, 2 * n - 1), dtype=torch.int64, device=like.device)
            ex["droles"] = layer_stats.device_roles(roles, like)
        return ex

    def add_layer(self, record: dict[str, Any], layer: int, a: Any) -> None:
        """Add the maps ``a[head, n, n]`` of layer ``layer`` of the example ``record`` (layers in order from 0; the
        examples of a batch may be open at once, each kept by its record, as the stream hands them layer by layer)."""
        from bertlook.analyses import layer_stats  # lazy: as in _begin

        on_device = not isinstance(a, np.ndarray) and (self.kernel == "torch" or a.device.type != "cpu")
        if not isinstance(a, np.ndarray) and not on_device:
            a = a.detach().contiguous().numpy()  # a CPU tensor: the same memory
        n = int(a.shape[-1])
        if layer == 0 or id(record) not in self._open:
            self._open[id(record)] = self._begin(record, n, a if on_device else None)
        ex = self._open[id(record)]
        if layer != ex["layers"] or n != ex["n"] or tuple(a.shape) != (self.num_heads, n, n):
            raise BertlookError(f"{self.where}: example {ex['id']!r}: layer {layer} of shape {list(a.shape)} after "
                                f"{ex['layers']} layers of {ex['n']} tokens")
        ex["layers"] += 1
        if on_device:
            raw, finite = layer_stats.layer_stats_torch(a.contiguous(), ex["roles"], ex["droles"], causal=self.causal,
                                                       offs=ex["offsets"][layer], smoothing=ENTROPY_SMOOTHING)
            ex["finite"] = finite if layer == 0 else ex["finite"] & finite
            cols = layer_stats.finish(raw, ex["roles"])
            for i, c in enumerate(STAT_COLUMNS):
                ex["stats"][i, layer] = cols[c]
            return
        if a.dtype != np.float16:
            self._add_layer_reference(ex, layer, record, np.asarray(a, dtype=np.float64))
            return
        raw, finite = layer_stats.layer_stats_cpu(a, ex["roles"], ex["table"], causal=self.causal,
                                                  offs=ex["offsets"][layer], smoothing=ENTROPY_SMOOTHING,
                                                  num_threads=self.num_threads)
        if not finite:
            raise BertlookError(f"{self.where}: example {ex['id']!r} has non-finite attention values")
        for c, v in layer_stats.finish(raw, ex["roles"]).items():
            ex["stats"][c][layer] = v

    def _add_layer_reference(self, ex: dict[str, Any], layer: int, record: dict[str, Any], a: "np.ndarray") -> None:
        """A float map (not float16) on the CPU: :func:`example_stats` and :func:`argmax_offset_counts`."""
        if not _all_finite(a):
            raise BertlookError(f"{self.where}: example {ex['id']!r} has non-finite attention values")
        stats = example_stats(a[None], record["tokens"], cls_token=self.cls_token, sep_token=self.sep_token,
                              causal=self.causal)
        for c in STAT_COLUMNS:
            ex["stats"][c][layer] = stats[c][0]
        ex["offsets"][layer] = argmax_offset_counts(a[None])[0]

    def end_example(self, record: dict[str, Any]) -> None:
        """Close the example whose layers :meth:`add_layer` took: add its statistics and offsets."""
        ex = self._open.pop(id(record), None)
        if ex is None or ex["layers"] != self.num_layers:
            raise BertlookError(f"{self.where}: example {record.get('id', self.n_examples)!r}: "
                                f"{0 if ex is None else ex['layers']} of {self.num_layers} layers added")
        n = ex["n"]
        if ex["device"] is not None:
            self._end_on_device(ex)
        else:
            for c in STAT_COLUMNS:
                v = ex["stats"][c]
                if not np.isnan(v).any():
                    self.sums[c] += v
                    self.counts[c] += 1
            self.offset_counts = add_centered(self.offset_counts, ex["offsets"])  # [layer, head, 2*max_n-1]
        self.n_examples += 1
        # the entropy of a uniform row: ln n, or for a causal map the mean over rows of ln(i + 1) = ln(n!) / n
        self.sum_log_n += math.lgamma(n + 1) / n if self.causal else math.log(n)
        self.sum_n += n

    def _end_on_device(self, ex: dict[str, Any]) -> None:
        """Add an example's device statistics to the device sums (no synchronisation)."""
        from bertlook.analyses.layer_stats import torch_of  # lazy: as in _begin

        torch = torch_of(ex["stats"])
        d = self._dev
        if d is None:
            zeros = dict(dtype=torch.float64, device=ex["device"])
            d = self._dev = {"sums": torch.zeros((len(STAT_COLUMNS), self.num_layers, self.num_heads), **zeros),
                             "counts": torch.zeros(len(STAT_COLUMNS), dtype=torch.int64, device=ex["device"]),
                             "offsets": ex["offsets"].clone(), "finite": [], "ids": []}
        else:
            w, wp = d["offsets"].shape[-1], ex["offsets"].shape[-1]
            if w < wp:
                d["offsets"], ex["offsets"] = ex["offsets"].clone(), d["offsets"]
                w, wp = wp, w
            lo = (w - wp) // 2
            d["offsets"][..., lo:lo + wp] += ex["offsets"]
        stats = ex["stats"]  # [stat, layer, head]
        valid = ~torch.isnan(stats).flatten(1).any(dim=1)  # [stat]
        d["sums"] += torch.where(valid[:, None, None], stats, torch.zeros_like(stats))
        d["counts"] += valid.long()
        d["finite"].append(ex["finite"])
        d["ids"].append(ex["id"])

    def _collect_device(self) -> None:
        """Move the device sums to the host sums (one synchronisation); a non-finite example is refused here."""
        d, self._dev = self._dev, None
        if d is None:
            return
        from bertlook.analyses.layer_stats import torch_of  # lazy: as in _begin

        torch = torch_of(d["sums"])
        finite = torch.stack(d["finite"]).cpu().numpy()  # [example]
        if not finite.all():
            self._dev = d
            raise BertlookError(f"{self.where}: example {d['ids'][int(np.argmin(finite))]!r} has non-finite "
                                "attention values")
        sums, counts = d["sums"].cpu().numpy(), d["counts"].cpu().numpy()  # [stat, layer, head], [stat]
        for i, c in enumerate(STAT_COLUMNS):
            self.sums[c] += sums[i]
            self.counts[c] += int(counts[i])
        self.offset_counts = add_centered(self.offset_counts, d["offsets"].cpu().numpy())

    def partial(self, *, n_examples_in_store: int, max_examples: int | None = None,
                attention: Any = None) -> tuple[dict[str, Any], dict[str, "np.ndarray"]]:
        """``(meta, arrays)`` of the examples added (:func:`surface_stats_partial` documents the layout)."""
        self._collect_device()
        meta = {
            "partial_version": PARTIAL_VERSION,
            "attention": str(self.where if attention is None else attention),
            "num_layers": self.num_layers,
            "num_heads": self.num_heads,
            "special_tokens": {"cls": self.cls_token, "sep": self.sep_token},
            "n_examples": self.n_examples,
            "n_examples_in_store": int(n_examples_in_store),
            "max_examples": max_examples,
            "sum_n": self.sum_n,
            "counts": dict(self.counts),
            **({"causal": True} if self.causal else {}),
        }
        arrays = {"sums": np.stack([self.sums[c] for c in STAT_COLUMNS]),  # [stat, layer, head]
                  "sum_log_n": np.float64(self.sum_log_n),
                  "offset_counts": self.offset_counts}  # [layer, head, 2*max_n-1]
        return meta, arrays


def _all_finite(a: "np.ndarray") -> bool:
    if a.dtype == np.float16:  # finite float16 values have an exponent field below 0x7C00
        return not a.size or int((a.view(np.uint16) & 0x7C00).max()) < 0x7C00
    return bool(np.isfinite(a).all())


#: offsets listed per head beside the mode (:func:`positional_candidates`): within this many rows of it
POSITIONAL_WINDOW = 50


def positional_candidates(counts: "np.ndarray", window: int = POSITIONAL_WINDOW) -> dict[str, list[list[int]]]:
    """Per head ("L-H"), the argmax offsets whose row count is within ``window`` of the mode's, as
    ``[offset, rows]`` pairs, the mode first (the regression gate accepts a near-tied mode either way)."""
    c = np.asarray(counts, dtype=np.int64)  # [layer, head, 2*m-1]
    m = (c.shape[-1] + 1) // 2
    mode, _ = positional_offsets(c)  # [layer, head]
    out = {}
    for l in range(c.shape[0]):
        for h in range(c.shape[1]):
            row = c[l, h]  # [2*m-1]
            top = int(row[int(mode[l, h]) + m - 1])
            near = [int(i) for i in np.flatnonzero(row >= top - window)]
            near.sort(key=lambda i: (i - m + 1 != int(mode[l, h]), -int(row[i])))
            out[head_label(l, h)] = [[i - m + 1, int(row[i])] for i in near]
    return out


def surface_stats_partial(
    store: "AttentionStore", *, max_examples: int | None = None, segments=None
) -> tuple[dict[str, Any], dict[str, "np.ndarray"]]:
    """Sums and counts of the statistics over the selected examples of one store: ``(meta, arrays)``.

    Selection (:func:`bertlook.attention.shards.select_examples`): all examples, or with ``max_examples`` the
    first N segments of the ``segments`` file (without it: the first N of the store). ``arrays``:
    ``sums`` ``[columns, layers, heads]`` (float64, in :data:`STAT_COLUMNS` order), ``sum_log_n``,
    ``offset_counts`` ``[layers, heads, 2*max_n-1]`` (int64, :func:`argmax_offset_counts` summed,
    aligned on offset 0; ``max_n`` = the longest example, 1 without examples);
    ``meta``: ``partial_version`` (:data:`PARTIAL_VERSION`), layout, special tokens, ``n_examples``,
    ``counts`` per column, ``sum_n``, ``n_examples_in_store``. Reduce with :func:`reduce_surface_stats`.
    The extraction stream computes the same partial without a store (:class:`SurfaceStatsAccumulator`).
    """
    cls_token, sep_token = special_tokens(store)
    acc = SurfaceStatsAccumulator(store.num_layers, store.num_heads, cls_token=cls_token, sep_token=sep_token,
                                  causal=is_causal(store.meta), where=store.path)
    for k in select_examples(store, max_examples, segments):
        acc.add(store.records[k], store.get(k))
    return acc.partial(n_examples_in_store=len(store), max_examples=max_examples)


def _add_partials(partials, where: list[Any], L: int, H: int) -> tuple:
    """The partials' sums added up, each checked: ``(sums [stat, layer, head], counts per stat, offset_counts
    [layer, head, 2*max_n-1], examples, sum of ln n, rows)``."""
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
    return stacked, counts, offset_counts, n_examples, sum_log_n, sum_n


def reduce_surface_stats(
    partials: "list[tuple[dict[str, Any], dict[str, np.ndarray]]]", *, where: "list[Any] | None" = None
) -> tuple["pd.DataFrame", dict[str, Any]]:
    """Add partial sums (:func:`surface_stats_partial`, in shard order) and divide once -> ``(frame, summary)``.

    One partial gives exactly :func:`compute_surface_stats` of its store (sums added to zeros).
    """
    where, metas = partial_metas(partials, where, "statistics")
    for m, w in zip(metas, where):
        if m.get("partial_version") != PARTIAL_VERSION:
            raise BertlookError(f"{w}: surface-stats partial version {m.get('partial_version')!r}, expected "
                                f"{PARTIAL_VERSION} (written by another bertlook version: rerun surface-stats --out-partial)")
    L = same_value([m["num_layers"] for m in metas], "num_layers", where)
    H = same_value([m["num_heads"] for m in metas], "num_heads", where)
    tokens = same_value([m["special_tokens"] for m in metas], "special tokens", where)
    cls_token, sep_token = tokens["cls"], tokens["sep"]
    causal = same_value([bool(m.get("causal", False)) for m in metas], "causal (decoder) maps", where)
    max_examples = same_value([m.get("max_examples") for m in metas], "max_examples", where)
    stacked, counts, offset_counts, n_examples, sum_log_n, sum_n = _add_partials(partials, where, L, H)
    sums = {c: stacked[i] for i, c in enumerate(STAT_COLUMNS)}
    if n_examples == 0:
        where_txt = where[0] if len(where) == 1 else ", ".join(map(str, where))
        raise BertlookError(f"{where_txt}: no examples to compute statistics on")

    layer_idx, head_idx = np.meshgrid(np.arange(1, L + 1), np.arange(1, H + 1), indexing="ij")  # [layer, head] each
    data: dict[str, Any] = {"layer": layer_idx.ravel(), "head": head_idx.ravel()}
    for c in STAT_COLUMNS:
        data[c] = (sums[c] / counts[c]).ravel() if counts[c] else np.full(L * H, np.nan)
    offset, fraction = positional_offsets(offset_counts)  # [layer, head] each
    positional = positional_candidates(offset_counts)
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
        **({"causal": True, "token_roles": describe_roles(cls_token, sep_token)} if causal else {}),
        "punct_tokens": list(PUNCT_TOKENS),
        "rows": sum_n,
        "positional_candidates": positional,
        "excluded_from_column": {
            "sep_sep (no [SEP] token)": n_examples - counts["sep_sep"],
            "rest_sep (only [SEP] tokens)": n_examples - counts["rest_sep"],
            ("cls_entropy (causal maps: the first row sees itself alone)" if causal else
             "cls_entropy (no [CLS] token)"): n_examples - counts["cls_entropy"],
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


class SurfaceStatsStepResult(NamedTuple):
    """The table (one row per head, :data:`COLUMNS`) and the summary JSON of ``bertlook surface-stats``:
    ``attention`` (the store's path, or the list of the shards' store paths) first, then the ``summary`` of
    :func:`compute_surface_stats` / :func:`reduce_surface_stats`."""

    frame: "pd.DataFrame"
    summary: dict[str, Any]


def run_surface_stats_step(attention=None, *, partials: "Sequence[Any] | None" = None,
                           max_examples: int | None = None, segments=None) -> SurfaceStatsStepResult:
    """``bertlook surface-stats`` without the command line: the statistics of the store ``attention`` (a
    directory or an open store; ``max_examples`` / ``segments`` as in :func:`compute_surface_stats`), or of the
    partial files ``partials`` (``.npz`` of :func:`surface_stats_partial`, saved with
    :func:`bertlook.pipeline.sharding.save_partial`, in shard order), with the summary JSON."""
    if (attention is None) == (partials is None):
        raise BertlookError("surface statistics: give an attention store or partial files (one of them)")
    if partials is not None:
        loaded = [load_partial(p, PARTIAL_KIND) for p in partials]
        frame, summary = reduce_surface_stats(loaded, where=list(partials))
        stores = [m["attention"] for m, _ in loaded]
        return SurfaceStatsStepResult(frame, {"attention": stores[0] if len(stores) == 1 else stores, **summary})
    store = open_store(attention)
    frame, summary = compute_surface_stats(store, max_examples=max_examples, segments=segments)
    path = attention.path if isinstance(attention, AttentionStore) else attention
    return SurfaceStatsStepResult(frame, {"attention": str(path), **summary})
