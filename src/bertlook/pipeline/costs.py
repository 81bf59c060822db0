"""What a job of a rule costs before the safety factors and floors of :mod:`bertlook.pipeline.sizing`: RSS in MiB,
CPU seconds and output MiB, from the model's dimensions (:class:`~bertlook.pipeline.sizing.ModelDims`) and the
job's examples.

Every rule declares its :class:`Cost`: a step in its ``Step(..., cost=...)`` (:mod:`bertlook.pipeline.steps`),
a rule without a step of its own (segments, gathers, merges, downloads, summaries) in the ``COSTS`` table of
the CLI module of the command it runs; :func:`bertlook.cli.declared_costs` gathers them and
:func:`bertlook.pipeline.sizing.rule_resources` reads them (no rule name is known here). A cost names one of
the estimators below and the parameters it reads: a model-running step usually :func:`forward_pass` with the
examples it runs the model on (:func:`segments`, :data:`treebank_words`, :func:`coref_documents`,
:func:`detector_sequences`), its batch size, its forward passes and the attention stores it writes.

Model of each quantity (``K = layers * heads``; ``n`` tokens of an example; ``W`` weights in MiB):

* **attention store** bytes = ``K * sum(n_i^2) * 2`` (float16 ``[L, H, n, n]`` per example), the disk
  of ``extract_segments`` / ``extract_words``;
* **RSS of a forward pass** (extraction) = ``BASE_TORCH_MB + W + 1.5 * one batch of fp32 maps``
  (``L * B * H * n^2 * 4`` bytes: the maps the model returns, plus their float16 copy);
* **RSS of the gradients step** = ``BASE_TORCH_MB + W`` + what autograd keeps per batch:
  ``L * B * (2 H n^2 + n (10 h + 2 i)) * 4`` bytes (attention probabilities and their gradients, hidden
  activations) + ``2 * B * n * V * 4`` (masked-LM logits and their gradient);
* **CPU time of a forward pass** = tokens x FLOPs per token / ``CPU_FLOPS`` with FLOPs per token =
  ``L * (2 (4 h^2 + 2 h i) + 4 n h)`` (as in ``scripts/bench_extract.py``); gradients: 3 forward passes
  plus the masked-LM head (``6 h V`` per token);
* **CPU time of the maps** (the softmax, masks and copies of an eager forward pass beyond its matmuls) =
  ``MAP_NS_PER_ENTRY * K * sum(n_i^2)``: what a long context costs beyond its FLOPs;
* **JS clustering** CPU time = ``JS_NS_PER_ENTRY * entries * K^2 / 2`` (every head pair; ``entries``:
  :func:`js_entries`, ``sum(n_i^2)`` for an encoder, the visible triangles of a decoder, R rows per example with
  the estimator);
* reading a store: ``bytes / IO_MB_S`` (surface statistics, figures, heads, probes).

The constants are calibrated on Snakemake benchmark files (``bertlook resources``) of measured runs on the
2-core development machine: the measured points, the fits and their caveats are in
docs/development/benchmarks.md ("Calibration of the sizing model").
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Callable, Mapping

from bertlook.pipeline.sizing import (MIB, SAFETY_TIME, Examples, Job, ModelDims, path_bytes, segments_input,
                                      store_bytes, sum_flops, train_store, treebank_input)

#: (RSS MiB, CPU seconds, output MiB) of a job, before the safety factors and floors
Estimate = tuple[float, float, float]

# ---- calibrated constants (docs/development/benchmarks.md gives the measured points) --------------
BASE_TORCH_MB = 540.0  # python + torch + transformers + tokenizers, before the model
BASE_NUMPY_MB = 160.0  # analysis steps reading a store one example at a time (stats, clustering)
BASE_PLOT_MB = 320.0  # steps drawing figures (matplotlib): figures 308, heads 266
BASE_SPACY_MB = 460.0  # segments (tokenizer) 456, silver treebank (spaCy sm) 419
BASE_SMALL_MB = 250.0  # manifest, compare, coref, summaries, downloads
MAPS_COPIES = 1.5  # one batch of fp32 maps + its float16 copy
CPU_FLOPS = 30e9  # FLOP per CPU second of a BERT forward pass (measured 37.7e9 and 65.5e9)
JS_NS_PER_ENTRY = 0.7  # CPU ns per (head pair x map entry) of the JS divergence (numba kernel: measured 0.58, 1 thread)
STATS_NS_PER_ENTRY = 5.0  # ns per map entry of the surface statistics of extract_segments (layer_stats: 1.9-2.6 ms
#                           per demo-shaped example of 0.5 M entries on 1 thread, issue 42)
ROLLOUT_NS_PER_ENTRY = 10.0  # ns per map entry of the rollout reader (6 measured before issue 42, kept)
ALTI_NS_PER_MAC = 0.075  # CPU s x 1e9 per multiply-add of ALTI in the stream (alti_macs; 34 ms per 128-token MiniLM
#                          segment, 2 threads, a batch's wanted examples in one call, Intel Xeon, 2026-12-06: 0.075)
MAP_NS_PER_ENTRY = 6.5  # s x 1e9 per map entry of an eager forward pass beyond its matmuls (softmax, masks, the
#                         float16 copy): 40 decoder segments of <= 1,024 tokens, 2.6e9 entries, 21.6 s of which
#                         the FLOPs at CPU_FLOPS are 4.8 s (issue 42, 2 threads)
IO_MB_S = 50.0  # MB/s reading a store (measured 55, 86 on a loaded machine)
PROBE_STEP_S = 20e-3  # CPU s per training step of the batched probes, every model (offline: 30 ms per step)
PROBE_S_PER_PAIR_FEATURE = 8e-11  # plus per (pair x attention feature) of every model of every seed
PROBE_HIDDEN = 256  # the hidden layer of the MLP probes (bertlook.analyses.probes.catalogue.HIDDEN)
TREE_S_PER_ENTRY = 1e-8  # tree_heads: CPU s per (tree x map entry x word) (offline MiniLM: 8.4e-9, 1.8e-8 loaded)
BASE_PROBES_MB = 840.0  # BASE_TORCH_MB + 300: probes RSS 714 (MiniLM), 797 (BERT-base shape, 1 thread)
PROBE_WORKER_MB = 300.0  # the forked worker's own pages (probe_workers; the demo's probes job PSS 1,412 -> 1,584 MiB)
STARTUP_S = 20.0  # interpreter + imports + model load of a step


def _one(config: Mapping) -> int:
    return 1


def _extraction_batch(job: Job) -> int:
    return job.batch


@dataclasses.dataclass(frozen=True, kw_only=True)
class Cost:
    """How the jobs of a rule are sized: ``estimate(job, cost)`` -> (RSS MiB, CPU s, output MiB) with this
    declaration's parameters. ``base_mb``: the RSS of a job that reads no maps (gathers, summaries);
    ``examples(job)`` -> (examples a store holds, examples a forward pass sees: wordpieces) of a
    :func:`forward_pass`, run ``passes(config)`` times in batches of ``batch(job)``, writing ``stores(config)``
    attention stores and ``disk_mb`` more. ``flops(job)``: the model FLOPs of a job that runs the model its own way
    (a GPU job's time, :func:`gpu_seconds`)."""

    estimate: Callable[[Job, Cost], Estimate]
    base_mb: float = BASE_SMALL_MB
    examples: Callable[[Job], tuple[Examples, Examples]] | None = None
    batch: Callable[[Job], int] = _extraction_batch
    passes: Callable[[Mapping], int] = _one
    stores: Callable[[Mapping], int] = _one
    disk_mb: float = 0.0
    flops: Callable[[Job], float] | None = None

    def gpu_runtime(self, job: Job, gpu_tflops: float) -> float | None:
        """Seconds of ``job`` on a GPU at ``gpu_tflops`` (:func:`gpu_seconds`, its weights read at float32 size,
        sizing's bound), or None when the job does not run the model (:func:`runs_model`)."""
        if not runs_model(job, self):
            return None
        dims = job.dims()
        return gpu_seconds(job, self, dims, dims.weights_mb * MIB, gpu_tflops)


# ---- what a model runs on -------------------------------------------------------------------------

def segments(job: Job) -> tuple[Examples, Examples]:
    """The job's segments (its shard of the segments file, else the configuration's upper bound)."""
    ex = segments_input(job)
    return ex, ex


#: the words (+ [CLS]/[SEP]) and wordpieces of the job's treebank split (its shard)
treebank_words = treebank_input


def coref_documents(job: Job) -> tuple[Examples, Examples]:
    """CoNLL-2012 documents of max_seq_len wordpieces, about 20 kB of the input files each."""
    docs = max(1, sum(path_bytes(p) or 0 for p in job.inputs) // 20_000)
    ex = Examples.uniform(int(docs), job.max_len)
    return ex, ex


def detector_sequences(job: Job) -> tuple[Examples, Examples]:
    """head_detectors' n_sequences sequences of 2 x length tokens (+ the tokenizer's 2 at most)."""
    hd = job.config.get("head_detectors") or {}
    ex = Examples.uniform(int(hd.get("n_sequences", 50)), 2 * int(hd.get("length", 25)) + 2)
    return ex, ex


def detector_batch(job: Job) -> int:
    return int((job.config.get("head_detectors") or {}).get("batch_size", 16))


def norms_on(config: Mapping) -> bool:
    return bool((config.get("norms") or {}).get("enabled", True))


def random_init_on(config: Mapping) -> bool:
    return bool((config.get("probes") or {}).get("random_init", True))


def with_random_init(config: Mapping) -> int:
    """Forward passes of extract_words: the model's, and the random-init model's (probes.random_init)."""
    return 1 + int(random_init_on(config))


def word_stores(config: Mapping) -> int:
    """Stores of extract_words: the model's maps, their norm-based twin, the random-init model's maps."""
    return 1 + int(norms_on(config)) + int(random_init_on(config))


def no_store(config: Mapping) -> int:
    return 0


# ---- the estimators ---------------------------------------------------------------------------------

def forward(dims: ModelDims, pieces: Examples, batch: int) -> tuple[float, float]:
    """(RSS MiB, CPU seconds) of extracting the maps of ``pieces``."""
    n = pieces.longest
    maps = dims.layers * batch * dims.heads * n * n * 4 / MIB
    mem = BASE_TORCH_MB + dims.weights_mb + MAPS_COPIES * maps
    entries = dims.heads_total * pieces.squares  # map entries the forward pass computes
    return mem, STARTUP_S + sum_flops(dims, pieces) / CPU_FLOPS + MAP_NS_PER_ENTRY * 1e-9 * entries


def forward_pass(job: Job, cost: Cost) -> Estimate:
    """A step running the model over ``cost.examples``: :func:`forward` once per pass (the model loaded once),
    and its stores."""
    dims = job.dims()
    words, pieces = cost.examples(job)
    mem, cpu = forward(dims, pieces, cost.batch(job))
    stores = cost.stores(job.config)
    return (mem, cpu + (cpu - STARTUP_S) * (cost.passes(job.config) - 1),
            stores * store_bytes(dims, words) * 1.05 / MIB + cost.disk_mb)


def js_entries(seg: Examples, *, causal: bool, rows: int | None) -> float:
    """Map entries the JS sums read per head pair over ``seg`` (the sum over its examples of
    :func:`bertlook.analyses.js_device.entries_per_pair`, from the counts only): ``sum n^2`` (causal maps: the
    visible triangles, ``(sum n^2 + sum n) / 2``); with the estimator's ``rows = R``: at most ``R sum n``
    (causal: ``R (sum n + count) / 2``), never more than the exact sums."""
    exact = (seg.squares + seg.tokens) / 2 if causal else seg.squares
    if rows is None:
        return exact
    return min(exact, rows * (seg.tokens + seg.count) / 2 if causal else rows * seg.tokens)


def alti_macs(job: Job, dims: ModelDims) -> float:
    """Multiply-adds of ALTI per layer in the stream (``contributions.enabled``): ``L x H x d x sum n^2`` over the
    first ``contributions.stream_segments`` segments (every ``(i, j)`` pair of a layer builds a ``d``-long vector
    from ``H`` head terms; the forward pass's own FLOPs are counted apart), a decoder's visible triangles only
    (``(n^2 + n) / 2``: both the CPU kernels and the torch path skip keys no head weights); 0 with the step off."""
    c = job.config.get("contributions") or {}
    if not c.get("enabled", True):
        return 0.0
    seg = segments_input(job, c.get("stream_segments"))
    pairs = (seg.squares + seg.tokens) / 2 if dims.family == "decoder" else seg.squares
    return float(dims.layers * dims.heads * dims.hidden) * pairs


def segment_pass(job: Job, cost: Cost) -> Estimate:
    """extract_segments: the forward pass, and the readers of its maps layer by layer inside it (surface statistics,
    JS partial sums, rollout, and their norm-based twins; ALTI per layer: :func:`alti_macs`); stores only with
    extraction.keep_maps. Causal maps (a decoder's) are read on their visible triangles, the JS estimator
    (clustering.js_rows) on R rows per segment."""
    cfg, dims = job.config, job.dims()
    seg = segments_input(job)
    mem, cpu = forward(dims, seg, job.batch)
    kinds = 2 if norms_on(cfg) else 1
    K, n = dims.heads_total, seg.longest
    causal = dims.family == "decoder"
    rows = (cfg["clustering"] or {}).get("js_rows")
    js_seg = segments_input(job, cfg["clustering"].get("max_examples"))
    visible = (seg.squares + seg.tokens) / 2 if causal else seg.squares
    cpu += kinds * (JS_NS_PER_ENTRY * 1e-9 * js_entries(js_seg, causal=causal, rows=rows) * K * K / 2
                    + STATS_NS_PER_ENTRY * 1e-9 * visible * K)
    if (cfg.get("rollout") or {}).get("enabled", True):
        cpu += ROLLOUT_NS_PER_ENTRY * 1e-9 * seg.squares * K
    cpu += ALTI_NS_PER_MAC * 1e-9 * alti_macs(job, dims)
    maps = dims.layers * job.batch * dims.heads * n ** 2 * 4 / MIB  # one batch of float32 maps
    # the norm-based twin of the batch, and the next batch (and its twin) in flight: the calibrated RSS of the
    # readers beside the forward pass (docs/development/benchmarks.md; the layer-wise readers of issue 42 keep no
    # host batch without a store, so this is an upper bound until the demo's RSS is calibrated again)
    mem += (kinds - 1) * MAPS_COPIES * maps + kinds * MAPS_COPIES * maps
    # one example in float64 per reader, the JS scratch (the estimator's: its R rows)
    mem += 4 * K * (n * n if rows is None else min(rows, n) * n) * 8 / MIB
    keep = bool(cfg["extraction"].get("keep_maps"))
    disk = (kinds * store_bytes(dims, seg) * 1.05 / MIB if keep else 0.0) + 10.0 * (2 * kinds + 2)
    return mem, cpu, disk


def gradients(job: Job, cost: Cost) -> Estimate:
    """The gradients of the masked-LM loss (a shard of segments), or the gather of the shards' partial sums."""
    if not job.reads_maps():  # the gather of the shards' partial sums
        return BASE_PLOT_MB, STARTUP_S, 10.0
    cfg, dims = job.config, job.dims()
    if not dims.mlm_head:  # the step only writes "not run" (offline MiniLM: 8 s, RSS 570)
        return BASE_TORCH_MB + dims.weights_mb, STARTUP_S, 0.0
    ex = segments_input(job, cfg["gradients"].get("max_examples"))
    b, n, L, H = int(cfg["gradients"]["batch_size"]), ex.longest, dims.layers, dims.heads
    autograd = L * b * (2 * H * n * n + n * (10 * dims.hidden + 2 * dims.intermediate)) * 4 + 2 * b * n * dims.vocab * 4
    mem = BASE_TORCH_MB + dims.weights_mb + autograd / MIB
    cpu = STARTUP_S + (3 * sum_flops(dims, ex) + 6.0 * dims.hidden * dims.vocab * ex.tokens) / CPU_FLOPS
    return mem, cpu, 0.0


def contributions(job: Job, cost: Cost) -> Estimate:
    """The contributions step: its seeded samples (the first ``contributions.segments`` segments' counts stand for
    the sample; ``contributions.sentences`` dev sentences of 40 wordpieces) through one forward pass with ALTI
    (about 3 passes' work) and value zeroing (``n`` layer passes per layer and example: ``n`` forward passes)."""
    dims = job.dims()
    n = max(segments_input(job, _contribution_segments(job)).longest, 1)
    maps = dims.layers * dims.heads * n * n * 4 / MIB  # one example's float32 maps (a batch of 1; MiniLM: RSS 0.85 GB)
    return (BASE_PLOT_MB + BASE_TORCH_MB + dims.weights_mb + 6 * maps,
            STARTUP_S + contribution_flops(job, dims) / CPU_FLOPS, 1.0)


def _contribution_segments(job: Job) -> int:
    return int((job.config.get("contributions") or {}).get("segments", 24))


def contribution_flops(job: Job, dims: ModelDims) -> float:
    """FLOPs of :func:`contributions`: per sample, its forward FLOPs x (3 + its mean length)."""
    seg = segments_input(job, _contribution_segments(job))
    sent = Examples.uniform(int((job.config.get("contributions") or {}).get("sentences", 64)), 40)
    return sum(sum_flops(dims, ex) * (3.0 + ex.tokens / max(1, ex.count)) for ex in (seg, sent))


def gather(job: Job, cost: Cost) -> Estimate:
    """A gather: partial sums in (extract_segments computed them), tables, the MDS of a K x K matrix out."""
    return cost.base_mb, STARTUP_S + 10.0, 10.0


def _store_total(job: Job, fallback: Callable[[], float]) -> float:
    sizes = [path_bytes(p) for p in job.stores()]
    known = [s for s in sizes if s]
    return float(sum(known)) if known else fallback()


def store_reader(job: Job, cost: Cost) -> Estimate:
    """A step reading word-level stores twice, one example at a time (Table 1)."""
    dims = job.dims()
    words, _ = treebank_input(job)
    nbytes = _store_total(job, lambda: 2 * store_bytes(dims, words))
    one = dims.heads_total * (job.max_len + 2) ** 2 * 8 / MIB
    return BASE_PLOT_MB + 4 * one, STARTUP_S + 2 * nbytes / (IO_MB_S * 1e6), 10.0


def tree_decoder(job: Job, cost: Cost) -> Estimate:
    """tree_heads on the dev store: 2 K trees per sentence (both directions), each about W passes over its
    (W+1)^2 scores."""
    dims = job.dims()
    words, _ = treebank_input(dataclasses.replace(job, wildcards={**job.wildcards, "split": "dev"}))
    nbytes = _store_total(job, lambda: store_bytes(dims, words))
    squares = nbytes / (2.0 * dims.heads_total)  # sum (W+2)^2 over the dev sentences
    count = words.count
    for p in job.stores():
        try:
            count = int(json.loads(Path(p, "meta.json").read_text(encoding="utf-8"))["n_examples"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
    cubes = squares * math.sqrt(squares / max(1, count))  # sum (W+2)^3, for sentences of one length
    one = dims.heads_total * (job.max_len + 2) ** 2 * 8 / MIB
    cpu = STARTUP_S + nbytes / (IO_MB_S * 1e6) + TREE_S_PER_ENTRY * 2 * dims.heads_total * cubes
    return BASE_PLOT_MB + 8 * one, cpu, 10.0


def probe_batch(job: Job, cost: Cost) -> Estimate:
    """The one probes job (bertlook.analyses.probes.batch): every probe x seed steps together, one sentence per
    step; a step costs about PROBE_STEP_S plus PROBE_S_PER_PAIR_FEATURE per (dependent, candidate) pair and
    attention feature of every model reading attention (the per-pair work of the hidden-layer probes is
    folded into the constant). Memory: the float16 features of every store read, once (shared with the forked
    worker of the second group of cohorts, which adds its own pages)."""
    cfg, dims = job.config, job.dims()
    train = train_store(job, dims)
    K = dims.heads_total
    seeds, epochs = len(cfg["probes"]["seeds"]), int(cfg["probes"]["epochs"])
    modes = list(cfg["probes"].get("layer_ablations") or [])
    norm = bool((cfg.get("norms") or {}).get("enabled", True) and (cfg.get("norms") or {}).get("probes", True))
    random = bool(cfg["probes"].get("random_init", True))
    # attention-reading models per seed: Table 3's 5 (+1 random-init), 3 on the norm maps, 1 per ablation
    attn_models = 5 + int(random) + 3 * int(norm) + dims.layers * len(modes)
    pairs = train.squares / max(1, train.count)  # mean (W+2)^2 ~ pairs per sentence
    step = PROBE_STEP_S + PROBE_S_PER_PAIR_FEATURE * seeds * pairs * (attn_models * 4 * K + 2 * K * PROBE_HIDDEN)
    cpu = STARTUP_S + epochs * train.count * step
    stores = 1 + int(norm) + int(random)
    glove_mb = 100.0 if str(cfg["glove"].get("path") or "").startswith("package:") else 600.0
    # float16 word-word blocks and ROOT parts of train + dev (a quarter of train): about 0.7 x (W+2)^2 per head
    mem = BASE_PROBES_MB + PROBE_WORKER_MB + glove_mb + stores * 1.25 * 0.7 * train.squares * K * 2 / MIB
    return mem, cpu, 30.0


def segmenter(job: Job, cost: Cost) -> Estimate:
    """segments: sentence splitting and tokenising the corpus (about 20 bytes a token out)."""
    n = int(job.config["segments"]["n_segments"])
    return BASE_SPACY_MB, STARTUP_S + 0.05 * n, n * job.max_len * 20 / MIB


def treebank_builder(job: Job, cost: Cost) -> Estimate:
    """treebank: spaCy parses of the silver sentences, or the conversion of a downloaded treebank."""
    tb = job.config["treebank"]
    if tb["source"] == "silver":
        sents = int(tb["silver"]["train_sentences"]) + int(tb["silver"]["dev_sentences"])
        return BASE_SPACY_MB, STARTUP_S + 0.02 * sents, sents * 60 * 80 / MIB
    return BASE_SMALL_MB, STARTUP_S + 60.0, 100.0


def download(job: Job, cost: Cost) -> Estimate:
    """A download whose size is unknown before it: 2 h, 2 GB."""
    return BASE_SMALL_MB, 7200.0 / SAFETY_TIME, 2000.0


def small(job: Job, cost: Cost) -> Estimate:
    """Summaries, tables, manifests, report pages: the interpreter and a few files."""
    return BASE_SMALL_MB, STARTUP_S, 10.0


# ---- the costs the declarations name ------------------------------------------------------------------
SMALL = Cost(estimate=small)
DOWNLOAD = Cost(estimate=download)
STATS_GATHER = Cost(estimate=gather, base_mb=BASE_NUMPY_MB)  # surface statistics, JS clustering, rollout
PLOT_GATHER = Cost(estimate=gather, base_mb=BASE_PLOT_MB)  # figures and pages drawn from tables
STORE_READER = Cost(estimate=store_reader)
CONTRIBUTIONS = Cost(estimate=contributions)


# ---- a model job on a GPU -------------------------------------------------------------------------

GPU_LOAD_MB_S = 200.0  # MB/s reading the weights from a shared filesystem into the GPU
GPU_MEM_GB_S = 2000.0  # GB/s of GPU memory: ASSUMED (an H100 PCIe's 2.0 TB/s; no GPU was lent to measure one)
ALTI_GPU_BYTES_PER_MAC = 16.0  # ALTI's torch path (the GPU's): 4 float32 passes over [rows, keys, d] per head-summed
#                                vector (write, subtract, abs, sum): 16 bytes per (pair x d), i.e. per MAC / heads
JS_FLOPS_PER_ENTRY = 10.0  # device FLOPs per (head pair x map entry) of the JS sums (smoothing, logs, sums)


def runs_model(job: Job, cost: Cost) -> bool:
    """Whether ``job`` runs the model (forward passes, the gradients, the one-pass extraction): the jobs a GPU speeds
    up; the gather of the gradients' shards (the same cost, reading partial sums) does not."""
    if cost.estimate is gradients:
        return job.reads_maps()
    return cost.estimate in (segment_pass, contributions) or cost.examples is not None or cost.flops is not None


def gpu_seconds(job: Job, cost: Cost, dims: ModelDims, weights_bytes: float, gpu_tflops: float) -> float:
    """Seconds a model job holds its GPU: startup, reading ``weights_bytes`` at ``GPU_LOAD_MB_S``, its FLOPs at
    ``gpu_tflops`` (effective TFLOP/s): the forward passes (three for the gradients plus the language-model head)
    and, in the one-pass extraction, the JS sums on the device (``JS_FLOPS_PER_ENTRY`` per head pair and entry) and
    ALTI per layer (:func:`alti_macs`: memory-bound on a GPU, its bytes at ``GPU_MEM_GB_S``, or its FLOPs if more)."""
    extra = 0.0
    if cost.estimate is segment_pass:
        seg = segments_input(job)
        kinds = 2 if norms_on(job.config) else 1
        rows = (job.config.get("clustering") or {}).get("js_rows")
        js = js_entries(segments_input(job, (job.config.get("clustering") or {}).get("max_examples")),
                        causal=dims.family == "decoder", rows=rows)
        flops = sum_flops(dims, seg) + kinds * JS_FLOPS_PER_ENTRY * js * dims.heads_total ** 2 / 2
        macs = alti_macs(job, dims)
        extra = max(2 * macs / (gpu_tflops * 1e12), ALTI_GPU_BYTES_PER_MAC * macs / dims.heads / (GPU_MEM_GB_S * 1e9))
    elif cost.estimate is gradients:
        ex = segments_input(job, (job.config.get("gradients") or {}).get("max_examples"))
        flops = (3 * sum_flops(dims, ex) + 6.0 * dims.hidden * dims.vocab * ex.tokens) if dims.mlm_head else 0.0
    elif cost.estimate is contributions:
        flops = contribution_flops(job, dims)
    elif cost.flops is not None:
        flops = cost.flops(job)
    elif cost.examples is not None:
        flops = sum_flops(dims, cost.examples(job)[1]) * cost.passes(job.config)
    else:
        flops = 0.0
    return STARTUP_S + weights_bytes / (GPU_LOAD_MB_S * 1e6) + flops / (gpu_tflops * 1e12) + extra
