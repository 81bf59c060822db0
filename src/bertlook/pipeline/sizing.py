"""Resource requests of every rule (``mem_mb``, ``runtime`` in minutes, ``disk_mb``) from the model's
dimensions and the sizes of a job's inputs, calibrated on measured Snakemake benchmarks.

Use from a rule (Snakemake calls each value with the job's ``wildcards``, ``input`` and ``attempt``)::

    resources:
        **sizing.snakemake_resources("extract_segments", config),

or directly ``sizing.rule_resources("extract_segments", config, input, wildcards=wildcards,
attempt=attempt)`` -> ``{"mem_mb": ..., "runtime": ..., "disk_mb": ...}``. Every rule of the workflow
has an estimate (:data:`KNOWN_RULES`; ``kind=`` names the rule a new one behaves like). Sharded jobs
(``{shard}`` = ``2of4``) get their contiguous share of the segments / treebank file; gather jobs,
whose inputs are only partial sums and tables, get the small requests.

The model's dimensions are read from its ``config.json`` (local directory, ``package:`` spec, or the
Hugging Face cache for hub ids; no weights are loaded, nothing is downloaded); when it cannot be read,
BERT-large dimensions are assumed (conservative). Inputs that do not exist yet (Snakemake evaluates
resources again when the job is ready) are replaced by upper bounds from the configuration
(``n_segments * max_seq_len`` tokens, ...).

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
* **JS clustering** CPU time = ``JS_NS_PER_ENTRY * sum(n_i^2) * K^2 / 2`` (every head pair, every entry);
* reading a store: ``bytes / IO_MB_S`` (surface statistics, figures, heads, probes).

Requests = model x safety factor (``SAFETY_MEM`` 1.5, ``SAFETY_TIME`` 2: other machines, other
loads; Snakemake samples memory only every 0.5 s, then every 30 s, so measured peaks are lower
bounds), never below the floors (``MEM_FLOOR_MB`` 1000, ``RUNTIME_FLOOR_MIN`` 5,
``DISK_FLOOR_MB`` 100), times ``attempt`` for memory and runtime (a job retried after running out of
memory or time asks for more). Runtime is CPU time as if on one core (the measured jobs used 0.4-1.3
of the 2 cores): an upper bound with more threads, and far above a GPU's.

Calibration: Snakemake benchmark files (``bertlook resources``) of two runs on the 2-core development
machine (no GPU; shared and loaded, so wall times were up to 3x the CPU times: the formulas fit CPU
seconds and RSS in MiB):

* **offline MiniLM-L6** (``results/offline-minilm/benchmarks``, ``make demo``): 6 layers x 12 heads,
  h 384, i 1536, W 87 MiB; 1000 segments (127,387 tokens, store 2.34 GB), 2000 / 500 silver sentences;
* **BERT-base shape** (random weights, ``tiny_models.make_tiny_bert(num_layers=12, num_heads=12,
  hidden_size=768, intermediate_size=3072, vocab 30522, mlm_head=True)``): 12 x 12, W 418 MiB;
  tiny_config with 200 segments (25,600 tokens, store 944 MB), 400 / 200 silver sentences, 2 seeds,
  gradients on 48 segments (batch 8).

=====================  ==========================  ===========================  ==========================
rule                   MiniLM: RSS, CPU s          BERT-base shape: RSS, CPU s  model (before safety)
=====================  ==========================  ===========================  ==========================
extract_segments       735, 75.7                   1141, 68.2                   735, 115 / 1174, 169
extract_words train    695, 24.0                   1030, 95.5 (3.8 wp/word)     735, 69 / 1174, 96
gradients              570, 6.6 (no MLM: not run)  1891, 58.9                   627, 20 / 1988, 156
random_init_model (*)  540, 5.8                    937, 8.1                     627, 24 / 958, 41
cluster_heads          154, 46.8                   90, 33.0                     196, 118 / 232, 80
surface_stats          154, 6.2 (wall 42.7)        121, 6.0 (wall 11.0)         196, 67 / 232, 39
figures / heads        308, 5.0 / 266, 3.4         290, 4.7 / 240, 3.0          356 / 357, 394 / 394
segments / treebank    456, 6.6 / 419, 6.1         406, 4.7 / 381, 6.3          460, 70 / 460, 32
probes                 714, 99.1 (3 seeds)         797, 7.0 (1 seed, 1 thread)  1014, 102 / 1089, 29
=====================  ==========================  ===========================  ==========================

(*) a rule of earlier versions (the saved random-init model copy): the random-init maps now come from
``extract_words_random``, which re-initialises the run's model in memory (``extract-words
--random-init-seed``) and is sized like ``extract_words``. The probes are two rules since: ``probes``
(4 trained probes per seed) and ``probes_random`` (the random-init probe, 1 per seed), each sized by the
formula below with its own number of probes.

A third point, the tests' tiny random BERT (2 x 2 heads, h 32): extraction RSS 412 MiB, the cost of
the interpreter and libraries alone (below ``BASE_TORCH_MB``, which the two real models fit).

Fitted: extraction RSS = 540 + W + 1.5 x one batch of fp32 maps (72 MiB MiniLM, 144 MiB BERT-base at
batch 16, n 128) gives 735 and 1174 for 735 and 1141 measured. Forward throughput: 37.7 (MiniLM) and
65.5 (BERT-base) GFLOP per CPU second -> ``CPU_FLOPS`` = 30e9. Gradients: (3 x 1.07 + 0.86) TFLOP in
58.9 CPU s = 69 GFLOP/s, same constant; autograd model 1988 MiB for 1891 measured. JS clustering: 1.11
ns (MiniLM, 4.2e10 entries) and 0.97 ns (BERT-base, 3.4e10) per entry -> ``JS_NS_PER_ENTRY`` = 1.2.
Store reading: 55 and 86 MB/s wall under load -> ``IO_MB_S`` = 50. Probes (batch 1): 2.05 ms
(MiniLM, K x E[(W+2)^2] = 59k features) and 2.3 ms (BERT-base, 81k) per sentence, probe and seed ->
2.5 ms + 4 ns per feature. The probes job of the BERT-base run took 109 CPU s / 255 s wall with
``OMP_NUM_THREADS=2`` on the loaded 2 cores, but 7 CPU s (10 s wall) alone with one thread: OpenMP
threads spinning on an oversubscribed machine inflate CPU time (and wall time) many times, which
no formula here covers; the same caution applies to the other multi-threaded steps.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from bertlook.errors import BertlookError

MIB = 1 << 20
# inputs of gather jobs (partial sums, tables, summaries): a job with only these reads no maps
GATHERED_SUFFIXES = (".npz", ".csv", ".json", ".md", ".png", ".tsv")

# ---- calibrated constants (see the module docstring for the measured points) ----------------------
BASE_TORCH_MB = 540.0  # python + torch + transformers + tokenizers, before the model
BASE_NUMPY_MB = 160.0  # analysis steps reading a store one example at a time (stats, clustering)
BASE_PLOT_MB = 320.0  # steps drawing figures (matplotlib): figures 308, heads 266
BASE_SPACY_MB = 460.0  # segments (tokenizer) 456, silver treebank (spaCy sm) 419
BASE_SMALL_MB = 250.0  # manifest, compare, coref, summaries, downloads
MAPS_COPIES = 1.5  # one batch of fp32 maps + its float16 copy
CPU_FLOPS = 30e9  # FLOP per CPU second of a BERT forward pass (measured 37.7e9 and 65.5e9)
JS_NS_PER_ENTRY = 0.7  # CPU ns per (head pair x map entry) of the JS divergence (numba kernel: measured 0.58, 1 thread)
STATS_NS_PER_ENTRY = 10.0  # CPU ns per map entry of one per-example reader of extract_segments (stats 8.5, rollout 6)
IO_MB_S = 50.0  # MB/s reading a store (measured 55, 86 on a loaded machine)
PROBE_STEP_S = 20e-3  # CPU s per training step of the batched probes, every model (offline: 30 ms per step)
PROBE_S_PER_PAIR_FEATURE = 8e-11  # plus per (pair x attention feature) of every model of every seed
PROBE_HIDDEN = 256  # the hidden layer of the MLP probes (bertlook.analyses.probes.HIDDEN)
TREE_S_PER_ENTRY = 1e-8  # tree_heads: CPU s per (tree x map entry x word) (offline MiniLM: 8.4e-9, 1.8e-8 loaded)
BASE_PROBES_MB = 840.0  # BASE_TORCH_MB + 300: probes RSS 714 (MiniLM), 797 (BERT-base shape, 1 thread)
PROBE_WORKER_MB = 300.0  # the forked worker's own pages (probe_workers; the demo's probes job PSS 1,412 -> 1,584 MiB)
STARTUP_S = 20.0  # interpreter + imports + model load of a step
WORDPIECES_PER_WORD = 1.3  # BERT WordPiece on English treebanks (offline silver trees: 1.11)
SAFETY_MEM = 1.5
SAFETY_TIME = 2.0
MEM_FLOOR_MB = 1000
RUNTIME_FLOOR_MIN = 5
DISK_FLOOR_MB = 100


@dataclasses.dataclass(frozen=True)
class ModelDims:
    """What the sizes depend on: layers, heads, hidden and feed-forward size, vocabulary, weights."""

    layers: int
    heads: int
    hidden: int
    intermediate: int
    vocab: int
    max_positions: int = 512
    weights_bytes: int | None = None  # from the weights files when found, else from the dimensions
    source: str = "config.json"
    mlm_head: bool = True  # False when config.json's architectures name no masked-LM head (no gradients)
    family: str = "encoder"  # encoder | decoder (bertlook.pipeline.model_spec.model_family)
    kv_heads: int | None = None  # grouped-query attention: key/value heads (None: as many as heads)
    gated_mlp: bool = False  # a gated feed-forward (Llama, Qwen2, Mistral: 3 matrices instead of 2)

    @property
    def heads_total(self) -> int:
        return self.layers * self.heads

    @property
    def kv_fraction(self) -> float:
        """Key/value heads per head (1 without grouped-query attention)."""
        return (self.kv_heads or self.heads) / self.heads

    @property
    def mlp_matrices(self) -> int:
        return 3 if self.gated_mlp else 2

    @property
    def params(self) -> int:
        """Parameter count from the dimensions: a BERT encoder (embeddings, layers, pooler), or a decoder
        (token embeddings, an untied output head, layers with grouped-query key/value projections and a
        gated feed-forward where the model has them)."""
        h, i, layer_count = self.hidden, self.intermediate, self.layers
        if self.family == "decoder":
            attention = int(2 * h * h + 2 * h * h * self.kv_fraction)
            return 2 * self.vocab * h + layer_count * (attention + self.mlp_matrices * h * i + 4 * h) + 2 * h
        embeddings = (self.vocab + self.max_positions + 2) * h + 2 * h
        layer = 4 * (h * h + h) + 2 * h + (h * i + i) + (i * h + h) + 2 * h
        return embeddings + layer_count * layer + h * h + h

    @property
    def weights_mb(self) -> float:
        """fp32 weights in MiB (the files' size when known)."""
        return (self.weights_bytes if self.weights_bytes else 4 * self.params) / MIB

    @property
    def matmul_params_per_layer(self) -> float:
        """Weights a token passes through per layer: q, o, k, v (k, v smaller under grouped-query attention)
        and the feed-forward matrices."""
        h, i = self.hidden, self.intermediate
        return 2 * h * h + 2 * h * h * self.kv_fraction + self.mlp_matrices * h * i

    def flops_per_token(self, n: float) -> float:
        """Forward FLOPs per token of an n-token example (projections, feed-forward, attention)."""
        return self.layers * (2.0 * self.matmul_params_per_layer + 4.0 * n * self.hidden)


# BERT-large: assumed when a model's config.json cannot be read (conservative for BERT-base-like models)
DEFAULT_DIMS = ModelDims(layers=24, heads=16, hidden=1024, intermediate=4096, vocab=30522,
                         source="assumed: BERT-large dimensions (config.json not readable)")


def dims_from_config(cfg: Mapping[str, Any], weights_bytes: int | None = None, source: str = "config.json") -> ModelDims:
    """ModelDims from a ``config.json`` dict (BERT / RoBERTa names, GPT-2 style names as fallback)."""
    def get(*names, default=None):
        for name in names:
            if cfg.get(name):
                return int(cfg[name])
        if default is None:
            raise BertlookError(f"{source}: none of {', '.join(names)} in the model config")
        return default

    from bertlook.pipeline.model_spec import DECODER, model_family

    hidden = get("hidden_size", "n_embd", "d_model")
    archs = cfg.get("architectures")
    family = model_family(cfg)
    mlm = not archs or any(("MaskedLM" in a or "ForPreTraining" in a) for a in archs)
    if family == DECODER:  # its pre-training head is the next-token head: gradients run when it has one
        mlm = not archs or any(a.endswith(("ForCausalLM", "LMHeadModel")) for a in archs)
    heads = get("num_attention_heads", "n_head")
    return ModelDims(
        layers=get("num_hidden_layers", "n_layer", "num_layers"),
        heads=heads,
        hidden=hidden,
        intermediate=get("intermediate_size", "n_inner", default=4 * hidden),
        vocab=get("vocab_size", default=30522),
        max_positions=get("max_position_embeddings", "n_positions", default=512),
        weights_bytes=weights_bytes,
        source=source,
        mlm_head=mlm,
        family=family,
        kv_heads=get("num_key_value_heads", default=heads),
        gated_mlp=family == DECODER and cfg.get("model_type") not in ("gpt2", "gpt_neo", "gpt_neox", "gptj", "opt",
                                                                     "bloom", "falcon", "phi", "codegen", "starcoder2"),
    )


def _weights_bytes(root: Path) -> int | None:
    files = [p for p in root.glob("*.safetensors") if p.is_file()]
    return sum(p.stat().st_size for p in files) or None


def model_dims(spec: str, revision: str | None = None) -> ModelDims:
    """Dimensions of a model spec from its ``config.json``, without loading weights or using the
    network (hub ids: the HF cache only). :data:`DEFAULT_DIMS` when the config cannot be read."""
    from bertlook.pipeline.model_spec import cached_file, resolve_model  # no torch: the DAG is built with this

    try:
        resolved = resolve_model(spec, revision)
        if resolved.is_hub:
            found = cached_file(resolved.path_or_id, "config.json", revision)
            if not found:
                return dataclasses.replace(DEFAULT_DIMS, source=f"assumed: BERT-large ({spec} not in the HF cache)")
            config_path = Path(found)
            weights = cached_file(resolved.path_or_id, "model.safetensors", revision)
            weights_bytes = Path(weights).stat().st_size if weights else None
        else:
            config_path = Path(resolved.path_or_id) / "config.json"
            weights_bytes = _weights_bytes(Path(resolved.path_or_id))
        cfg = json.loads(config_path.read_text(encoding="utf-8"))
        return dims_from_config(cfg, weights_bytes, source=str(config_path))
    except (BertlookError, OSError, ValueError, TypeError):
        return DEFAULT_DIMS


# ---- inputs ---------------------------------------------------------------------------------------

def path_bytes(path: str | os.PathLike) -> int | None:
    """Size of a file, or of every file under a directory; None when it does not exist."""
    p = Path(path)
    if p.is_file():
        return p.stat().st_size
    if p.is_dir():
        return sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
    return None


@dataclasses.dataclass
class Examples:
    """Token counts of a set of examples: count, sum of n, sum of n^2, largest n."""

    count: int = 0
    tokens: float = 0.0
    squares: float = 0.0
    longest: int = 0

    def add(self, n: float) -> None:
        self.count += 1
        self.tokens += n
        self.squares += n * n
        self.longest = max(self.longest, int(math.ceil(n)))

    @classmethod
    def uniform(cls, count: int, n: int) -> "Examples":
        return cls(count=count, tokens=float(count * n), squares=float(count * n * n), longest=n)


def shard_slice(items: list, shard: tuple[int, int] | None) -> list:
    """Shard ``i`` of ``k``: the contiguous range ``[(i-1) N // k, i N // k)`` of the items, as
    ``bertlook.pipeline.sharding.shard_range`` cuts the segments and treebank files."""
    if shard is None:
        return items
    i, k = shard
    n = len(items)
    return items[(i - 1) * n // k: i * n // k]


def segments_examples(path: str | os.PathLike, shard: tuple[int, int] | None = None) -> Examples | None:
    """Token counts of a segments file (JSON Lines with ``tokens``), or of one shard of it; None when
    the file is not there."""
    p = Path(path)
    if not p.is_file():
        return None
    lengths = []
    with open(p, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                try:
                    lengths.append(len(json.loads(line).get("tokens") or ()))
                except (ValueError, AttributeError):
                    continue
    ex = Examples()
    for n in shard_slice(lengths, shard):
        ex.add(n)
    return ex


def conllu_examples(path: str | os.PathLike, max_seq_len: int,
                    shard: tuple[int, int] | None = None) -> tuple[Examples, Examples] | None:
    """(words incl. [CLS]/[SEP], wordpieces) of a CoNLL-U file's sentences (or of one shard of them);
    None when the file is not there. Wordpieces ~ ``WORDPIECES_PER_WORD`` per word, at most
    ``max_seq_len``; multi-word-token ranges and empty nodes are not words."""
    p = Path(path)
    if not p.is_file():
        return None
    counts: list[int] = []
    n = 0
    with open(p, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            line = line.strip()
            if not line:
                if n:
                    counts.append(n)
                n = 0
            elif not line.startswith("#") and line.split("\t", 1)[0].isdigit():
                n += 1
    if n:
        counts.append(n)
    words, pieces = Examples(), Examples()
    for n in shard_slice(counts, shard):
        words.add(n + 2)
        pieces.add(min(max_seq_len, WORDPIECES_PER_WORD * n + 2))
    pieces.longest = max_seq_len  # a batch may hold a sentence of max_seq_len wordpieces
    return words, pieces


def store_bytes(dims: ModelDims, examples: Examples) -> float:
    """Bytes of an attention store: ``K * sum(n^2) * 2`` (float16 maps)."""
    return dims.heads_total * examples.squares * 2.0


# ---- the request ----------------------------------------------------------------------------------

@dataclasses.dataclass
class Job:
    """What a rule's estimate may use."""

    rule: str
    config: Mapping[str, Any]
    inputs: list[str]
    wildcards: dict[str, str]
    dims_of: Callable[[str, str | None], ModelDims]

    def run_model(self) -> Mapping[str, Any]:
        run = self.wildcards.get("run")
        models = self.config["models"]
        for m in models:
            if run == f"{self.config['run_name']}-{m['label']}":
                return m
        return models[0]

    def dims(self) -> ModelDims:
        for p in self.inputs:  # a model directory among the inputs (config.json) gives the dimensions
            if Path(p, "config.json").is_file():
                return model_dims(p)
        m = self.run_model()
        return self.dims_of(m["name_or_path"], m.get("revision"))

    def input_like(self, *suffixes: str) -> list[str]:
        return [p for p in self.inputs if str(p).endswith(suffixes)]

    def stores(self) -> list[str]:
        """The input attention stores that exist (directories with a meta.json)."""
        return [p for p in self.inputs if Path(p, "meta.json").is_file()]

    @property
    def shard(self) -> tuple[int, int] | None:
        """``(i, k)`` from the ``shard`` wildcard ("2of4", "02of12"), None for an unsharded job."""
        m = re.match(r"^(\d+)(?:of|/)(\d+)$", self.wildcards.get("shard", ""))
        if not m or not 1 <= int(m.group(1)) <= int(m.group(2)):
            return None
        return int(m.group(1)), int(m.group(2))

    def reads_maps(self) -> bool:
        """False for a gather job, whose inputs are only partial sums, tables and summaries."""
        return any(not str(p).endswith(GATHERED_SUFFIXES) for p in self.inputs) or not self.inputs

    @property
    def max_len(self) -> int:
        return int(self.config["segments"]["max_seq_len"])

    @property
    def batch(self) -> int:
        return int(self.config["extraction"]["batch_size"])


def _uniform_shard(count: int, n: int, shard: tuple[int, int] | None) -> Examples:
    return Examples.uniform(len(shard_slice(range(count), shard)), n)


def _segments(job: Job, limit: int | None = None) -> Examples:
    """Token counts of the job's segments: its shard of the segments file (of its first ``limit``
    segments), else the configuration's upper bound ``n_segments x max_seq_len``."""
    for p in job.input_like(".jsonl"):
        if limit:
            ex = segments_examples(p)
            if ex is not None and ex.count:
                lengths = []
                with open(p, encoding="utf-8") as fh:
                    for line in fh:
                        if line.strip() and len(lengths) < limit:
                            try:
                                lengths.append(len(json.loads(line).get("tokens") or ()))
                            except (ValueError, AttributeError):
                                continue
                got = Examples()
                for n in shard_slice(lengths, job.shard):
                    got.add(n)
                return got
        ex = segments_examples(p, job.shard)
        if ex is not None and ex.count:
            return ex
    count = int(job.config["segments"]["n_segments"])
    return _uniform_shard(min(count, limit) if limit else count, job.max_len, job.shard)


def _treebank_sentences(job: Job) -> int:
    """Sentences of a split when the treebank file is not there yet (upper bounds)."""
    tb = job.config["treebank"]
    split = job.wildcards.get("split", "train")
    if tb["source"] == "silver":
        return int(tb["silver"][f"{split}_sentences"])
    return 15000 if split == "train" else 2500  # UD English EWT: 12,544 / 2,001


def _words(job: Job) -> tuple[Examples, Examples]:
    for p in job.input_like(".conllu", ".conll", ".conllx"):
        got = conllu_examples(p, job.max_len, job.shard)
        if got is not None and got[0].count:
            return got
    count = len(shard_slice(range(_treebank_sentences(job)), job.shard))
    max_words = int(job.config["treebank"].get("silver", {}).get("max_words") or 60)
    mean = min(30, max_words)  # offline silver trees: E[(W+2)^2] = 824, i.e. ~29 words incl. [CLS]/[SEP]
    pieces = Examples.uniform(count, min(job.max_len, int(WORDPIECES_PER_WORD * mean + 2)))
    pieces.longest = job.max_len
    return Examples.uniform(count, mean + 2), pieces


def _train_store(job: Job, dims: ModelDims) -> Examples:
    """Sentences and sum((W+2)^2) of the training split: from the train store's meta.json and size
    when it exists (``sum = bytes / (2 K)``), else from the configuration."""
    for p in job.stores():
        if Path(p).name.startswith(("words-train", "randwords-train")) or Path(p).name == "train":
            try:
                count = int(json.loads(Path(p, "meta.json").read_text(encoding="utf-8"))["n_examples"])
            except (OSError, ValueError, KeyError, TypeError):
                continue
            squares = (path_bytes(p) or 0) / (2.0 * dims.heads_total)
            return Examples(count=count, tokens=0.0, squares=squares, longest=job.max_len)
    split_job = dataclasses.replace(job, wildcards={**job.wildcards, "split": "train"}, inputs=[])
    return _words(split_job)[0]


def _store_total(job: Job, fallback: Callable[[], float]) -> float:
    sizes = [path_bytes(p) for p in job.stores()]
    known = [s for s in sizes if s]
    return float(sum(known)) if known else fallback()


def _forward(dims: ModelDims, pieces: Examples, batch: int) -> tuple[float, float]:
    """(RSS MiB, CPU seconds) of extracting the maps of ``pieces``."""
    n = pieces.longest
    maps = dims.layers * batch * dims.heads * n * n * 4 / MIB
    mem = BASE_TORCH_MB + dims.weights_mb + MAPS_COPIES * maps
    flops = sum_flops(dims, pieces)
    return mem, STARTUP_S + flops / CPU_FLOPS


def sum_flops(dims: ModelDims, ex: Examples) -> float:
    """Forward FLOPs of every example: per token ``2 L`` x the weights it passes
    (:attr:`ModelDims.matmul_params_per_layer`; BERT: ``4h^2 + 2hi``) plus ``4 L h n`` for attention."""
    return dims.layers * (2.0 * dims.matmul_params_per_layer * ex.tokens + 4.0 * dims.hidden * ex.squares)


def _norms_on(cfg: Mapping[str, Any]) -> bool:
    return bool((cfg.get("norms") or {}).get("enabled", True))


def _estimate_segment_pass(job: Job) -> tuple[float, float, float]:
    """(RSS MiB, CPU seconds, output MiB) of extract_segments: the forward pass, then the readers of its maps
    in memory (surface statistics, JS partial sums, rollout, and their norm-based twins); stores only with
    extraction.keep_maps."""
    cfg, dims = job.config, job.dims()
    seg = _segments(job)
    mem, cpu = _forward(dims, seg, job.batch)
    kinds = 2 if _norms_on(cfg) else 1
    K = dims.heads_total
    js_squares = seg.squares
    limit = cfg["clustering"].get("max_examples")
    if limit and seg.count > limit:
        js_squares *= limit / seg.count
    cpu += kinds * (JS_NS_PER_ENTRY * 1e-9 * js_squares * K * K / 2 + STATS_NS_PER_ENTRY * 1e-9 * seg.squares * K)
    if (cfg.get("rollout") or {}).get("enabled", True):
        cpu += STATS_NS_PER_ENTRY * 1e-9 * seg.squares * K
    maps = dims.layers * job.batch * dims.heads * seg.longest ** 2 * 4 / MIB  # one batch of float32 maps
    # the norm-based twin of the batch, and the next batch (and its twin) computed while the readers work
    # on this one (extract-segments with 2+ threads pipelines them)
    mem += (kinds - 1) * MAPS_COPIES * maps + kinds * MAPS_COPIES * maps
    mem += 4 * K * seg.longest ** 2 * 8 / MIB  # one example in float64 per reader, the JS scratch
    keep = bool(cfg["extraction"].get("keep_maps"))
    disk = (kinds * store_bytes(dims, seg) * 1.05 / MIB if keep else 0.0) + 10.0 * (2 * kinds + 2)
    return mem, cpu, disk


def _estimate_probes(job: Job) -> tuple[float, float, float]:
    """The one probes job (bertlook.analyses.probe_batch): every probe x seed steps together, one sentence per
    step; a step costs about PROBE_STEP_S plus PROBE_S_PER_PAIR_FEATURE per (dependent, candidate) pair and
    attention feature of every model reading attention (the per-pair work of the hidden-layer probes is
    folded into the constant). Memory: the float16 features of every store read, once (shared with the forked
    worker of the second group of cohorts, which adds its own pages)."""
    cfg, dims = job.config, job.dims()
    train = _train_store(job, dims)
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


def _estimate(job: Job) -> tuple[float, float, float]:
    """(RSS MiB, CPU seconds, output MiB) before safety factors and floors."""
    rule, cfg = job.rule, job.config
    if rule == "extract_segments":
        return _estimate_segment_pass(job)
    if rule in ("extract_words", "coref_extract"):
        dims = job.dims()
        if rule == "coref_extract":
            docs = max(1, sum(path_bytes(p) or 0 for p in job.inputs) // 20_000)  # ~20 kB per CoNLL-2012 part
            pieces = words = Examples.uniform(int(docs), job.max_len)
        else:
            words, pieces = _words(job)
        mem, cpu = _forward(dims, pieces, job.batch)
        if rule == "coref_extract":
            return mem, cpu, store_bytes(dims, words) * 1.05 / MIB
        # extract_words: the norm-based store (norms.enabled) and the random-init model's maps of the same
        # sentences in the same job (probes.random_init: a second forward pass), each a store of the same size
        random = bool((cfg.get("probes") or {}).get("random_init", True))
        stores = 1 + int(_norms_on(cfg)) + int(random)
        return mem, cpu + (cpu - STARTUP_S) * int(random), stores * store_bytes(dims, words) * 1.05 / MIB
    if rule in ("gradients", "gradients_shard"):
        if not job.reads_maps():  # the gather of the shards' partial sums
            return BASE_PLOT_MB, STARTUP_S, 10.0
        dims = job.dims()
        if not dims.mlm_head:  # the step only writes "not run" (offline MiniLM: 8 s, RSS 570)
            return BASE_TORCH_MB + dims.weights_mb, STARTUP_S, 0.0
        ex = _segments(job, cfg["gradients"].get("max_examples"))
        b, n, L, H = int(cfg["gradients"]["batch_size"]), ex.longest, dims.layers, dims.heads
        autograd = L * b * (2 * H * n * n + n * (10 * dims.hidden + 2 * dims.intermediate)) * 4 + 2 * b * n * dims.vocab * 4
        mem = BASE_TORCH_MB + dims.weights_mb + autograd / MIB
        cpu = STARTUP_S + (3 * sum_flops(dims, ex) + 6.0 * dims.hidden * dims.vocab * ex.tokens) / CPU_FLOPS
        return mem, cpu, 0.0
    if rule in ("surface_stats", "cluster_heads", "rollout", "figures"):
        # gathers: partial sums in (extract_segments computed them), tables, the MDS of a K x K matrix out
        return BASE_PLOT_MB if rule == "figures" else BASE_NUMPY_MB, STARTUP_S + 10.0, 10.0
    if rule == "heads":
        dims = job.dims()
        words, _ = _words(job)
        nbytes = _store_total(job, lambda: 2 * store_bytes(dims, words))
        one = dims.heads_total * (job.max_len + 2) ** 2 * 8 / MIB
        return BASE_PLOT_MB + 4 * one, STARTUP_S + 2 * nbytes / (IO_MB_S * 1e6), 10.0
    if rule == "tree_heads":
        # 2 K trees per sentence (both directions), each about W passes over its (W+1)^2 scores
        dims = job.dims()
        words, _ = _words(dataclasses.replace(job, wildcards={**job.wildcards, "split": "dev"}))
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
    if rule == "probes":
        return _estimate_probes(job)
    if rule == "head_detectors":
        # one forward pass over n_sequences sequences of 2 x length tokens (+ the tokenizer's 2 at most)
        hd = cfg.get("head_detectors") or {}
        n = 2 * int(hd.get("length", 25)) + 2
        mem, cpu = _forward(job.dims(), Examples.uniform(int(hd.get("n_sequences", 50)), n),
                            int(hd.get("batch_size", 16)))
        return mem, cpu, 1.0
    if rule == "segments":
        n = int(cfg["segments"]["n_segments"])
        return BASE_SPACY_MB, STARTUP_S + 0.05 * n, n * job.max_len * 20 / MIB
    if rule == "treebank":
        tb = cfg["treebank"]
        if tb["source"] == "silver":
            sents = int(tb["silver"]["train_sentences"]) + int(tb["silver"]["dev_sentences"])
            return BASE_SPACY_MB, STARTUP_S + 0.02 * sents, sents * 60 * 80 / MIB
        return BASE_SMALL_MB, STARTUP_S + 60.0, 100.0
    if rule in ("download_wikipedia", "download_glove"):
        return BASE_SMALL_MB, 7200.0 / SAFETY_TIME, 2000.0  # size unknown before the download: 2 h, 2 GB
    if rule in SMALL_RULES:
        return BASE_SMALL_MB, STARTUP_S, 10.0
    raise BertlookError(f"sizing: no estimate for rule {rule!r} (known: {', '.join(sorted(KNOWN_RULES))}); "
                        "pass kind= the rule it behaves like")


SMALL_RULES = ("manifest", "compare", "coref", "models_summary", "resources", "resources_summary", "report_pages",
               "gather_extraction", "merge_words", "merge_words_random", "merge_words_norm")
KNOWN_RULES = (
    "segments", "download_wikipedia", "download_glove", "extract_segments",
    "surface_stats", "cluster_heads", "rollout", "figures", "treebank", "extract_words",
    "heads", "probes", "coref_extract", "gradients_shard", "gradients", "tree_heads", "head_detectors",
    *SMALL_RULES,
)


def rule_resources(rule: str, config: Mapping[str, Any], input_paths: Iterable[Any] = (), *,
                   wildcards: Mapping[str, Any] | None = None, attempt: int = 1, kind: str | None = None,
                   dims_of: Callable[[str, str | None], ModelDims] | None = None) -> dict[str, int]:
    """``{"mem_mb", "runtime" (minutes), "disk_mb"}`` of a job of ``rule`` (or of the rule ``kind``
    it behaves like, e.g. a shard of ``extract_segments``). ``input_paths``: the job's input files
    (Snakemake's ``input``), ``wildcards``: its wildcards (``run``, ``split``, ``maps``)."""
    wc = {k: str(v) for k, v in (wildcards.items() if wildcards is not None else ())}  # dict or Wildcards
    inputs = [str(p) for p in (input_paths or [])]
    name = kind or rule
    job = Job(rule=name, config=config, inputs=inputs, wildcards=wc, dims_of=dims_of or model_dims)
    mem, cpu, disk = _estimate(job)
    attempt = max(1, int(attempt))
    return {
        "mem_mb": int(max(MEM_FLOOR_MB, math.ceil(SAFETY_MEM * mem * 1.048576))) * attempt,  # MiB -> MB
        "runtime": int(max(RUNTIME_FLOOR_MIN, math.ceil(SAFETY_TIME * cpu / 60.0))) * attempt,
        "disk_mb": int(max(DISK_FLOOR_MB, math.ceil(disk * 1.048576))),
    }


def snakemake_resources(rule: str, config: Mapping[str, Any], *, kind: str | None = None) -> dict[str, Callable]:
    """``mem_mb``, ``runtime``, ``disk_mb`` as Snakemake resource callables of one rule
    (``resources: **sizing.snakemake_resources("extract_segments", config)``)."""
    cache: dict[tuple, dict[str, int]] = {}

    def state(path: str) -> tuple:
        try:
            st = os.stat(path)
        except OSError:
            return (path, None)
        return (path, st.st_size, st.st_mtime_ns)

    def value(key: str) -> Callable:
        def get(wildcards, input, attempt):
            # Snakemake evaluates resources when it builds the DAG (inputs may not exist yet) and
            # again when the job is ready: the inputs' state is part of the key, so that second
            # evaluation sees the real sizes
            token = (tuple(sorted(dict(wildcards.items()).items())), tuple(state(str(p)) for p in input), attempt)
            if token not in cache:
                cache[token] = rule_resources(rule, config, list(input), wildcards=dict(wildcards.items()),
                                              attempt=attempt, kind=kind)
            return cache[token][key]

        return get

    return {key: value(key) for key in ("mem_mb", "runtime", "disk_mb")}
