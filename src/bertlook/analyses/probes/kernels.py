"""Fused loops of the probes (numba): the ``[word, candidate, hidden]`` work of the MLP and Distances+GloVe
cohorts and the Attn cohorts' pair scores (:mod:`bertlook.analyses.probes.cohorts`) without torch's temporaries.

The Attn cohorts (:func:`attn_scores`, :func:`attn_backward`) read a sentence's maps ``gt[i, j]`` (``A(i->j)`` over
the heads) and score ``x_ij . (P_i + Q_j)`` with ``x_ij = [gt[i, j] ; gt[j, i]]``: the pair features ``[word, 2K,
word]`` that torch's batched products needed are never built (the cohorts of one thread, and in evaluation the
seeds' rows of one sentence, read one float32 copy of the maps).

The MLP and hidden-layer cohorts evaluate ``sigma_ijh = sigmoid(pre_ijh)`` on every (dependent i, candidate j,
hidden unit h) with a pre-activation that is a sum of per-word terms: ``pre = a_ih + b_jh`` (MLP) and ``a_ih + b_jh + d_oh``
(hidden layer; ``d`` of the pair's offset ``o = j - i``, :func:`offset_row`). So ``exp(-pre)`` is a product of
``exp(-a) exp(-b) [exp(-d)]``, taken once per word (``ea``, ``eb``, ``ed``, torch's exp): :func:`sigma_grid` needs
one product and one division per element, ``sigma = 1 / (1 + ea eb ed)``, which the compiler vectorises (numba
has no vector exp here; a per-element exp would be scalar). Each factor is within 1 ulp and the product within
3, the same size as the rounding of ``pre`` itself: the difference to torch's ``sigmoid(a + b)`` is float
rounding of the kind another CPU code path gives (tests/test_probe_kernels.py). The product can overflow only
when a term is large (|term| >= :data:`FACTOR_LIMIT` / number of factors); such a call takes ``exp(-pre)`` per
element instead (``direct``: scalar, only for extreme weights).

``sigma`` is written once per pair and read by the scores and by the backward (the division is the costly step,
and two hyperthreads of one core share its unit). The sums over ``h`` and the Attn scores' sums over heads fold a
row in halves down to :data:`LANES` values, then add those in order: the order is written out, so the rounding is
the same on every CPU (nothing is left to the compiler's reassociation) and every loop still vectorises
(:func:`attn_scores` would run 2.6x faster with its sums left to reassociation, 0.51 -> 0.19 ms on a 27-word
sentence with 72 heads and 15 variants, measured; not taken, so that its rounding stays CPU-independent). Loops over
contiguous rows index with unsigned integers (see :mod:`bertlook.analyses.xlogx`, "Loads");
``error_model="numpy"``: a float division needs no zero check (which would keep the loops scalar).

Definitions: docs/definitions.md#attention-based-probes
"""

from __future__ import annotations

import numpy as np
from numba import njit

#: ``exp`` of a sum of factors is taken as a product when every factor's |exponent| is below this over their
#: number (the product stays below e^86, a normal float32, and so does 1 / (1 + product))
FACTOR_LIMIT = 86.0
#: the reductions over the hidden units fold down to this many partial sums
LANES = 16

_ONE = np.float32(1.0)


def factored(*terms: np.ndarray) -> bool:
    """Whether ``exp(-sum(terms))`` may be taken as the product of the terms' exps (see :data:`FACTOR_LIMIT`)."""
    limit = FACTOR_LIMIT / len(terms)
    return all(t.size == 0 or float(np.abs(t).max()) < limit for t in terms)


# ====================================================================================== sigma
@njit(cache=True, nogil=True, error_model="numpy")
def sigma_grid(ea, eb, ed, a, b, d, direct, by_offset, sg):  # pragma: no cover - compiled
    """``sg[i, j, h] = 1 / (1 + exp(-(a[i, h] + b[j, h] + d[o, h])))`` for every dependent ``i``, candidate ``j``
    (0 = ROOT): from the factors ``ea eb ed`` = ``exp(-a) exp(-b) exp(-d)``, or (``direct``) the terms. ``o``: the
    pair's offset row (:func:`offset_row`) when ``by_offset``, else 0 (``ed`` = 1 and ``d`` = 0 then, exactly).

    ``ea``, ``a`` ``[W, H]``; ``eb``, ``b`` ``[W + 1, H]``; ``ed``, ``d`` ``[2W | 1, H]``; out ``sg``
    ``[W, W + 1, H]``."""
    W, H = ea.shape
    for i in range(W):
        for j in range(W + 1):
            o = offset_row(W, i, j) if by_offset else 0
            if direct:
                for h in range(np.uint64(H)):
                    sg[i, j, h] = _ONE / (_ONE + np.exp(-(a[i, h] + b[j, h] + d[o, h])))
            else:
                for h in range(np.uint64(H)):
                    sg[i, j, h] = _ONE / (_ONE + ea[i, h] * eb[j, h] * ed[o, h])


# ======================================================================================== MLP
@njit(cache=True, nogil=True, error_model="numpy")
def mlp_scores(sg, z, s):  # pragma: no cover - compiled
    """``s[i, j] = sum_h sg[i, j + 1, h] z[i W + j, h]`` (the word candidates); ``z`` ``[W * W, H]``."""
    W, H = sg.shape[0], sg.shape[2]
    row = np.empty(H, dtype=np.float32)
    for i in range(W):
        for j in range(W):
            r = i * W + j
            for h in range(np.uint64(H)):
                row[h] = sg[i, j + 1, h] * z[r, h]
            s[i, j] = _fold_sum(row)


@njit(cache=True, nogil=True, error_model="numpy")
def mlp_backward(sg, z, g, dh0, m, da, db):  # pragma: no cover - compiled
    """Given ``g`` ``[W, W + 1]`` (d loss / d score of each candidate, ROOT first) and ``dh0`` ``[W, H]`` (d loss /
    d sigma of the ROOT candidate): ``m[i W + j, h] = sigma_i(j+1)h g[i, j+1]``, and with ``q = dsigma sigma (1 -
    sigma)`` (``dsigma = g z`` for words, ``dh0`` for ROOT) ``da[i] = sum_j q_ij``, ``db[j] = sum_i q_ij``."""
    W, H = sg.shape[0], sg.shape[2]
    db[:] = 0.0
    for i in range(W):
        for h in range(np.uint64(H)):
            q = dh0[i, h] * (_ONE - sg[i, 0, h]) * sg[i, 0, h]
            da[i, h] = q
            db[0, h] += q
        for j in range(W):
            r, gij = i * W + j, g[i, j + 1]
            for h in range(np.uint64(H)):
                y = sg[i, j + 1, h]
                m[r, h] = y * gij
                q = gij * z[r, h] * (_ONE - y) * y
                da[i, h] += q
                db[j + 1, h] += q


# ================================================================================ hidden layer
@njit(cache=True, nogil=True, error_model="numpy")
def hidden_scores(sg, wo, s):  # pragma: no cover - compiled
    """``s[i, j] = sum_h sg[i, j, h] wo[h]`` over every candidate j (0 = ROOT)."""
    W, H = sg.shape[0], sg.shape[2]
    row = np.empty(H, dtype=np.float32)
    for i in range(W):
        for j in range(W + 1):
            for h in range(np.uint64(H)):
                row[h] = sg[i, j, h] * wo[h]
            s[i, j] = _fold_sum(row)


@njit(cache=True, nogil=True, error_model="numpy")
def hidden_backward(sg, wo, g, dwo, da, db, dd):  # pragma: no cover - compiled
    """Given ``g`` ``[W, W + 1]``: ``dwo[h] = sum_ij sigma_ijh g_ij`` and, with ``q = g_ij wo_h sigma (1 - sigma)``,
    ``da[i] = sum_j q``, ``db[j] = sum_i q``, ``dd[o] = sum over the pairs of offset row o of q``."""
    W, H = sg.shape[0], sg.shape[2]
    dwo[:] = 0.0
    db[:] = 0.0
    dd[:] = 0.0
    da[:] = 0.0
    for i in range(W):
        for j in range(W + 1):
            o, gij = offset_row(W, i, j), g[i, j]
            for h in range(np.uint64(H)):
                y = sg[i, j, h]
                dwo[h] += y * gij
                q = gij * wo[h] * (_ONE - y) * y
                da[i, h] += q
                db[j, h] += q
                dd[o, h] += q


@njit(cache=True, nogil=True, error_model="numpy")
def offset_row(W, i, j):  # pragma: no cover - compiled
    """The row of dependent ``i`` (0-based word) and candidate ``j`` (0 = ROOT) in the ``2W`` offset rows of
    :func:`bertlook.analyses.probes.cohorts._offset_tables`: ``j - (i + 1) + W - 1``, ROOT ``2W - 1``."""
    return 2 * W - 1 if j == 0 else j - i + W - 2


# ========================================================================== attention features
@njit(cache=True, nogil=True, error_model="numpy")
def attn_scores(gt, rt, P, Q, ab, s, rr):  # pragma: no cover - compiled
    """The Attn cohorts' scores of one sentence, read from its maps (no ``[word, 2K, word]`` features built):
    ``s[v, i, j + 1] = x_ij . (P[i, v] + Q[j + 1, v])`` with ``x_ij = [gt[i, j] ; gt[j, i]]`` (``A(i->j)`` and
    ``A(j->i)`` over the heads), and for ROOT ``rr[i, v, c] = rt[i, c] . (P[i, v] + Q[0, v])``, ``s[v, i, 0] =
    ab[v, 0] rr[i, v, 0] + ab[v, 1] rr[i, v, 1]``.

    ``gt`` ``[W, W, K]`` (float32; ``gt[i, j, k]`` = head k's ``A(i->j)``); ``rt`` ``[W, 2, 2K]`` (ROOT features:
    ``[A(i->[CLS]) ; A([CLS]->i)]``, ``[A(i->[SEP]) ; A([SEP]->i)]``); ``P`` ``[>= W, V, 2K]``, ``Q`` ``[>= W + 1, V,
    2K]`` (rows past the sentence unread); ``ab`` ``[V, 2]``; out ``s`` ``[V, W, W + 1]``, ``rr`` ``[W, V, 2]``. Sums
    over the features in a fixed order (:func:`_fold_sum`)."""
    W, K, V = gt.shape[0], gt.shape[2], s.shape[0]
    F = 2 * K
    row, rowf = np.empty(K, dtype=np.float32), np.empty(F, dtype=np.float32)
    for i in range(W):
        for v in range(V):
            for c in range(2):
                for f in range(np.uint64(F)):
                    rowf[f] = rt[i, c, f] * (P[i, v, f] + Q[0, v, f])
                rr[i, v, c] = _fold_sum(rowf)
            s[v, i, 0] = ab[v, 0] * rr[i, v, 0] + ab[v, 1] * rr[i, v, 1]
            for j in range(W):
                for k in range(np.uint64(K)):
                    row[k] = (gt[i, j, k] * (P[i, v, k] + Q[j + 1, v, k])
                              + gt[j, i, k] * (P[i, v, k + np.uint64(K)] + Q[j + 1, v, k + np.uint64(K)]))
                s[v, i, j + 1] = _fold_sum(row)


@njit(cache=True, nogil=True, error_model="numpy")
def attn_backward(gt, rt, G, ab, rr, dP, dQ, dab):  # pragma: no cover - compiled
    """Given ``G`` ``[V, W, W + 1]`` (d loss / d scores, ROOT first), adds to ``dP`` ``[>= W, V, 2K]``, ``dQ`` ``[>= W
    + 1, V, 2K]`` and ``dab`` ``[V, 2]`` the gradients of :func:`attn_scores`: ``dP_i = sum_j G_ij x_ij + G_i0 xr_i``,
    ``dQ_j = sum_i G_ij x_ij``, ``dQ_0 = sum_i G_i0 xr_i`` (``xr_i = ab_0 rt[i, 0] + ab_1 rt[i, 1]``), ``dab_c = sum_i
    G_i0 rr_ic``; each sum in the loops' order (i, then j)."""
    W, K, V = gt.shape[0], gt.shape[2], G.shape[0]
    F = 2 * K
    for i in range(W):
        for v in range(V):
            g0 = G[v, i, 0]
            xa, xb = g0 * ab[v, 0], g0 * ab[v, 1]
            for f in range(np.uint64(F)):
                x = xa * rt[i, 0, f] + xb * rt[i, 1, f]
                dP[i, v, f] += x
                dQ[0, v, f] += x
            dab[v, 0] += g0 * rr[i, v, 0]
            dab[v, 1] += g0 * rr[i, v, 1]
            for j in range(W):
                g = G[v, i, j + 1]
                for k in range(np.uint64(K)):
                    a = gt[i, j, k] * g
                    b = gt[j, i, k] * g
                    dP[i, v, k] += a
                    dP[i, v, k + np.uint64(K)] += b
                    dQ[j + 1, v, k] += a
                    dQ[j + 1, v, k + np.uint64(K)] += b


# ===================================================================================== helpers
@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _fold_sum(row):  # pragma: no cover - compiled
    """``sum(row)`` in a fixed order (``row`` is overwritten): the back half added onto the front half until at most
    :data:`LANES` values remain (the middle value of an odd length stays), then those in order."""
    n = row.shape[0]
    while n > LANES:
        half = n // 2
        top = n - half
        for h in range(np.uint64(half)):
            row[h] += row[h + np.uint64(top)]
        n = top
    t = np.float32(0.0)
    for k in range(n):
        t += row[k]
    return t
