"""``bertlook plan``: what a configuration's run will cost before anything is downloaded, from each model's
``config.json`` alone (:mod:`bertlook.pipeline.plan_models` finds it and counts its parameters).

Per model: its jobs (the rules a model run has, with the shards and splits the configuration asks for), each job's
requests as the workflow will make them (:func:`bertlook.pipeline.sizing.rule_resources` with the costs every rule
declares: ``mem_mb``, ``runtime``, ``disk_mb``; the model's dimensions from the same ``config.json``, its weights
the files' size where they are here, else sizing's own bound, 4 bytes x ``ModelDims.params``: the requests a
``snakemake -n`` of the configuration prints once the model's config.json is in the HF cache, which
tests/test_plan.py checks job by job), and for the jobs that run the model (the rules the SLURM profile
sends to its GPU partition) the GPU memory and the time on a GPU:

* **GPU memory** of a job = the weights in the dtype they are loaded in (``extraction.model_dtype``: float32, or
  ``auto`` = the checkpoint's) + what the job's cost model adds to the weights (one batch of maps and its copies,
  the activations autograd keeps; :mod:`bertlook.pipeline.costs`) + ``CUDA_CONTEXT_MB``: an upper bound (the
  cost model's readers partly live in host memory).
* **GPU time** of a job = ``STARTUP_S`` + reading the weights at ``LOAD_MB_S`` + its FLOPs at ``gpu_tflops``
  (default :data:`GPU_TFLOPS`, an effective rate: eager attention with its maps returned runs far below a card's
  peak): the model's forward passes (:func:`bertlook.pipeline.sizing.sum_flops`, three for the gradients plus the
  language-model head) and, in extract_segments, the JS sums on the device (``costs.JS_FLOPS_PER_ENTRY`` per head pair
  and map entry).
* **disk**: the jobs' output estimates (``disk_mb``): written in all, and kept (the word-level and coreference
  stores of ``TEMP_STORE_RULES`` are removed after their readers unless ``extraction.keep_maps``: they keep
  their summaries).
* **wall time** of the GPU jobs on G GPUs: longest-job-first list scheduling of every model's GPU jobs.
"""

from __future__ import annotations

import dataclasses
import os
import re
import textwrap
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import yaml

from bertlook.errors import BertlookError
from bertlook.pipeline import costs as cost_models
from bertlook.pipeline.plan_models import (DTYPE_BYTES, ModelConfig, find_config, hub_download, layout_refusal,
                                           param_count, refusal, transformers_types, weights_dtype)
from bertlook.pipeline.sharding import shard_labels
from bertlook.pipeline.sizing import (MIB, Job, ModelDims, dims_from_config, rule_resources, segments_input,
                                      sum_flops)
from bertlook.pipeline.steps import enabled_steps, switches

GPU_TFLOPS = 20.0  # effective TFLOP/s of an eager forward pass returning its maps (an A100/H100 peaks at 300+)
LOAD_MB_S = cost_models.GPU_LOAD_MB_S  # MB/s reading the weights from a shared filesystem into the GPU
CUDA_CONTEXT_MB = 500.0  # the CUDA context and allocator slack of a job
#: the rules of a model run besides its steps' (cross-model rules, downloads and summaries are not per model)
SUPPORT_RULES = ("segments", "treebank", "gather_extraction", "manifest", "report_pages")
#: the profile the table names partitions from, by --profile
#: rules whose attention stores are temporary without extraction.keep_maps (removed once their readers are done):
#: what they keep is their summary
TEMP_STORE_RULES = ("extract_words", "coref_extract")
KEPT_SUMMARY_MB = 1.0
#: inputs standing for a gather job's partial sums (a job without inputs is sized as reading maps)
GATHER_INPUTS = {"gradients": ("partials/gradients-1of1.npz",), "gather_extraction": ("attention/segments-1of1.summary.json",)}
PROFILES = {"slurm": "profiles/slurm/config.yaml", "default": "profiles/default/config.yaml"}
HEX40 = re.compile(r"^[0-9a-f]{40}$")


@dataclasses.dataclass(frozen=True)
class Partitions:
    """Where jobs go: the rules the profile gives a GPU, the rules that run on the login node (``localrule``: the
    downloads), and the partition names (``(default)``: the cluster's default partition; ``local`` without
    SLURM)."""

    gpu_rules: frozenset[str]
    gpu: str
    cpu: str
    local_rules: frozenset[str] = frozenset()

    def of(self, rule: str) -> str:
        if rule in self.local_rules:
            return "login node"
        return self.gpu if rule in self.gpu_rules else self.cpu


@dataclasses.dataclass(frozen=True)
class WorkflowRules:
    """What the rule files say beyond the step declarations: the rules with one job per map kind (a ``{maps}``
    wildcard: the attention maps and, with ``norms.enabled``, the norm-based ones) and the login-node rules."""

    per_maps: frozenset[str]
    local: frozenset[str]


def read_workflow_rules(root: str | os.PathLike = ".") -> WorkflowRules:
    """:class:`WorkflowRules` from ``workflow/rules/*.smk``: a rule file whose outputs carry ``{maps}`` makes one job
    per map kind; a ``use rule ... as NAME`` block with ``localrule: True`` runs on the login node."""
    per_maps, local = set(), set()
    for path in sorted(Path(root, "workflow", "rules").glob("*.smk")):
        text = path.read_text(encoding="utf-8")
        if "{maps}" in text and path.stem != "common":
            per_maps.add(path.stem)
        for block in text.split("use rule ")[1:]:
            name = re.match(r"\w+ as (\w+) with:", block)
            if name and "localrule: True" in block:
                local.add(name.group(1))
    return WorkflowRules(frozenset(per_maps), frozenset(local))


def read_partitions(profile: str, root: str | os.PathLike = ".") -> Partitions:
    """The partitions of ``profile`` (``slurm``: its ``set-resources`` rules with a ``gpu`` go to the GPU partition,
    ``BERTLOOK_SLURM_GPU_PARTITION`` (default ``gpu``), the rest to ``BERTLOOK_SLURM_PARTITION`` as the profile
    reads them, the login-node rules of the workflow stay there; ``default``: every job local, the model's jobs on
    the local GPU)."""
    if profile not in PROFILES:
        raise BertlookError(f"--profile {profile!r}: one of {', '.join(PROFILES)}")
    path = Path(root, PROFILES["slurm"])
    try:
        slurm = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as err:
        raise BertlookError(f"{path}: cannot read the SLURM profile ({err})") from None
    gpu_rules = frozenset(rule for rule, res in (slurm.get("set-resources") or {}).items()
                          if isinstance(res, dict) and res.get("gpu"))
    if profile == "default":
        return Partitions(gpu_rules, "local (GPU)", "local")
    return Partitions(gpu_rules, os.environ.get("BERTLOOK_SLURM_GPU_PARTITION", "gpu") or "(default)",
                      os.environ.get("BERTLOOK_SLURM_PARTITION", "") or "(default)", read_workflow_rules(root).local)


def model_jobs(config: Mapping[str, Any], on: Mapping[str, bool], declared: Sequence[Any], partitions: Partitions,
               rules_info: WorkflowRules) -> list[tuple[str, dict[str, str]]]:
    """``(rule, wildcards)`` of every job of one model run: the model's jobs with their shards and treebank splits,
    then the other rules of the enabled steps (one job per map kind where the rule has a ``{maps}`` wildcard) and
    the support rules."""
    ext, grad = config["extraction"], config.get("gradients") or {}
    shards = int(ext.get("shards") or 1)
    word_shards = int(ext.get("word_shards") or shards)
    jobs = [("extract_segments", {"shard": s}) for s in shard_labels(shards)]
    for split in ("train", "dev"):
        jobs += [("extract_words", {"split": split, **({"shard": s} if word_shards > 1 else {})})
                 for s in shard_labels(word_shards)]
    if (config.get("coref") or {}).get("conll"):
        jobs.append(("coref_extract", {}))
    jobs += [("gradients_shard", {"shard": s}) for s in shard_labels(int(grad.get("shards") or shards))]
    rules = {step.rule_name for step in enabled_steps(declared, on)}
    treebank = "treebank_ud" if config["treebank"]["source"] == "ud" else "treebank"
    support = ("segments", treebank, "gather_extraction", *(("explorer_sample",) if "explorer" in rules else ()),
               "manifest", "report_pages")
    maps = ("", "_norm") if on.get("norms") else ("",)
    # a {maps} rule that also runs on ALTI (surface_stats: attention_stats_alti.csv, contributions.enabled)
    alti = {step.rule_name for step in enabled_steps(declared, on) if "alti" in step.maps}
    done = {rule for rule, _ in jobs}
    for rule in dict.fromkeys([*sorted(rules & partitions.gpu_rules), *support, *sorted(rules)]):
        if rule not in done:
            twins = maps + (("_alti",) if rule in alti else ())
            jobs += [(rule, {"maps": m}) for m in twins] if rule in rules_info.per_maps else [(rule, {})]
            done.add(rule)
    return jobs


def _job_row(rule: str, wc: dict[str, str], config: Mapping[str, Any], run: str, dims: ModelDims,
             costs: Mapping[str, Any], partitions: Partitions, gpu_bytes: float, gpu_tflops: float) -> dict[str, Any]:
    """One job: its requests, partition and (a model job) GPU memory and time."""
    wildcards = {"run": run, **wc}
    inputs = [f"{run}/{p}" for p in GATHER_INPUTS.get(rule, ())]
    req = rule_resources(rule, config, inputs, costs=costs, wildcards=wildcards, dims_of=lambda spec, rev: dims)
    row: dict[str, Any] = {"rule": rule, "wildcards": wc, "partition": partitions.of(rule), **req}
    job = Job(rule=rule, config=config, inputs=inputs, wildcards=wildcards, dims_of=lambda spec, rev: dims)
    cost = costs[rule]
    mem, cpu, _disk = cost.estimate(job, cost)
    row["cpu_s"] = round(cpu, 1)
    temporary = rule in TEMP_STORE_RULES and not config["extraction"].get("keep_maps")
    row["kept_mb"] = KEPT_SUMMARY_MB if temporary else row["disk_mb"]
    if rule in partitions.gpu_rules:
        extra_mb = max(0.0, mem - cost_models.BASE_TORCH_MB - dims.weights_mb)
        row["gpu_mem_mb"] = round(gpu_bytes / MIB + extra_mb + CUDA_CONTEXT_MB, 1)
        row["gpu_s"] = round(cost_models.gpu_seconds(job, cost, dims, gpu_bytes, gpu_tflops), 1)
    return row


def _pinned(model: Mapping[str, Any], found: ModelConfig) -> bool:
    """A local or package model needs no revision; a hub model is pinned by a commit hash."""
    return not found.hub or bool(HEX40.match(str(model.get("revision") or "")))


def _refused(model: Mapping[str, Any], found: ModelConfig, reason: str) -> dict[str, Any]:
    return {"label": model["label"], "name_or_path": model["name_or_path"], "revision": model.get("revision"),
            "pinned": _pinned(model, found), "family": model.get("family"), "gated": bool(model.get("gated", False)),
            "config_source": found.source, "refused": reason}


def notes(cfg: Mapping[str, Any], dims: ModelDims) -> list[str]:
    """What a reader of the model's results should know before the run (the model runs all the same)."""
    out = []
    archs = cfg.get("architectures") or []
    if cfg.get("model_type") == "electra" and "ElectraForPreTraining" in archs or cfg.get("model_type") == "deberta-v2":
        out.append("a replaced-token-detection discriminator: its checkpoint may hold no masked-LM head, so the "
                   "gradients step (sep_gradients) finds its head missing and writes 'not run' (attention/mlm.py)")
    if dims.family == "decoder" and not dims.mlm_head:
        out.append("no next-token head in architectures: the gradients step writes 'not run'")
    return out


def plan_model(model: Mapping[str, Any], found: ModelConfig, config: Mapping[str, Any], *, declared: Sequence[Any],
               costs: Mapping[str, Any], partitions: Partitions, rules_info: WorkflowRules, gpu_tflops: float,
               known_types: frozenset[str] | None) -> dict[str, Any]:
    """The plan of one ``models[]`` entry from its ``config.json`` (or its refusal with the reason)."""
    if found.cfg is None:
        return _refused(model, found, found.refused or "no config.json")
    cfg, spec = found.cfg, str(model["name_or_path"])
    on = switches(config, True, declared)
    reason = refusal(cfg, spec, known_types) or layout_refusal(cfg, spec, on)
    try:
        dims = dims_from_config(cfg, found.weights_bytes, source=found.source)
    except BertlookError as err:
        reason = reason or f"unknown architecture: {err}"
    if reason:
        return _refused(model, found, reason)
    params, counted = param_count(cfg, dims)
    stored = weights_dtype(cfg)
    loaded = stored if config["extraction"].get("model_dtype") == "auto" else "float32"
    gpu_bytes = float(params * DTYPE_BYTES[loaded])
    run = f"{config['run_name']}-{model['label']}"
    jobs = [_job_row(rule, wc, config, run, dims, costs, partitions, gpu_bytes, gpu_tflops)
            for rule, wc in model_jobs(config, on, declared, partitions, rules_info) if rule in costs]
    gpu_jobs = [j for j in jobs if "gpu_s" in j]
    return {
        "label": model["label"], "name_or_path": spec, "revision": model.get("revision"),
        "pinned": _pinned(model, found), "gated": bool(model.get("gated", False)), "notes": notes(cfg, dims),
        "family": model.get("family") or cfg.get("model_type"), "model_type": cfg.get("model_type"),
        "kind": dims.family, "config_source": found.source, "params": params, "params_source": counted,
        "layers": dims.layers, "heads": dims.heads, "kv_heads": dims.kv_heads or dims.heads,
        "download_bytes": found.weights_bytes or params * DTYPE_BYTES[stored],
        "download_source": ("the weights files here" if found.weights_bytes else
                            f"parameters x {stored} (config.json; repos with several weight formats hold more)"),
        "gpu_dtype": loaded, "gpu_mem_mb": max((j["gpu_mem_mb"] for j in gpu_jobs), default=0.0),
        "gpu_s": round(sum(j["gpu_s"] for j in gpu_jobs), 1), "gpu_job_s_max": max((j["gpu_s"] for j in gpu_jobs), default=0.0),
        "cpu_s": round(sum(j["cpu_s"] for j in jobs if "gpu_s" not in j), 1),
        "disk_mb": sum(j["disk_mb"] for j in jobs), "kept_mb": round(sum(j["kept_mb"] for j in jobs), 1),
        "jobs": jobs, "refused": None,
    }


def makespan(durations: Sequence[float], workers: int) -> float:
    """Wall time of independent jobs on ``workers`` (longest job first, each to the least loaded worker)."""
    loads = [0.0] * max(1, int(workers))
    for d in sorted(durations, reverse=True):
        loads[loads.index(min(loads))] += d
    return max(loads)


def totals(rows: Sequence[Mapping[str, Any]], gpus: int) -> dict[str, Any]:
    """GPU-hours, CPU-hours, downloads, disk, wall time of the GPU jobs on 1 and ``gpus`` GPUs."""
    ok = [r for r in rows if not r["refused"]]
    gpu_jobs = [j["gpu_s"] for r in ok for j in r["jobs"] if "gpu_s" in j]
    return {
        "models": len(rows), "planned": len(ok), "refused": len(rows) - len(ok),
        "unpinned": [r["label"] for r in rows if not r["pinned"]],
        "gpu_jobs": len(gpu_jobs), "cpu_jobs": sum(len(r["jobs"]) for r in ok) - len(gpu_jobs),
        "gpu_hours": round(sum(gpu_jobs) / 3600, 2), "cpu_hours": round(sum(r["cpu_s"] for r in ok) / 3600, 2),
        "download_gb": round(sum(r["download_bytes"] for r in ok) / 1e9, 2),
        "disk_gb": round(sum(r["disk_mb"] for r in ok) / 1e3, 2),  # rule_resources' disk_mb is in MB
        "kept_gb": round(sum(r["kept_mb"] for r in ok) / 1e3, 2),
        "disk_peak_model_gb": round(max((r["disk_mb"] for r in ok), default=0) / 1e3, 2),
        "gpu_mem_max_mb": max((r["gpu_mem_mb"] for r in ok), default=0.0),
        "largest_request": max(({"model": r["label"], "rule": j["rule"], "runtime_min": j["runtime"], "mem_mb": j["mem_mb"]}
                                for r in ok for j in r["jobs"]), key=lambda x: x["runtime_min"], default=None),
        "wall_hours_1_gpu": round(makespan(gpu_jobs, 1) / 3600, 2),
        "gpus": int(gpus), f"wall_hours_{int(gpus)}_gpus": round(makespan(gpu_jobs, gpus) / 3600, 2),
    }


def plan(config: Mapping[str, Any], *, declared: Sequence[Any], costs: Mapping[str, Any], configs_dir: str | None = None,
         profile: str = "slurm", gpus: int = 8, gpu_tflops: float | None = None, root: str | os.PathLike = ".",
         download: Callable[[str, str | None], str] = hub_download) -> dict[str, Any]:
    """The plan of a (validated) configuration: ``{"models": [...], "totals": {...}, "assumptions": {...}}``.
    ``gpu_tflops``: None = the configuration's ``extraction.gpu_tflops``, else :data:`GPU_TFLOPS`."""
    if gpu_tflops is None:
        gpu_tflops = float(config["extraction"].get("gpu_tflops") or GPU_TFLOPS)
    if gpus < 1 or not gpu_tflops > 0:
        raise BertlookError(f"--gpus must be >= 1 and --gpu-tflops > 0 (got {gpus}, {gpu_tflops})")
    partitions, rules_info = read_partitions(profile, root), read_workflow_rules(root)
    known = transformers_types()
    rows = [plan_model(m, find_config(m, configs_dir, download=download), config, declared=declared, costs=costs,
                       partitions=partitions, rules_info=rules_info, gpu_tflops=gpu_tflops, known_types=known)
            for m in config["models"]]
    return {
        "config": {"run_name": config["run_name"], "model_dtype": config["extraction"].get("model_dtype", "float32"),
                   "n_segments": config["segments"]["n_segments"], "max_seq_len": config["segments"]["max_seq_len"]},
        "models": rows, "totals": totals(rows, gpus),
        "partitions": {"profile": profile, "gpu": partitions.gpu, "cpu": partitions.cpu,
                       "gpu_rules": sorted(partitions.gpu_rules), "local_rules": sorted(partitions.local_rules)},
        "assumptions": {"gpu_tflops": gpu_tflops,
                        "runtime_model": "gpu" if config["extraction"].get("gpu_tflops") else "cpu", "load_mb_s": LOAD_MB_S, "cuda_context_mb": CUDA_CONTEXT_MB,
                        "js_flops_per_entry": cost_models.JS_FLOPS_PER_ENTRY, "startup_s": cost_models.STARTUP_S},
    }


def _gb(n_bytes: float) -> str:
    return f"{n_bytes / 1e9:.2f}"


def _count(n: int) -> str:
    return f"{n / 1e9:.2f}B" if n >= 1e9 else f"{n / 1e6:.0f}M"


def _hms(seconds: float) -> str:
    minutes = seconds / 60
    return f"{minutes / 60:.1f}h" if minutes >= 100 else f"{minutes:.1f}m"


def plan_table(result: Mapping[str, Any], width: int = 120) -> str:
    """The plan as text: one row per model (a refused one: its reason), the totals, the partitions, the assumptions
    (at most ``width`` columns)."""
    head = (f"{'model':<24} {'family':<11} {'params':>7} {'L x H (kv)':>11} {'dl GB':>6} {'GPU GB':>6} "
            f"{'job max':>7} {'GPU/model':>9} {'CPU/model':>9} {'kept GB':>7} {'jobs g/c':>8}")
    lines = [head, "-" * len(head)]
    for r in result["models"]:
        if r["refused"]:
            text = f"{r['label'][:24]:<24} refused: {r['refused']}"
            lines += textwrap.wrap(text, width, subsequent_indent=" " * 25, break_on_hyphens=False)
            continue
        g = sum(1 for j in r["jobs"] if "gpu_s" in j)
        jobs = f"{g}/{len(r['jobs']) - g}"
        lxh = f"{r['layers']}x{r['heads']}" + (f" ({r['kv_heads']})" if r["kv_heads"] != r["heads"] else "")
        lines.append(f"{r['label'][:24]:<24} {str(r['family'])[:11]:<11} {_count(r['params']):>7} {lxh:>11} "
                     f"{_gb(r['download_bytes']):>6} {r['gpu_mem_mb'] / 1e3 * 1.048576:>6.1f} "
                     f"{_hms(r['gpu_job_s_max']):>7} {_hms(r['gpu_s']):>9} {_hms(r['cpu_s']):>9} "
                     f"{r['kept_mb'] / 1e3:>7.1f} {jobs:>8}")
    t, p, a = result["totals"], result["partitions"], result["assumptions"]
    n = t["gpus"]
    lines += ["", f"models: {t['models']} ({t['planned']} planned, {t['refused']} refused); jobs: {t['gpu_jobs']} on a "
              f"GPU, {t['cpu_jobs']} on CPUs",
              f"GPU-hours: {t['gpu_hours']:.2f}   CPU-hours: {t['cpu_hours']:.2f}   downloads: {t['download_gb']:.2f} GB"
              f"   disk kept: {t['kept_gb']:.2f} GB   largest GPU job: {t['gpu_mem_max_mb'] / 1e3 * 1.048576:.1f} GB",
              f"disk written: {t['disk_gb']:.2f} GB in all (temporary word-level stores included; one model at most "
              f"{t['disk_peak_model_gb']:.2f} GB)",
              f"GPU jobs' wall time: one GPU {t['wall_hours_1_gpu']:.2f} h; {n} GPUs {t[f'wall_hours_{n}_gpus']:.2f} h",
              f"partitions (--profile {p['profile']}): {', '.join(p['gpu_rules'])} -> {p['gpu']}; "
              + (f"{', '.join(p['local_rules'])} -> the login node; " if p["local_rules"] else "")
              + f"every other job -> {p['cpu']}",
              f"assumed: {a['gpu_tflops']:g} effective TFLOP/s per GPU (--gpu-tflops), weights read at "
              f"{a['load_mb_s']:g} MB/s, {a['startup_s']:g} s startup, {a['cuda_context_mb']:g} MB CUDA context; "
              f"weights on the GPU in {result['config']['model_dtype']} (extraction.model_dtype)"]
    big = t["largest_request"]
    if big:
        lines.append(f"longest request: {big['rule']} of {big['model']} asks SLURM for {big['runtime_min']} min and "
                     f"{big['mem_mb']} MB (the workflow's runtime requests: "
                     + ("its GPU time at extraction.gpu_tflops, x2)" if a.get("runtime_model") == "gpu" else
                        "the CPU-time model, x2; set extraction.gpu_tflops for a GPU partition)"))
    for r in result["models"]:
        lines += [f"note: {r['label']}: {note}" for note in r.get("notes") or ()]
    gated = [r["label"] for r in result["models"] if r.get("gated") and not r["refused"]]
    if gated:
        lines.append(f"gated (accept the licence on the hub page, then HF_TOKEN=... make fetch): {', '.join(gated)}")
    if t["unpinned"]:
        lines.append(f"unpinned (no commit hash as revision: pin before a real run): {', '.join(t['unpinned'])}")
    return "\n".join(textwrap.fill(line, width, subsequent_indent="  ") if len(line) > width else line
                     for line in lines)
