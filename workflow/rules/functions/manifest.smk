# Step `manifest`: its own functions and values, included by workflow/rules/manifest.smk (Snakemake's
# linter wants rules and functions in separate files).
def beyond_summaries():
    """The summaries of the steps beyond the paper that run, for the manifest (bertlook.pipeline.steps order)."""
    return [run_path(path) for path in steps.beyond_summaries(STEPS, SWITCH).values()]


def beyond_summary_names():
    return list(steps.beyond_summaries(STEPS, SWITCH))


def manifest_summaries(wildcards, input, output):
    """--summary NAME=PATH of every step summary the manifest gathers."""
    return (
        [f"{name}={input[name]}" for name in ("segments", "extraction", "stats", "treebank", "words_dev", "heads")]
        + [f"probes={path}" for path in input.probes]
        + [f"{name}={input[name]}" for name in ("coref", "gradients")]
        + [f"{name}={path}" for name, path in zip(beyond_summary_names(), input.beyond)]
    )
