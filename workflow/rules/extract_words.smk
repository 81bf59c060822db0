# Step `extract-words`: word-level attention maps ([CLS] w1..wn [SEP], split words merged:
# TO = sum over the word's tokens, FROM = word_attention.from_split) for each treebank split: the run's model
# (attention/words-*, and its norm-based maps normwords-*) and, in the same job on the same sentences, the
# probes' random-init baseline, the run's model re-initialised in memory (`extract-words --random-init-seed
# --random-init-out`, nothing saved; attention/randwords-*). With extraction.word_shards > 1, one job per word shard ({shard}: a contiguous
# range of the split's sentences) writes a temp() store and merge_words / merge_words_random gather them
# into one store by hard links (no map copied) and one summary; with one word shard (the default) the job
# writes the split's store itself (no merge job). With extraction.keep_maps: false the split's stores are
# temp() (word_maps): deleted once heads, the trees and the probes have read them.
# Priorities (disk with keep_maps: false): the consumers (heads, trees, probes: 10) run as soon as their
# stores exist, so that each store is deleted as early as it can be; the probes job reads the model's, the
# norm-based and the random-init stores together (about 0.9 GB in the offline configuration).


include: "functions/extract_words.smk"


use rule _model_step as extract_words with:
    input:
        treebank=run_path("treebank", "{split}.conllu"),
    output:
        **({"norms": word_store("normwords")} if RUN_NORMS else {}),
        # the probes' random-init baseline (probes.random_init): the run's model re-initialised in memory, run
        # on the same sentences in the same job (nothing saved)
        **({"random": word_store("randwords"), "random_summary": word_summary("randwords")} if RUN_RANDOM_INIT else {}),
        store=word_store("words"),
        summary=word_summary("words"),
        # norm-based word maps (norms.enabled), written in the same forward pass
    log:
        log_path(f"extract_words-{{split}}{WORD_SHARD_SUFFIX}"),
    benchmark:
        bench_path(f"extract_words-{{split}}{WORD_SHARD_SUFFIX}")
    params:
        cmd=model_cmd(
            "extract-words",
            treebank=IN.treebank,
            out=OUT.store,
            from_split=config["word_attention"]["from_split"],
            text=WORD_TEXT_ARG,
            batch_size=config["extraction"]["batch_size"],
            max_seq_len=config["segments"]["max_seq_len"],
            device=config["extraction"]["device"],
            **settings("extraction", "model_dtype", "shard_mb", "max_unk_rate"),
            shard=WORD_SHARD_FLAG,
            summary=OUT.summary,
            norms_out=OUT.norms if RUN_NORMS else None,
            **random_words_flags(),
        ),


# The shards' stores -> one store per split (extraction.word_shards > 1 only).
if WORD_SHARDS > 1:

    use rule _analysis_step as merge_words with:
        input:
            stores=every_word_shard(rules.extract_words.output.store),
            summaries=every_word_shard(rules.extract_words.output.summary),
        output:
            store=word_maps(directory(run_path("attention", "words-{split}"))),
            summary=run_path("attention", "words-{split}.summary.json"),
        log:
            log_path("merge_words-{split}"),
        benchmark:
            bench_path("merge_words-{split}")
        priority: 10  # frees the shard stores (hard links) and lets the consumers start
        params:
            cmd=bertlook_cmd(
                "merge-stores", store=IN.stores, part_summary=IN.summaries, out=OUT.store, summary=OUT.summary
            ),

    # merge_words on the random-init baseline's shard stores: same command (inputs and outputs through
    # IN / OUT), priority, threads and env; only the paths, log and benchmark differ.
    if RUN_RANDOM_INIT:

        use rule merge_words as merge_words_random with:
            input:
                stores=every_word_shard(rules.extract_words.output.random),
                summaries=every_word_shard(rules.extract_words.output.random_summary),
            output:
                store=word_maps(directory(run_path("attention", "randwords-{split}"))),
                summary=run_path("attention", "randwords-{split}.summary.json"),
            log:
                log_path("merge_words_random-{split}"),
            benchmark:
                bench_path("merge_words_random-{split}")

    # The norm-based word stores of the shards (norms.enabled) -> one store per split; their counts are in
    # the attention stores' summaries (merge_words), so no summary here.
    if RUN_NORMS:

        use rule merge_words as merge_words_norm with:
            input:
                stores=every_word_shard(rules.extract_words.output.norms),
            output:
                store=word_maps(directory(run_path("attention", "normwords-{split}"))),
            log:
                log_path("merge_words_norm-{split}"),
            benchmark:
                bench_path("merge_words_norm-{split}")
            params:
                cmd=bertlook_cmd("merge-stores", store=IN.stores, out=OUT.store),
