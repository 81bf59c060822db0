# The functions and values of step `explorer` (workflow/rules/explorer.smk, which includes this file): kept
# apart from its rules, as Snakemake's linter asks (no rules and functions in one file).
def models_explorer_outputs():
    """The fan-out's side-by-side head explorer (made by explorer_models), with two or more models and the
    explorer on."""
    on = SWITCH["explorer"] and len(MODEL_RUNS) > 1
    return [os.path.join(SUMMARY_DIR, "explorer.html")] if on else []
