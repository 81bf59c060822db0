# Shared definitions: config validation, run names, paths, and the one way a rule builds its
# command line (bertlook_cmd). Runs are {run_name}-{model label}.
import json
import os
import re
import shlex
import sys
from pathlib import Path

# The workflow uses the bertlook package of THIS checkout (src/), installed or not: its parse-time
# imports (config validation, command lines, sharding, rule resources) need only PyYAML and
# jsonschema, which Snakemake itself depends on; the steps run `python -m bertlook` from src/ too.
sys.path.insert(0, str(Path(workflow.basedir) / "src"))
try:
    from bertlook.pipeline.config import load_yaml_strict, validate_config
except ImportError as _err:  # e.g. PyYAML / jsonschema missing from the Python running Snakemake
    sys.exit(f"error: the workflow needs {Path(workflow.basedir) / 'src'} importable and its "
             f"dependencies installed (make install, or pip install -e .): {_err}")
from bertlook.errors import BertlookError
from bertlook.pipeline.preflight import glove_download_target, ud_download_dir, wikipedia_target
from bertlook.pipeline.config import resolve_data_path
from bertlook.pipeline import sizing
from bertlook.pipeline.sharding import shard_labels
from bertlook.pipeline.shellcmd import command
from bertlook.reporting import compare as _compare


# The config is validated (and normalised: 30.0 -> 30 where the schema says integer; defaults
# filled) by bertlook's own validator, the one `bertlook validate-config` uses, and every
# --configfile is re-read strictly (a duplicate key is an error; Snakemake's loader would keep
# the last one silently).
try:
    for _configfile in workflow.configfiles:
        load_yaml_strict(_configfile)
    _validated = validate_config(dict(config), source=" + ".join(map(str, workflow.configfiles)) or "config")
except BertlookError as _err:
    print(f"error: {_err}", file=sys.stderr)
    sys.exit(2)
config.clear()
config.update(_validated)

RESULTS = config["results_dir"]
RESOURCES = config["resources_dir"]
RUNS = [f"{config['run_name']}-{m['label']}" for m in config["models"]]
MODELS = dict(zip(RUNS, config["models"]))
# The corpus: a MediaWiki dump (wikipedia.path, or wikipedia.url downloaded), or a Hugging Face dataset
# (wikipedia.hf_dataset: no dump; its local data files, if any, are the rules' inputs).
HF_DATASET = config["wikipedia"].get("hf_dataset")
WIKI_DUMP = None if HF_DATASET else str(wikipedia_target(config))
HF_DATASET_JSON = json.dumps(HF_DATASET, sort_keys=True) if HF_DATASET else None


def corpus_inputs():
    """{"dump": the dump} or, for wikipedia.hf_dataset, {"hf_files": its local data files}."""
    if not HF_DATASET:
        return {"dump": WIKI_DUMP}
    files = HF_DATASET.get("data_files")
    if isinstance(files, dict):
        files = [f for v in files.values() for f in (v if isinstance(v, list) else [v])]
    elif isinstance(files, str):
        files = [files]
    local = [str(resolve_data_path(f)) for f in files or [] if not any(c in str(f) for c in "*?[")]
    return {"hf_files": local}
ENV_TORCH = "../../envs/torch.yaml"  # corpora, extraction, clustering (torch, transformers, spaCy)
ENV_ANALYSIS = "../../envs/analysis.yaml"  # download, stats, figures, manifest (numpy, pandas, seaborn)

# The step CLI, run from this checkout's src/ with the Python that runs Snakemake, or with the
# rule's conda env Python under --software-deployment-method conda. Built from paths only (never
# from a config value), each quoted.
_PYTHON = (
    "python"
    if "conda" in str(workflow.deployment_settings.deployment_method).lower()
    else shlex.quote(sys.executable)
)
_SRC = shlex.quote(str(Path(workflow.basedir) / "src"))
BERTLOOK = f"PYTHONPATH={_SRC}${{PYTHONPATH:+:$PYTHONPATH}} {_PYTHON} -m bertlook"


# ---- command lines ------------------------------------------------------------------------------
# Every rule has exactly one parameter, `cmd = bertlook_cmd(STEP, ...)`, and the shell line CMD.
# Flag values are constants (config values), or IN.x / OUT.x / WC.x / functions of
# (wildcards, input, output) resolved when the job runs; bertlook.pipeline.shellcmd.command quotes every
# one of them. None/False leave a flag out, True gives the bare flag, a list repeats it.
CMD = "{params.cmd} > {log:q} 2>&1"


class _JobRef:
    """IN.name / OUT.name / WC.name: a job's named input, output or wildcard value."""

    def __init__(self, kind):
        self._kind = kind

    def __getattr__(self, name):
        kind = self._kind

        def get(wildcards, input, output):
            return getattr({"input": input, "output": output, "wildcards": wildcards}[kind], name)

        return get


IN, OUT, WC = _JobRef("input"), _JobRef("output"), _JobRef("wildcards")


def bertlook_cmd(step, *flag_groups, omp_threads=False, **flags):
    """params function: the whole `bertlook STEP ...` command line of a job, every value quoted.
    flag_groups: functions of (wildcards, input, output) returning a dict of flags (e.g. the model)."""

    def cmd(wildcards, input, output, threads):
        values = {}
        for group in flag_groups:
            values.update(group(wildcards, input, output))
        for name, value in flags.items():
            values[name] = value(wildcards, input, output) if callable(value) else value
        env = {"OMP_NUM_THREADS": threads} if omp_threads else None
        return command(BERTLOOK, step, values, env)

    return cmd


wildcard_constraints:
    run="|".join(re.escape(r) for r in RUNS),
    split="train|dev",
    shard="[0-9]+of[0-9]+",


def run_path(*parts):
    """Path under results/{run}/ (with the {run} wildcard left in)."""
    return os.path.join(RESULTS, "{run}", *parts)


def log_path(rule_name):
    return run_path("logs", f"{rule_name}.log")


def bench_path(rule_name):
    """Snakemake benchmark file (wall time, max RSS, I/O) of a rule, per run."""
    return run_path("benchmarks", f"{rule_name}.tsv")


# ---- scale-out: extraction.shards, extraction.word_shards, extraction.keep_maps -------------------
# Every model-running step runs once per shard {shard} = "1of4" ... "4of4": a contiguous range of its
# input by index (`bertlook ... --shard 1of4`). Statistics are reduced from per-shard partial sums
# (results/{run}/partials/*.npz); word-level stores are merged into one store (hard links). The
# word-level extraction of each treebank split has its own count, extraction.word_shards (null: the
# same as extraction.shards): every job pays the start-up (~5 s) whatever its size.
SHARDS = int(config["extraction"]["shards"])
SHARD_LABELS = shard_labels(SHARDS)
WORD_SHARDS = int(config["extraction"].get("word_shards") or SHARDS)
WORD_SHARD_LABELS = shard_labels(WORD_SHARDS)
# gradients.shards: the gradient step writes sums only (no maps), so its job count is its own (null:
# extraction.shards).
GRADIENT_SHARDS = int(config["gradients"].get("shards") or SHARDS)
GRADIENT_SHARD_LABELS = shard_labels(GRADIENT_SHARDS)
KEEP_MAPS = bool(config["extraction"]["keep_maps"])


def segment_maps(path):
    """The token-level segment stores: kept (extraction.keep_maps), or temp() -- deleted by Snakemake
    once their consumers (stats / JS partial sums, the Fig 1 example) ran, so disk grows with the
    shard size, not with the number of segments."""
    return path if KEEP_MAPS else temp(path)


def word_maps(path):
    """The merged word-level stores (attention/words-*, attention/randwords-*): kept (extraction.keep_maps),
    or temp() -- deleted once their consumers ran (heads and probes; probes_random), so that the model's
    and the random-init model's stores need not be on disk together (see extract_words.smk, priorities)."""
    return path if KEEP_MAPS else temp(path)


def every_shard(path, labels=None):
    """``path`` (with {shard}) of every shard (``labels``, default the segment shards
    extraction.shards), other wildcards ({run}, ...) left for the rule."""
    return expand(path, shard=SHARD_LABELS if labels is None else labels, allow_missing=True)


def every_word_shard(path):
    """``path`` (with {shard}) of every word-level extraction shard (extraction.word_shards)."""
    return every_shard(path, WORD_SHARD_LABELS)


def model_flags(wildcards, input, output):
    """--model/--revision of a run's model."""
    model = MODELS[wildcards.run]
    return {"model": model["name_or_path"], "revision": model.get("revision")}


# Figure file -> (report label, caption file under workflow/report/).
FIGURE_REPORT = {
    "fig1_example_heads.png": ("Fig 1: example heads", "fig1_example_heads.rst"),
    "fig2_special_tokens.png": ("Fig 2: attention to [CLS], [SEP], . ,", "fig2_special_tokens.rst"),
    "fig4_entropy.png": ("Fig 4: attention entropy", "fig4_entropy.rst"),
    "fig6_head_clusters.png": ("Fig 6: head clusters", "fig6_head_clusters.rst"),
}
FIGURES = list(FIGURE_REPORT)


def example_heads_arg():
    """--example-heads value: "auto" or a comma-separated list of "L-H" labels."""
    heads = config["figures"]["example_heads"]
    return heads if heads == "auto" else ",".join(heads)


# ---- treebank (Table 1) -------------------------------------------------------------------------
TREEBANK = config["treebank"]
TREEBANK_KIND = _compare.config_treebank_kind(TREEBANK)  # ptb_sd / ud / silver
TREEBANK_NAME = {
    "silver": f"silver Wikipedia trees (spaCy {TREEBANK['silver']['spacy_model']})",
    "ud": f"{TREEBANK['ud']['repo']} {TREEBANK['ud']['release']}",
    "local": f"local {TREEBANK_KIND} treebank",
}[TREEBANK["source"]]
# Without a train split (local source, no train file) there is no held-out head selection.
HAS_TRAIN_SPLIT = TREEBANK["source"] != "local" or bool(TREEBANK["local"]["train"])


def treebank_inputs(wildcards):
    if TREEBANK["source"] == "silver":
        return {**corpus_inputs(), "segments": run_path("corpus", "segments.jsonl").format(run=wildcards.run)}
    if TREEBANK["source"] == "local":
        local = TREEBANK["local"]
        return {k: local[k] for k in ("train", "dev") if local[k]}
    return {}


def treebank_flags(wildcards, input, output):
    """Flags of `bertlook treebank` for the configured source."""
    flags = {"source": TREEBANK["source"]}
    if TREEBANK["source"] == "silver":
        silver = TREEBANK["silver"]
        flags.update(
            dump=None if HF_DATASET else input.dump,
            hf_dataset=HF_DATASET_JSON,
            segments=input.segments,
            train_sentences=silver["train_sentences"],
            dev_sentences=silver["dev_sentences"],
            max_words=silver["max_words"],
            seed=config["seed"],
            spacy_model=silver["spacy_model"],
            max_articles=silver["max_articles"],
        )
    elif TREEBANK["source"] == "local":
        flags.update(dev=input.dev, train=input.get("train"), format=TREEBANK["local"]["format"])
    else:
        ud = TREEBANK["ud"]
        flags.update(
            ud_repo=ud["repo"],
            ud_release=ud["release"],
            ud_train_file=ud["train_file"],
            ud_dev_file=ud["dev_file"],
            ud_base_url=ud["base_url"],
            download_dir=str(ud_download_dir(config)),
            train_sha256=ud["train_sha256"],
            dev_sha256=ud["dev_sha256"],
        )
    flags["strip_subtypes"] = TREEBANK["strip_subtypes"]
    return flags


def heads_inputs(wildcards):
    inputs = {"dev": run_path("attention", "words-dev").format(run=wildcards.run)}
    if HAS_TRAIN_SPLIT:
        inputs["train"] = run_path("attention", "words-train").format(run=wildcards.run)
    return inputs


# ---- probes (Table 3) ----------------------------------------------------------------------------
GLOVE = config["glove"]
_glove_target = glove_download_target(config)
GLOVE_FILE = str(_glove_target) if _glove_target else None
GLOVE_ARG = GLOVE["path"] or GLOVE_FILE
# The probes need a train split; without one (local source, no train file) there is no Table 3.
RUN_PROBES = HAS_TRAIN_SPLIT


# probes_random trains the random-init probe on the random-init stores and writes its rows
# (partials/probes_random.json); probes trains the others on the model's stores and adds those rows,
# so the two pairs of word stores are never needed at the same time (keep_maps: false deletes each
# pair once read).
PROBES_RANDOM_ROWS = run_path("partials", "probes_random.json")


def probes_inputs(wildcards):
    words = lambda maps, split: run_path("attention", f"{maps}-{split}").format(run=wildcards.run)
    inputs = {"train": words("words", "train"), "dev": words("words", "dev")}
    if config["probes"]["random_init"]:
        inputs["random_rows"] = PROBES_RANDOM_ROWS.format(run=wildcards.run)
    if GLOVE_FILE:
        inputs["glove"] = GLOVE_FILE
    return inputs


def norm_heads_inputs(wildcards):
    """heads_inputs on the norm-based word stores (norms.enabled)."""
    inputs = {"dev": run_path("attention", "normwords-dev").format(run=wildcards.run)}
    if HAS_TRAIN_SPLIT:
        inputs["train"] = run_path("attention", "normwords-train").format(run=wildcards.run)
    return inputs


def norm_probes_inputs(wildcards):
    """probes_inputs on the norm-based word stores; no random-init rows (no random-init norm maps)."""
    inputs = {"train": run_path("attention", "normwords-train").format(run=wildcards.run),
              "dev": run_path("attention", "normwords-dev").format(run=wildcards.run)}
    if GLOVE_FILE:
        inputs["glove"] = GLOVE_FILE
    return inputs


def probes_random_inputs(wildcards):
    words = lambda split: run_path("attention", f"randwords-{split}").format(run=wildcards.run)
    inputs = {"train": words("train"), "dev": words("dev")}
    if GLOVE_FILE:
        inputs["glove"] = GLOVE_FILE
    return inputs


def probe_settings():
    """The probe training flags shared by probes and probes_random (the rows must agree on them)."""
    probes = config["probes"]
    return dict(
        glove=GLOVE_ARG,
        glove_member=config["glove"].get("member"),
        seeds=",".join(str(s) for s in probes["seeds"]),
        epochs=probes["epochs"],
        batch_size=probes["batch_size"],
        lr=probes["lr"],
        mst=probes["mst"],
    )


def paper_comparable(wildcards, input, output):
    """--paper-comparable: the one definition, bertlook.reporting.compare.paper_comparable (the paper's
    model on the paper's trees, PTB-SD), also behind comparison.csv."""
    return _compare.paper_comparable(MODELS[wildcards.run], TREEBANK_KIND)


# ---- coreference (Table 2) -----------------------------------------------------------------------
COREF_FILES = list(config["coref"]["conll"])

# ---- beyond the paper: norm-based maps, rollout, head report card ---------------------------------
RUN_NORMS = bool(config["norms"]["enabled"])
RUN_NORM_PROBES = RUN_NORMS and bool(config["norms"]["probes"]) and RUN_PROBES
# Table 3 on the norm maps: every probe of bertlook.analyses.probes.PROBES but the random-init one
# (written out: the Snakefile parses without numpy; tests/test_workflow_dag.py checks the list)
NORM_PROBES = "right_branching,distances_glove,attn,attn_glove,attn_glove_released"
RUN_ROLLOUT = bool(config["rollout"]["enabled"])
RUN_HEAD_REPORT = bool(config["head_report"]["enabled"])


def beyond_outputs():
    """The outputs of the analyses beyond the paper that the configuration switches on."""
    out = []
    if RUN_NORMS:
        out += [run_path("tables", "attention_stats_norm.csv"), run_path("tables", "head_clusters_norm.csv"),
                run_path("tables", "table1_norm.csv"), run_path("tables", "table1_norm.md"),
                run_path("figures", "fig_norms.png")]
    if RUN_NORM_PROBES:
        out += [run_path("tables", "table3_norm.csv"), run_path("tables", "table3_norm.md")]
    if RUN_ROLLOUT:
        out += [run_path("tables", "rollout_stats.csv"), run_path("figures", "fig_rollout.png"),
                run_path("tables", "table1_rollout.csv"), run_path("tables", "table1_rollout.md")]
    if RUN_HEAD_REPORT:
        out += [run_path("tables", "head_report.csv"), run_path("figures", "fig_head_report.png")]
    return out


def _beyond_summaries():
    out = {}
    if RUN_NORMS:
        out["stats_norm"] = run_path("tables", "attention_stats_norm.summary.json")
        out["heads_norm"] = run_path("tables", "head_accuracy_norm.summary.json")
    if RUN_NORM_PROBES:
        out["probes_norm"] = run_path("tables", "table3_norm.summary.json")
    if RUN_ROLLOUT:
        out["rollout"] = run_path("tables", "rollout_stats.summary.json")
        out["rollout_table1"] = run_path("tables", "table1_rollout.summary.json")
    if RUN_HEAD_REPORT:
        out["head_report"] = run_path("tables", "head_report.summary.json")
    return out


def beyond_summaries():
    """The summaries of the analyses beyond the paper, for the manifest (in a fixed order)."""
    return list(_beyond_summaries().values())


def beyond_summary_names():
    return list(_beyond_summaries())


# ---- cross-model summary (several models in one config) ------------------------------------------
SUMMARY_DIR = os.path.join(RESULTS, f"{config['run_name']}-all-models")


def all_outputs():
    return expand(
        [
            run_path("tables", "attention_stats.csv"),
            run_path("tables", "js_divergence.csv"),
            run_path("tables", "head_clusters.csv"),
            *[run_path("figures", name) for name in FIGURES],
            run_path("tables", "head_accuracy.csv"),
            run_path("tables", "table1.csv"),
            run_path("tables", "table1.md"),
            run_path("figures", "fig5_syntax_heads.png"),
            *([run_path("tables", "table3.csv"), run_path("tables", "table3.md")] if RUN_PROBES else []),
            run_path("tables", "table2.csv"),
            run_path("tables", "table2.md"),
            run_path("tables", "coref_heads.csv"),
            run_path("tables", "sep_gradients.csv"),
            run_path("figures", "fig3_sep_gradients.png"),
            *beyond_outputs(),
            run_path("manifest.json"),
            run_path("comparison.csv"),
            run_path("comparison.md"),
            run_path("resources.csv"),  # resources.smk: measured resources, after everything else
            run_path("resources.md"),
        ],
        run=RUNS,
    ) + [os.path.join(SUMMARY_DIR, name) for name in ("models_summary.csv", "fig_models_summary.png",
                                                        "resources.csv", "resources.md")]
