# Shared definitions: config validation, run names, paths. Runs are {run_name}-{model label}.
import json
import os
import re
import shlex
import sys
from pathlib import Path

from snakemake.utils import validate

from bertlook.preflight import glove_download_target, ud_download_dir, wikipedia_target


validate(config, schema="../schemas/config.schema.yaml")

RESULTS = config["results_dir"]
RESOURCES = config["resources_dir"]
RUNS = [f"{config['run_name']}-{m['label']}" for m in config["models"]]
MODELS = dict(zip(RUNS, config["models"]))
WIKI_DUMP = str(wikipedia_target(config))
ENV_TORCH = "../../envs/torch.yaml"  # corpora, extraction, clustering (torch, transformers, spaCy)
ENV_ANALYSIS = "../../envs/analysis.yaml"  # download, stats, figures, manifest (numpy, pandas, seaborn)

# The step CLI, run from this checkout's src/ with the Python that runs Snakemake, or with the
# rule's conda env Python under --software-deployment-method conda.
_PYTHON = (
    "python"
    if "conda" in str(workflow.deployment_settings.deployment_method).lower()
    else shlex.quote(sys.executable)
)
_SRC = shlex.quote(str(Path(workflow.basedir) / "src"))
BERTLOOK = f"PYTHONPATH={_SRC}${{PYTHONPATH:+:$PYTHONPATH}} {_PYTHON} -m bertlook"


wildcard_constraints:
    run="|".join(re.escape(r) for r in RUNS),
    split="train|dev",
    maps="words|randwords",


def run_path(*parts):
    """Path under results/{run}/ (with the {run} wildcard left in)."""
    return os.path.join(RESULTS, "{run}", *parts)


def log_path(rule_name):
    return run_path("logs", f"{rule_name}.log")


def model_args(wildcards):
    """--model/--revision flags of a run's model."""
    model = MODELS[wildcards.run]
    args = f"--model {json.dumps(model['name_or_path'])}"
    if model.get("revision"):
        args += f" --revision {json.dumps(model['revision'])}"
    return args


def optional_flag(name, value):
    return "" if value is None else f"{name} {value}"


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
TREEBANK_KIND = {"silver": "silver", "ud": "ud", "local": TREEBANK["local"]["kind"]}[TREEBANK["source"]]
TREEBANK_NAME = {
    "silver": f"silver Wikipedia trees (spaCy {TREEBANK['silver']['spacy_model']})",
    "ud": f"{TREEBANK['ud']['repo']} {TREEBANK['ud']['release']}",
    "local": f"local {TREEBANK_KIND} treebank",
}[TREEBANK["source"]]
# Without a train split (local source, no train file) there is no held-out head selection.
HAS_TRAIN_SPLIT = TREEBANK["source"] != "local" or bool(TREEBANK["local"]["train"])


def treebank_inputs(wildcards):
    if TREEBANK["source"] == "silver":
        return {"dump": WIKI_DUMP, "segments": run_path("corpus", "segments.jsonl").format(run=wildcards.run)}
    if TREEBANK["source"] == "local":
        local = TREEBANK["local"]
        return {k: local[k] for k in ("train", "dev") if local[k]}
    return {}


def treebank_source_args(wildcards, input):
    """Command-line flags of `bertlook treebank` for the configured source."""
    strip = " --strip-subtypes" if TREEBANK["strip_subtypes"] else ""
    if TREEBANK["source"] == "silver":
        silver = TREEBANK["silver"]
        return (
            f"--source silver --dump {shlex.quote(input.dump)} --segments {shlex.quote(input.segments)} "
            f"--train-sentences {silver['train_sentences']} --dev-sentences {silver['dev_sentences']} "
            f"--max-words {silver['max_words']} --seed {config['seed']} "
            f"--spacy-model {shlex.quote(silver['spacy_model'])}{strip}"
            + (f" --max-articles {silver['max_articles']}" if silver["max_articles"] else "")
        )
    if TREEBANK["source"] == "local":
        local = TREEBANK["local"]
        train = f" --train {shlex.quote(input.train)}" if local["train"] else ""
        return f"--source local --dev {shlex.quote(input.dev)}{train} --format {local['format']}{strip}"
    ud = TREEBANK["ud"]
    args = (
        f"--source ud --ud-repo {shlex.quote(ud['repo'])} --ud-release {shlex.quote(ud['release'])} "
        f"--ud-train-file {shlex.quote(ud['train_file'])} --ud-dev-file {shlex.quote(ud['dev_file'])} "
        f"--ud-base-url {shlex.quote(ud['base_url'])} "
        f"--download-dir {shlex.quote(str(ud_download_dir(config)))}"
    )
    for split in ("train", "dev"):
        if ud[f"{split}_sha256"]:
            args += f" --{split}-sha256 {ud[f'{split}_sha256']}"
    return args + strip


def heads_inputs(wildcards):
    inputs = {"dev": run_path("attention", "words-dev").format(run=wildcards.run)}
    if HAS_TRAIN_SPLIT:
        inputs["train"] = run_path("attention", "words-train").format(run=wildcards.run)
    return inputs


def extract_words_inputs(wildcards):
    inputs = {"treebank": run_path("treebank", f"{wildcards.split}.conllu").format(run=wildcards.run)}
    if wildcards.maps == "randwords":
        inputs["model"] = run_path("models", "random_init").format(run=wildcards.run)
    return inputs


def extract_words_model_args(wildcards, input):
    """The run's model, or the random-init copy for the probes' baseline maps."""
    if wildcards.maps == "randwords":
        return f"--model {shlex.quote(input.model)}"
    return model_args(wildcards)


# ---- probes (Table 3) ----------------------------------------------------------------------------
GLOVE = config["glove"]
_glove_target = glove_download_target(config)
GLOVE_FILE = str(_glove_target) if _glove_target else None
GLOVE_ARG = GLOVE["path"] or GLOVE_FILE
# The probes need a train split; without one (local source, no train file) there is no Table 3.
RUN_PROBES = HAS_TRAIN_SPLIT


def probes_inputs(wildcards):
    words = lambda maps, split: run_path("attention", f"{maps}-{split}").format(run=wildcards.run)
    inputs = {"train": words("words", "train"), "dev": words("words", "dev")}
    if config["probes"]["random_init"]:
        inputs.update(random_train=words("randwords", "train"), random_dev=words("randwords", "dev"))
    if GLOVE_FILE:
        inputs["glove"] = GLOVE_FILE
    return inputs


def paper_comparable_flag(wildcards):
    """--paper-comparable only for the paper's model on the paper's corpus (PTB-SD)."""
    comparable = MODELS[wildcards.run].get("compare_with_paper") and TREEBANK_KIND == "ptb_sd"
    return "--paper-comparable" if comparable else ""


# ---- coreference (Table 2) -----------------------------------------------------------------------
COREF_FILES = list(config["coref"]["conll"])

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
            run_path("manifest.json"),
            run_path("comparison.csv"),
            run_path("comparison.md"),
        ],
        run=RUNS,
    ) + [os.path.join(SUMMARY_DIR, name) for name in ("models_summary.csv", "fig_models_summary.png")]
