"""Layer-wise attention rollout: one layer's ``A_hat``, its product with the running rollout and that layer's
statistics, on the device the maps are on (the work of :class:`bertlook.analyses.rollout.RolloutAccumulator`).

Two forms of one computation (definitions: docs/definitions.md#attention-rollout-abnar--zuidema-2020):

- numpy, for maps on the host (a numpy array or a CPU tensor): :func:`host_a_hat`, :func:`host_layer_stats`, :func:`host_example_stats`,
  the operations of :func:`bertlook.analyses.rollout.rollout` and
  :func:`~bertlook.analyses.rollout.rollout_example_stats` taken one layer at a time, so an encoder's numbers
  are today's bit for bit (float16 head mean by :func:`bertlook.analyses.map_kernels.head_mean`, numpy's
  BLAS for the product, numpy's sums and logarithm);
- torch, for maps on another device (CUDA): :func:`device_a_hat`, :func:`device_layer_stats`. No host
  synchronisation: the checks (non-finite values, a row summing to <= 0) come back as a 0-d int tensor
  that the caller keeps on the device. Tested on CPU tensors against the numpy form (tests/test_rollout_layers.py):
  the head mean is the same bit for bit (a float64 sum of float16 values is exact in any order), the rest
  within 1e-12 relative (other summation orders, another BLAS and logarithm).

Both keep the running rollout ``R_l`` [n, n] in float64, the definition's precision. :func:`lower_matmul`
multiplies lower-triangular matrices (a decoder's causal maps: ``R_l`` is lower-triangular too) by blocks,
skipping the zero blocks: at n = 1,024 and blocks of 128, 0.234 n^3 multiply-adds instead of n^3 (the
triangles' own count is n^3 / 6), 3x faster with numpy's BLAS on the 2-core EPYC (40.3 -> 13.3 ms on one
thread); it works on numpy arrays and torch tensors alike. Importing this module imports neither torch nor numba.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from bertlook.analyses.surface_stats import ENTROPY_SMOOTHING, row_entropy
from bertlook.errors import BertlookError

RESIDUAL_WEIGHT = 0.5  # A_hat = (1 - w) * mean_h(A) + w * I (bertlook.analyses.rollout.RESIDUAL_WEIGHT)
#: :func:`lower_matmul` recurses into blocks down to this size (host: numpy's OpenBLAS on the 2-core EPYC, one
#: thread, n = 1,024: plain 40.3 ms, blocks of 64 / 128 / 256 / 512: 11.9 / 13.3 / 16.1 / 23.0 ms; two threads
#: 20.8 ms plain, 8.2 ms with 128); on a GPU a kernel launch costs more than a small block's arithmetic, so only
#: large blocks are split there (not measured on a GPU yet)
HOST_MIN_BLOCK = 128
DEVICE_MIN_BLOCK = 1024
#: the checks' bits in the device flag (0: fine)
NON_FINITE, NON_POSITIVE_ROW = 1, 2
CHECK_MESSAGES = {NON_FINITE: "rollout: non-finite attention values",
                  NON_POSITIVE_ROW: "rollout: an attention row sums to a non-positive value"}


def flag_message(code: int) -> str:
    """The error of a device flag's ``code`` (non-zero): the first check that failed, in the host's order."""
    return CHECK_MESSAGES[NON_FINITE if code & NON_FINITE else NON_POSITIVE_ROW]


# --------------------------------------------------------------------------------------------------
# the triangular product (numpy or torch)
# --------------------------------------------------------------------------------------------------


def lower_matmul(a: Any, r: Any, *, min_block: int = HOST_MIN_BLOCK) -> Any:
    """``a @ r`` of two lower-triangular square matrices (numpy arrays or torch tensors, the same type; their
    upper triangles must be zero, as a decoder's masked maps are, and are read only inside the smallest
    diagonal blocks): a lower-triangular matrix of the same type. Blocks
    ``[[a11, 0], [a21, a22]]``: ``c11 = a11 r11``, ``c21 = a21 r11 + a22 r21``, ``c22 = a22 r22``,
    recursively down to ``min_block`` rows (the triangle-times-square products as well)."""
    out = _zeros_like(a)  # [query_pos, key_pos]
    _lower_into(a, r, out, True, True, min_block)
    return out


def _zeros_like(a: Any) -> Any:
    if isinstance(a, np.ndarray):
        return np.zeros_like(a)
    return a.new_zeros(a.shape)


def _lower_into(a: Any, r: Any, out: Any, lower_a: bool, lower_r: bool, min_block: int) -> None:
    """``out += a @ r`` (``out``: a view of the result) where ``lower_a`` / ``lower_r`` mark a square
    lower-triangular factor: the inner dimension is split in two, a triangular factor's other dimension at the
    same place, and the products of a zero block (above a triangle's diagonal) are skipped; diagonal blocks
    stay triangular, the others are full."""
    m, inner = a.shape
    cols = r.shape[1]
    if not (lower_a or lower_r) or inner <= min_block:
        out += a @ r
        return
    h = inner // 2
    halves = [(0, h), (h, inner)]
    row_parts = halves if lower_a else [(0, m)]
    col_parts = halves if lower_r else [(0, cols)]
    for i, (r0, r1) in enumerate(row_parts):
        for j, (c0, c1) in enumerate(col_parts):
            for k, (k0, k1) in enumerate(halves):
                if (lower_a and (i, k) == (0, 1)) or (lower_r and (k, j) == (0, 1)):
                    continue  # a block above a triangle's diagonal: zero
                _lower_into(a[r0:r1, k0:k1], r[k0:k1, c0:c1], out[r0:r1, c0:c1],
                            lower_a and i == k, lower_r and k == j, min_block)


# --------------------------------------------------------------------------------------------------
# host (numpy): today's operations, one layer at a time
# --------------------------------------------------------------------------------------------------


def host_head_mean(maps: Any) -> tuple[np.ndarray, bool]:
    """``(mean [n, n] float64, every value finite)`` of one layer's host maps ``maps [head, n, n]`` (a numpy array or
    a CPU tensor, read through its numpy view): :func:`bertlook.analyses.rollout.rollout`'s head mean bit for bit
    (float16: :func:`bertlook.analyses.map_kernels.head_mean`; other dtypes: numpy's float64 mean)."""
    if not isinstance(maps, np.ndarray):  # a CPU tensor
        maps = (maps.detach().float() if str(maps.dtype) == "torch.bfloat16" else maps.detach()).numpy()
    if maps.dtype == np.float16:  # the stores' and the stream's maps: the same mean, without a float64 copy
        from bertlook.analyses.map_kernels import head_mean  # lazy: numba, only for float16 maps

        means, finite = head_mean(maps[None])  # [1, query_pos, key_pos]
        return means[0], finite
    a = np.asarray(maps, dtype=np.float64)  # [head, query_pos, key_pos]
    return a.mean(axis=0), bool(np.isfinite(a).all())  # [query_pos, key_pos]


def host_a_hat(maps: Any) -> np.ndarray:
    """``A_hat`` [n, n] float64 of one layer's host maps ``[head, n, n]`` (:func:`host_head_mean`): ``0.5 mean +
    0.5 I``, rows renormalised; :func:`bertlook.analyses.rollout.rollout`'s numbers bit for bit. Raises
    :class:`BertlookError` on non-finite values or a row summing to <= 0."""
    mean, finite = host_head_mean(maps)  # [query_pos, key_pos]
    if not finite:
        raise BertlookError(CHECK_MESSAGES[NON_FINITE])
    n = mean.shape[-1]
    a_hat = np.multiply(mean, 1.0 - RESIDUAL_WEIGHT, out=mean)  # [query_pos, key_pos]
    a_hat.reshape(-1)[::n + 1] += RESIDUAL_WEIGHT  # + w I: the off-diagonal entries gain an exact 0.0
    sums = np.add.reduce(a_hat, axis=-1, keepdims=True)  # [query_pos, 1]
    if (sums <= 0).any():
        raise BertlookError(CHECK_MESSAGES[NON_POSITIVE_ROW])
    a_hat /= sums
    return a_hat  # [query_pos, key_pos]


def host_layer_stats(r: np.ndarray, causal: bool) -> tuple[np.ndarray, float]:
    """``(col [key_pos], entropy)`` of one layer's rollout ``r [n, n]`` float64: the rollout each token receives,
    summed over rows, and the mean row entropy; :func:`host_example_stats` turns an example's layers into
    :func:`bertlook.analyses.rollout.rollout_example_stats`'s numbers (bit for bit)."""
    col = np.add.reduce(r, axis=-2)  # [key_pos]
    return col, (host_causal_entropy(r) if causal else float(np.add.reduce(row_entropy(r)) / r.shape[-1]))


def host_causal_entropy(r: np.ndarray, smoothing: float = ENTROPY_SMOOTHING, block: int = 128) -> float:
    """The mean over rows of :func:`bertlook.analyses.surface_stats.causal_row_entropy` of a lower-triangular
    ``r [n, n]`` (float64), reading only the visible triangle: rows in blocks of ``block``, each up to its last
    row's diagonal (9/16 of the entries at n = 1,024: 2.1 ms instead of 4.6-13.6 ms). Other sums than the
    reference's (rounding: 2e-16 relative measured)."""
    n = r.shape[-1]
    k = np.arange(1, n + 1, dtype=np.float64)[:, None]  # [query_pos, 1]: keys row i sees
    total = 0.0
    for i0 in range(0, n, block):
        i1 = min(n, i0 + block)
        p = (1.0 - smoothing) * r[i0:i1, :i1] + smoothing / k[i0:i1]  # [query_pos, key_pos]
        p[:, i0:][np.triu_indices(i1 - i0, 1)] = 1.0  # keys after the query: p ln p = 0
        total += float(-(p * np.log(p)).sum())
    return total / n


def host_example_stats(cols: np.ndarray, entropy: np.ndarray, masks: "list[np.ndarray]") -> np.ndarray:
    """An example's statistics ``[stat, layer]`` (cls, sep, punct, other, entropy) from its layers' ``cols
    [layer, key_pos]`` and ``entropy [layer]`` (:func:`host_layer_stats`); ``masks``: the four boolean
    ``[key_pos]`` role masks. The shares are summed over ``[layer, key]`` blocks as
    :func:`~bertlook.analyses.rollout.rollout_example_stats` does (one layer's masked sum adds in another
    order)."""
    n = cols.shape[-1]
    return np.stack([*(cols[:, m].sum(axis=-1) / n for m in masks), entropy])  # [stat, layer]


# --------------------------------------------------------------------------------------------------
# device (torch): no host synchronisation
# --------------------------------------------------------------------------------------------------


def device_a_hat(maps: Any) -> tuple[Any, Any]:
    """``(A_hat [n, n] float64, flag)`` of one layer's maps ``maps [head, n, n]`` (a torch tensor on any
    device); ``flag``: 0-d int32 tensor, the bits :data:`NON_FINITE` / :data:`NON_POSITIVE_ROW` of the checks
    that fail (:func:`host_a_hat` raises on them), 0 if none (left on the device)."""
    import torch  # lazy: the device path only; the analysis steps' env has no torch

    mean = maps.sum(dim=0, dtype=torch.float64)  # [query_pos, key_pos]: exact (float16 terms)
    mean /= maps.shape[0]
    mean *= 1.0 - RESIDUAL_WEIGHT
    mean.diagonal().add_(RESIDUAL_WEIGHT)
    sums = mean.sum(dim=-1, keepdim=True)  # [query_pos, 1]; a non-finite value makes its row's sum non-finite
    flag = (~torch.isfinite(sums).all()).to(torch.int32) * NON_FINITE  # 0-d
    flag |= (sums <= 0).any().to(torch.int32) * NON_POSITIVE_ROW
    mean /= sums
    return mean, flag


def device_roles(masks: "list[np.ndarray]", device: Any) -> Any:
    """The four role masks as a ``[role, key_pos]`` float64 tensor on ``device`` (one copy per example; to a
    GPU from pinned memory without waiting for it)."""
    import torch  # lazy: the device path only

    roles = torch.from_numpy(np.stack(masks).astype(np.float64))  # [role, key_pos]
    if torch.device(device).type == "cuda":
        return roles.pin_memory().to(device, non_blocking=True)
    return roles.to(device)


def device_zero_flag(like: Any) -> Any:
    """A 0-d int32 flag of no failed check on ``like``'s device (an example's flag: its layers' flags or-ed)."""
    import torch  # lazy: the device path only

    return like.new_zeros((), dtype=torch.int32)


def device_layer_stats(r: Any, roles: Any, causal: bool, smoothing: float) -> Any:
    """One layer's statistics ``[stat]`` float64 tensor (cls, sep, punct, other, entropy) of its rollout
    ``r [n, n]`` (torch float64, any device), ``roles``: :func:`device_roles`; as :func:`host_layer_stats`,
    entropy smoothed as ``row_entropy`` / ``causal_row_entropy`` (``smoothing``: their ``ENTROPY_SMOOTHING``)."""
    import torch  # lazy: the device path only

    n = r.shape[-1]
    col = r.sum(dim=-2)  # [key_pos]
    shares = (roles * col).sum(dim=-1) / n  # [role]
    if causal:
        k = torch.arange(1, n + 1, dtype=torch.float64, device=r.device)[:, None]  # [query_pos, 1]: keys seen
        p = ((1.0 - smoothing) * r + smoothing / k).tril_()  # [query_pos, key_pos]; 0 above: 0 ln 0 taken as 0
        terms = torch.special.xlogy(p, p)  # [query_pos, key_pos]
    else:
        p = (1.0 - smoothing) * r + smoothing / n  # [query_pos, key_pos]
        terms = p * torch.log(p)  # [query_pos, key_pos]
    entropy = -terms.sum(dim=-1).mean()  # mean over rows of each row's entropy
    return torch.cat([shares, entropy[None]])  # [stat]
