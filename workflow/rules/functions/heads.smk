# Step `heads`: its own functions and values, included by workflow/rules/heads.smk (Snakemake's
# linter wants rules and functions in separate files).
def heads_inputs(wildcards):
    """The word stores Table 1 reads: the model's attention maps (``{maps}`` empty) or the norm-based maps
    (``_norm``); the train split when the run's treebank has one."""
    prefix = {"": "words", "_norm": "normwords"}[wildcards.maps]
    inputs = {"dev": run_path("attention", f"{prefix}-dev").format(run=wildcards.run)}
    if has_train_split(wildcards.run):
        inputs["train"] = run_path("attention", f"{prefix}-train").format(run=wildcards.run)
    return inputs


def paper_comparable(wildcards, input, output):
    """--paper-comparable: the one definition, bertlook.reporting.compare.paper_comparable (the paper's
    model on the paper's trees, PTB-SD), also behind comparison.csv."""
    return _compare.paper_comparable(MODELS[wildcards.run], treebank_kind(wildcards.run))


def head_scoring():
    """The heads.* flags of Table 1's scoring that rollout_words (Table 1 on the rollout maps) shares."""
    heads = config["heads"]
    return dict(
        min_count=heads["min_count"],
        offsets=",".join(str(k) for k in heads["offsets"]),
        poss_from_possessive=heads["poss_from_possessive"],
        no_poss_from_possessive=not heads["poss_from_possessive"],
        bootstrap=heads["bootstrap"],
    )
