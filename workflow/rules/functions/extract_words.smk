# Step `extract_words`: its own functions and values, included by workflow/rules/extract_words.smk (Snakemake's
# linter wants rules and functions in separate files).
WORD_TEXT_ARG = lambda wildcards, input, output: TREEBANK_OF[wildcards.run]["text"]
# One word shard (the default): each extraction job writes its split's store itself, no merge job.
WORD_SHARD_SUFFIX = "-{shard}" if WORD_SHARDS > 1 else ""
WORD_SHARD_FLAG = WC.shard if WORD_SHARDS > 1 else None


def word_store(prefix):
    """The store an extract_words(_random) job writes: a temp() shard store merged by merge_words (word_shards
    > 1), or the split's store itself (word_maps)."""
    if WORD_SHARDS > 1:
        return temp(directory(run_path("attention", f"{prefix}-{{split}}-{{shard}}")))
    return word_maps(directory(run_path("attention", f"{prefix}-{{split}}")))


def random_words_flags():
    """The extract-words flags of the random-init baseline run in the same job (probes.random_init)."""
    if not RUN_RANDOM_INIT:
        return {}
    return dict(
        random_init_seed=config["seed"],
        random_init_keep=config["probes"]["random_init_keep"],
        random_init_out=OUT.random,
        random_init_summary=OUT.random_summary,
    )


def word_summary(prefix):
    return run_path("attention", f"{prefix}-{{split}}{WORD_SHARD_SUFFIX}.summary.json")


def word_maps(path):
    """The word-level stores of a split (attention/words-*, normwords-*, randwords-*) and the coreference
    maps (attention/coref): kept (extraction.keep_maps), or temp() -- deleted once their consumers ran (heads,
    rollout_words, tree_heads, probes; coref; see extract_words.smk, priorities)."""
    return path if KEEP_MAPS else temp(path)


def every_word_shard(path):
    """``path`` (with {shard}) of every word-level extraction shard (extraction.word_shards)."""
    return every_shard(path, WORD_SHARD_LABELS)
