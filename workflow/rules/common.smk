# Shared definitions: config validation, run names, paths. Runs are {run_name}-{model label}.
import json
import os
import re
import shlex
import sys
from pathlib import Path

from snakemake.utils import validate

from bertlook.preflight import wikipedia_target


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


def all_outputs():
    return expand(
        [
            run_path("tables", "attention_stats.csv"),
            run_path("tables", "js_divergence.csv"),
            run_path("tables", "head_clusters.csv"),
            *[run_path("figures", name) for name in FIGURES],
            run_path("manifest.json"),
        ],
        run=RUNS,
    )
