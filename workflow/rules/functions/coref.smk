# Step `coref`: its own functions and values, included by workflow/rules/coref.smk (Snakemake's
# linter wants rules and functions in separate files).
COREF_FILES = list(config["coref"]["conll"])


def coref_input_files(wildcards):
    """COREF_FILES as an input function: paths from the config stay out of the report's rule listing."""
    return COREF_FILES


def coref_flags(wildcards, input, output):
    """The coref step's input: the coreference maps, or why it did not run."""
    if COREF_FILES:
        return {"attention": input.store[0], "candidates": config["coref"]["candidates"]}
    return {"not_run": "no coreference corpus configured (set coref.conll to CoNLL-2012 files)"}
