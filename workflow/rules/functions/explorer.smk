# Step `explorer`: its own functions and values, included by workflow/rules/explorer.smk (Snakemake's
# linter wants rules and functions in separate files).
def models_explorer_outputs():
    """The fan-out's side-by-side head explorer (made by explorer_models), with two or more models and the
    explorer on."""
    on = SWITCH["explorer"] and len(MODEL_RUNS) > 1
    return [os.path.join(SUMMARY_DIR, "explorer.html")] if on else []
