#!/usr/bin/env python
"""Benchmark (not a test): the one-pass readers of ``extract-segments`` at long contexts (issue 42).

The case of issue 42: a random GPT-2-shaped decoder (4 layers x 16 heads, d 128, 1,024 positions; byte-level BPE
of 2,000 tokens trained on the gensim Wikipedia excerpt, :func:`bertlook.testing.tiny_models.make_tiny_decoder`)
on ``bertlook segments --max-seq-len 1024 --n-segments 40`` of the same excerpt. Both are built under
``--workdir`` and reused when present (the segment file is named by its ``--n-segments`` and ``--max-seq-len``).
It measures

* this machine's single-pass limits (torch, ``torch.get_num_threads()`` threads, min of ``--repeats``): a
  float16 read + sum, and ``x * log(x)`` + sum over float32 entries, in entries per second;
* the bare Hugging Face eager forward returning its maps, converted to float16, batch 1, no analysis
  (seconds, min of ``--forward-repeats``), twice: with glibc's allocator defaults (a plain Python process) and
  with the heap reuse every bertlook model step sets (:mod:`bertlook.attention.host_memory`; the limits are
  measured with it too);
* ``bertlook extract-segments --batch-size 1`` with each reader alone, with all of them, and with all of them and
  the JS estimator (``--readers``: stats, js, rollout, norm_stats, norm_js, all, all-est; ``--js-rows``, default
  64), each job's ``--summary``: its seconds and the per-reader seconds (``"readers"``);

and prints per reader: seconds, map entries per second (causal maps: the visible entries, keys <= query,
``layers x heads x n (n + 1) / 2`` per segment; an encoder: ``n^2``), that rate as a share of the
single-pass limits (the float16 read, ``x log x``), the reader's and its job's seconds over the bare forward.
``--json`` writes every number. The full case takes ~10 minutes on a 2-core machine; shrink it with
``--n-segments`` / ``--max-seq-len`` / ``--readers``.

    .venv/bin/python scripts/bench_long_context.py [--workdir DIR] [--n-segments 40] [--max-seq-len 1024]
        [--readers stats,js,rollout,norm_stats,norm_js,all] [--repeats 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import bz2
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_WORKDIR = ROOT / "results" / "bench-long-context"
DUMP = "gensim/test/test_data/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
MODEL = dict(vocab_size=2000, layers=4, heads=16, hidden=128, intermediate_size=512, max_positions=1024)
#: reader -> (extract-segments flag, names in the summary's "readers", the single-pass limit it is held to)
READERS = {
    "stats": ("--stats-partial", ["surface_stats_attention"], "xlogx"),
    "js": ("--js-partial", ["js_attention"], "xlogx"),
    "rollout": ("--rollout-partial", ["rollout"], "read"),
    "norm_stats": ("--norm-stats-partial", ["surface_stats_norm"], "xlogx"),
    "norm_js": ("--norm-js-partial", ["js_norm"], "xlogx"),
}
LIMIT_ENTRIES = 1 << 25  # entries per single-pass probe (64 MiB of float16, 128 MiB of float32)


def _dump_path() -> Path:
    import gensim  # lazy: only to find the excerpt

    return Path(gensim.__file__).parent / DUMP.split("/", 1)[1]


def build_model(workdir: Path) -> Path:
    """The random GPT-2-shaped decoder (reused when ``workdir/gpt2/config.json`` exists)."""
    out = workdir / "gpt2"
    if (out / "config.json").exists():
        return out
    from bertlook.testing.tiny_models import make_tiny_decoder

    text = bz2.open(_dump_path(), "rt").read()
    words = re.findall(r"[A-Za-z]+[ .,]", text)
    texts = [" ".join(words[i:i + 50]) for i in range(0, min(len(words), 200000), 50)]
    make_tiny_decoder(out, "gpt2", texts, **MODEL)
    return out


def build_segments(workdir: Path, model: Path, n_segments: int, max_seq_len: int) -> Path:
    """``bertlook segments`` of the excerpt (reused when present)."""
    out = workdir / f"seg-{n_segments}-{max_seq_len}.jsonl"
    if out.exists():
        return out
    _bertlook(["segments", "--dump", f"package:{DUMP}", "--model", str(model), "--out", str(out),
               "--summary", str(out.with_suffix(".summary.json")), "--n-segments", str(n_segments),
               "--max-seq-len", str(max_seq_len)])
    return out


def _bertlook(args: list[str]) -> float:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    t0 = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "bertlook", *args], env=env, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        sys.stderr.write(done.stderr)
        raise SystemExit(f"bench_long_context: bertlook {args[0]} failed (exit {done.returncode})")
    return time.perf_counter() - t0


def _best(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def single_pass_limits(repeats: int) -> dict[str, float]:
    """Entries per second of a float16 read + sum and of ``x * log(x)`` + sum over float32 (torch)."""
    import torch

    x16 = torch.rand(LIMIT_ENTRIES).half()  # [entry]
    x32 = torch.rand(LIMIT_ENTRIES) + 1e-6  # [entry]
    x16.sum(dtype=torch.float32)
    (x32 * x32.log()).sum()
    read = _best(lambda: x16.sum(dtype=torch.float32), repeats)
    xlogx = _best(lambda: (x32 * x32.log()).sum(), repeats)
    return {"read": LIMIT_ENTRIES / read, "xlogx": LIMIT_ENTRIES / xlogx, "threads": torch.get_num_threads()}


def bare_forward(model: Path, segments: list[dict], repeats: int) -> float:
    """Seconds of the eager forward with its maps, converted to float16, batch 1 (min of ``repeats``)."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    m = AutoModel.from_pretrained(model, attn_implementation="eager").eval()
    tok = AutoTokenizer.from_pretrained(model)
    ids = [torch.tensor([tok.convert_tokens_to_ids(s["tokens"])]) for s in segments]

    def run():
        with torch.inference_mode():
            for x in ids:
                out = m(input_ids=x, output_attentions=True)
                [a.half() for a in out.attentions]

    return _best(run, repeats)


def run_job(workdir: Path, model: Path, segs: Path, max_seq_len: int, readers: list[str],
            js_rows: int | None = None) -> dict:
    """One ``extract-segments`` job with ``readers`` (``js_rows``: the JS estimator's rows): wall seconds, its
    summary's seconds and per-reader seconds."""
    name = "+".join(readers) + (f"-rows{js_rows}" if js_rows else "")
    summary = workdir / f"job-{name}.summary.json"
    args = ["extract-segments", "--segments", str(segs), "--model", str(model), "--max-seq-len", str(max_seq_len),
            "--batch-size", "1", "--summary", str(summary)] + (["--js-rows", str(js_rows)] if js_rows else [])
    for r in readers:
        args += [READERS[r][0], str(workdir / f"job-{name}-{r}.npz")]
    wall = _bertlook(args)
    data = json.loads(summary.read_text(encoding="utf-8"))
    seconds = {r: sum(float(data["readers"][k]["seconds"]) for k in READERS[r][1]) for r in readers}
    causal = str(((data.get("store_meta") or {}).get("model") or {}).get("family")) == "decoder"
    return {"readers": readers, "js_rows": js_rows, "wall_seconds": wall, "seconds": float(data["seconds"]), "reader_seconds": seconds,
            "schedule": data.get("schedule"), "causal": causal}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workdir", type=Path, default=DEFAULT_WORKDIR, help=f"model, segments, jobs (default {DEFAULT_WORKDIR})")
    ap.add_argument("--n-segments", type=int, default=40)
    ap.add_argument("--max-seq-len", type=int, default=1024)
    ap.add_argument("--js-rows", type=int, default=64, help="the JS estimator's rows of the all-est job (default 64)")
    ap.add_argument("--readers", default="stats,js,rollout,norm_stats,norm_js,all,all-est",
                    help="jobs to run, comma-separated: a reader alone (stats, js, rollout, norm_stats, norm_js) or all")
    ap.add_argument("--repeats", type=int, default=3, help="repeats of the limits (and --forward-repeats)")
    ap.add_argument("--forward-repeats", type=int, default=1)
    ap.add_argument("--json", type=Path, help="write every number here")
    args = ap.parse_args(argv)
    if args.max_seq_len > MODEL["max_positions"]:
        ap.error(f"--max-seq-len {args.max_seq_len} > the model's {MODEL['max_positions']} positions")
    jobs = [list(READERS) if j in ("all", "all-est") else [j] for j in args.readers.split(",") if j]
    rows_of = [args.js_rows if j == "all-est" else None for j in args.readers.split(",") if j]
    unknown = sorted({r for j in jobs for r in j} - set(READERS))
    if unknown:
        ap.error(f"unknown readers: {', '.join(unknown)}")
    args.workdir.mkdir(parents=True, exist_ok=True)
    model = build_model(args.workdir)
    segs_path = build_segments(args.workdir, model, args.n_segments, args.max_seq_len)
    segments = [json.loads(line) for line in segs_path.read_text(encoding="utf-8").splitlines() if line.strip()]
    lengths = [len(s["tokens"]) for s in segments]
    L, H = MODEL["layers"], MODEL["heads"]
    entries = {"all": L * H * sum(n * n for n in lengths), "visible": L * H * sum(n * (n + 1) // 2 for n in lengths)}
    print(f"{len(segments)} segments, {sum(lengths)} tokens (n {min(lengths)}-{max(lengths)}); map entries "
          f"{entries['all']:.3g}, visible (causal) {entries['visible']:.3g}")
    plain = bare_forward(model, segments, args.forward_repeats)
    print(f"bare eager forward with maps -> float16: {plain:.2f} s (min of {args.forward_repeats}; glibc's "
          "allocator defaults, as a plain Python process runs it)")
    from bertlook.attention.host_memory import reuse_freed_memory

    print(f"this process from here on, as every bertlook model step: {reuse_freed_memory()}")
    limits = single_pass_limits(args.repeats)
    print(f"single-pass limits ({limits['threads']} torch threads, min of {args.repeats}): float16 read + sum "
          f"{limits['read'] / 1e9:.3f} G entries/s; x log x + sum (float32) {limits['xlogx'] / 1e9:.3f} G entries/s")
    forward = bare_forward(model, segments, args.forward_repeats)
    print(f"bare eager forward with maps -> float16, heap reuse: {forward:.2f} s (min of {args.forward_repeats})")
    results = []
    for readers, js_rows in zip(jobs, rows_of):
        job = run_job(args.workdir, model, segs_path, args.max_seq_len, readers, js_rows)
        results.append(job)
        print(f"  job {'+'.join(readers)}{f' (JS estimator, {js_rows} rows)' if js_rows else ''}: {job['seconds']:.1f} s ({job['wall_seconds']:.1f} s with imports)",
              flush=True)
    rows = _table(results, entries, limits, forward, plain)
    if args.json:
        args.json.write_text(json.dumps({"n_segments": len(segments), "tokens": sum(lengths),
                                         "max_seq_len": args.max_seq_len, "model": MODEL, "entries": entries,
                                         "limits": limits, "forward_seconds": forward,
                                         "forward_seconds_allocator_defaults": plain, "jobs": results,
                                         "rows": rows}, indent=2) + "\n", encoding="utf-8")
    return 0


def _table(results: list[dict], entries: dict, limits: dict, forward: float, plain: float) -> list[dict]:
    """Print the table (one row per reader of each job) and return its rows."""
    head = (f"{'job':<38} {'reader':<11} {'s':>7} {'M ent/s':>8} {'/read':>6} {'/xlogx':>7} {'rd/fwd':>7} "
            f"{'job s':>7} {'job/fwd':>8} {'job/plain':>9}")
    print(head)
    print("-" * len(head))
    rows = []
    for job in results:
        n = entries["visible"] if job["causal"] else entries["all"]
        name = "+".join(job["readers"]) if len(job["readers"]) < len(READERS) else "all"
        name += f" (JS {job['js_rows']} rows)" if job.get("js_rows") else ""
        for r, sec in job["reader_seconds"].items():
            rate = n / sec if sec > 0 else float("inf")
            row = {"job": name, "reader": r, "seconds": sec, "entries_per_s": rate,
                   "share_read": rate / limits["read"], "share_xlogx": rate / limits["xlogx"],
                   "limit": READERS[r][2], "reader_over_forward": sec / forward,
                   "job_seconds": job["seconds"], "job_over_forward": job["seconds"] / forward,
                   "job_over_plain_forward": job["seconds"] / plain}
            rows.append(row)
            print(f"{name:<38} {r:<11} {sec:7.1f} {rate / 1e6:8.1f} {row['share_read']:6.2f} "
                  f"{row['share_xlogx']:7.2f} {row['reader_over_forward']:7.2f} {job['seconds']:7.1f} "
                  f"{row['job_over_forward']:8.2f} {row['job_over_plain_forward']:9.2f}")
    print("M ent/s: million map entries per second (causal: visible entries); /read, /xlogx: that rate over the "
          "single-pass limit (the one a reader is held to: stats, JS: x log x; rollout: the float16 read); "
          "rd/fwd, job/fwd: seconds over the bare forward with heap reuse (as the jobs run); job/plain: over the bare "
          "forward with glibc's defaults (a plain Python process)")
    return rows


if __name__ == "__main__":
    sys.exit(main())
