"""Fused CPU kernels (numba) for ALTI's distances: :func:`bertlook.attention.contributions.alti_layer` and
:func:`~bertlook.attention.contributions.alti_heads` without their ``[batch, rows, keys, d_model]`` temporaries.

The torch path builds every transformed vector ``T_i(x_j)`` of a chunk of rows in memory, then reads it back for
``||y_i - T_i(x_j)||_1``: at MiniLM's shapes (batch 16, 12 heads, n 128, d 384) each pass over those vectors
moves 400 MB of float32, several passes per layer and 12 times that per head, so it runs at memory speed (1-6 s
per layer, 2.5-13 s for the head maps on a shared 2-core EPYC). These
kernels build ``T_i(x_j)`` one at a time in a ``d_model`` buffer that stays in the L1 cache and take its distance
at once; a block of :data:`ROWS` query rows shares each key's head vectors (read once from memory per block).

* :func:`alti_layer_rows` (per layer): ``t = sum_h alpha_h[i, j] f_h(x_j) (+ x_i where i == j)`` in ``f``'s
  dtype (float32 from :func:`~bertlook.attention.contributions.alti_layer`), four heads per sweep of ``t``, the
  last four fused with the distance; then (post-LN) ``T = (t - mean(t)) * (gamma / sigma_i)``, ``mean(t)`` by
  linearity from the float64 means of the head vectors and of ``x_i``, rounded to ``t``'s dtype as torch's
  ``mean`` is (``gamma / sigma_i`` once per row, not a division per entry), else ``T = t * (1 / sigma_i)``; ``y``
  and ``sigma`` are the torch path's;
* :func:`alti_heads_rows` (per head): ``y_i = sum_j alpha_h[i, j] u_j`` and ``T = alpha_h[i, j] u_j`` in float64
  (``u``: the centred head vectors, float64 from :func:`~bertlook.attention.contributions.alti_heads`: where
  ``c << ||T||`` the map is ill-conditioned, and float32 ``u`` moved a few values by 3e-7);
* both: ``||y_i - T||_1`` and ``||y_i||_1`` added in float64, ``c = max(0, ||y_i||_1 - ||y_i - T||_1)`` (a NaN
  stays NaN), rows divided by their float64 sums (a row of zeros stays zeros), stored as float32. A key whose
  weights are all exactly 0 (causal or padded keys; in the per-layer map not the row's own token) has ``T = 0``,
  so ``c = 0`` exactly: skipped.

Accuracy (tests/test_alti_kernels.py): within 1e-6 relative or 1e-7 absolute of the torch path run in float64,
random inputs with and without a post-LN, causal and padded, and a tiny BERT's and GPT-2's tensors. The float32
torch path is farther from that (its float32 sums of ``|y - T|``, ``||y||_1`` ~ 300 at d 384): 1e-6 at d 32,
3e-5 at MiniLM's shapes, so these kernels are the more exact of the two.

Threads: ``num_threads`` Python threads take work items (a batch entry's block of rows; per head: of one head)
in chunks, in order (:func:`bertlook.threads.run_items`), and run the kernel without the GIL; an item is computed by the same code whatever thread
takes it, so the result does not depend on ``num_threads``. The kernels are compiled once per checkout
(``cache=True``: numba's cache in ``__pycache__``).

Measured: docs/development/benchmarks.md ("ALTI and value zeroing", ``scripts/bench_contributions.py``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from bertlook.threads import run_items

#: reassociation lets the compiler vectorise the float64 sums; no ``nnan``/``ninf`` (NaN and inf keep their
#: meaning), no ``arcp``/``afn`` (the divisions and products round as torch's)
FASTMATH = {"nsz", "contract", "reassoc"}
JIT = dict(nogil=True, cache=True, fastmath=FASTMATH)
#: query rows per work item: the buffers ``[ROWS, d_model]`` and one key's head vectors stay in the L1/L2 cache
ROWS = 8


@njit(**JIT)
def _layer_items(a, f, x, y, s, gamma, mf, mx, centre, rows, out, start, stop):  # pragma: no cover - compiled
    """Per-layer ALTI of work items ``start:stop`` (item = batch entry ``b``, rows ``i0:i0 + rows``): ``a``
    ``[B, q, k, head]``, ``f`` ``[B, k, head, d]`` (a key's head vectors side by side), ``x``/``y`` ``[B, q, d]``,
    ``s`` ``[B, q]``, ``gamma`` ``[d]``, ``mf`` ``[B, k, head]`` and ``mx`` ``[B, q]`` the float64 means of ``f``
    and ``x`` over ``d``; writes ``out[b, i0:i1, :]``."""
    B, n, _, H = a.shape
    d = f.shape[3]
    blocks = (n + rows - 1) // rows
    t = np.empty(d, f.dtype)
    mean = np.empty(1, f.dtype)  # the mean rounded to f's dtype (as torch's)
    zero = f.dtype.type(0.0)
    gs = np.empty((rows, d), f.dtype)  # gamma / sigma_i of the block's rows
    c = np.empty((rows, n), np.float64)
    for item in range(start, stop):
        b, i0 = item // blocks, (item % blocks) * rows
        i1 = min(n, i0 + rows)
        for i in range(i0, i1):
            for k in range(d):
                gs[i - i0, k] = gamma[k] / s[b, i]
        for j in range(n):
            for i in range(i0, i1):
                live = i == j
                m = mx[b, i] if i == j else 0.0  # mean(t) = sum_h alpha_h mean(f_h(x_j)) (+ mean(x_i))
                for h in range(H):
                    live |= a[b, i, j, h] != 0
                    m += a[b, i, j, h] * mf[b, j, h]
                if not live:
                    c[i - i0, j] = 0.0
                    continue
                mean[0] = m
                mt = mean[0] if centre else zero  # (a Python 0 would make the float32 arithmetic float64)
                c[i - i0, j] = _pair_distance(a[b, i, j], f[b, j], x[b, i], y[b, i], gs[i - i0], t, mt, i == j)
        for i in range(i0, i1):
            _finish_row(y[b, i], c[i - i0], a[b, i], out[b, i], i)


@njit(inline="always", **JIT)
def _pair_distance(ai, fj, xi, yi, gi, t, mt, diag):  # pragma: no cover - compiled
    """``||y_i - T_i(x_j)||_1`` (float64 sum), ``T = (t - mt) * gi``, ``t = sum_h ai[h] fj[h] (+ x_i if diag)``:
    heads four at a time (the first sweep starts from ``x_i`` or 0), the last four fused with the distance (heads
    past ``H`` with weight 0), so ``t`` is written ``ceil(H / 4) - 1`` times and read as often."""
    H, d = fj.shape
    zero = fj.dtype.type(0.0)  # (a Python 0 would make float32 arithmetic float64 in numba)
    xw = fj.dtype.type(1.0) if diag else zero
    last = 4 * ((H - 1) // 4)  # the first head of the fused sweep
    for h in range(0, last, 4):
        w0, w1, w2, w3 = ai[h], ai[h + 1], ai[h + 2], ai[h + 3]
        if h == 0:
            for k in range(d):
                t[k] = xw * xi[k] + (((w0 * fj[h, k] + w1 * fj[h + 1, k]) + w2 * fj[h + 2, k]) + w3 * fj[h + 3, k])
        else:
            for k in range(d):
                t[k] += ((w0 * fj[h, k] + w1 * fj[h + 1, k]) + w2 * fj[h + 2, k]) + w3 * fj[h + 3, k]
    h0, h1, h2, h3 = last, min(last + 1, H - 1), min(last + 2, H - 1), min(last + 3, H - 1)
    w0 = ai[h0]
    w1 = ai[h1] if last + 1 < H else zero
    w2 = ai[h2] if last + 2 < H else zero
    w3 = ai[h3] if last + 3 < H else zero
    dist = 0.0
    if last == 0:
        for k in range(d):
            tk = xw * xi[k] + (((w0 * fj[h0, k] + w1 * fj[h1, k]) + w2 * fj[h2, k]) + w3 * fj[h3, k])
            dist += abs(yi[k] - (tk - mt) * gi[k])
    else:
        for k in range(d):
            tk = t[k] + (((w0 * fj[h0, k] + w1 * fj[h1, k]) + w2 * fj[h2, k]) + w3 * fj[h3, k])
            dist += abs(yi[k] - (tk - mt) * gi[k])
    return dist


@njit(inline="always", **JIT)
def _finish_row(yi, ci, ai, oi, i):  # pragma: no cover - compiled
    """``c = max(0, ||y_i||_1 - dist)`` for the live keys (``ci`` holds their distances; skipped keys 0, left 0),
    divided by the row's sum into ``oi``. ``ai`` ``[k, head]`` says which keys are live."""
    ynorm = 0.0
    for k in range(yi.shape[0]):
        ynorm += abs(yi[k])
    total = 0.0
    for j in range(ci.shape[0]):
        live = i == j
        for h in range(ai.shape[1]):
            live |= ai[j, h] != 0
        v = ynorm - ci[j] if live else 0.0
        if v < 0:  # max(0, v) that keeps a NaN (as torch's clamp_min)
            v = 0.0
        ci[j] = v
        total += v
    if not total > 0:  # a row of zeros stays zeros (NaN too: torch's where(sums > 0, sums, 1))
        total = 1.0
    for j in range(ci.shape[0]):
        oi[j] = np.float32(ci[j] / total)


@njit(**JIT)
def _head_items(a, u, rows, out, start, stop):  # pragma: no cover - compiled
    """Per-head ALTI of work items ``start:stop`` (item = batch entry ``b``, head ``h``, rows ``i0:i0 + rows``):
    ``a`` ``[B, head, q, k]``, ``u`` ``[B, head, k, d]`` (centred head vectors); ``y_i = sum_j a[i, j] u_j`` and
    the distances in float64; writes ``out[b, h, i0:i1, :]``."""
    B, H, n, _ = a.shape
    d = u.shape[3]
    blocks = (n + rows - 1) // rows
    c = np.empty((rows, n), np.float64)
    y = np.empty((rows, d), np.float64)
    for item in range(start, stop):
        b, h, i0 = item // (H * blocks), (item // blocks) % H, (item % blocks) * rows
        i1 = min(n, i0 + rows)
        y[:] = 0
        for j in range(n):
            for i in range(i0, i1):
                w = np.float64(a[b, h, i, j])
                if w != 0:
                    for k in range(d):
                        y[i - i0, k] += w * u[b, h, j, k]
        for j in range(n):
            for i in range(i0, i1):
                w = np.float64(a[b, h, i, j])
                if w == 0:
                    c[i - i0, j] = -1.0  # T = 0: c = 0 exactly (below)
                    continue
                dist = 0.0
                for k in range(d):
                    dist += abs(y[i - i0, k] - w * u[b, h, j, k])
                c[i - i0, j] = dist
        for i in range(i0, i1):
            _finish_heads_row(y[i - i0], c[i - i0], out[b, h, i])


@njit(inline="always", **JIT)
def _finish_heads_row(yi, ci, oi):  # pragma: no cover - compiled
    """``c = max(0, ||y_i||_1 - dist)`` (``ci``: the distances, -1 for a skipped key: 0), row-normalised into ``oi``."""
    ynorm = 0.0
    for k in range(yi.shape[0]):
        ynorm += abs(yi[k])
    total = 0.0
    for j in range(ci.shape[0]):
        v = ynorm - ci[j] if ci[j] != -1.0 else 0.0
        if v < 0:  # max(0, v) that keeps a NaN
            v = 0.0
        ci[j] = v
        total += v
    if not total > 0:
        total = 1.0
    for j in range(ci.shape[0]):
        oi[j] = np.float32(ci[j] / total)


def _run(kernel, args, items: int, out, num_threads: int, grain: int = 4) -> None:
    """``kernel(*args, ROWS, out, start, stop)`` over ``range(items)`` in chunks of ``grain`` items, taken by
    ``num_threads`` threads (the first chunk in this thread first: compiled or loaded once before helpers start)."""
    chunks = [(start, min(items, start + grain)) for start in range(0, items, grain)]
    run_items(lambda c: kernel(*args, ROWS, out, *c), chunks, max(1, int(num_threads)), first_alone=True)  # releases the GIL


def _arrays(*arrays) -> list[np.ndarray]:
    """The arrays C-contiguous in one float dtype: float64 where any is float64, else float32."""
    dt = np.float64 if any(np.asarray(v).dtype == np.float64 for v in arrays) else np.float32
    return [np.ascontiguousarray(v, dtype=dt) for v in arrays]


def alti_layer_rows(attn, f, x, y, s, gamma=None, *, num_threads: int = 1) -> np.ndarray:
    """Per-layer ALTI ``[batch, query_pos, key_pos]`` float32 from float32 (or float64: computed in float64)
    arrays: ``attn`` ``[batch, head, q, k]``, ``f`` (the head vectors) ``[batch, head, k, d]``, ``x`` (the layer's
    input) and ``y`` (the block's output) ``[batch, seq, d]``, ``s`` (``sigma_i``) ``[batch, seq]``; ``gamma``
    ``[d]`` of the post-LN, None without one (then ``T = t / sigma`` without centring)."""
    B, n, d = np.shape(x)
    centre = gamma is not None
    g = gamma if centre else np.ones(d, np.float32)
    a, f, x, y, s, g = _arrays(np.moveaxis(np.asarray(attn), 1, -1), np.moveaxis(np.asarray(f), 1, 2), x, y,
                               np.reshape(s, (B, n)), g)
    mf, mx = f.mean(-1, dtype=np.float64), x.mean(-1, dtype=np.float64)  # [batch, key_pos, head], [batch, seq]
    out = np.zeros((B, n, n), np.float32)
    _run(_layer_items, (a, f, x, y, s, g, mf, mx, centre), B * -(-n // ROWS), out, num_threads)
    return out  # a: [batch, query_pos, key_pos, head]; f: [batch, key_pos, head, d]


def alti_heads_rows(attn, u, *, num_threads: int = 1) -> np.ndarray:
    """Per-head ALTI ``[batch, head, query_pos, key_pos]`` float32: ``attn`` ``[batch, head, q, k]``, ``u`` (the
    centred head vectors ``L(f_h(x_j))``) ``[batch, head, k, d]``, float32 or float64."""
    a, u = _arrays(attn, u)
    B, H, n = a.shape[0], a.shape[1], a.shape[2]
    out = np.zeros((B, H, n, n), np.float32)
    _run(_head_items, (a, u), B * H * -(-n // ROWS), out, num_threads)
    return out
