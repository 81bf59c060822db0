"""One layer's surface statistics in one pass over its maps: the kernels of
:class:`bertlook.analyses.surface_stats.SurfaceStatsAccumulator` (``add_layer``).

For every head of a layer ``a[head, query_pos, key_pos]`` one sweep over the rows reads each visible entry once
from memory and gives the head's raw sums (:data:`SLOTS`): attention to the [CLS] / [SEP] / punctuation columns,
the [SEP] share of the [SEP] rows, the self / prev / next diagonals, the smoothed row entropies (their pairwise
sum and the [CLS] row's), the row maxima and the histogram of argmax offsets (ties: the lowest column, as
``np.argmax``; non-negative float16 values compare like their bits). A row (at most a few KB) stays in the
cache: its few class columns and its max (a vectorised sweep: fusing the max into the table-gather loop made
it 2x slower) are read from there. :func:`finish` divides the sums into the columns of
:func:`bertlook.analyses.surface_stats.example_stats`. Causal maps (decoders) touch only the visible triangle
(keys ``j <= i``); their ``next`` is 0 (never read).

CPU (:func:`layer_stats_cpu`, numba, float16 bit patterns read in place):

* encoder entropy: the float64 table :func:`bertlook.analyses.surface_stats.xlogx_table` summed in numpy's
  pairwise order (:func:`pairwise_plan`: leaves of up to 128 entries summed by
  :func:`bertlook.analyses.map_kernels.pairwise_leaf`, halves above that; the row entropies again pairwise):
  today's numbers bit for bit.
  Every other sum adds float16 values (multiples of 2^-24) in float64, exact in any order: bit for bit too.
* causal entropy: row i smoothed over its ``i + 1`` keys (a table per row would cost more than the row), in
  float32 with the Cephes ``logf`` of :mod:`bertlook.analyses.xlogx`, vectorised; where ``a > 0.75`` its
  polynomial takes ``q = p - 1`` computed without rounding ``p`` (the 6e-8 rounding of a ``p`` near 1 would
  dominate a peaked row's entropy); blocks of 512 products in float32, rows in float64. Against the float64
  :func:`~bertlook.analyses.surface_stats.causal_row_entropy`: max 9.9e-8 nats, 2.0e-8 relative per example on a
  random GPT-2's maps (4 x 16 heads, n 355-1,024), 7e-8 relative on peaked random maps (tests/test_layer_stats.py).
* a row with a non-finite value marks its head ``bad`` (the caller refuses the example); a row with a sign bit
  (a negative value or -0) takes a float64 path with numpy's semantics (float max, the encoder table's NaN
  entropy at a negative value, NaN where a causal ``p <= 0``).
* ``num_threads`` Python threads take the heads one at a time (``nogil``) in a layer of at least
  :data:`THREADS_FROM` entries; each head is computed by the same code whatever thread takes it, so the numbers
  do not depend on ``num_threads``. No recursion in compiled code (:func:`pairwise_plan`).

Measured (2-core AMD EPYC shared with other jobs, min of 3): the 40 segments of a random GPT-2 (4 x 16 heads,
355-1,024 tokens, causal, 2.6e9 entries, 1.3e9 visible) in 2.0-2.3 s on 1-2 threads, 1.1-1.3e9 entries/s (the
numpy reader it replaces: 48 s; a torch pass of float32 ``x ln x`` plus a sum over the same entries: 0.23e9/s);
a MiniLM-shaped encoder example (6 x 12 heads, n <= 128) 1.9-2.6 ms (numpy: 3.2-3.9 ms).

Other devices (:func:`layer_stats_torch`, also run on CPU tensors by the tests): the same sums in torch, float32
arithmetic (``log1p`` near p = 1 as above) and float64 sums, blocks of rows (causal: keys up to the block's last
row, the rest masked), everything left on the device (no synchronisation). Against the numba kernel: the
entropies within 1.1e-7 relative (measured; the test's tolerance 1e-6), every other sum equal.

Definitions: docs/definitions.md#surface-statistics
"""

from __future__ import annotations

import functools
import sys
from typing import Any

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

# numba's cache keys a compiled function on its own file only: after an edit of map_kernels' pairwise_leaf or
# xlogx's logf alone, clear this module's cache (__pycache__/layer_stats.*.nbi|nbc) too (docs: 'Notes on Caching')
from bertlook.analyses.map_kernels import float16_values, pairwise_leaf
from bertlook.analyses.xlogx import BLOCK, FASTMATH, LOGF_POLY, logf
from bertlook.threads import run_items

#: raw sums per head, in this order (``[head, slot]``): divided by :func:`finish`
SLOTS = ("cls", "sep", "punct", "self", "prev", "next", "sep_sep", "entropy", "cls_entropy", "max_attention")
(_CLS, _SEP, _PUNCT, _SELF, _PREV, _NEXT, _SEPSEP, _ENT, _CLSENT, _MAX) = range(len(SLOTS))
EXACT = dict(nogil=True, cache=True)  # no fast-math: the encoder's sums keep numpy's order
FAST = dict(nogil=True, cache=True, fastmath=FASTMATH)
_PW = 128  # numpy's PW_BLOCKSIZE
#: map entries of a layer from which ``num_threads`` threads share its heads (below: starting threads costs more
#: than they save; a 12 x 128 x 128 layer took 0.3 ms on one thread, 1.7 ms on two, a 2-core machine under load)
THREADS_FROM = 1 << 20
#: map entries per block of rows in the torch kernel (its float32 temporaries: a few x 64 MiB); a 32-head layer
#: of 4,096 tokens is 32 blocks of 128 rows (not yet tuned on a GPU)
TORCH_BLOCK = 1 << 24
_F16 = float16_values()
_F16.setflags(write=False)
_Q = np.array(LOGF_POLY, dtype=np.float32)
_HALF32, _ONE32, _NEAR = np.float32(0.5), np.float32(1.0), np.float32(0.75)


class Roles:
    """Which keys of one example are [CLS] / [SEP] / punctuation (sorted ``int64`` index arrays), which rows
    are [SEP] rows (``is_sep`` uint8 ``[query_pos]``), the first [CLS] row (-1: none) and ``n``."""

    def __init__(self, is_cls: np.ndarray, is_sep: np.ndarray, is_punct: np.ndarray) -> None:
        self.n = int(is_cls.size)
        self.cls_idx = np.flatnonzero(is_cls).astype(np.int64)  # [cls keys]
        self.sep_idx = np.flatnonzero(is_sep).astype(np.int64)  # [sep keys]
        self.punct_idx = np.flatnonzero(is_punct).astype(np.int64)  # [punct keys]
        self.is_sep = np.ascontiguousarray(is_sep, dtype=np.uint8)  # [query_pos]
        self.cls_row = int(self.cls_idx[0]) if self.cls_idx.size else -1
        self.n_sep = int(self.sep_idx.size)


@intrinsic
def _half_to_float(typingctx, b):
    """The float32 value of float16 bits (LLVM ``fpext half``: ``vcvtph2ps`` with F16C, vectorised)."""
    if b != types.uint16:
        return None

    def codegen(context, builder, signature, args):
        return builder.fpext(builder.bitcast(args[0], ir.HalfType()), ir.FloatType())

    return types.float32(types.uint16), codegen


@njit(**EXACT)
def _bits_max(row, m):  # pragma: no cover - compiled
    """The largest of the bits ``row[:m]`` (a vectorised sweep of the row just read, from the cache)."""
    mx = np.uint16(0)
    for j in range(np.uint64(m)):
        mx = max(mx, row[j])
    return mx


@functools.lru_cache(maxsize=64)
def pairwise_plan(n: int) -> tuple[np.ndarray, np.ndarray]:
    """numpy's pairwise sum of ``n`` values as ``(leaves [leaf, (start, length)], program)``: leaves of up to 128
    values, halves (multiples of 8) above that; the program, in postfix order, pushes leaf ``k`` (``k >= 0``) or
    adds the two top sums (-1), left + right (:func:`_tree`). The kernels are free of recursion this way (numba's
    cache does not reload recursive functions called from other compiled functions reliably)."""
    leaves: list[tuple[int, int]] = []
    prog: list[int] = []

    def split(start: int, m: int) -> None:
        if m <= _PW:
            prog.append(len(leaves))
            leaves.append((start, m))
            return
        n2 = m // 2
        n2 -= n2 % 8
        split(start, n2)
        split(start + n2, m - n2)
        prog.append(-1)

    split(0, int(n))
    return np.array(leaves, dtype=np.int64).reshape(-1, 2), np.array(prog, dtype=np.int64)


@njit(**EXACT)
def _tree(sums, prog, stack):  # pragma: no cover - compiled
    """Run a :func:`pairwise_plan` program over the leaf sums ``sums[leaf]``."""
    sp = 0
    for op in prog:
        if op >= 0:
            stack[sp] = sums[op]
            sp += 1
        else:
            stack[sp - 2] = stack[sp - 2] + stack[sp - 1]
            sp -= 1
    return stack[0]


@njit(**EXACT)
def _pairwise64(x, leaves, prog, sums, stack):  # pragma: no cover - compiled
    """numpy's pairwise sum of the float64 ``x[:n]`` (``leaves``, ``prog``: :func:`pairwise_plan` of n)."""
    for k in range(leaves.shape[0]):
        start, m = leaves[k, 0], leaves[k, 1]
        if m < 8:
            res = -0.0
            for t in range(start, start + m):
                res += x[t]
        else:
            r0, r1, r2, r3, r4, r5, r6, r7 = x[start], x[start + 1], x[start + 2], x[start + 3], x[start + 4], \
                x[start + 5], x[start + 6], x[start + 7]
            i, stop = 8, m - m % 8
            while i < stop:
                t = start + i
                r0 += x[t]
                r1 += x[t + 1]
                r2 += x[t + 2]
                r3 += x[t + 3]
                r4 += x[t + 4]
                r5 += x[t + 5]
                r6 += x[t + 6]
                r7 += x[t + 7]
                i += 8
            res = ((r0 + r1) + (r2 + r3)) + ((r4 + r5) + (r6 + r7))
            while i < m:
                res += x[start + i]
                i += 1
        sums[k] = res
    return _tree(sums, prog, stack)


@njit(inline="always", fastmath=FASTMATH)
def _log1p_near(q):  # pragma: no cover - compiled
    """``ln(1 + q)`` for ``1 + q`` in ``[sqrt(1/2), sqrt(2))``: Cephes ``logf``'s polynomial without the split."""
    z = q * q
    y = _Q[0]
    for k in range(1, 9):
        y = y * q + _Q[k]
    return q + (y * q * z - _HALF32 * z)


@njit(**FAST)
def _causal_row(row, m, c, d, e):  # pragma: no cover - compiled
    """``(sum_j p ln p, max bits)`` over ``row[:m]``, ``p = c a + d`` in float32 (blocks of BLOCK, float64 total).
    Where ``a > 0.75``, ``ln p = ln(1 + q)`` with ``q = p - 1 = c (a - 1) + e`` (``e = c + d - 1``) computed
    without the rounding of ``p`` (whose absolute error, 6e-8 near 1, would dominate a peaked row's entropy)."""
    total = 0.0
    mx = np.uint16(0)
    for e0 in range(0, m, BLOCK):
        part = np.float32(0.0)
        for j in range(np.uint64(e0), np.uint64(min(m, e0 + BLOCK))):  # unsigned: xlogx's docstring, Loads
            b = row[j]
            v = _half_to_float(b)
            p = c * v + d
            ln = _log1p_near(c * (v - _ONE32) + e) if v > _NEAR else logf(p)
            part += p * ln
            mx = max(mx, b)
        total += part
    return total, mx


@njit(**EXACT)
def _first(row, m, mx):  # pragma: no cover - compiled
    """The first ``j < m`` with ``row[j] == mx`` (blocks of 64 tested with a vectorised count first)."""
    m16 = np.uint16(mx)
    for j0 in range(0, m, 64):
        j1 = min(m, j0 + 64)
        hit = np.int32(0)
        for j in range(np.uint64(j0), np.uint64(j1)):
            hit += np.int32(row[j] == m16)
        if hit:
            for j in range(j0, j1):
                if row[j] == m16:
                    return j
    return 0


@njit(**EXACT)
def _slow_row(values, row, m, s):  # pragma: no cover - compiled
    """A row ``row[:m]`` holding a value with the sign bit or a non-finite one, with numpy's float semantics:
    ``(finite, max value, first argmax, sum_j p ln p)`` (``p = (1 - s) a + s / m`` in float64, NaN where p <= 0)."""
    best, am, xlx = values[row[0]], 0, 0.0
    for j in range(m):
        v = values[row[j]]
        if not np.isfinite(v):
            return False, v, j, np.nan
        if v > best:
            best, am = v, j
        p = (1.0 - s) * v + s / m
        xlx += p * np.log(p) if p >= 0 else np.nan
    return True, best, am, xlx


@njit(inline="always")
def _f64(b):  # pragma: no cover - compiled
    return np.float64(_half_to_float(b))


@njit(**EXACT)
def _class_sum(row, idx, m):  # pragma: no cover - compiled
    """``sum_{j in idx, j < m} a[j]`` (``idx`` sorted) in float64."""
    t = 0.0
    for j in idx:
        if j >= m:
            break
        t += _f64(row[j])
    return t


@njit(**EXACT)
def _head(bits, h, table, values, causal, s, leaves, prog, cls_idx, sep_idx, punct_idx, is_sep, cls_row,
          out, offs, bad):  # pragma: no cover - compiled
    """Every raw sum of head ``h`` of ``bits[head, n, n]`` into ``out[h]``, argmax offsets into ``offs[h]``."""
    n = bits.shape[1]
    ent = np.empty(n)  # [query_pos]: row entropies
    sums = np.empty(leaves.shape[0])  # [leaf]
    stack = np.empty(prog.size)
    c32 = np.float32(1.0 - s)
    to_cls = to_sep = to_punct = diag = prev = nxt = sep_sep = max_sum = 0.0
    for i in range(n):
        row = bits[h, i]
        m = i + 1 if causal else n
        if causal:
            d = s / m
            xlx, mx = _causal_row(row, m, c32, np.float32(d), np.float32(d - s))
        else:
            for k in range(leaves.shape[0]):
                sums[k] = pairwise_leaf(table, row, leaves[k, 0], leaves[k, 1])
            xlx = _tree(sums, prog, stack)
            mx = _bits_max(row, n)
        if mx >= 0x7C00:  # a sign bit, or an infinite / NaN value
            ok, best, am, slow_xlx = _slow_row(values, row, m, s)
            if not ok:
                bad[h] = True
                return
            if causal:  # (an encoder's table is NaN at every negative value, as numpy's row_entropy)
                xlx = slow_xlx
        else:
            best, am = values[mx], _first(row, m, mx)
        ent[i] = -xlx
        max_sum += best
        offs[h, am - i + n - 1] += 1
        diag += _f64(row[i])
        if i > 0:
            prev += _f64(row[i - 1])
        if i + 1 < n and not causal:
            nxt += _f64(row[i + 1])
        to_cls += _class_sum(row, cls_idx, m)
        to_punct += _class_sum(row, punct_idx, m)
        row_sep = _class_sum(row, sep_idx, m)
        to_sep += row_sep
        if is_sep[i]:
            sep_sep += row_sep
    o = out[h]
    o[_CLS], o[_SEP], o[_PUNCT], o[_SELF], o[_PREV], o[_NEXT] = to_cls, to_sep, to_punct, diag, prev, nxt
    o[_SEPSEP], o[_MAX] = sep_sep, max_sum
    o[_ENT] = _pairwise64(ent, leaves, prog, sums, stack)
    o[_CLSENT] = ent[cls_row] if cls_row >= 0 and not causal else np.nan


def layer_stats_cpu(a: np.ndarray, roles: Roles, table: np.ndarray, *, causal: bool, offs: np.ndarray,
                    smoothing: float, num_threads: int = 1) -> tuple[np.ndarray, bool]:
    """Raw sums ``[head, slot]`` (:data:`SLOTS`) of one layer's float16 maps ``a[head, n, n]`` and whether every
    value is finite; argmax offsets added into ``offs[head, 2n-1]`` (index ``offset + n - 1``). ``table``:
    ``xlogx_table(n)`` (encoder entropy; unused for causal maps)."""
    bits = np.ascontiguousarray(a).view(np.uint16)  # [head, query_pos, key_pos]
    H = bits.shape[0]
    out = np.zeros((H, len(SLOTS)))  # [head, slot]
    bad = np.zeros(H, dtype=np.bool_)  # [head]
    table = np.zeros(1) if table is None else table  # (causal maps: no table; one compiled signature)
    leaves, prog = pairwise_plan(bits.shape[1])
    args = (table, _F16, bool(causal), float(smoothing), leaves, prog, roles.cls_idx, roles.sep_idx, roles.punct_idx, roles.is_sep,
            roles.cls_row, out, offs, bad)
    if H == 0:
        return out, True
    workers = max(1, min(int(num_threads), H)) if bits.size >= THREADS_FROM else 1
    # head 0 in this thread first: compiled (or loaded) once before the helpers start; each head writes its own rows
    run_items(lambda h: _head(bits, h, *args), range(H), workers, first_alone=True)  # releases the GIL
    return out, not bool(bad.any())


def finish(raw: Any, roles: Roles, xp: Any = np) -> dict[str, Any]:
    """The columns of :func:`~bertlook.analyses.surface_stats.example_stats` from raw sums ``[..., slot]``
    (numpy, or torch tensors with ``xp=torch``): sums / n, ``sep_sep`` / s, ``rest_sep`` = (sep - sep_sep) / (n - s);
    NaN where undefined."""
    n, s = roles.n, roles.n_sep
    col = {k: raw[..., i] for i, k in enumerate(SLOTS)}
    nan = col["cls"] * float("nan")
    return {
        "cls": col["cls"] / n, "sep": col["sep"] / n, "punct": col["punct"] / n,
        "self": col["self"] / n, "prev": col["prev"] / n, "next": col["next"] / n,
        "sep_sep": col["sep_sep"] / s if s > 0 else nan,
        "rest_sep": (col["sep"] - col["sep_sep"]) / (n - s) if s < n else nan,
        "entropy": col["entropy"] / n, "cls_entropy": col["cls_entropy"],
        "max_attention": col["max_attention"] / n,
    }


def torch_of(t: Any) -> Any:
    """The module of the tensor ``t`` (torch), without an import: the torch kernel runs only on a tensor handed
    in, so torch is loaded; the steps that read stores (``surface-stats``, whose env envs/analysis.yaml has no
    torch: tests/test_envs.py) never get here."""
    return sys.modules[type(t).__module__.split(".")[0]]


def device_roles(roles: Roles, like: Any) -> dict[str, Any]:
    """The index arrays of ``roles`` as int64 tensors on the device of the tensor ``like`` (copied without a
    synchronisation)."""
    torch = torch_of(like)
    put = lambda x: torch.from_numpy(x).to(like.device, non_blocking=True)  # noqa: E731
    return {"cls": put(roles.cls_idx), "sep": put(roles.sep_idx), "punct": put(roles.punct_idx),
            "is_sep": put(roles.is_sep.astype(np.float64))}


def _xlogx_torch(x: Any, c: float, d: Any, e: Any) -> Any:
    """``p ln p`` with ``p = c x + d`` (float32); where ``x > 0.75``, ``ln p = log1p(c (x - 1) + e)``, ``e = d - s``
    (as :func:`_causal_row`: no rounding of p near 1)."""
    torch = torch_of(x)
    p = c * x + d
    return p * torch.where(x > 0.75, torch.log1p(c * (x - 1.0) + e), torch.log(p))


def layer_stats_torch(a: Any, roles: Roles, droles: dict[str, Any], *, causal: bool, offs: Any, smoothing: float,
                      block_entries: int = TORCH_BLOCK) -> tuple[Any, Any]:
    """:func:`layer_stats_cpu` in torch on ``a``'s device: ``(raw sums [head, slot] float64, every visible value
    finite: a bool scalar)``, both on the device, nothing synchronised; argmax offsets added into the int64 tensor
    ``offs[head, 2n-1]``. Blocks of rows of about ``block_entries`` entries (causal: keys up to the block's last
    row, the rest masked). ``droles``: :func:`device_roles`."""
    torch = torch_of(a)
    H, n = int(a.shape[0]), int(a.shape[-1])
    dev, f64 = a.device, torch.float64
    acc = torch.zeros(H, len(SLOTS), dtype=f64, device=dev)  # [head, slot]
    ent = torch.empty(H, n, dtype=f64, device=dev)  # [head, query_pos]
    finite = torch.ones((), dtype=torch.bool, device=dev)
    step = max(1, min(n, block_entries // max(1, H * n)))
    for r0 in range(0, n, step):
        r1 = min(n, r0 + step)
        k = r1 if causal else n  # keys the block's rows see
        x = a[:, r0:r1, :k].float()  # [head, rows, keys]
        i = torch.arange(r0, r1, device=dev)  # [rows]
        if causal:
            hidden = torch.arange(k, device=dev)[None, :] > i[:, None]  # [rows, keys]
            best, am = x.masked_fill(hidden, float("-inf")).max(dim=-1)  # [head, rows] each
            x = x.masked_fill(hidden, 0.0)
            d = smoothing / (i + 1).to(f64)  # [rows]
        else:
            best, am = x.max(dim=-1)  # [head, rows] each
            d = torch.full((r1 - r0,), smoothing / n, dtype=f64, device=dev)
        xlx = _xlogx_torch(x, 1.0 - smoothing, d[:, None].float(), (d - smoothing)[:, None].float())
        if causal:
            xlx = xlx.masked_fill(hidden, 0.0)  # [head, rows, keys]
        finite &= torch.isfinite(best).all()  # max propagates NaN
        ent[:, r0:r1] = -xlx.sum(dim=-1).to(f64)
        acc[:, _MAX] += best.to(f64).sum(dim=-1)
        offs.scatter_add_(1, am - i + (n - 1), torch.ones_like(am))
        for slot, key in ((_CLS, "cls"), (_PUNCT, "punct")):
            idx = droles[key][:int(np.searchsorted(getattr(roles, key + "_idx"), k))]  # [class keys seen]
            acc[:, slot] += x[..., idx].to(f64).sum(dim=(-1, -2))
        idx = droles["sep"][:int(np.searchsorted(roles.sep_idx, k))]
        to_sep = x[..., idx].to(f64).sum(dim=-1)  # [head, rows]
        acc[:, _SEP] += to_sep.sum(dim=-1)
        acc[:, _SEPSEP] += (to_sep * droles["is_sep"][r0:r1]).sum(dim=-1)
    acc[:, _SELF] = a.diagonal(0, dim1=1, dim2=2).to(f64).sum(dim=-1)
    acc[:, _PREV] = a.diagonal(-1, dim1=1, dim2=2).to(f64).sum(dim=-1)
    if not causal:
        acc[:, _NEXT] = a.diagonal(1, dim1=1, dim2=2).to(f64).sum(dim=-1)
    acc[:, _ENT] = ent.sum(dim=-1)
    acc[:, _CLSENT] = ent[:, roles.cls_row] if roles.cls_row >= 0 and not causal else float("nan")
    return acc, finite
