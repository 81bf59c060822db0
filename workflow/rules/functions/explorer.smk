# Step `explorer`: its own functions and values, included by workflow/rules/explorer.smk (Snakemake's
# linter wants rules and functions in separate files).
def models_explorer_outputs():
    """The fan-out's side-by-side head explorer (made by explorer_models), with two or more models and the
    explorer on."""
    on = SWITCH["explorer"] and len(MODEL_RUNS) > 1
    return [os.path.join(SUMMARY_DIR, "explorer.html")] if on else []


def explorer_sample_inputs(wildcards):
    """What the explorer's sample reads: the dev word store, every shard's Fig 1 example, and with the switches on
    the norm-based dev store and the contributions step's maps of the same sentences (ALTI, value zeroing)."""
    run = wildcards.run
    inputs = {
        "dev": run_path("attention", "words-dev").format(run=run),
        "examples": [p.format(run=run) for p in every_shard(rules.extract_segments.output.example)],
    }
    if SWITCH["norms"]:
        inputs["norm_dev"] = run_path("attention", "normwords-dev").format(run=run)
    if SWITCH["contributions"]:
        inputs["contributions"] = run_path("partials", "contribution_explorer.npz").format(run=run)
    return inputs
