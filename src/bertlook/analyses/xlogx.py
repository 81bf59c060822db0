"""Fused numba kernels for the mixture term of the JS divergence: ``sum (P_i + P_j) ln (P_i + P_j)``.

:func:`mixture_xlx` gives that sum for every pair of heads ``j >= i`` of one example (``P[K, E]``: one
row of ``E = n * n`` smoothed attention entries per head), :func:`row_xlx` the per-head ``sum P ln P``
and ``sum P``; :mod:`bertlook.analyses.cluster_heads` combines them (its module docstring has the
identity). Importing this module imports numba (the caller falls back to torch without it).

The float32 logarithm :func:`logf` is Cephes' ``logf`` (cephes/single/logf.c, S. L. Moshier): write
``x = (1 + m) 2^e`` with ``1 + m`` in ``[sqrt(1/2), sqrt(2))`` (bit manipulation, :func:`_split_exponent`),
then ``ln x = m - m^2/2 + m^3 P(m) + e ln 2``, ``P`` the degree-8 minimax polynomial :data:`LOGF_POLY`
(Horner), ``ln 2`` split in two parts (:data:`LN2_HI` + :data:`LN2_LO`) so ``e ln 2`` stays exact.
Measured against float64 ``np.log`` on every float32 in ``(1e-7, 2]`` (the smoothed maps' sums lie in
``[2e-3 / n, 2]``): max error 1.07 ulp of the float32 result (at x = 0.178; 1.55 ulp over all positive
normal floats, at large x); tests/test_xlogx.py samples that domain. Inputs are strictly positive
here; 0 and subnormals give a finite log (about -88 for 0), so ``x ln x`` is 0 or below 1e-36 for
them, as its limit. A NaN or inf input gives a NaN or inf sum through the product ``x * ln x`` (``ln``
itself returns a finite number for them): the fast-math flags :data:`FASTMATH` leave out ``nnan`` and
``ninf``, so the compiler keeps those semantics.

Sums: within a block of :data:`BLOCK` entries the products are added in the input's dtype (float32:
the loop vectorises, 8 lanes x 2-4 accumulators, so each partial sum has at most ~64 terms), blocks
are added in float64. Measured on demo-shaped maps (n = 128) against a float64 reference, relative to
``sum |x ln x|``: block 512 max 2.6e-8 (rms 8e-9; the log's own rounding is ~3e-9), block 4096 max
8e-8, one float32 sum of all 16384 entries 4e-7; float64 accumulation of every term gets 2e-9 (the
log's rounding alone) but runs 2x slower (the float32 -> float64 conversion breaks the vectorised
reduction).

Loads: the loops over entries index with unsigned integers. numba wraps a negative signed index around,
so with a signed one LLVM cannot prove the addresses consecutive and vectorises the loads as gathers
(``vgatherqps``); on Intel CPUs with the Gather Data Sampling mitigation a gather costs tens of cycles:
2.58 -> 0.415 ns per pair-element on an Ice Lake Xeon (scripts/bench_js.py), the same sums bit for bit.
The AMD EPYC this kernel was first measured on hid it (cheap gathers). tests/test_xlogx.py checks the
compiled loops for gathers.

Threads: :func:`mixture_xlx` runs ``num_threads`` workers (``nogil`` kernels) that take rows ``i`` of
the triangle one at a time, longest first (row ``i`` has ``K - i`` pairs), so the work balances
whatever else runs on the cores. Every entry is computed by the same code on the same data whatever
thread gets it: the result does not depend on ``num_threads``, bit for bit. ``cache=True``: compiled
code is kept in ``__pycache__`` (numba's cache, or ``NUMBA_CACHE_DIR``), so a job loads it instead of
compiling again: first call about 2 s with an empty cache, 0.5-0.7 s from the cache (scripts/bench_js.py).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic, overload

from bertlook.threads import run_items

# fast-math without nnan/ninf: reassociation (vectorised sums) and contraction (FMA) only matter here
FASTMATH = {"nsz", "arcp", "contract", "afn", "reassoc"}
JIT = dict(nogil=True, cache=True, fastmath=FASTMATH)
BLOCK = 512  # entries per float32 partial sum (module docstring: measured error)

# Cephes logf: ln(1 + m) = m - m^2 / 2 + m^3 P(m), P's coefficients from the highest degree down
LOGF_POLY = (
    7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1, 1.4249322787e-1,
    -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1, 3.3333331174e-1,
)
LN2_HI = 0.693359375  # ln 2 = LN2_HI + LN2_LO; LN2_HI has 9 significant bits: e * LN2_HI is exact
LN2_LO = -2.12194440e-4
_P0, _P1, _P2, _P3, _P4, _P5, _P6, _P7, _P8 = (np.float32(c) for c in LOGF_POLY)
_HI, _LO, _HALF, _ONE = np.float32(LN2_HI), np.float32(LN2_LO), np.float32(0.5), np.float32(1.0)
_SQRT_HALF_BITS = 0x3F3504F3  # bits of float32 sqrt(1/2)
_MANTISSA_MASK = 0x007FFFFF


@intrinsic
def _split_exponent(typingctx, x):
    """``(1 + m, e)`` as float32 with ``x = (1 + m) 2^e`` and ``1 + m`` in ``[sqrt(1/2), sqrt(2))``.

    In 32-bit integer LLVM IR (numba's own integer arithmetic widens to int64, which AVX2 cannot
    convert to float in vectors): subtracting the bits of sqrt(1/2) moves the exponent boundary to
    sqrt(1/2); the shifted exponent field is ``e``, the mantissa gets sqrt(1/2)'s bits back.
    """
    if x != types.float32:
        return None
    sig = types.UniTuple(types.float32, 2)(types.float32)

    def codegen(context, builder, signature, args):
        i32 = ir.IntType(32)
        bits = builder.sub(builder.bitcast(args[0], i32), ir.Constant(i32, _SQRT_HALF_BITS))
        e = builder.sitofp(builder.ashr(bits, ir.Constant(i32, 23)), ir.FloatType())
        mant = builder.add(builder.and_(bits, ir.Constant(i32, _MANTISSA_MASK)), ir.Constant(i32, _SQRT_HALF_BITS))
        return context.make_tuple(builder, signature.return_type, [builder.bitcast(mant, ir.FloatType()), e])

    return sig, codegen


@njit(inline="always", fastmath=FASTMATH)
def logf(x):
    """Natural log of a float32 (Cephes ``logf``, module docstring); vectorises inside numba loops."""
    one_m, e = _split_exponent(x)
    m = one_m - _ONE
    z = m * m
    y = _P0
    y = y * m + _P1
    y = y * m + _P2
    y = y * m + _P3
    y = y * m + _P4
    y = y * m + _P5
    y = y * m + _P6
    y = y * m + _P7
    y = y * m + _P8
    y = y * m * z
    y = y + e * _LO
    y = y - _HALF * z
    return m + y + e * _HI


def _log(x):  # pragma: no cover - only called from jitted code, where the overload below replaces it
    return np.log(x)


@overload(_log, inline="always", jit_options={"fastmath": FASTMATH})
def _log_overload(x):
    """float32: :func:`logf`; float64: libm's ``log`` (the float64 reference path)."""
    if x == types.float32:
        return lambda x: logf(x)
    if x == types.float64:
        return lambda x: np.log(x)
    return None


@njit(**JIT)
def log_array(x, out):  # x, out: [entry]
    """``out = ln(x)`` elementwise with the kernels' logarithm (tests and benchmarks)."""
    for k in range(np.uint64(x.size)):
        out[k] = _log(x[k])


@njit(**JIT)
def pair_xlx(a, b):  # a, b: [query_pos * key_pos]
    """``sum (a + b) ln(a + b)`` in float64 (partial sums of :data:`BLOCK` entries in the input dtype)."""
    total = 0.0
    for e0 in range(0, a.size, BLOCK):
        part = np.float32(0.0)  # numba unifies it with the products: float32 or float64 like the input
        for e in range(np.uint64(e0), np.uint64(min(a.size, e0 + BLOCK))):  # unsigned: module docstring, Loads
            x = a[e] + b[e]
            part += x * _log(x)
        total += part
    return total


@njit(**JIT)
def _mixture_rows(P, i0, i1, out):  # P: [layer_head, query_pos * key_pos]; out: [layer_head, layer_head]
    """``out[i, j] = pair_xlx(P[i], P[j])`` for ``i0 <= i < i1`` and ``j >= i``."""
    for i in range(i0, i1):
        for j in range(i, P.shape[0]):
            out[i, j] = pair_xlx(P[i], P[j])


@njit(**JIT)
def _row_xlx(P, xlx, tot):  # P: [layer_head, query_pos * key_pos]; xlx, tot: [layer_head]
    """``xlx[k] = sum P_k ln P_k`` (blocks as :func:`pair_xlx`) and ``tot[k] = sum P_k`` (float64)."""
    for k in range(P.shape[0]):
        row, s = P[k], 0.0
        for e0 in range(0, row.size, BLOCK):
            part = np.float32(0.0)
            for e in range(np.uint64(e0), np.uint64(min(row.size, e0 + BLOCK))):  # unsigned: module docstring, Loads
                part += row[e] * _log(row[e])
            s += part
        xlx[k] = s
        tot[k] = np.sum(P[k].astype(np.float64))


def _check(P) -> "np.ndarray":
    P = np.asarray(P)
    if P.ndim != 2 or P.dtype not in (np.float32, np.float64):
        raise ValueError(f"P must be a 2-D float32 or float64 array, got {P.dtype} {list(P.shape)}")
    return np.ascontiguousarray(P)


def row_xlx(P) -> tuple["np.ndarray", "np.ndarray"]:
    """``(sum P_k ln P_k, sum P_k)`` per row ``k`` of ``P[K, E]``, float64, the same log as :func:`mixture_xlx`."""
    P = _check(P)  # [layer_head, query_pos * key_pos]
    xlx = np.empty(P.shape[0], dtype=np.float64)  # [layer_head]
    tot = np.empty(P.shape[0], dtype=np.float64)  # [layer_head]
    _row_xlx(P, xlx, tot)
    return xlx, tot


def mixture_xlx(P, num_threads: int = 1) -> "np.ndarray":
    """``out[i, j] = sum (P_i + P_j) ln(P_i + P_j)`` for ``j >= i`` (float64 ``[K, K]``, zeros below).

    ``num_threads`` workers take the rows of the triangle longest first (module docstring); the
    numbers do not depend on ``num_threads``.
    """
    P = _check(P)  # [layer_head, query_pos * key_pos]
    K = P.shape[0]
    out = np.zeros((K, K), dtype=np.float64)  # [layer_head, layer_head], upper triangle
    workers = max(1, min(int(num_threads), K))
    if workers == 1:
        _mixture_rows(P, 0, K, out)
        return out
    # row i has K - i pairs: the first rows, the longest, are taken first; rows of ``out`` are disjoint
    run_items(lambda i: _mixture_rows(P, i, i + 1, out), range(K), workers)  # releases the GIL
    return out
