"""The word-level conversion on the CPU in one pass per head (numba): :func:`bertlook.attention.alignment.
token_to_word_maps`' arithmetic, the same float32 additions in the same order, so the same maps bit for bit.

The torch path gathers a word's first token and then adds each further token with an exact zero where a word has
none: a dozen small tensor operations per example and layer, whose dispatch dominated ``extract-words`` (0.2 ms per
example and layer: 1.3 s of the 8.1 s forward-and-readers of 180 BERT-base sentences with the norm-based and
random-init maps, 2026-12-06). Here each head's map is read once: every row's word columns summed in token order
(``cols[i, w] = ((a[i, s] + a[i, s + 1]) + ...)``), then the word rows from ``cols`` (``mean``: each token row times
``1 / count`` in float32, then added in token order; ``first``: the first token's row; ``max``: the element-wise
maximum, renormalised by the caller with torch, as the torch path does). No ``fastmath``: a product rounds before
its addition (no fused multiply-add) and no sum is reassociated, as torch computes them.

Compiled once per checkout (``cache=True``: numba's cache in ``__pycache__``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

MODES = {"mean": 0, "first": 1, "max": 2}


@njit(nogil=True, cache=True)
def _word_maps(a, starts, counts, mode, out):  # pragma: no cover - compiled
    """``a`` ``[maps, n, n]`` float32 -> ``out`` ``[maps, m, m]``; ``starts`` / ``counts`` ``[m]`` int64."""
    k, n = a.shape[0], a.shape[1]
    m = starts.shape[0]
    cols = np.empty((n, m), dtype=np.float32)  # [query_pos, key_word]
    weight = np.empty(m, dtype=np.float32)
    for w in range(m):
        weight[w] = np.float32(1.0) / np.float32(counts[w])
    for h in range(k):
        for i in range(n):
            for w in range(m):
                s = starts[w]
                acc = a[h, i, s]
                for j in range(1, counts[w]):
                    acc = acc + a[h, i, s + j]
                cols[i, w] = acc
        for v in range(m):  # query word
            s, c = starts[v], counts[v]
            for w in range(m):
                if mode == 1:
                    out[h, v, w] = cols[s, w]
                elif mode == 0:
                    acc = cols[s, w] * weight[v]
                    for j in range(1, c):
                        acc = acc + cols[s + j, w] * weight[v]
                    out[h, v, w] = acc
                else:
                    acc = cols[s, w]
                    for j in range(1, c):
                        acc = max(acc, cols[s + j, w])
                    out[h, v, w] = acc


def word_maps(a: np.ndarray, starts: np.ndarray, counts: np.ndarray, mode: str) -> np.ndarray:
    """``a`` ``[..., n, n]`` float32 (any strides) -> ``[..., m, m]`` float32 (``max``: not yet renormalised)."""
    lead, n = a.shape[:-2], a.shape[-1]
    flat = np.ascontiguousarray(a, dtype=np.float32).reshape(-1, n, n)
    m = int(starts.shape[0])
    out = np.empty((flat.shape[0], m, m), dtype=np.float32)
    _word_maps(flat, np.ascontiguousarray(starts, dtype=np.int64), np.ascontiguousarray(counts, dtype=np.int64),
               MODES[mode], out)
    return out.reshape(*lead, m, m)
