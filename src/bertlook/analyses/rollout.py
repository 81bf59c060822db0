"""Attention rollout (Abnar & Zuidema 2020) of stored maps: per-layer statistics and a Table 1 view (numbers only).

:func:`rollout` turns one example's maps into its rollout ``R_l`` per layer (float64);
:func:`rollout_example_stats` gives one example's per-layer share of rollout to [CLS], [SEP], ". ,"
and other tokens and its rollout entropy (defined as the surface statistics); :func:`rollout_partial`
writes their sums and counts for one token-level store (``rollout --out-partial``),
:func:`reduce_rollout` adds partials in shard order and divides once, :func:`compute_rollout_stats`
is the unsharded path (one partial); its reader :class:`HostRolloutAccumulator` takes the maps layer by layer,
and :class:`RolloutAccumulator`, the extraction stream's, on the maps' device too (the layer's work:
:mod:`bertlook.analyses.rollout_device`). :class:`RolloutStore` presents a word-level store's rollout as a
store with one "head" per layer, so :mod:`bertlook.analyses.heads` scores it unchanged (Table 1 on
rollout maps). :func:`run_rollout` is the ``rollout`` step without the command line: the statistics
and / or Table 1 on rollout maps (settings :class:`RolloutTable1Options`) with the step's summary
(:class:`RolloutResult`).

Definitions: docs/definitions.md#attention-rollout-abnar--zuidema-2020
"""

from __future__ import annotations

import math
import os
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import pandas as pd

from bertlook.analyses.heads import (
    FORCED_BY_SCHEME, HeadScores, head_accuracy_table, resolve_tree_source, score_heads, store_where,
)
from bertlook.analyses import rollout_device
from bertlook.analyses.surface_stats import (
    ENTROPY_SMOOTHING, PUNCT_TOKENS, causal_row_entropy, row_entropy, special_tokens,
)
from bertlook.analyses.token_roles import is_causal, role_masks
from bertlook.analyses.table1 import Table1Scoring, relation_rows_summary, selection_candidates, table1
from bertlook.attention.store import AttentionStore, open_store
from bertlook.errors import BertlookError
from bertlook.attention.shards import select_examples
from bertlook.pipeline.sharding import load_partial, partial_metas, same_value

COLUMNS = ["layer", "cls", "sep", "punct", "other", "entropy", "uniform_entropy"]
#: per-example statistics (one value per layer), summed by the partials in this order
STAT_COLUMNS = ["cls", "sep", "punct", "other", "entropy"]
PARTIAL_KIND = "rollout"
RESIDUAL_WEIGHT = 0.5  # A_hat = (1 - w) * mean_h(A) + w * I
#: a host example whose layers' head means fit in this many bytes (float64 [layer, n, n]) keeps them and takes
#: its rollout and statistics at its end, all layers at once as :func:`rollout` (the demo's 6 x 128 x 128: fewer,
#: larger calls, ~10% faster than layer by layer); a larger one keeps only the running rollout (and a causal
#: one's products are triangular: 4 layers of n >= 257 with this budget)
HOST_KEEP_BYTES = 2 << 20


def rollout(maps: "np.ndarray") -> "np.ndarray":
    """Attention rollout of one example: ``maps [layer, head, query_pos, key_pos]`` -> ``R [layer, query_pos, key_pos]``.

    ``A_hat_l = 0.5 * mean_h(A_l) + 0.5 * I`` with rows renormalised to sum to 1, ``R_1 = A_hat_1``,
    ``R_l = A_hat_l @ R_{l-1}`` (float64). Row i of ``R_l``: how much of token i's representation at
    layer l comes from each input token j.
    """
    a = np.asarray(maps)  # [layer, head, query_pos, key_pos]
    if a.ndim != 4 or a.shape[-1] != a.shape[-2] or a.shape[0] < 1 or a.shape[1] < 1 or a.shape[-1] < 1:
        raise BertlookError(f"rollout: expected maps of shape [layer, head, n, n], got {list(a.shape)}")
    if a.dtype == np.float16:  # the stores' and the stream's maps: the same mean, without a float64 copy
        from bertlook.analyses.map_kernels import head_mean  # lazy: numba, only for float16 maps

        mean, finite = head_mean(a)  # [layer, query_pos, key_pos]
    else:
        a = np.asarray(a, dtype=np.float64)
        mean, finite = a.mean(axis=1), bool(np.isfinite(a).all())
    if not finite:
        raise BertlookError("rollout: non-finite attention values")
    return rollout_of_means(mean)


def rollout_of_means(mean: "np.ndarray") -> "np.ndarray":
    """The rollout ``R [layer, query_pos, key_pos]`` of one example's head means ``mean [layer, query_pos,
    key_pos]`` (float64, finite; overwritten by ``A_hat``): the rest of :func:`rollout`, in place (the same
    numbers as ``(1 - w) mean + w I`` with a new array: an off-diagonal entry gains an exact 0.0)."""
    L, n, _ = mean.shape
    a_hat = np.multiply(mean, 1.0 - RESIDUAL_WEIGHT, out=mean)  # [layer, query_pos, key_pos]
    diag = np.arange(n)  # [query_pos]
    a_hat[:, diag, diag] += RESIDUAL_WEIGHT
    sums = a_hat.sum(axis=-1, keepdims=True)  # [layer, query_pos, 1]
    if (sums <= 0).any():
        raise BertlookError("rollout: an attention row sums to a non-positive value")
    a_hat /= sums
    out = np.empty_like(a_hat)  # [layer, query_pos, key_pos]
    out[0] = a_hat[0]  # [query_pos, key_pos]
    for layer in range(1, L):
        np.matmul(a_hat[layer], out[layer - 1], out=out[layer])  # [query_pos, key_pos]
    return out


def punct_mask(tokens: Sequence[str]) -> "np.ndarray":
    """``[key_pos]`` boolean: the tokens exactly "." or "," (:data:`PUNCT_TOKENS`)."""
    return np.fromiter((t in _PUNCT for t in tokens), dtype=bool, count=len(tokens))


_PUNCT = frozenset(PUNCT_TOKENS)


def rollout_example_stats(
    r: "np.ndarray", tokens: list[str], *, cls_token: str | None = "[CLS]", sep_token: str | None = "[SEP]",
    causal: bool = False,
) -> dict[str, "np.ndarray"]:
    """Statistics of one example's rollout ``r [layer, query_pos, key_pos]``, each a ``[layer]`` float64 array.

    ``cls`` / ``sep`` / ``punct`` / ``other``: ``(1/n) sum_i sum_{j in S} R[i, j]`` for S = [CLS], [SEP],
    tokens exactly "." or ",", every other token; ``entropy``: mean over rows of the smoothed row
    entropy (:func:`bertlook.analyses.surface_stats.row_entropy`; ``causal``: over the visible keys,
    :func:`~bertlook.analyses.surface_stats.causal_row_entropy`). ``cls_token`` None: the first token.
    """
    R = np.asarray(r, dtype=np.float64)  # [layer, query_pos, key_pos]
    n = R.shape[-1]
    if len(tokens) != n:
        raise BertlookError(f"rollout: {len(tokens)} tokens for a map of size {n}")
    is_cls, is_sep = role_masks(tokens, cls_token, sep_token)  # [key_pos] each (a decoder: first token, EOS)
    is_punct = punct_mask(tokens)  # [key_pos]
    is_other = ~(is_cls | is_sep | is_punct)  # [key_pos]
    col = R.sum(axis=-2)  # [layer, key_pos]: rollout received by each token, summed over rows
    return {
        "cls": col[:, is_cls].sum(axis=-1) / n,  # [layer]
        "sep": col[:, is_sep].sum(axis=-1) / n,  # [layer]
        "punct": col[:, is_punct].sum(axis=-1) / n,  # [layer]
        "other": col[:, is_other].sum(axis=-1) / n,  # [layer]
        "entropy": (causal_row_entropy(R) if causal else row_entropy(R)).mean(axis=-1),  # [layer]
    }


def _map_kind(store: "AttentionStore") -> str:
    return str(store.meta.get("map") or "attention")


class _Example:
    """The example being added layer by layer: its record, size, last layer added, running rollout ``r [n, n]``
    (float64, numpy on the host, a tensor on a device), statistics so far (device: ``stats [stat, layer]``;
    host: ``cols [layer, key_pos]`` and the entropies ``stats [layer]``; a small host example: its layers' head
    means ``means [layer, n, n]`` instead), role masks and (device) their ``[role, key_pos]`` tensor and the
    checks' flag."""

    def __init__(self, record: dict[str, Any], n: int, host: bool) -> None:
        self.record, self.n, self.host = record, n, host
        self.layer = -1
        self.r: Any = None
        self.stats: Any = None
        self.cols: "np.ndarray | None" = None
        self.means: "np.ndarray | None" = None
        self.masks: list[np.ndarray] = []
        self.roles: Any = None
        self.flag: Any = None


class HostRolloutAccumulator:
    """Sums of the rollout statistics, one example at a time, from maps on the host (numpy arrays, CPU tensors):
    the reader of :func:`rollout_partial` (the ``rollout`` step's env has no torch). Layer by layer:
    ``add_layer(record, layer, a)`` for ``layer = 0 .. L-1`` (``a``: that layer's maps ``[head, n, n]``,
    float16 as stored), then ``end_example(record)``; a whole example: ``add(record, attn)`` (``[layer, head, n,
    n]``, the same calls). Only the running rollout ``R_l [n, n]`` of the current example is kept
    (:mod:`bertlook.analyses.rollout_device`: numpy, today's numbers bit for bit; a causal map's product by
    triangular blocks), except that a small example (:data:`HOST_KEEP_BYTES`) keeps its layers' head means and
    is rolled out at its end by :func:`rollout_of_means`. :class:`RolloutAccumulator` also takes maps on a GPU.
    :meth:`partial` gives ``(meta, arrays)``."""

    #: tests set it on a RolloutAccumulator: CPU tensors then take the device (torch) path
    torch_on_cpu = False

    def __init__(self, num_layers: int, num_heads: int, *, cls_token: str | None = "[CLS]",
                 sep_token: str | None = "[SEP]", causal: bool = False, map_kind: str = "attention", where: Any = "attention",
                 store_excluded: dict[str, Any] | None = None) -> None:
        self.num_layers, self.num_heads, self.map_kind, self.where = int(num_layers), int(num_heads), map_kind, where
        self.store_excluded = dict(store_excluded or {})  # the exclusions of the store (or stream) read
        self.causal = bool(causal)
        self.cls_token = None if cls_token is None else str(cls_token)
        self.sep_token = None if sep_token is None else str(sep_token)
        self.sums = np.zeros((len(STAT_COLUMNS), self.num_layers))  # [stat, layer]: the host examples'
        self.n_examples = 0
        self.sum_log_n = 0.0
        self.sum_n = 0
        self._open: dict[int, _Example] = {}  # the examples between layer 0 and end_example (by record object)
        self._device: dict[str, Any] = {}  # the device examples': sums [stat, layer], first failed example, its code
        self._device_ids: list[Any] = []  # their ids, in order (to name the first failed one)

    def add(self, record: dict[str, Any], attn: Any) -> None:
        """Add one example: its record (``tokens``, ``id``) and token-level map ``[layer, head, n, n]``."""
        a = attn if hasattr(attn, "device") else np.asarray(attn)  # [layer, head, query_pos, key_pos]
        host = self._host_maps(a)  # a CPU tensor: its numpy view, sliced by layer at no cost
        a = a if host is None else host
        shape = list(a.shape)
        if len(shape) != 4 or shape[-1] != shape[-2] or min(shape) < 1:
            raise BertlookError(f"{self.where}: example {record.get('id', self.n_examples)!r}: rollout: expected "
                                f"maps of shape [layer, head, n, n], got {shape}")
        for layer in range(shape[0]):
            self.add_layer(record, layer, a[layer])
        self.end_example(record)

    def add_layer(self, record: dict[str, Any], layer: int, a: Any) -> None:
        """Add layer ``layer`` of an example (``layer`` 0 starts it): ``a [head, n, n]``. The examples of a batch may
        be open at once (the stream hands every example layer 0, then layer 1, ...): each is kept by its record."""
        try:
            host = self._host_maps(a)
            if layer == 0:
                self._begin(record, int(a.shape[-1]), host is not None, a)
            cur = self._open.get(id(record))
            if cur is None or layer != cur.layer + 1 or layer >= self.num_layers or int(a.shape[-1]) != cur.n:
                raise BertlookError(f"rollout: layer {layer} of a map of size {int(a.shape[-1])} after "
                                    + ("no layer 0" if cur is None else f"layer {cur.layer} of size {cur.n}")
                                    + f" ({self.num_layers} layers)")
            if cur.host:
                self._host_layer(cur, layer, host)
            else:
                self._device_layer(cur, layer, a)
            cur.layer = layer
        except BertlookError as err:
            self._open.pop(id(record), None)
            raise BertlookError(f"{self.where}: example {record.get('id', self.n_examples)!r}: {err}") from None

    def end_example(self, record: dict[str, Any]) -> None:
        """The example's last layer was added: its statistics join the sums."""
        cur = self._open.pop(id(record), None)
        if cur is None or cur.layer != self.num_layers - 1:
            done = "no layer" if cur is None else f"{cur.layer + 1} layers"
            raise BertlookError(f"{self.where}: example {record.get('id', self.n_examples)!r}: rollout: example ended "
                                f"after {done} of {self.num_layers}")
        if cur.means is not None:
            self.sums += self._small_example_stats(cur)  # [stat, layer]
        elif cur.host:
            self.sums += rollout_device.host_example_stats(cur.cols, cur.stats, cur.masks)  # [stat, layer]
        else:
            self._device_end(cur)
        n = cur.n
        self.n_examples += 1
        self.sum_log_n += math.lgamma(n + 1) / n if self.causal else math.log(n)  # a uniform row's entropy
        self.sum_n += n

    def _small_example_stats(self, cur: _Example) -> "np.ndarray":
        """The statistics ``[stat, layer]`` of a small host example from its head means: :func:`rollout` and
        :func:`rollout_example_stats` on all its layers at once (fewer, larger calls than layer by layer)."""
        try:
            stats = rollout_example_stats(rollout_of_means(cur.means), cur.record["tokens"], cls_token=self.cls_token,
                                          sep_token=self.sep_token, causal=self.causal)
        except BertlookError as err:
            raise BertlookError(f"{self.where}: example {cur.record.get('id', self.n_examples)!r}: {err}") from None
        return np.stack([stats[c] for c in STAT_COLUMNS])  # [stat, layer]

    def _host_maps(self, a: Any) -> "np.ndarray | None":
        """``a`` as a numpy array when it is on the host (a CPU tensor: a view), None on another device."""
        if isinstance(a, np.ndarray):
            return a
        if not a.is_cpu or self.torch_on_cpu:
            return None
        try:
            return a.numpy()
        except (RuntimeError, TypeError):  # a tensor that requires grad, or bfloat16 (no numpy dtype)
            t = a.detach()
            return (t.float() if str(t.dtype) == "torch.bfloat16" else t).numpy()

    def _begin(self, record: dict[str, Any], n: int, host: bool, a: Any) -> None:
        tokens = record["tokens"]
        if len(tokens) != n:
            raise BertlookError(f"rollout: {len(tokens)} tokens for a map of size {n}")
        cur = _Example(record, n, host)
        if host and self.num_layers * n * n * 8 <= HOST_KEEP_BYTES:
            cur.means = np.empty((self.num_layers, n, n))  # [layer, query_pos, key_pos]
            self._open[id(record)] = cur
            return
        is_cls, is_sep = role_masks(tokens, self.cls_token, self.sep_token)  # [key_pos] each
        is_punct = punct_mask(tokens)  # [key_pos]
        cur.masks = [is_cls, is_sep, is_punct, ~(is_cls | is_sep | is_punct)]  # [key_pos] each
        if host:
            cur.cols = np.zeros((self.num_layers, n))  # [layer, key_pos]
            cur.stats = np.zeros(self.num_layers)  # [layer]: the entropies (the shares: at the end)
        else:
            self._device_begin(cur, a)
        self._open[id(record)] = cur

    def _host_layer(self, cur: _Example, layer: int, maps: "np.ndarray") -> None:
        if cur.means is not None:  # a small example: its head means now, the rest at its end
            cur.means[layer], finite = rollout_device.host_head_mean(maps)
            if not finite:
                raise BertlookError(rollout_device.CHECK_MESSAGES[rollout_device.NON_FINITE])
            return
        a_hat = rollout_device.host_a_hat(maps)  # [query_pos, key_pos]
        if layer == 0:
            cur.r = a_hat
        elif self.causal:
            cur.r = rollout_device.lower_matmul(a_hat, cur.r)  # [query_pos, key_pos]
        else:
            cur.r = a_hat @ cur.r  # [query_pos, key_pos]
        cur.cols[layer], cur.stats[layer] = rollout_device.host_layer_stats(cur.r, self.causal)

    def _device_begin(self, cur: _Example, a: Any) -> None:
        raise BertlookError(f"rollout: maps on {a.device}: this reader takes host maps (RolloutAccumulator: any device)")

    def _device_layer(self, cur: _Example, layer: int, a: Any) -> None:
        raise NotImplementedError  # no device example begins here

    def _device_end(self, cur: _Example) -> None:
        raise NotImplementedError

    def _device_sums(self) -> "np.ndarray":
        return np.zeros_like(self.sums)  # [stat, layer]

    def partial(self, *, n_examples_in_store: int, max_examples: int | None = None,
                store_excluded: dict[str, Any] | None = None) -> tuple[dict[str, Any], dict[str, "np.ndarray"]]:
        """``(meta, arrays)`` of the examples added (:func:`rollout_partial` documents the layout)."""
        meta = {
            "attention": str(self.where),
            "num_layers": self.num_layers,
            "num_heads": self.num_heads,
            "map": self.map_kind,
            "special_tokens": {"cls": self.cls_token, "sep": self.sep_token},
            "n_examples": self.n_examples,
            "n_examples_in_store": int(n_examples_in_store),
            "max_examples": max_examples,
            "sum_n": self.sum_n,
            "store_excluded": self.store_excluded if store_excluded is None else store_excluded,
            **({"causal": True} if self.causal else {}),
        }
        sums = self.sums + self._device_sums() if self._device else self.sums.copy()  # [stat, layer]
        return meta, {"sums": sums, "sum_log_n": np.float64(self.sum_log_n)}


class RolloutAccumulator(HostRolloutAccumulator):
    """The rollout reader of the extraction stream: :class:`HostRolloutAccumulator` (the same calls, the same
    numbers) that also takes maps on another device (a GPU: torch). They stay there: the running rollout, the
    statistics and the checks are device tensors, read once by :meth:`partial` (no synchronisation per example),
    which raises for the first example that failed a check."""

    def _device_begin(self, cur: _Example, a: Any) -> None:
        cur.roles = rollout_device.device_roles(cur.masks, a.device)  # [role, key_pos]
        cur.stats = cur.roles.new_zeros((len(STAT_COLUMNS), self.num_layers))  # [stat, layer]
        cur.flag = rollout_device.device_zero_flag(cur.roles)  # 0-d

    def _device_layer(self, cur: _Example, layer: int, a: Any) -> None:
        a_hat, flag = rollout_device.device_a_hat(a.contiguous())  # [query_pos, key_pos], 0-d
        cur.flag |= flag
        if layer == 0:
            cur.r = a_hat
        elif self.causal:
            cur.r = rollout_device.lower_matmul(a_hat, cur.r, min_block=rollout_device.DEVICE_MIN_BLOCK)
        else:
            cur.r = a_hat @ cur.r  # [query_pos, key_pos]
        cur.stats[:, layer] = rollout_device.device_layer_stats(cur.r, cur.roles, self.causal, ENTROPY_SMOOTHING)

    def _device_end(self, cur: _Example) -> None:
        key = str(cur.stats.device)
        dev = self._device.get(key)
        if dev is None:
            dev = self._device[key] = {"sums": cur.stats.new_zeros(cur.stats.shape),
                                       "first": cur.flag.new_full((), -1), "code": cur.flag.new_zeros(())}
        dev["sums"] += cur.stats  # [stat, layer]
        first = (cur.flag != 0) & (dev["first"] < 0)  # 0-d: this example is the first that failed a check
        dev["first"] = dev["first"].where(~first, len(self._device_ids))
        dev["code"] = dev["code"].where(~first, cur.flag)
        self._device_ids.append(cur.record.get("id", self.n_examples))

    def _device_sums(self) -> "np.ndarray":
        """The device examples' sums ``[stat, layer]`` on the host (one copy per device); raises for the first
        device example that failed a check."""
        total = np.zeros_like(self.sums)  # [stat, layer]
        for dev in self._device.values():
            first, code = int(dev["first"]), int(dev["code"])
            if first >= 0:
                message = rollout_device.flag_message(code)
                raise BertlookError(f"{self.where}: example {self._device_ids[first]!r}: {message}")
            total += dev["sums"].cpu().numpy()
        return total

def rollout_partial(
    store: "AttentionStore", *, max_examples: int | None = None, segments=None
) -> tuple[dict[str, Any], dict[str, "np.ndarray"]]:
    """Sums and counts of the rollout statistics over the selected examples of one token-level store.

    Selection as :func:`bertlook.analyses.surface_stats.surface_stats_partial`
    (:func:`bertlook.attention.shards.select_examples`). ``arrays``: ``sums [stat, layer]`` (float64,
    :data:`STAT_COLUMNS` order), ``sum_log_n``; ``meta``: layout, special tokens, map kind,
    ``n_examples``, ``n_examples_in_store``, ``sum_n``, the store's own exclusions. Reduce with
    :func:`reduce_rollout`. The extraction stream computes the same partial without a store
    (:class:`RolloutAccumulator`).
    """
    store = open_store(store, level="token")
    cls_token, sep_token = special_tokens(store)
    acc = HostRolloutAccumulator(store.num_layers, store.num_heads, cls_token=cls_token, sep_token=sep_token,
                             causal=is_causal(store.meta), map_kind=_map_kind(store), where=store.path)
    for k in select_examples(store, max_examples, segments):
        acc.add(store.records[k], store.get(k))
    return acc.partial(n_examples_in_store=len(store), max_examples=max_examples,
                       store_excluded=store.meta.get("excluded") or {})


def reduce_rollout(
    partials: "list[tuple[dict[str, Any], dict[str, np.ndarray]]]", *, where: "list[Any] | None" = None
) -> tuple["pd.DataFrame", dict[str, Any]]:
    """Add partial sums (:func:`rollout_partial`, in shard order) and divide once -> ``(frame, summary)``.

    ``frame``: one row per layer, columns :data:`COLUMNS` (``layer`` 1-indexed; ``uniform_entropy`` =
    mean ln n, the same on every row). One partial gives exactly :func:`compute_rollout_stats`.
    """
    where, metas = partial_metas(partials, where, "rollout statistics")
    L = same_value([m["num_layers"] for m in metas], "num_layers", where)
    H = same_value([m["num_heads"] for m in metas], "num_heads", where)
    kind = same_value([m.get("map", "attention") for m in metas], "map kind", where)
    tokens = same_value([m["special_tokens"] for m in metas], "special tokens", where)
    max_examples = same_value([m.get("max_examples") for m in metas], "max_examples", where)
    causal = same_value([bool(m.get("causal", False)) for m in metas], "causal (decoder) maps", where)
    total = np.zeros((len(STAT_COLUMNS), L))  # [stat, layer]
    n_examples = 0
    sum_log_n = 0.0
    sum_n = 0
    for (meta, arrays), w in zip(partials, where):
        part = np.asarray(arrays["sums"], dtype=np.float64)  # [stat, layer]
        if part.shape != total.shape:
            raise BertlookError(f"{w}: partial sums of shape {list(part.shape)}, expected {list(total.shape)}")
        total += part
        n_examples += int(meta["n_examples"])
        sum_log_n += float(arrays["sum_log_n"])
        sum_n += int(meta["sum_n"])
    if n_examples == 0:
        where_txt = where[0] if len(where) == 1 else ", ".join(map(str, where))
        raise BertlookError(f"{where_txt}: no examples to compute rollout statistics on")
    uniform = sum_log_n / n_examples
    means = total / n_examples  # [stat, layer]
    data: dict[str, Any] = {"layer": np.arange(1, L + 1)}
    for i, c in enumerate(STAT_COLUMNS):
        data[c] = means[i]  # [layer]
    data["uniform_entropy"] = np.full(L, uniform)  # [layer]
    frame = pd.DataFrame(data, columns=COLUMNS)
    n_in_store = sum(int(m["n_examples_in_store"]) for m in metas)
    store_excluded = [m.get("store_excluded") or {} for m in metas]
    summary: dict[str, Any] = {
        "n_examples": n_examples,
        "n_examples_in_store": n_in_store,
        "max_examples": max_examples,
        "excluded": {"not selected (max_examples)": n_in_store - n_examples},
        "store_excluded": store_excluded[0] if len(store_excluded) == 1 else store_excluded,
        "uniform_entropy": uniform,
        **({"causal": True} if causal else {}),
        "mean_tokens": sum_n / n_examples,
        "num_layers": L,
        "num_heads": H,
        "map": kind,
        "residual_weight": RESIDUAL_WEIGHT,
        "special_tokens": dict(tokens),
        "punct_tokens": list(PUNCT_TOKENS),
    }
    return frame, summary


def compute_rollout_stats(
    store: "AttentionStore", *, max_examples: int | None = None, segments=None
) -> tuple["pd.DataFrame", dict[str, Any]]:
    """Per-layer rollout statistics of (the selected examples of) a token-level store: ``(frame, summary)``."""
    return reduce_rollout([rollout_partial(store, max_examples=max_examples, segments=segments)],
                          where=[store.path])


class RolloutStore(AttentionStore):
    """Read-only view of a word-level store whose example k is the rollout of its maps.

    ``get(k)`` -> ``R [layer, 1, query_word, key_word]`` (float64; rows sum to 1): a store with
    ``num_heads = 1``, so "head" ``L-1`` is the rollout up to layer L. Records, ``path``, ``level``
    and the gold trees are the base store's; ``meta`` is the base meta with ``"map": "rollout"``.
    Everything :mod:`bertlook.analyses.heads` uses (``records``, ``get``, ``len``, ``num_layers``,
    ``num_heads``, ``meta``, ``path``, ``level``) is provided; one example in memory at a time.
    """

    def __init__(self, base: "AttentionStore | Any") -> None:  # noqa: D107 - no AttentionStore.__init__: no files
        self._files = OrderedDict()
        self.base = open_store(base, level="word")
        self.path = self.base.path
        self.meta = {**self.base.meta, "num_heads": 1, "map": "rollout",
                     "rollout_of": _map_kind(self.base), "base_num_heads": self.base.num_heads}
        self.num_layers = self.base.num_layers
        self.num_heads = 1
        self.level = self.base.level
        self.records = self.base.records

    def get(self, i: int) -> "np.ndarray":
        """Rollout of example ``i`` as ``[layer, 1, query_word, key_word]`` float64 (base map checked on read)."""
        rec = self.records[i]
        try:
            r = rollout(self.base.get(i))  # [layer, query_word, key_word]
        except BertlookError as err:
            raise BertlookError(f"{self.path}: example {rec.get('id', i)!r}: {err}") from None
        return r[:, None]  # [layer, 1, query_word, key_word]

    def check_map(self, rec: dict[str, Any], attn: "np.ndarray") -> None:
        """Base maps are checked when read; a rollout of checked maps needs no float16 check."""

    def close(self) -> None:
        base = getattr(self, "base", None)
        if base is not None:
            base.close()


# --------------------------------------------------------------------------------------------------
# the rollout step
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RolloutTable1Options(Table1Scoring):
    """The settings of Table 1 on rollout maps (:func:`run_rollout`), with the defaults of the
    ``bertlook rollout`` flags: Table 1's scoring (:class:`~bertlook.analyses.table1.Table1Scoring`: rows,
    offsets of the baselines, the poss switch, bootstrap intervals), the first ``max_sentences``
    of the word store (``--max-sentences``) and the tree source (``treebank_kind`` / ``treebank_name``,
    default the store's meta)."""

    max_sentences: int | None = None
    treebank_kind: str | None = None
    treebank_name: str | None = None


@dataclass(frozen=True)
class RolloutResult:
    """What :func:`run_rollout` computed. ``stats``: the per-layer statistics (:data:`COLUMNS`;
    ``rollout_stats.csv``), None without a token-level input; ``table`` (Table 1 on rollout maps, no
    paper columns), ``accuracy`` (every layer x relation x direction) and ``scores``, None without a word
    store; ``summary``: the step's summary JSON, ``{"stats": ..., "table1": ...}`` with the parts that ran."""

    stats: pd.DataFrame | None
    table: pd.DataFrame | None
    accuracy: pd.DataFrame | None
    scores: HeadScores | None
    summary: dict[str, Any]


def _stats_part(
    attention: "AttentionStore | str | os.PathLike | None" = None,
    *,
    partials: "Sequence[str | os.PathLike] | None" = None,
    max_examples: int | None = None,
    segments=None,
) -> tuple["pd.DataFrame", dict[str, Any]]:
    """The per-layer statistics of a token-level store (``attention``: path or open store; selection as
    :func:`compute_rollout_stats`) or of the partial sums of its shards (``partials``: NPZ files of
    :func:`rollout_partial`, in shard order) -> ``(frame, summary)``; the summary starts with the
    store(s) read (``"attention"``)."""
    if (attention is None) == (partials is None):
        raise BertlookError("rollout statistics: give a token-level store or partial sums (one of them)")
    if partials is not None:
        loaded = [load_partial(p, PARTIAL_KIND) for p in partials]
        frame, summary = reduce_rollout(loaded, where=list(partials))
        where = [m["attention"] for m, _ in loaded]
        return frame, {"attention": where[0] if len(where) == 1 else where, **summary}
    store = open_store(attention, level="token")
    frame, summary = compute_rollout_stats(store, max_examples=max_examples, segments=segments)
    return frame, {"attention": store_where(attention), **summary}


def _table1_part(
    word_attention: "AttentionStore | str | os.PathLike", options: RolloutTable1Options | None = None
) -> tuple["pd.DataFrame", "pd.DataFrame", HeadScores, dict[str, Any]]:
    """Table 1 on the rollout maps of a word-level store with gold trees (path or open store; "head"
    ``L-1`` = the rollout up to layer L) -> ``(table, accuracy, scores, summary)``: the table of
    :func:`bertlook.analyses.table1.table1` (no paper columns), every layer's accuracy and the summary
    entries (tree source, counts, settings, the best layer per row, the selections)."""
    opts = options if options is not None else RolloutTable1Options()
    base = open_store(word_attention, level="word")
    kind, name, scheme = resolve_tree_source(base, opts.treebank_kind, opts.treebank_name,
                                             store_where(word_attention))
    store = RolloutStore(base)
    scores = score_heads(store, offsets=opts.offsets, poss_from_possessive=opts.poss_from_possessive,
                         max_examples=opts.max_sentences)
    table = table1(scores, min_count=opts.min_count, dev_store=store, bootstrap=opts.bootstrap,
                   confidence=opts.confidence, seed=opts.seed, forced_relations=FORCED_BY_SCHEME[scheme])
    acc = head_accuracy_table(scores)
    best = {row.relation: {"layer": int(str(row.best_head).split("-")[0]), "direction": row.direction,
                           "accuracy": float(row.accuracy), "baseline_offset": int(row.baseline_offset),
                           "baseline_accuracy": float(row.baseline_accuracy), "count": int(row.count)}
            for row in table.itertuples(index=False)}
    summary = {
        "word_attention": store_where(word_attention),
        "map": "rollout",
        "rollout_of": store.meta["rollout_of"],
        "treebank_kind": kind,
        "treebank_name": name,
        "relation_scheme": scheme,
        "n_sentences": scores.n_sentences,
        "n_sentences_in_store": len(base),
        "excluded": {"not selected (max_examples)": len(base) - scores.n_sentences},
        "store_excluded": base.meta.get("excluded") or {},
        "n_words": scores.n_words,
        "num_layers": scores.num_layers,
        **relation_rows_summary(scores, table),
        "min_count": opts.min_count,
        "offsets": list(scores.offsets),
        "poss_from_possessive": scores.poss_from_possessive,
        "n_poss_switched": scores.n_poss_affected,
        "bootstrap": opts.bootstrap,
        "confidence": opts.confidence,
        "seed": opts.seed,
        "best_layer": best,
        "selections": selection_candidates(table, scores),
    }
    return table, acc, scores, summary


def run_rollout(
    attention: "AttentionStore | str | os.PathLike | None" = None,
    *,
    partials: "Sequence[str | os.PathLike] | None" = None,
    word_attention: "AttentionStore | str | os.PathLike | None" = None,
    max_examples: int | None = None,
    segments=None,
    table1_options: RolloutTable1Options | None = None,
) -> RolloutResult:
    """The ``rollout`` step (definitions: docs/definitions.md#attention-rollout-abnar--zuidema-2020):
    the per-layer statistics of a token-level store (``attention``: path or open store; the first
    ``max_examples`` of ``segments``) or of its shards' ``partials`` (NPZ files of :func:`rollout_partial`,
    in shard order), and / or Table 1 on the rollout maps of the word-level store ``word_attention``
    (settings ``table1_options``). Everything is computed before the caller writes anything."""
    stats_mode = attention is not None or bool(partials)
    if attention is not None and partials:
        raise BertlookError("rollout: give a token-level store or partial sums (not both)")
    if not stats_mode and word_attention is None:
        raise BertlookError("rollout: give a token-level store, partial sums or a word-level store")
    summary: dict[str, Any] = {}
    frame = table = acc = scores = None
    if stats_mode:
        frame, summary["stats"] = _stats_part(attention, partials=partials or None, max_examples=max_examples,
                                              segments=segments)
    if word_attention is not None:
        table, acc, scores, summary["table1"] = _table1_part(word_attention, table1_options)
    return RolloutResult(stats=frame, table=table, accuracy=acc, scores=scores, summary=summary)
