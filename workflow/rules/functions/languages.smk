# Step `languages`: its own functions and values, included by workflow/rules/languages.smk (Snakemake's
# linter wants rules and functions in separate files).
LANGUAGES_DIR = os.path.join(RESULTS, f"{config['run_name']}-languages")
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
