# Shared definitions: config validation, run names, paths, and the one way a rule builds its
# command line (bertlook_cmd). Runs are {run_name}-{model label}.
import json
import os
import re
import sys
import time
from pathlib import Path

# The checkout this file belongs to: two levels above workflow/rules/. Not workflow.basedir, which is the
# directory of the *main* Snakefile: a user's own when bertlook is used as a module (`module bertlook:`,
# snakedeploy; tests/test_workflow_module.py).
BERTLOOK_ROOT = Path(str(workflow.current_basedir)).resolve().parents[1]

# The workflow uses the bertlook package of THIS checkout (src/), installed or not: its parse-time
# imports (config validation, command lines, sharding, rule resources) need only PyYAML and
# jsonschema, which Snakemake itself depends on; the steps run `python -m bertlook` from src/ too.
sys.path.insert(0, str(BERTLOOK_ROOT / "src"))
try:
    from bertlook.pipeline.config import load_yaml_strict, validate_config
except ImportError as _err:  # e.g. PyYAML / jsonschema missing from the Python running Snakemake
    sys.exit(
        f"error: the workflow needs {BERTLOOK_ROOT / 'src'} importable and its "
        f"dependencies installed (make install, or pip install -e .): {_err}"
    )
from bertlook.errors import BertlookError
from bertlook.pipeline.preflight import glove_download_target, ud_download_dir, wikipedia_target
from bertlook.pipeline.config import resolve_data_path, treebank_label
from bertlook.cli import ORDER as CLI_ORDER, declared_costs, declared_steps
from bertlook.pipeline import model_spec, sizing, steps
from bertlook.pipeline.sharding import shard_labels
from bertlook.pipeline.shellcmd import command
from bertlook.reporting import compare as _compare

# The steps of a run, each declared once in its CLI module (bertlook.cli.<step>.STEPS, gathered by
# bertlook.cli.declared_steps): what `all` asks for, the manifest's summaries, the report pages, the
# rules' costs (docs/ADDING_A_STEP.md).
STEPS = declared_steps()
RULE_COSTS = declared_costs()  # what the jobs of every rule cost (bertlook.pipeline.costs), read by step_resources


def step_rule_files():
    """workflow/rules/*.smk but this file, in pipeline order (bertlook.cli.ORDER: the .smk of a step is
    named as its CLI module; a rule may name an earlier file's rules as `rules.X`), then any other file
    (a new step's) in name order. The Snakefile includes them."""
    rank = {name: i for i, name in enumerate(CLI_ORDER)}
    files = [p for p in (BERTLOOK_ROOT / "workflow" / "rules").glob("*.smk") if p.name != "common.smk"]
    return sorted(files, key=lambda p: (rank.get(p.stem, len(rank)), p.stem))


def step_resources(rule):
    """mem_mb / runtime / disk_mb of a rule (bertlook.pipeline.sizing) from the cost its declaration gives (its
    step's `cost`, or the COSTS table of its CLI module); an undeclared rule is an error naming it."""
    return sizing.snakemake_resources(rule, config, RULE_COSTS)


# The config is validated (and normalised: 30.0 -> 30 where the schema says integer; defaults
# filled) by bertlook's own validator, the one `bertlook validate-config` uses, and every
# --configfile is re-read strictly (a duplicate key is an error; Snakemake's loader would keep
# the last one silently).
try:
    for _configfile in workflow.configfiles:
        load_yaml_strict(_configfile)
    _validated = validate_config(dict(config), source=" + ".join(map(str, workflow.configfiles)) or "config")
    # a model the workflow cannot run (a decoder, remote code ...): refused before any job
    _model_problems = model_spec.workflow_model_problems(_validated)
    if _model_problems:
        raise BertlookError("; ".join(_model_problems))
except BertlookError as _err:
    print(f"error: {_err}", file=sys.stderr)
    sys.exit(2)
config.clear()
config.update(_validated)

RESULTS = config["results_dir"]
RESOURCES = config["resources_dir"]
# A run per model (MODEL_RUNS: every step, on the main `treebank`) and, for each entry of `treebanks`, a
# run per model and treebank (SYNTAX_RUNS, {run_name}-{model label}-{treebank label}: the syntax steps
# only -- trees, word maps, Table 1, Fig 5 -- since the segment analyses do not depend on the treebank).
MODEL_RUNS = [f"{config['run_name']}-{m['label']}" for m in config["models"]]
MODELS = dict(zip(MODEL_RUNS, config["models"]))
TREEBANK_OF = {run: config["treebank"] for run in MODEL_RUNS}  # run -> its treebank entry
TREEBANK_LABEL_OF = {run: treebank_label(config["treebank"]) for run in MODEL_RUNS}
MODEL_RUN_OF = {run: run for run in MODEL_RUNS}  # run -> the model run it belongs to
SYNTAX_RUNS = []
for _model_run, _model in zip(MODEL_RUNS, config["models"]):
    for _tb in config["treebanks"]:
        _run = f"{_model_run}-{_tb['label']}"
        SYNTAX_RUNS.append(_run)
        MODELS[_run], TREEBANK_OF[_run], TREEBANK_LABEL_OF[_run] = _model, _tb, _tb["label"]
        MODEL_RUN_OF[_run] = _model_run
RUNS = MODEL_RUNS + SYNTAX_RUNS
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


def corpus_input_files(wildcards):
    """corpus_inputs() as an input function (`unpack(corpus_input_files)`): the report lists a rule's
    plain input paths, and a `package:` dump resolves to an absolute path in the virtualenv."""
    return corpus_inputs()


ENV_TORCH = "../../envs/torch.yaml"  # corpora, extraction, clustering (torch, transformers, spaCy)
ENV_ANALYSIS = "../../envs/analysis.yaml"  # download, stats, figures, manifest (numpy, pandas, seaborn)

# The step CLI, run from this checkout's src/ with the Python that runs Snakemake, or with the
# rule's conda env Python under --software-deployment-method conda. The two paths are passed in the
# environment (BERTLOOK_SRC, BERTLOOK_PYTHON, set here each time the Snakefile is parsed: by the
# snakemake that runs a job, locally or in a SLURM job alike), not written into the command line:
# the command lines (rule params) are copied into the HTML report, which must not carry the
# checkout's or the virtualenv's absolute paths. A command copied from a log by hand falls back to
# `python` on PATH and `src` below the current directory (the checkout's root). Never from a config value.
os.environ["BERTLOOK_SRC"] = str(BERTLOOK_ROOT / "src")
os.environ["BERTLOOK_PYTHON"] = (
    "python" if "conda" in str(workflow.deployment_settings.deployment_method).lower() else sys.executable
)


envvars:
    "BERTLOOK_SRC",
    "BERTLOOK_PYTHON",


BERTLOOK = 'PYTHONPATH="${BERTLOOK_SRC:-src}${PYTHONPATH:+:$PYTHONPATH}" "${BERTLOOK_PYTHON:-python}" -m bertlook'


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


def segment_pass_outputs():
    """The outputs of extract_segments (the one pass over the segment maps) besides its summary and the
    paper's partial sums: the norm-based twins (norms.enabled), the rollout partial (rollout.enabled) and the
    stores of the maps themselves (extraction.keep_maps; with it off no segment map is written at all)."""
    out = {}
    if RUN_NORMS:
        out["norm_stats"] = run_path("partials", "stats_norm-{shard}.npz")
        out["norm_js"] = run_path("partials", "js_norm-{shard}.npz")
    if RUN_ROLLOUT:
        out["rollout"] = run_path("partials", "rollout-{shard}.npz")
    if KEEP_MAPS:
        out["store"] = directory(run_path("attention", "segments-{shard}"))
        if RUN_NORMS:
            out["norms"] = directory(run_path("attention", "norms-{shard}"))
    return out


def segment_pass_flags():
    """The extract-segments flags of segment_pass_outputs()."""
    flags = {}
    if RUN_NORMS:
        flags.update(norm_stats_partial=OUT.norm_stats, norm_js_partial=OUT.norm_js)
    if RUN_ROLLOUT:
        flags.update(rollout_partial=OUT.rollout, rollout_max_examples=config["rollout"]["max_examples"])
    if KEEP_MAPS:
        flags["out"] = OUT.store
        if RUN_NORMS:
            flags["norms_out"] = OUT.norms
    return flags


# One word shard (the default): each extraction job writes its split's store itself, no merge job.
WORD_SHARD_SUFFIX = "-{shard}" if WORD_SHARDS > 1 else ""
WORD_SHARD_FLAG = WC.shard if WORD_SHARDS > 1 else None


def word_store(prefix):
    """The store an extract_words(_random) job writes: a temp() shard store merged by merge_words (word_shards
    > 1), or the split's store itself (word_maps)."""
    if WORD_SHARDS > 1:
        return temp(directory(run_path("attention", f"{prefix}-{{split}}-{{shard}}")))
    return word_maps(directory(run_path("attention", f"{prefix}-{{split}}")))


def random_words_flags():
    """The extract-words flags of the random-init baseline run in the same job (probes.random_init)."""
    if not RUN_RANDOM_INIT:
        return {}
    return dict(
        random_init_seed=config["seed"],
        random_init_keep=config["probes"]["random_init_keep"],
        random_init_out=OUT.random,
        random_init_summary=OUT.random_summary,
    )


def word_summary(prefix):
    return run_path("attention", f"{prefix}-{{split}}{WORD_SHARD_SUFFIX}.summary.json")


def word_maps(path):
    """The word-level stores of a split (attention/words-*, normwords-*, randwords-*) and the coreference
    maps (attention/coref): kept (extraction.keep_maps), or temp() -- deleted once their consumers ran (heads,
    rollout_words, tree_heads, probes; coref; see extract_words.smk, priorities)."""
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


# The figures of the paper's `figures` step (declared in bertlook.cli.figures).
FIGURES = [os.path.basename(path) for step in STEPS if step.name == "figures" for path in step.outputs]


def example_heads_arg():
    """--example-heads value: "auto" or a comma-separated list of "L-H" labels."""
    heads = config["figures"]["example_heads"]
    return heads if heads == "auto" else ",".join(heads)


# ---- treebank (Table 1) -------------------------------------------------------------------------
# Every treebank-dependent value is looked up per run (TREEBANK_OF): the main `treebank` for the model
# runs, a `treebanks` entry for the syntax runs.
TREEBANK = config["treebank"]


def treebank_kind(run):
    """ptb_sd / ud / silver: the relation inventory of a run's trees."""
    return _compare.config_treebank_kind(TREEBANK_OF[run])


def treebank_name(run):
    tb = TREEBANK_OF[run]
    return {
        "silver": f"silver Wikipedia trees (spaCy {tb['silver']['spacy_model']})",
        "ud": f"{tb['ud']['repo']} {tb['ud']['release']}",
        "local": f"local {treebank_kind(run)} treebank",
    }[tb["source"]]


def has_train_split(run):
    """Without a train split (local source, no train file) there is no held-out head selection."""
    tb = TREEBANK_OF[run]
    return tb["source"] != "local" or bool(tb["local"]["train"])


TREEBANK_KIND_ARG = lambda wildcards, input, output: treebank_kind(wildcards.run)
TREEBANK_NAME_ARG = lambda wildcards, input, output: treebank_name(wildcards.run)
WORD_TEXT_ARG = lambda wildcards, input, output: TREEBANK_OF[wildcards.run]["text"]
# The main treebank's train split decides the model runs' Table 3 and comparison rows.
HAS_TRAIN_SPLIT = has_train_split(MODEL_RUNS[0])
# Which switchable steps run (bertlook.pipeline.steps.switches: the config's on/off keys, and the probes
# need a train split); the RUN_* names below are its entries.
SWITCH = steps.switches(config, HAS_TRAIN_SPLIT, STEPS)
# Runs whose treebank is downloaded (ud): the treebank_ud rule, on the login node (localrule).
UD_TREEBANK_RUNS = [run for run in RUNS if TREEBANK_OF[run]["source"] == "ud"]
BUILT_TREEBANK_RUNS = [run for run in RUNS if TREEBANK_OF[run]["source"] != "ud"]


def runs_pattern(runs):
    """A wildcard constraint matching exactly these run names (none: matches nothing)."""
    return "|".join(re.escape(r) for r in runs) if runs else "(?!)"


def treebank_inputs(wildcards):
    tb = TREEBANK_OF[wildcards.run]
    if tb["source"] == "silver":
        return {**corpus_inputs(), "segments": run_path("corpus", "segments.jsonl").format(run=wildcards.run)}
    if tb["source"] == "local":
        local = tb["local"]
        return {k: local[k] for k in ("train", "dev") if local[k]}
    return {}


def treebank_flags(wildcards, input, output):
    """Flags of `bertlook treebank` for the run's treebank source."""
    tb = TREEBANK_OF[wildcards.run]
    flags = {"source": tb["source"]}
    if tb["source"] == "silver":
        silver = tb["silver"]
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
            language=config["segments"]["language"],
            splitter=config["segments"]["splitter"],
        )
    elif tb["source"] == "local":
        flags.update(dev=input.dev, train=input.get("train"), format=tb["local"]["format"])
    else:
        ud = tb["ud"]
        flags.update(
            ud_repo=ud["repo"],
            ud_release=ud["release"],
            ud_train_file=ud["train_file"],
            ud_dev_file=ud["dev_file"],
            ud_base_url=ud["base_url"],
            download_dir=str(ud_download_dir(config, tb)),
            train_sha256=ud["train_sha256"],
            dev_sha256=ud["dev_sha256"],
        )
    flags["strip_subtypes"] = tb["strip_subtypes"]
    # UD trees: relations of UD v1 releases renamed to v2 (dobj -> obj, ...), counted in the summary, so
    # that treebanks of different UD versions compare relation by relation
    flags["ud_v2_relations"] = _compare.config_treebank_kind(tb) == "ud"
    return flags


def heads_inputs(wildcards):
    """The word stores Table 1 reads: the model's attention maps (``{maps}`` empty) or the norm-based maps
    (``_norm``); the train split when the run's treebank has one."""
    prefix = {"": "words", "_norm": "normwords"}[wildcards.maps]
    inputs = {"dev": run_path("attention", f"{prefix}-dev").format(run=wildcards.run)}
    if has_train_split(wildcards.run):
        inputs["train"] = run_path("attention", f"{prefix}-train").format(run=wildcards.run)
    return inputs


# ---- probes (Table 3) ----------------------------------------------------------------------------
GLOVE = config["glove"]
_glove_target = glove_download_target(config)
GLOVE_FILE = str(_glove_target) if _glove_target else None
GLOVE_ARG = GLOVE["path"] or GLOVE_FILE
# The probes need a train split; without one (local source, no train file) there is no Table 3.
RUN_PROBES = SWITCH["probes"]
# the probes' random-init baseline: its word maps are extracted in the extract_words jobs (probes.random_init)
RUN_RANDOM_INIT = SWITCH["random_init"]


def probes_inputs(wildcards):
    """The word stores the probes job reads: the model's, the random-init model's (probes.random_init) and the
    norm-based ones (norms.probes), and GloVe."""
    words = lambda maps, split: run_path("attention", f"{maps}-{split}").format(run=wildcards.run)
    inputs = {"train": words("words", "train"), "dev": words("words", "dev")}
    if RUN_RANDOM_INIT:
        inputs.update(random_train=words("randwords", "train"), random_dev=words("randwords", "dev"))
    if RUN_NORM_PROBES:
        inputs.update(norm_train=words("normwords", "train"), norm_dev=words("normwords", "dev"))
    if GLOVE_FILE:
        inputs["glove"] = GLOVE_FILE
    return inputs


def probes_extra_outputs():
    """table3_norm.* (norms.probes) and probe_ablations.* (probes.layer_ablations) of the probes job."""
    out = {}
    if RUN_NORM_PROBES:
        out.update(
            norm_table=data_file(
                run_path("tables", "table3_norm.csv"), "table3_norm.rst", "Table 3 on the norm-based maps (CSV)"
            ),
            norm_markdown=run_path("tables", "table3_norm.md"),
            norm_summary=run_path("tables", "table3_norm.summary.json"),
        )
    if RUN_PROBE_ABLATIONS:
        out.update(
            ablations_table=data_file(
                run_path("tables", "probe_ablations.csv"),
                "probe_ablations.rst",
                "Per-layer ablations of the Attn + GloVe probe (CSV)",
            ),
            ablations_markdown=run_path("tables", "probe_ablations.md"),
            ablations_summary=run_path("tables", "probe_ablations.summary.json"),
        )
    return out


def probes_extra_flags():
    flags = {}
    if RUN_RANDOM_INIT:
        flags.update(random_train_attention=IN.random_train, random_dev_attention=IN.random_dev)
    if RUN_NORM_PROBES:
        flags.update(
            norm_train_attention=IN.norm_train,
            norm_dev_attention=IN.norm_dev,
            out_norm_table=OUT.norm_table,
            out_norm_markdown=OUT.norm_markdown,
            norm_summary=OUT.norm_summary,
        )
    if RUN_PROBE_ABLATIONS:
        flags.update(
            ablations=",".join(config["probes"]["layer_ablations"]),
            out_ablations_table=OUT.ablations_table,
            out_ablations_markdown=OUT.ablations_markdown,
            ablations_summary=OUT.ablations_summary,
        )
    return flags


def probe_settings():
    """The probe training flags of the probes job (config probes.*, GloVe)."""
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
    return _compare.paper_comparable(MODELS[wildcards.run], treebank_kind(wildcards.run))


# ---- coreference (Table 2) -----------------------------------------------------------------------
COREF_FILES = list(config["coref"]["conll"])


def coref_input_files(wildcards):
    """COREF_FILES as an input function: paths from the config stay out of the report's rule listing."""
    return COREF_FILES


# ---- beyond the paper: norm-based maps, rollout, head report card ---------------------------------
RUN_NORMS = SWITCH["norms"]
RUN_NORM_PROBES = SWITCH["norm_probes"]
RUN_ROLLOUT = SWITCH["rollout"]
RUN_HEAD_REPORT = SWITCH["head_report"]
RUN_TREE_HEADS = SWITCH["tree_heads"]
# probes.layer_ablations: the modes (keep, drop) of the per-layer ablations; [] = none (needs a train split)
RUN_PROBE_ABLATIONS = SWITCH["probe_ablations"]


# The map kind of a step that runs on the attention maps and, with norms.enabled, on the norm-based maps
# (surface_stats, cluster_heads, heads): the wildcard {maps}, "" or "_norm", ends the name of every path
# (attention_stats.csv, attention_stats_norm.csv). "(?:)" matches only "": no norm twin without norms.
wildcard_constraints:
    maps="|_norm" if RUN_NORMS else "(?:)",


def maps_label(text):
    """A report label of a {maps} step's output: ``text``, plus ", norm-based maps" for the norm twin."""
    return lambda wildcards: {"result": text.format(maps=", norm-based maps" if wildcards.maps else "")}


def data_file(path, caption, label, subcategory="{run}"):
    """``path`` registered in the report as a download under "Data files (CSV)", listed under the run
    (or ``subcategory``), with its caption file (under workflow/report/; None: the generic one,
    steps.GENERIC_CAPTION) and one label (a string, or maps_label(...)). One label only: see
    report_page_outputs_of."""
    return report(
        path,
        caption=f"../report/{caption or steps.GENERIC_CAPTION}",
        category="Data files (CSV)",
        subcategory=subcategory,
        labels=label if callable(label) else {"result": label},
    )


TREE_HEADS_NOTE = lambda wildcards, input, output: (
    f"Model {MODELS[wildcards.run]['name_or_path']}; trees: {treebank_name(wildcards.run)}."
)


def beyond_summaries():
    """The summaries of the steps beyond the paper that run, for the manifest (bertlook.pipeline.steps order)."""
    return [run_path(path) for path in steps.beyond_summaries(STEPS, SWITCH).values()]


def beyond_summary_names():
    return list(steps.beyond_summaries(STEPS, SWITCH))


# ---- cross-model summary (several models in one config) ------------------------------------------
SUMMARY_DIR = os.path.join(RESULTS, f"{config['run_name']}-all-models")

# ---- cross-language summary (`treebanks`: several treebanks for each model) ----------------------
# results/{run_name}-languages/{model label}/: each relation's best head per treebank, and whether the
# same heads track the same relations across treebanks (languages.smk).
LANGUAGES_DIR = os.path.join(RESULTS, f"{config['run_name']}-languages")
MODEL_LABELS = [m["label"] for m in config["models"]]
LANGUAGE_OUTPUTS = ("best_heads.csv", "agreement.csv", "languages.md", "fig_languages.png", "languages.summary.json")


def syntax_outputs(run):
    """What a syntax run (a `treebanks` entry) produces: its trees and its syntax steps' outputs (Table 1,
    Fig 5)."""
    paths = [run_path("treebank", "treebank.summary.json")]
    paths += [run_path(path) for step in steps.syntax_steps(STEPS) for path in step.outputs]
    return [path.format(run=run) for path in paths]


def language_runs(model_label):
    """The runs of one model, one per treebank, main treebank first."""
    model_run = f"{config['run_name']}-{model_label}"
    return [run for run in RUNS if MODEL_RUN_OF[run] == model_run]


def languages_inputs(wildcards):
    return {
        "accuracy": [run_path("tables", "head_accuracy.csv").format(run=run) for run in language_runs(wildcards.model)]
    }


def languages_flags(wildcards, input, output):
    runs = language_runs(wildcards.model)
    return {
        "head_accuracy": list(input.accuracy),
        "label": [TREEBANK_LABEL_OF[run] for run in runs],
        "language": [TREEBANK_OF[run]["language"] for run in runs],
    }


def languages_outputs():
    if not config["treebanks"]:
        return []
    return [os.path.join(LANGUAGES_DIR, label, name) for label in MODEL_LABELS for name in LANGUAGE_OUTPUTS]


# ---- the HTML report (report_pages.smk) ----------------------------------------------------------
# `snakemake --report` shows images and HTML files in the page and offers anything else (a CSV) as a
# download only. The step report-pages turns each table into an HTML page (percents) and each figure into
# a page-sized PNG under {dir}/report/; those pages are what the report shows, with a human label each.
# The CSVs stay registered as downloads ("Data files (CSV)"); the full-resolution PNGs stay in figures/.
REPORT_DIR = "report"
ReportPage = steps.Page  # the declarations' page type; the summaries' pages below use full paths


def page_output_name(page):
    """A page's output name in its rule: a valid identifier, unique in the rule (from the whole page
    path: the summary rule has a languages.html for every model)."""
    return "page_{}".format(re.sub(r"\W", "_", os.path.splitext(page.page)[0]))


def syntax_report_pages():
    """The report entries of every run's syntax steps (model runs and `treebanks` runs)."""
    return steps.syntax_pages(STEPS)


def run_report_pages():
    """The report entries of a model run (declared with their steps in bertlook.pipeline.steps)."""
    return steps.run_pages(STEPS, SWITCH)


def models_explorer_outputs():
    """The fan-out's side-by-side head explorer (made by explorer_models), with two or more models and the
    explorer on."""
    on = SWITCH["explorer"] and len(MODEL_RUNS) > 1
    return [os.path.join(SUMMARY_DIR, "explorer.html")] if on else []


def summary_report_pages():
    """The report entries of the cross-model summary and, with `treebanks`, of each model's
    cross-language summary (full paths)."""
    here = lambda *parts: os.path.join(SUMMARY_DIR, *parts)
    mine = lambda name: here(REPORT_DIR, name)
    pages = [
        ReportPage(
            here("models_summary.md"),
            mine("models_summary.html"),
            "Comparison across models",
            "Models side by side (table)",
            caption="models_summary.rst",
        ),
        ReportPage(
            here("fig_models_summary.png"),
            mine("fig_models_summary.png"),
            "Comparison across models",
            "Models side by side (figure)",
            caption="fig_models_summary.rst",
        ),
        ReportPage(
            here("resources.md"),
            mine("resources.html"),
            "Resources",
            "Measured resources per rule, all runs",
            caption="resources_summary.rst",
        ),
    ] + [
        ReportPage(
            path,
            mine("explorer.html"),
            "Comparison across models",
            "Head explorer, models side by side (interactive)",
            caption="explorer_models.rst",
        )
        for path in models_explorer_outputs()
    ]
    for label in (MODEL_LABELS if config["treebanks"] else []):
        src = lambda name: os.path.join(LANGUAGES_DIR, label, name)
        dst = lambda name: os.path.join(LANGUAGES_DIR, label, REPORT_DIR, name)
        pages += [
            ReportPage(
                src("languages.md"),
                dst("languages.html"),
                "Across languages",
                f"Best heads across treebanks, {label} (table)",
                caption="languages.rst",
            ),
            ReportPage(
                src("fig_languages.png"),
                dst("fig_languages.png"),
                "Across languages",
                f"Best heads across treebanks, {label} (figure)",
                caption="fig_languages.rst",
            ),
        ]
    return pages


def report_page_outputs():
    """Every page of the report (the report/ folders), for `all`."""
    return (
        [run_path(REPORT_DIR, p.page).format(run=run) for run in MODEL_RUNS for p in run_report_pages()]
        + [run_path(REPORT_DIR, p.page).format(run=run) for run in SYNTAX_RUNS for p in syntax_report_pages()]
        + [p.page for p in summary_report_pages()]
    )


def is_report_page(path):
    """A page of the report (made from the resources tables too: never an input of `resources`)."""
    return os.path.basename(os.path.dirname(str(path))) == REPORT_DIR


def report_page_outputs_of(pages, own_paths=False, subcategory=None):
    """The report()-flagged outputs of ``pages``: under results/{run}/report/ (``own_paths``: at
    the page's own full path), listed under subcategory "{run}" or "{run}: <group>" (``subcategory``: a
    function of the page giving it instead), with one label, {"result": <the page's label>}.

    One label only: Snakemake's report turns a second label with exactly two values, each on half of
    a list's entries (a table and a figure of one run, say), into a toggle between them."""
    out = {}
    for p in pages:
        where = subcategory(p) if subcategory else "{{run}}{}".format(f": {p.subcategory}" if p.subcategory else "")
        out[page_output_name(p)] = report(
            p.page if own_paths else run_path(REPORT_DIR, p.page),
            caption=f"../report/{p.caption_file}",
            category=p.category,
            subcategory=where,
            labels={"result": p.label},
        )
    return out


def gradients_shown(wildcards, input, output):
    """What Fig 3 shows in this run, for its caption: "ran" or the reason it did not (from the gradient
    step's summary; "unknown" before it exists, e.g. in a dry run)."""
    path = run_path("tables", "sep_gradients.summary.json").format(run=wildcards.run)
    try:
        with open(path, encoding="utf-8") as f:
            summary = json.load(f)
    except (OSError, ValueError):
        return {"status": "unknown", "reason": ""}
    ran = summary.get("status") != "not run"
    return {"status": "ran" if ran else "not run", "reason": "" if ran else str(summary.get("reason", ""))}


PAGE_FLAGS = dict(
    source=lambda wildcards, input, output: list(input.sources),
    page=lambda wildcards, input, output: list(output),
)


def summary_page_subcategory(page):
    """ "all models", or "model <label>" for a page of that model's cross-language summary."""
    model = next((m for m in MODEL_LABELS if page.page.startswith(os.path.join(LANGUAGES_DIR, m) + os.sep)), None)
    return f"model {model}" if model else "all models"


def all_outputs():
    """What `all` asks for: every model run's declared outputs (bertlook.pipeline.steps) and manifest, the
    syntax runs' outputs, the cross-language and cross-model summaries, and every report page."""
    return (
        expand(
            [run_path(path) for path in steps.run_outputs(STEPS, SWITCH)] + [run_path("manifest.json")], run=MODEL_RUNS
        )
        + [path for run in SYNTAX_RUNS for path in syntax_outputs(run)]
        + languages_outputs()
        + [
            os.path.join(SUMMARY_DIR, name)
            for name in ("models_summary.csv", "fig_models_summary.png", "resources.csv", "resources.md")
        ]
        + models_explorer_outputs()
        + report_page_outputs()
    )


# ---- the end of a run (the Snakefile's onsuccess) -------------------------------------------------
WORKFLOW_START = time.time()  # when Snakemake read the workflow: the wall time the summary reports


def shown_path(path):
    """``path`` relative to the working directory when it lies below it (what a user typed), else as it is."""
    rel = os.path.relpath(path)
    return str(path) if rel.startswith("..") else rel


def print_run_summary():
    """Print what the run found beside the paper, where its results are and how long it took."""
    from bertlook.reporting.run_summary import end_of_run_summary

    text = end_of_run_summary(
        [os.path.join(RESULTS, run) for run in MODEL_RUNS],
        elapsed_s=time.time() - WORKFLOW_START,
        summary_dir=SUMMARY_DIR,
        configfiles=[shown_path(c) for c in workflow.configfiles],
    )
    print(f"\n{text}", flush=True)
