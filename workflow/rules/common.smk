# What several steps share: config validation, run names, the corpus, paths, shards, which steps run and
# the report's data files, and what `all` asks for. What every rule is made of (command line, log,
# resources) is in rule_helpers.smk; a step's own functions in functions/<step>.smk, which its rule file
# includes. Runs are {run_name}-{model label}.
import json
import os
import re
import sys
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
from bertlook.pipeline.preflight import wikipedia_target
from bertlook.pipeline.config import resolve_data_path, treebank_label
from bertlook.cli import ORDER as CLI_ORDER, declared_costs, declared_steps
from bertlook.pipeline import model_spec, sizing, steps
from bertlook.pipeline.sharding import shard_labels

# The steps of a run, each declared once in its CLI module (bertlook.cli.<step>.STEPS, gathered by
# bertlook.cli.declared_steps): what `all` asks for, the manifest's summaries, the report pages, the
# sizing kinds (docs/ADDING_A_STEP.md).
STEPS = declared_steps()
SHARED_RULE_FILES = ("common.smk", "rule_helpers.smk")  # included first by the Snakefile


def step_rule_files():
    """workflow/rules/*.smk but the shared files, in pipeline order (bertlook.cli.ORDER: the .smk of a step is
    named as its CLI module; a rule may name an earlier file's rules as `rules.X`), then any other file
    (a new step's) in name order. The Snakefile includes them."""
    rank = {name: i for i, name in enumerate(CLI_ORDER)}
    files = [p for p in (BERTLOOK_ROOT / "workflow" / "rules").glob("*.smk") if p.name not in SHARED_RULE_FILES]
    return sorted(files, key=lambda p: (rank.get(p.stem, len(rank)), p.stem))


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


wildcard_constraints:
    run="|".join(re.escape(r) for r in RUNS),
    split="train|dev",
    shard="[0-9]+of[0-9]+",


def run_path(*parts):
    """Path under results/{run}/ (with the {run} wildcard left in)."""
    return os.path.join(RESULTS, "{run}", *parts)


def runs_pattern(runs):
    """A wildcard constraint matching exactly these run names (none: matches nothing)."""
    return "|".join(re.escape(r) for r in runs) if runs else "(?!)"


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
KEEP_MAPS = bool(config["extraction"]["keep_maps"])


def every_shard(path, labels=None):
    """``path`` (with {shard}) of every shard (``labels``, default the segment shards
    extraction.shards), other wildcards ({run}, ...) left for the rule."""
    return expand(path, shard=SHARD_LABELS if labels is None else labels, allow_missing=True)


def model_flags(wildcards, input, output):
    """--model/--revision of a run's model."""
    model = MODELS[wildcards.run]
    return {"model": model["name_or_path"], "revision": model.get("revision")}


# ---- which steps run ------------------------------------------------------------------------------
def has_train_split(run):
    """Without a train split (local source, no train file) there is no held-out head selection."""
    tb = TREEBANK_OF[run]
    return tb["source"] != "local" or bool(tb["local"]["train"])


# The main treebank's train split decides the model runs' Table 3 and comparison rows.
HAS_TRAIN_SPLIT = has_train_split(MODEL_RUNS[0])
# Which switchable steps run (bertlook.pipeline.steps.switches: the config's on/off keys, and the probes
# need a train split); the RUN_* names below are its entries.
SWITCH = steps.switches(config, HAS_TRAIN_SPLIT, STEPS)
RUN_PROBES = SWITCH["probes"]  # they need a train split: without one there is no Table 3
RUN_RANDOM_INIT = SWITCH["random_init"]  # the probes' random-init baseline (its maps: extract_words)
RUN_NORMS = SWITCH["norms"]
RUN_NORM_PROBES = SWITCH["norm_probes"]
RUN_ROLLOUT = SWITCH["rollout"]
RUN_HEAD_REPORT = SWITCH["head_report"]
RUN_TREE_HEADS = SWITCH["tree_heads"]
# probes.layer_ablations: the modes (keep, drop) of the per-layer ablations; [] = none (needs a train split)
RUN_PROBE_ABLATIONS = SWITCH["probe_ablations"]


# The wildcard {maps} of a step on the attention maps and, with norms.enabled, the norm-based maps (surface_stats,
# cluster_heads, heads: "" or "_norm" ends each path: attention_stats_norm.csv); surface_stats also on ALTI ("_alti",
# contributions.enabled: attention_stats_alti.csv, from the extraction stream). "(?:)" matches only "".
MAPS_TWINS = {"_norm": ", norm-based maps", "_alti": ", ALTI per layer"}
MAPS_ON = [""] + (["_norm"] if RUN_NORMS else []) + (["_alti"] if SWITCH["contributions"] else [])


wildcard_constraints:
    maps="|".join(MAPS_ON) if len(MAPS_ON) > 1 else "(?:)",


def maps_label(text):
    """A report label of a {maps} step's output: ``text``, plus the twin's name (", norm-based maps", ...)."""
    return lambda wildcards: {"result": text.format(maps=MAPS_TWINS.get(wildcards.maps, ""))}


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


def data_table(name, label):
    """results/{run}/tables/NAME.csv as a data file, with its caption NAME.rst."""
    return data_file(run_path("tables", f"{name}.csv"), f"{name}.rst", label)


def table_outputs(name, label):
    """The three files of a table step: tables/NAME.csv (a data file), its Markdown twin and its summary."""
    return dict(
        table=data_table(name, label),
        markdown=run_path("tables", f"{name}.md"),
        summary=run_path("tables", f"{name}.summary.json"),
    )


def maps_table(name, label):
    """tables/NAME{maps}.csv of a {maps} step as a data file (``label`` with {maps}: maps_label)."""
    return data_file(run_path("tables", f"{name}{{maps}}.csv"), "maps_data_file.rst", maps_label(label))


# ---- summaries beside the runs: across models (SUMMARY_DIR), across treebanks (languages.smk) -----
SUMMARY_DIR = os.path.join(RESULTS, f"{config['run_name']}-all-models")
MODEL_LABELS = [m["label"] for m in config["models"]]


def all_outputs():
    """What `all` asks for: every model run's declared outputs (bertlook.pipeline.steps) and manifest, the
    syntax runs' outputs, the cross-language and cross-model summaries, the atlas, and every report page."""
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
        + atlas_outputs()
        + report_page_outputs()
    )
