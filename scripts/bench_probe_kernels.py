#!/usr/bin/env python
"""Benchmark (not a test): the probes' fused hidden-layer loops (``bertlook.analyses.probes.kernels``) against
the torch formulation they replaced, and against the machine's division throughput.

One MLP probe step's ``[word, candidate, hidden]`` work on one sentence (W words, 256 hidden units): sigma of
every pair, the word candidates' scores ``sum_h sigma z``, and the backward (``sigma g`` for the W2 gradient,
``q = dsigma sigma (1 - sigma)`` summed by word and by candidate). Torch (one thread), as the cohort computed it
before: ``sigmoid(a_i + b_j)`` on the broadcast sum, products and sums over axes, ``sigmoid_backward``. The
loops: ``sigma_grid`` (one division per element), ``mlp_scores``, ``mlp_backward``. The limit: numpy's
vectorised float32 division over an L2-resident array (ns per division), times one division per element.
Prints ns per element for each, the speed-up and the loops' ratio to that limit.

The Attn cohort's step on one sentence (``--heads`` K heads, ``--variants`` V models: the demo's model cohort,
Table 3's three Attn probes and 12 layer ablations): scores ``x_ij . (P_i + Q_j)`` of every pair and variant with
the ROOT scores, and the gradients ``dP``, ``dQ``, ``da``, ``db``. Torch as the cohort computed it before the loops:
the pair features ``X`` ``[word, 2K, word + 2]`` built from the maps, batched products over words forward
(``[2V, 2K] x [2K, word + 2]``) and backward, and their reshuffling. The loops: ``attn_scores`` and
``attn_backward``, which read the maps directly. The limit: their arithmetic (per pair, variant and head: 5
operations forward, 6 backward, the sums' folds not counted) at the ns per vector-lane FMA of ``bench_js``'s probe.

    .venv/bin/python scripts/bench_probe_kernels.py [--words 27] [--heads 72] [--variants 15] [--repeat 200]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

from bertlook.analyses.probes import kernels as pk

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_tree_heads import best_of  # noqa: E402  (the scripts' timing helper)

H = 256


def per_call(fn, repeat: int) -> float:
    """Seconds per call of ``fn``: the best of 5 rounds of ``repeat`` calls, after one call."""
    fn()
    return best_of(5, lambda: [fn() for _ in range(repeat)])[0] / repeat


def inputs(W: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    f = lambda *s, scale=1.0: (rng.standard_normal(s) * scale).astype(np.float32)  # noqa: E731
    return f(W, H), f(W + 1, H), f(W * W, H), f(W, W + 1, scale=0.1), f(W, H, scale=0.1)


def torch_step(a, b, z, g, dh0):
    """The cohort's arithmetic before the loops (torch, broadcast temporaries)."""
    W = a.shape[0]
    sig = torch.sigmoid(a.unsqueeze(1) + b.unsqueeze(0))  # [word, candidate, hidden]
    zt = z.view(W, W, H)
    s = (sig[:, 1:] * zt).sum(-1)  # [word, word]
    m = (sig[:, 1:] * g[:, 1:, None]).reshape(W * W, H)
    dh = torch.empty_like(sig)
    torch.mul(zt, g[:, 1:, None], out=dh[:, 1:])
    dh[:, 0] = dh0
    q = torch.ops.aten.sigmoid_backward(dh, sig)
    return s, m, q.sum(1), q.sum(0)


def loop_step(a, b, z, g, dh0, ones, zeros, ea, eb):
    W = a.shape[0]
    sg = np.empty((W, W + 1, H), np.float32)
    pk.sigma_grid(ea, eb, ones, a, b, zeros, False, False, sg)
    s = np.empty((W, W), np.float32)
    pk.mlp_scores(sg, z, s)
    m, da, db = np.empty((W * W, H), np.float32), np.empty((W, H), np.float32), np.empty((W + 1, H), np.float32)
    pk.mlp_backward(sg, z, g, dh0, m, da, db)
    return s, m, da, db


def attn_inputs(W: int, K: int, V: int, seed: int = 0):
    """A sentence's maps ``gt`` ``[i, j, K]``, ROOT features ``rt`` ``[i, 2, 2K]``, ``P`` ``[i, V, 2K]``, ``Q``
    ``[candidate, V, 2K]``, a, b ``[V, 2]``, d loss / d scores ``G`` ``[V, i, candidate]`` (float32)."""
    rng = np.random.default_rng(seed)
    f = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    gt = rng.dirichlet(np.ones(W + 2), size=(W, K))[..., :W].transpose(0, 2, 1).astype(np.float32)
    return np.ascontiguousarray(gt), rng.random((W, 2, 2 * K), dtype=np.float32), f(W, V, 2 * K), \
        f(W + 1, V, 2 * K), f(V, 2), f(V, W, W + 1)


def torch_attn_step(gt, rt, P, Q, ab, G):
    """The Attn cohort's step before the loops, on one row: the pair features ``X`` built, batched products."""
    W, K, V = gt.shape[0], gt.shape[2], P.shape[1]
    X = torch.empty(W, 2 * K, W + 2)  # [i, feature, j | ROOT columns]
    X[:, :K, :W] = gt.permute(0, 2, 1)  # A(i->j)
    X[:, K:, :W] = gt.permute(1, 2, 0)  # A(j->i)
    X[:, :, W:] = rt.transpose(1, 2)
    swap = lambda t: torch.cat([t[..., K:], t[..., :K]], dim=-1)  # noqa: E731
    T = torch.bmm(torch.cat([P, swap(Q[1:])], dim=1), X)  # [i, 2V, W + 2]
    s_words = T[:, :V, :W].permute(1, 0, 2) + T[:, V:, :W].permute(1, 2, 0)  # [V, i, j]
    root = X[:, :, W:].transpose(1, 2)  # [i, 2, feature]
    rr = T[:, :V, W:] + (root @ Q[0].T).transpose(1, 2)  # [i, V, 2]
    s = torch.cat([(rr * ab).sum(-1).T.unsqueeze(-1), s_words], dim=-1)  # [V, i, candidate]
    Gs = torch.empty(W, 2 * V, W + 2)
    Gs[:, :V, :W] = G[..., 1:].permute(1, 0, 2)
    Gs[:, V:, :W] = G[..., 1:].permute(2, 0, 1)
    torch.mul(G[..., 0].T.unsqueeze(-1), ab, out=Gs[:, :V, W:])
    Gs[:, V:, W:] = 0.0
    D = torch.bmm(Gs, X.transpose(1, 2))  # [i, 2V, feature]
    g0 = Gs[:, :V, W:].permute(1, 0, 2).reshape(V, 2 * W)  # [V, i*2]
    dQ = torch.cat([(g0 @ root.reshape(2 * W, -1)).unsqueeze(0), swap(D[:, V:])], dim=0)
    return s, D[:, :V], dQ, (rr * G[..., 0].T.unsqueeze(-1)).sum(0)


def loop_attn_step(gt, rt, P, Q, ab, G):
    V, W = G.shape[:2]
    s, rr = np.empty((V, W, W + 1), np.float32), np.empty((W, V, 2), np.float32)
    pk.attn_scores(gt, rt, P, Q, ab, s, rr)
    dP, dQ, dab = np.zeros_like(P), np.zeros_like(Q), np.zeros_like(ab)
    pk.attn_backward(gt, rt, G, ab, rr, dP, dQ, dab)
    return s, dP, dQ, dab


def attn_report(W: int, K: int, V: int, repeat: int) -> float:
    """Print the Attn step's lines; returns the largest relative difference of the loops to torch."""
    from bench_js import fma_ns_per_lane

    arrays = attn_inputs(W, K, V)
    tensors = [torch.from_numpy(a) for a in arrays]
    want, got = torch_attn_step(*tensors), loop_attn_step(*arrays)
    err = max(float(np.abs(x.numpy() - y).max() / max(np.abs(x.numpy()).max(), 1e-30)) for x, y in zip(want, got))
    t_torch = per_call(lambda: torch_attn_step(*tensors), repeat)
    t_loop = per_call(lambda: loop_attn_step(*arrays), repeat)
    elements = W * W * V * K  # (pair, variant, head): two features each
    lane_ns = fma_ns_per_lane()
    limit = (5 + 6) * elements * lane_ns * 1e-9
    print(f"Attn cohort step on one sentence of {W} words, {K} heads, {V} variants ({elements:,} pair-variant-heads),"
          " one thread")
    print(f"  torch (pair features built, batched products): {t_torch * 1e6:8.1f} us")
    print(f"  fused loops (attn_scores + attn_backward): {t_loop * 1e6:8.1f} us  -> {t_torch / t_loop:.2f}x")
    print(f"  limit: 11 operations per pair, variant and head at the FMA probe's {lane_ns:.4f} ns per lane, "
          f"{limit * 1e6:.1f} us -> the loops at {t_loop / limit:.2f}x of it")
    print(f"  largest difference to torch, relative to each output's largest value: {err:.1e}")
    return err


def division_ns(repeat: int) -> float:
    """ns per float32 division, numpy's vectorised loop over 64 KiB (L2-resident)."""
    x = np.random.default_rng(1).random(16384, dtype=np.float32) + 1.0
    out = np.empty_like(x)
    return per_call(lambda: np.divide(1.0, x, out=out), repeat * 4) / x.size * 1e9


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--words", type=int, default=27, help="words per sentence (the demo's mean W^2 is 27^2)")
    ap.add_argument("--heads", type=int, default=72, help="heads of the model (the demo's: 6 x 12)")
    ap.add_argument("--variants", type=int, default=15, help="Attn models on one source (the demo's model cohort)")
    ap.add_argument("--repeat", type=int, default=200)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    W = args.words
    a, b, z, g, dh0 = inputs(W)
    ta, tb, tz, tg, tdh0 = map(torch.from_numpy, (a, b, z, g, dh0))
    ones, zeros = np.ones((1, H), np.float32), np.zeros((1, H), np.float32)
    ea, eb = np.exp(-a), np.exp(-b)
    want, got = torch_step(ta, tb, tz, tg, tdh0), loop_step(a, b, z, g, dh0, ones, zeros, ea, eb)
    err = max(float(np.abs(x.numpy() - y).max() / max(np.abs(x.numpy()).max(), 1e-30)) for x, y in zip(want, got))
    elements = W * (W + 1) * H
    t_torch = per_call(lambda: torch_step(ta, tb, tz, tg, tdh0), args.repeat)
    t_loop = per_call(lambda: loop_step(a, b, z, g, dh0, ones, zeros, ea, eb), args.repeat)
    div = division_ns(args.repeat)
    per = lambda t: t / elements * 1e9  # noqa: E731
    print(f"MLP probe step on one sentence of {W} words x {H} hidden units ({elements:,} pair-units), one thread")
    print(f"  torch (broadcast sigmoid, products, sums): {t_torch * 1e6:8.1f} us  {per(t_torch):.3f} ns/element")
    print(f"  fused loops (sigma_grid + mlp_scores + mlp_backward): {t_loop * 1e6:8.1f} us  "
          f"{per(t_loop):.3f} ns/element  -> {t_torch / t_loop:.2f}x")
    print(f"  limit: one float32 division per element at numpy's vectorised rate, {div:.3f} ns"
          f" -> the loops at {per(t_loop) / div:.2f}x of it")
    print(f"  largest difference to torch, relative to each output's largest value: {err:.1e}")
    attn_report(W, args.heads, args.variants, max(1, args.repeat // 4))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
