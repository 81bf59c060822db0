#!/usr/bin/env python
"""Benchmark (not a test): the probes' fused hidden-layer loops (``bertlook.analyses.probe_kernels``) against
the torch formulation they replaced, and against the machine's division throughput.

One MLP probe step's ``[word, candidate, hidden]`` work on one sentence (W words, 256 hidden units): sigma of
every pair, the word candidates' scores ``sum_h sigma z``, and the backward (``sigma g`` for the W2 gradient,
``q = dsigma sigma (1 - sigma)`` summed by word and by candidate). Torch (one thread), as the cohort computed it
before: ``sigmoid(a_i + b_j)`` on the broadcast sum, products and sums over axes, ``sigmoid_backward``. The
loops: ``sigma_grid`` (one division per element), ``mlp_scores``, ``mlp_backward``. The limit: numpy's
vectorised float32 division over an L2-resident array (ns per division), times one division per element.
Prints ns per element for each, the speed-up and the loops' ratio to that limit.

    .venv/bin/python scripts/bench_probe_kernels.py [--words 27] [--repeat 200]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

from bertlook.analyses import probe_kernels as pk

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


def division_ns(repeat: int) -> float:
    """ns per float32 division, numpy's vectorised loop over 64 KiB (L2-resident)."""
    x = np.random.default_rng(1).random(16384, dtype=np.float32) + 1.0
    out = np.empty_like(x)
    return per_call(lambda: np.divide(1.0, x, out=out), repeat * 4) / x.size * 1e9


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--words", type=int, default=27, help="words per sentence (the demo's mean W^2 is 27^2)")
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
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
