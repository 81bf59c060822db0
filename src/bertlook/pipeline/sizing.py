"""Resource requests of every rule (``mem_mb``, ``runtime`` in minutes, ``disk_mb``) from the model's
dimensions and the sizes of a job's inputs, calibrated on measured Snakemake benchmarks.

Each rule declares what its jobs cost (a :class:`bertlook.pipeline.costs.Cost`: in its step's declaration, or
in the ``COSTS`` table of its CLI module; :func:`bertlook.cli.declared_costs` gathers them). A rule takes its
resources from them (Snakemake calls each value with the job's ``wildcards``, ``input`` and ``attempt``)::

    resources:
        **sizing.snakemake_resources("extract_segments", config, declared_costs()),

(``step_resources(rule)`` in workflow/rules/rule_helpers.smk), or directly ``sizing.rule_resources("extract_segments",
config, input, costs=declared_costs(), wildcards=wildcards, attempt=attempt)`` -> ``{"mem_mb": ..., "runtime":
..., "disk_mb": ...}``; a rule without a declared cost is an error naming it. Sharded jobs (``{shard}`` =
``2of4``) get their contiguous share of the segments / treebank file; gather jobs, whose inputs are only
partial sums and tables, get the small requests.

The model's dimensions are read from its ``config.json`` (local directory, ``package:`` spec, or the
Hugging Face cache for hub ids; no weights are loaded, nothing is downloaded); when it cannot be read,
BERT-large dimensions are assumed (conservative). Inputs that do not exist yet (Snakemake evaluates
resources again when the job is ready) are replaced by upper bounds from the configuration
(``n_segments * max_seq_len`` tokens, ...).

Requests = model x safety factor (``SAFETY_MEM`` 1.5, ``SAFETY_TIME`` 2: other machines, other
loads; Snakemake samples memory only every 0.5 s, then every 30 s, so measured peaks are lower
bounds), never below the floors (``MEM_FLOOR_MB`` 1000, ``RUNTIME_FLOOR_MIN`` 5,
``DISK_FLOOR_MB`` 100), times ``attempt`` for memory and runtime (a job retried after running out of
memory or time asks for more). Runtime is CPU time as if on one core (the measured jobs used 0.4-1.3
of the 2 cores): an upper bound with more threads, and far above a GPU's.

The estimate before the safety factors comes from the rule's cost (:mod:`bertlook.pipeline.costs` gives the
model of each quantity); its calibration on measured runs is in docs/development/benchmarks.md.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import re
import stat
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from bertlook.errors import BertlookError
from bertlook.pipeline.model_spec import DECODER, cached_file, model_family, resolve_model

MIB = 1 << 20
# inputs of gather jobs (partial sums, tables, summaries): a job with only these reads no maps
GATHERED_SUFFIXES = (".npz", ".csv", ".json", ".md", ".png", ".tsv")

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

    hidden = get("hidden_size", "n_embd", "d_model", "dim")  # dim, n_layers, n_heads, hidden_dim: DistilBERT
    archs = cfg.get("architectures")
    family = model_family(cfg)
    mlm = not archs or any(("MaskedLM" in a or "ForPreTraining" in a) for a in archs)
    if family == DECODER:  # its pre-training head is the next-token head: gradients run when it has one
        mlm = not archs or any(a.endswith(("ForCausalLM", "LMHeadModel")) for a in archs)
    heads = get("num_attention_heads", "n_head", "n_heads")
    return ModelDims(
        layers=get("num_hidden_layers", "n_layer", "num_layers", "n_layers"),
        heads=heads,
        hidden=hidden,
        intermediate=get("intermediate_size", "n_inner", "hidden_dim", default=4 * hidden),
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


def shard_slice(items: Sequence, shard: tuple[int, int] | None) -> Sequence:
    """Shard ``i`` of ``k``: the contiguous range ``[(i-1) N // k, i N // k)`` of the items, as
    ``bertlook.pipeline.sharding.shard_range`` cuts the segments and treebank files."""
    if shard is None:
        return items
    i, k = shard
    n = len(items)
    return items[(i - 1) * n // k: i * n // k]


def _path_state(path: str | os.PathLike, *, regular: bool = False) -> tuple[str, int, int] | None:
    """(path, size, mtime) of a path (with ``regular``: of a regular file only); None when there is none. The key of
    the read caches below and of :func:`snakemake_resources`' cache: Snakemake evaluates a rule's resources for
    every job of the rule (and again when the job is ready), and the files are read once per state, not once per
    evaluation."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (str(path), st.st_size, st.st_mtime_ns) if stat.S_ISREG(st.st_mode) or not regular else None


@functools.lru_cache(maxsize=64)
def _segment_lengths(key: tuple[str, int, int]) -> tuple[int, ...]:
    lengths = []
    with open(key[0], encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                try:
                    lengths.append(len(json.loads(line).get("tokens") or ()))
                except (ValueError, AttributeError):
                    continue
    return tuple(lengths)


def segments_examples(path: str | os.PathLike, shard: tuple[int, int] | None = None,
                      limit: int | None = None) -> Examples | None:
    """Token counts of a segments file (JSON Lines with ``tokens``; of its first ``limit`` segments), or of one
    shard of them; None when the file is not there."""
    key = _path_state(path, regular=True)
    if key is None:
        return None
    lengths = _segment_lengths(key)
    ex = Examples()
    for n in shard_slice(lengths[:limit] if limit else lengths, shard):
        ex.add(n)
    return ex


@functools.lru_cache(maxsize=64)
def _sentence_words(key: tuple[str, int, int]) -> tuple[int, ...]:
    """Words per sentence of a CoNLL-U file (multi-word-token ranges and empty nodes are not words)."""
    counts: list[int] = []
    n = 0
    with open(key[0], encoding="utf-8", errors="replace") as fh:
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
    return tuple(counts)


def conllu_examples(path: str | os.PathLike, max_seq_len: int,
                    shard: tuple[int, int] | None = None) -> tuple[Examples, Examples] | None:
    """(words incl. [CLS]/[SEP], wordpieces) of a CoNLL-U file's sentences (or of one shard of them);
    None when the file is not there. Wordpieces ~ ``WORDPIECES_PER_WORD`` per word, at most
    ``max_seq_len``; multi-word-token ranges and empty nodes are not words."""
    key = _path_state(path, regular=True)
    if key is None:
        return None
    words, pieces = Examples(), Examples()
    for n in shard_slice(_sentence_words(key), shard):
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


def segments_input(job: Job, limit: int | None = None) -> Examples:
    """Token counts of the job's segments: its shard of the segments file (of its first ``limit``
    segments), else the configuration's upper bound ``n_segments x max_seq_len``."""
    for p in job.input_like(".jsonl"):
        ex = segments_examples(p, None if limit else job.shard)  # with a limit: the shard of the first segments
        if ex is not None and ex.count:
            return segments_examples(p, job.shard, limit) if limit else ex
    count = int(job.config["segments"]["n_segments"])
    return _uniform_shard(min(count, limit) if limit else count, job.max_len, job.shard)


def _treebank_sentences(job: Job) -> int:
    """Sentences of a split when the treebank file is not there yet (upper bounds)."""
    tb = job.config["treebank"]
    split = job.wildcards.get("split", "train")
    if tb["source"] == "silver":
        return int(tb["silver"][f"{split}_sentences"])
    return 15000 if split == "train" else 2500  # UD English EWT: 12,544 / 2,001


def treebank_input(job: Job) -> tuple[Examples, Examples]:
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


def train_store(job: Job, dims: ModelDims) -> Examples:
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
    return treebank_input(split_job)[0]


def sum_flops(dims: ModelDims, ex: Examples) -> float:
    """Forward FLOPs of every example: per token ``2 L`` x the weights it passes
    (:attr:`ModelDims.matmul_params_per_layer`; BERT: ``4h^2 + 2hi``) plus ``4 L h n`` for attention."""
    return dims.layers * (2.0 * dims.matmul_params_per_layer * ex.tokens + 4.0 * dims.hidden * ex.squares)


def declared_cost(rule: str, costs: Mapping[str, Any]) -> Any:
    """The cost ``costs`` (``{rule: bertlook.pipeline.costs.Cost}``) declares for ``rule``; a rule without one
    is an error naming it."""
    if rule not in costs:
        raise BertlookError(f"sizing: no estimate for rule {rule!r}: declare its cost (cost= in its step, or the COSTS "
                            f"table of its CLI module: docs/ADDING_A_STEP.md); declared: {', '.join(sorted(costs))}")
    return costs[rule]


def rule_resources(rule: str, config: Mapping[str, Any], input_paths: Iterable[Any] = (), *,
                   costs: Mapping[str, Any], wildcards: Mapping[str, Any] | None = None, attempt: int = 1,
                   dims_of: Callable[[str, str | None], ModelDims] | None = None) -> dict[str, int]:
    """``{"mem_mb", "runtime" (minutes), "disk_mb"}`` of a job of ``rule``, from the cost ``costs`` declares
    for it (:func:`bertlook.cli.declared_costs`). ``input_paths``: the job's input files (Snakemake's
    ``input``), ``wildcards``: its wildcards (``run``, ``split``, ``maps``)."""
    cost = declared_cost(rule, costs)
    wc = {k: str(v) for k, v in (wildcards.items() if wildcards is not None else ())}  # dict or Wildcards
    inputs = [str(p) for p in (input_paths or [])]
    job = Job(rule=rule, config=config, inputs=inputs, wildcards=wc, dims_of=dims_of or model_dims)
    mem, cpu, disk = cost.estimate(job, cost)
    seconds = _gpu_runtime(job, cost) or cpu
    attempt = max(1, int(attempt))
    return {
        "mem_mb": int(max(MEM_FLOOR_MB, math.ceil(SAFETY_MEM * mem * 1.048576))) * attempt,  # MiB -> MB
        "runtime": int(max(RUNTIME_FLOOR_MIN, math.ceil(SAFETY_TIME * seconds / 60.0))) * attempt,
        "disk_mb": int(max(DISK_FLOOR_MB, math.ceil(disk * 1.048576))),
    }


def _gpu_runtime(job: Job, cost: Any) -> float | None:
    """Seconds of a model job on a GPU when the configuration says how fast its GPUs are
    (``extraction.gpu_tflops``: the cost's ``gpu_runtime``, :func:`bertlook.pipeline.costs.gpu_seconds`), else None
    (the CPU-time model)."""
    tflops = (job.config.get("extraction") or {}).get("gpu_tflops")
    return cost.gpu_runtime(job, float(tflops)) if tflops else None


def snakemake_resources(rule: str, config: Mapping[str, Any], costs: Mapping[str, Any]) -> dict[str, Callable]:
    """``mem_mb``, ``runtime``, ``disk_mb`` as Snakemake resource callables of one rule (``resources:
    **sizing.snakemake_resources("extract_segments", config, declared_costs())``); a rule without a
    declared cost fails here, when the workflow is parsed."""
    declared_cost(rule, costs)
    cache: dict[tuple, dict[str, int]] = {}

    def state(path: str) -> tuple:
        return _path_state(path) or (path, None)

    def value(key: str) -> Callable:
        def get(wildcards, input, attempt):
            # Snakemake evaluates resources when it builds the DAG (inputs may not exist yet) and
            # again when the job is ready: the inputs' state is part of the key, so that second
            # evaluation sees the real sizes
            token = (tuple(sorted(dict(wildcards.items()).items())), tuple(state(str(p)) for p in input), attempt)
            if token not in cache:
                cache[token] = rule_resources(rule, config, list(input), costs=costs,
                                              wildcards=dict(wildcards.items()), attempt=attempt)
            return cache[token][key]

        return get

    return {key: value(key) for key in ("mem_mb", "runtime", "disk_mb")}
