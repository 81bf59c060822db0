# Step `figures`: its own functions and values, included by workflow/rules/figures.smk (Snakemake's
# linter wants rules and functions in separate files).
# The figures of the paper's `figures` step (declared in bertlook.cli.figures).
FIGURES = [os.path.basename(path) for step in STEPS if step.name == "figures" for path in step.outputs]


def example_heads_arg():
    """--example-heads value: "auto" or a comma-separated list of "L-H" labels."""
    heads = config["figures"]["example_heads"]
    return heads if heads == "auto" else ",".join(heads)
