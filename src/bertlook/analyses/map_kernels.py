"""Compiled (numba) kernels over float16 maps for the per-example statistics: the same numbers as numpy, bit for bit.

The extraction job's readers (:mod:`bertlook.attention.stream`) call :func:`bertlook.analyses.surface_stats.row_entropy`
and :func:`bertlook.analyses.rollout.rollout` on every segment map; with numpy they cost 11 and 8 ms per 128-token
MiniLM example (a float64 table lookup of 1.2 M entries, then a sum; a float64 copy of the whole map for a mean
over the heads). These kernels read the float16 bit patterns in place:

* :func:`table_row_sums`: ``sum_j table[bits[r, j]]`` per row, added in numpy's own order (its pairwise sum:
  8 accumulators over blocks of up to 128, :func:`pairwise_leaf`, halves above that, :func:`_pairwise`), so the
  result equals ``np.take(table, bits).sum(axis=-1)`` bit for bit (tests/test_map_kernels.py checks every length
  to 300);
* :func:`head_mean`: ``mean over heads`` of the float64 values, the heads added in order then divided by their
  count, as ``np.asarray(a, float64).mean(axis=1)``, and whether every value is finite.

Measured on a 6 x 12 x 128 x 128 map (scripts/bench_one_pass.py runs them in the stream): row entropy 10.8 -> 1.5 ms,
the head mean and finiteness check of the rollout 6.4 -> 1.2 ms. ``cache=True``: compiled once per checkout
(numba's cache in ``__pycache__``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

JIT = dict(nogil=True, cache=True)  # no fast-math: the sums must keep numpy's order and rounding
_PW_BLOCK = 128  # numpy's PW_BLOCKSIZE


@njit(inline="always", **JIT)
def pairwise_leaf(table, bits, start, n):  # pragma: no cover - compiled
    """numpy's ``pairwise_sum`` of ``table[bits[start : start + n]]`` for ``n <= 128`` (one block: below 8 values
    in order, else 8 accumulators combined as a tree, then the tail). Not recursive, so compiled callers in other
    modules load it from numba's cache reliably (:func:`bertlook.analyses.layer_stats.pairwise_plan`); inlined
    (as a call from the recursive :func:`_pairwise` it was not, and cost it 35% at n = 512)."""
    if n < 8:
        res = -0.0
        for i in range(n):
            res += table[bits[start + i]]
        return res
    r0, r1 = table[bits[start]], table[bits[start + 1]]
    r2, r3 = table[bits[start + 2]], table[bits[start + 3]]
    r4, r5 = table[bits[start + 4]], table[bits[start + 5]]
    r6, r7 = table[bits[start + 6]], table[bits[start + 7]]
    i, stop = 8, n - n % 8
    while i < stop:
        k = start + i
        r0 += table[bits[k]]
        r1 += table[bits[k + 1]]
        r2 += table[bits[k + 2]]
        r3 += table[bits[k + 3]]
        r4 += table[bits[k + 4]]
        r5 += table[bits[k + 5]]
        r6 += table[bits[k + 6]]
        r7 += table[bits[k + 7]]
        i += 8
    res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
    while i < n:
        res += table[bits[start + i]]
        i += 1
    return res


@njit(**JIT)
def _pairwise(table, bits, start, n):  # pragma: no cover - compiled
    """numpy's ``pairwise_sum`` of ``table[bits[start : start + n]]`` (float64): :func:`pairwise_leaf` up to 128
    values, halves (the first a multiple of 8) above that."""
    if n <= _PW_BLOCK:
        return pairwise_leaf(table, bits, start, n)
    n2 = n // 2
    n2 -= n2 % 8
    return _pairwise(table, bits, start, n2) + _pairwise(table, bits, start + n2, n - n2)


@njit(**JIT)
def _table_row_sums(table, bits, n):  # pragma: no cover - compiled
    rows = bits.size // n
    out = np.empty(rows)
    for r in range(rows):
        out[r] = _pairwise(table, bits, r * n, n)
    return out


def table_row_sums(table: np.ndarray, bits: np.ndarray) -> np.ndarray:
    """``np.take(table, bits).sum(axis=-1)`` (``table`` float64 ``[65536]``, ``bits`` uint16 ``[..., n]``), bit for bit."""
    bits = np.ascontiguousarray(bits)
    n = bits.shape[-1]
    if n == 0:
        return np.zeros(bits.shape[:-1])
    return _table_row_sums(np.ascontiguousarray(table, dtype=np.float64), bits.reshape(-1), n).reshape(bits.shape[:-1])


def float16_values() -> np.ndarray:
    """The float64 value of every float16 bit pattern ``[65536]`` (exact)."""
    return np.arange(2**16, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float64)


_F16 = float16_values()
_F16.setflags(write=False)


@njit(**JIT)
def _head_mean(values, bits, out):  # pragma: no cover - compiled
    L, H, n, m = bits.shape
    finite = True
    for layer in range(L):
        for i in range(n):
            for j in range(m):
                b = bits[layer, 0, i, j]
                finite &= (b & 0x7C00) != 0x7C00
                out[layer, i, j] = values[b]
            for h in range(1, H):
                for j in range(m):
                    b = bits[layer, h, i, j]
                    finite &= (b & 0x7C00) != 0x7C00
                    out[layer, i, j] += values[b]
            for j in range(m):
                out[layer, i, j] /= H
    return finite


def head_mean(maps: np.ndarray) -> tuple[np.ndarray, bool]:
    """``(np.asarray(maps, float64).mean(axis=1), every value finite)`` of float16 ``maps [layer, head, n, m]``
    (``[layer, n, m]`` float64, the heads added in order, then divided by their count: numpy's result bit for bit)."""
    if maps.dtype != np.float16 or maps.ndim != 4 or maps.shape[1] < 1:
        raise ValueError(f"head_mean: float16 [layer, head, n, m] maps with a head, got {maps.dtype} {list(maps.shape)}")
    bits = np.ascontiguousarray(maps).view(np.uint16)
    out = np.empty((maps.shape[0], maps.shape[2], maps.shape[3]))
    finite = _head_mean(_F16, bits, out)
    return out, bool(finite)
