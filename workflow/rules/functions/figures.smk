# The functions and values of step `figures` (workflow/rules/figures.smk, which includes this file): kept
# apart from its rules, as Snakemake's linter asks (no rules and functions in one file).
# The figures of the paper's `figures` step (declared in bertlook.cli.figures).
FIGURES = [os.path.basename(path) for step in STEPS if step.name == "figures" for path in step.outputs]


def example_heads_arg():
    """--example-heads value: "auto" or a comma-separated list of "L-H" labels."""
    heads = config["figures"]["example_heads"]
    return heads if heads == "auto" else ",".join(heads)
