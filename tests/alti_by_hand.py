"""ALTI of one attention block from the definition, in float64 numpy with explicit loops over tokens and heads
(never through bertlook's modules): the hand computation the decomposition tests of tests/test_contributions.py
(BERT) and tests/test_encoder_layouts.py (every encoder layout) check the real models and bertlook's maps
against. Definitions: docs/definitions.md#alti-and-value-zeroing."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class AltiByHand(NamedTuple):
    raw: np.ndarray  # [q, k, d]: sum_h alpha_h[i, j] f_h(x_j) + x_i if i == j (before the LayerNorm)
    pre: np.ndarray  # [q, d]: sum_j raw[i, j] + b_O (the LayerNorm's input)
    t: np.ndarray  # [q, k, d]: T_i(x_j) = L(raw[i, j]) / sigma_i (pre-LN: raw[i, j])
    y: np.ndarray  # [q, d]: sum_j T_i(x_j) + L(b_O) / sigma_i + beta (pre-LN: pre)
    map: np.ndarray  # [q, k]: min_sum, max(0, |y_i|_1 - |y_i - T_i(x_j)|_1), each row normalised


def alti_by_hand(x, a, v, w, b, ln=None) -> AltiByHand:
    """One example's block: ``x`` [n, d] the block's input (the residual), ``a`` [head, q, k] its attention, ``v``
    [n, heads * d_head] the values x W_V + b_V (heads side by side), ``w`` [d, heads * d_head] and ``b`` [d] the
    output projection (as a Linear stores them), ``ln`` (gamma, beta, eps) of a post-LN block's LayerNorm, or None
    for a pre-LN block (L the identity, sigma 1, beta 0)."""
    nh, n = a.shape[0], a.shape[1]
    dh = v.shape[1] // nh
    f = np.stack([[w[:, h * dh:(h + 1) * dh] @ v[j, h * dh:(h + 1) * dh] for j in range(n)] for h in range(nh)])
    raw = np.stack([np.stack([sum(a[h, i, j] * f[h, j] for h in range(nh)) + (x[i] if i == j else 0)
                              for j in range(n)]) for i in range(n)])
    pre = raw.sum(1) + b
    if ln is None:
        t, y = raw, pre
    else:
        g, beta, eps = ln
        centre = lambda u: g * (u - u.mean(-1, keepdims=True))  # noqa: E731
        sigma = np.sqrt(pre.var(-1) + eps)[:, None]
        t = centre(raw) / sigma[:, :, None]
        y = t.sum(1) + centre(b) / sigma + beta
    want = np.maximum(0, np.abs(y).sum(-1)[:, None] - np.abs(y[:, None] - t).sum(-1))
    return AltiByHand(raw, pre, t, y, want / want.sum(-1, keepdims=True))
