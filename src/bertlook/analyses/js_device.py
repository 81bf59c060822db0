"""The entries one example's JS divergences read, and the torch kernel that reads them on the maps' device.

:class:`bertlook.analyses.cluster_heads.JsAccumulator` takes an example layer by layer; this module says
which entries of each layer it keeps and with what weight, and computes the JS terms of the kept entries
with torch (any device; the CPU default is the numba kernel of :mod:`bertlook.analyses.xlogx`).

**Which entries** (:class:`EntryPlan`, per example). With the identity of :mod:`bertlook.analyses.cluster_heads`,
``JS_ij`` is a sum over entries ``e`` of ``f(p, q) = p ln p + q ln q + ln 2 (p + q) - (p + q) ln (p + q)``
(``p``, ``q``: heads i and j's smoothed entries, halved at the end). ``f(c, c) = 0`` for every ``c``: an entry
where every head has the same value adds exactly nothing to any pair. In a causal map every key after the
query has ``p = 0`` in every head, smoothed to ``s/n`` in every head, so the exact sum can skip them: the
per-head terms (``sum p ln p``, ``sum p``) and the mixture term all run over the visible triangle (keys <=
query), ``n (n + 1) / 2`` of the ``n^2`` entries. The smoothing keeps its definition (``s/n`` with ``n`` the
segment's length, over all ``n`` keys of a row), so the value is the paper's, up to float rounding (the
skipped entries' float32 terms cancel only up to rounding in the full computation).

**The estimator** (``rows=R``; issue 42 item 3): exact JS costs heads^2 x n^2 per layer. With ``R < n``, the
``n`` query rows are cut into ``R`` strata of consecutive rows (bounds ``floor(s n / R)``), one row drawn
uniformly in each (:func:`sample_rows`, ``numpy.random.default_rng([seed, stable hash of the example id])``:
the same rows on every run, device and thread count); row ``q`` of stratum ``s`` gets weight ``w_s`` = the
stratum's size, and the estimate is ``sum_s w_s JS-row(q_s)``: since ``E[w_s JS-row(q_s)]`` is the stratum's
sum, the estimate's expectation is the exact sum (stratified sampling: unbiased; the strata follow the
position, which a causal map's row sums depend on). ``R >= n`` keeps every row with weight 1: the exact
value. The accumulator keeps only the sampled rows of each layer (``[head, R, n]``, then their visible keys).
Measured error: docs/definitions.md#jensen-shannon-divergence-between-heads-and-mds.

The torch kernel (:func:`js_terms_torch`): float32 smoothed entries, float32 logs, sums in float64, head
pairs in blocks of about :data:`DEVICE_BLOCK_BYTES`; nothing leaves the device (no ``.item()``).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
from typing import Any

import numpy as np

ESTIMATOR = "sampled-rows"  # the partial's meta["estimator"] with rows=R (exact: no key)
DEFAULT_ROWS = 64  # the documented default R for long contexts (docs/definitions.md: measured error)
DEVICE_BLOCK_BYTES = 2**28  # one block of pairwise mixtures on a device (float32 [bi, bj, E])


def stable_id_hash(example_id: Any) -> int:
    """A 64-bit hash of an example id that does not change between processes (not Python's ``hash``)."""
    text = json.dumps(example_id, sort_keys=True, default=str)
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "little")


def sample_rows(n: int, rows: int | None, seed: int, example_id: Any) -> tuple["np.ndarray", "np.ndarray"]:
    """``(q, w)``: the query rows kept for an example of ``n`` tokens (ascending) and their weights.

    ``rows`` None or ``>= n``: every row, weight 1. Else one row per stratum (module docstring), weight the
    stratum's size; ``w.sum() == n``.
    """
    if rows is None or rows >= n:
        return np.arange(n, dtype=np.int64), np.ones(n, dtype=np.float64)
    rng = np.random.default_rng([int(seed), stable_id_hash(example_id)])
    bounds = (np.arange(rows + 1, dtype=np.int64) * n) // rows  # [rows + 1]: strata [b_s, b_s+1), none empty
    q = rng.integers(bounds[:-1], bounds[1:])  # [rows]
    return q.astype(np.int64), np.diff(bounds).astype(np.float64)


def entries_per_pair(n: int, *, causal: bool = False, rows: int | None = None) -> float:
    """Map entries the JS sums read per head pair for an example of ``n`` tokens (for sizing: the kernel's time
    is about this times the number of head pairs times its ns per entry): ``n^2`` (causal: ``n (n + 1) / 2``),
    with ``rows=R < n``: ``R n`` (causal: the expected ``R (n + 1) / 2``)."""
    r = n if rows is None or rows >= n else rows
    return r * (n + 1) / 2 if causal else float(r * n)


@functools.lru_cache(maxsize=16)
def _visible_index(n: int) -> "np.ndarray":
    """Flat indices ``q * n + k`` of the visible triangle ``k <= q`` of an ``[n, n]`` map, row by row."""
    return _row_entries(np.arange(n, dtype=np.int64), n, True)


def _row_entries(q: "np.ndarray", n: int, causal: bool) -> "np.ndarray":
    """Flat indices into ``[len(q), n]`` (the kept rows) of the entries kept: keys ``<= q_s`` if causal."""
    R = len(q)
    if not causal:
        return np.arange(R * n, dtype=np.int64)
    lens = q + 1  # [rows]
    starts = np.cumsum(lens) - lens  # [rows]
    row = np.repeat(np.arange(R, dtype=np.int64), lens)  # [entry]
    return row * n + (np.arange(int(lens.sum()), dtype=np.int64) - np.repeat(starts, lens))


def copy_triangle(x: "np.ndarray", out: "np.ndarray") -> None:
    """``out[h] = `` the visible triangle of ``x[h]`` row by row (the order of :func:`_visible_index`), cast to
    ``out``'s dtype: ``x[head, n, n]``, ``out[head, n (n + 1) / 2]``."""
    off = 0
    for q in range(x.shape[1]):
        out[:, off:off + q + 1] = x[:, q, :q + 1]
        off += q + 1


class EntryPlan:
    """The entries of one example that the JS sums read (module docstring).

    ``q``: the query rows kept (all of them when exact); per group of equal weight (one group when exact,
    at most two with strata): ``(weight, flat index into the kept rows [len(q) * n], or None for all)``.
    ``entry_weight``: the weight of each kept entry in group order (for the torch kernel; None when all 1).
    """

    def __init__(self, n: int, *, causal: bool, rows: int | None, seed: int, example_id: Any) -> None:
        self.n, self.causal = int(n), bool(causal)
        self.q, w = sample_rows(self.n, rows, seed, example_id)  # [rows], [rows]
        self.all_rows = len(self.q) == self.n
        self.groups: list[tuple[float, Any]] = []
        if self.all_rows:
            self.groups.append((1.0, _visible_index(self.n) if self.causal else None))
        else:
            for weight in np.unique(w):
                sel = np.flatnonzero(w == weight)  # [rows of the group]
                idx = _row_entries(self.q[sel], self.n, self.causal)  # into [len(sel), n]
                # into [len(q), n]: row r of the group is row sel[r] of the kept rows
                self.groups.append((float(weight), sel[idx // self.n] * self.n + idx % self.n))
        sizes = [self.n * len(self.q) if idx is None else len(idx) for _, idx in self.groups]
        self.size = sum(sizes)
        self.entry_weight = None if self.all_rows else np.repeat([g[0] for g in self.groups], sizes)


def to_device(x: "np.ndarray", device):
    """A host array on ``device`` without waiting for the device's queued work (pinned, non-blocking)."""
    import torch  # lazy: the device path only (store-reading steps run without torch)

    t = torch.from_numpy(np.ascontiguousarray(x))
    if getattr(device, "type", str(device)) == "cpu":
        return t
    return t.pin_memory().to(device, non_blocking=True)


def js_terms_torch(P, weight=None, *, block_bytes: int = DEVICE_BLOCK_BYTES):
    """``(xlx[K], tot[K], mix[K, K])`` of smoothed entries ``P[K, E]`` (float32 tensor), float64 on P's device.

    ``xlx[k] = sum_e w_e P ln P``, ``tot[k] = sum_e w_e P``, ``mix[i, j] = sum_e w_e S ln S`` with
    ``S = P_i + P_j`` for ``j >= i`` (blocks of heads; entries below the diagonal blocks are left 0 or
    filled, callers read the upper triangle). ``weight[E]``: float32 tensor or None (all 1).
    """
    import torch  # lazy: see to_device

    K, E = P.shape
    t = P * torch.log(P)  # [layer_head, entry]
    xlx = (t if weight is None else t.mul_(weight)).sum(dim=1, dtype=torch.float64)  # [layer_head]
    tot = (P if weight is None else P * weight).sum(dim=1, dtype=torch.float64)  # [layer_head]
    del t
    mix = torch.zeros((K, K), dtype=torch.float64, device=P.device)  # [layer_head, layer_head]
    b = max(1, min(K, int(math.sqrt(block_bytes / max(1, 4 * E)))))
    for i0 in range(0, K, b):
        i1 = min(K, i0 + b)
        for j0 in range(i0, K, b):
            j1 = min(K, j0 + b)
            S = P[i0:i1, None, :] + P[None, j0:j1, :]  # [bi, bj, entry]
            S.mul_(torch.log(S))
            if weight is not None:
                S.mul_(weight)
            mix[i0:i1, j0:j1] = S.sum(dim=2, dtype=torch.float64)
    return xlx, tot, mix


def js_matrix_torch(xlx, tot, mix):
    """The JS matrix ``[K, K]`` (float64 tensor, symmetric, zero diagonal, negatives clipped) of the terms."""
    import torch  # lazy: see to_device

    base = xlx + math.log(2.0) * tot  # [layer_head]
    js = torch.triu(0.5 * (base[:, None] + base[None, :] - mix), diagonal=1)  # [layer_head, layer_head]
    return (js + js.T).clamp_(min=0.0)


@dataclasses.dataclass
class OpenExample:
    """An example of :class:`bertlook.analyses.cluster_heads.JsAccumulator` between its first layer and its ``end_example``: which entries it
    reads (``plan``), the layers read so far (``parts``: host buffers per entry group, or a device tensor per
    layer), the device (None: the host) and the device's row and entry indices."""

    plan: Any
    next_layer: int = 0
    parts: list = dataclasses.field(default_factory=list)
    device: Any = None
    q_dev: Any = None
    idx_dev: list = dataclasses.field(default_factory=list)
