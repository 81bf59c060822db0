# Step `extract-words`: word-level attention maps ([CLS] w1..wn [SEP], split words merged:
# TO = sum over the word's tokens, FROM = word_attention.from_split) for each treebank split.
# extract_words: the run's model (attention/words-*); extract_words_random: the probes' random-init
# baseline, the run's model re-initialised in memory (`extract-words --random-init-seed`, nothing saved;
# attention/randwords-*). One job per word shard ({shard}: a contiguous range of the split's sentences,
# extraction.word_shards) writes a temp() store; merge_words / merge_words_random gather them into one
# store by hard links (no map copied) and one summary. With extraction.keep_maps: false the merged
# stores are temp() too (word_maps): deleted once heads / probes (probes_random) read them.
# Priorities (disk with keep_maps: false): the consumers (heads, probes, probes_random: 10) run as soon
# as their stores exist. `probes` needs the rows of probes_random, so the random-init maps come first
# (extract_words_random: 5, above extract_words and extract_segments: 0): extracted, read by probes_random
# and deleted before the model's word stores are written, which heads and probes then read and free.
# (The other way round the model's stores would wait on disk for probes while the random-init ones
# are extracted: all four at once.)


rule extract_words:
    input:
        treebank=run_path("treebank", "{split}.conllu"),
    output:
        store=temp(directory(run_path("attention", "words-{split}-{shard}"))),
        summary=run_path("attention", "words-{split}-{shard}.summary.json"),
        # norm-based word maps (norms.enabled), written in the same forward pass
        **({"norms": temp(directory(run_path("attention", "normwords-{split}-{shard}")))} if RUN_NORMS else {}),
    params:
        cmd=bertlook_cmd(
            "extract-words",
            model_flags,
            omp_threads=True,
            treebank=IN.treebank,
            out=OUT.store,
            from_split=config["word_attention"]["from_split"],
            text=WORD_TEXT_ARG,
            batch_size=config["extraction"]["batch_size"],
            max_seq_len=config["segments"]["max_seq_len"],
            device=config["extraction"]["device"],
            shard_mb=config["extraction"]["shard_mb"],
            max_unk_rate=config["extraction"]["max_unk_rate"],
            shard=WC.shard,
            summary=OUT.summary,
            norms_out=OUT.norms if RUN_NORMS else None,
        ),
    log:
        log_path("extract_words-{split}-{shard}"),
    benchmark:
        bench_path("extract_words-{split}-{shard}")
    threads: 8
    resources:
        **sizing.snakemake_resources("extract_words", config),
    conda:
        ENV_TORCH
    shell:
        CMD


# A rule of its own, not `use rule extract_words as extract_words_random with:`: its command differs
# (--random-init-seed), and `with: params:` replaces the whole `cmd` parameter, so the command line
# would be written out twice anyway; it also has its own priority.
rule extract_words_random:
    input:
        treebank=run_path("treebank", "{split}.conllu"),
    output:
        store=temp(directory(run_path("attention", "randwords-{split}-{shard}"))),
        summary=run_path("attention", "randwords-{split}-{shard}.summary.json"),
    params:
        cmd=bertlook_cmd(
            "extract-words",
            model_flags,
            omp_threads=True,
            random_init_seed=config["seed"],
            random_init_keep=config["probes"]["random_init_keep"],
            treebank=IN.treebank,
            out=OUT.store,
            from_split=config["word_attention"]["from_split"],
            text=WORD_TEXT_ARG,
            batch_size=config["extraction"]["batch_size"],
            max_seq_len=config["segments"]["max_seq_len"],
            device=config["extraction"]["device"],
            shard_mb=config["extraction"]["shard_mb"],
            max_unk_rate=config["extraction"]["max_unk_rate"],
            shard=WC.shard,
            summary=OUT.summary,
        ),
    log:
        log_path("extract_words_random-{split}-{shard}"),
    benchmark:
        bench_path("extract_words_random-{split}-{shard}")
    priority: 5  # before the model's word extraction: see above
    threads: 8
    resources:
        **sizing.snakemake_resources("extract_words_random", config),
    conda:
        ENV_TORCH
    shell:
        CMD


rule merge_words:
    input:
        stores=every_word_shard(rules.extract_words.output.store),
        summaries=every_word_shard(rules.extract_words.output.summary),
    output:
        store=word_maps(directory(run_path("attention", "words-{split}"))),
        summary=run_path("attention", "words-{split}.summary.json"),
    params:
        cmd=bertlook_cmd(
            "merge-stores", store=IN.stores, part_summary=IN.summaries, out=OUT.store, summary=OUT.summary
        ),
    log:
        log_path("merge_words-{split}"),
    benchmark:
        bench_path("merge_words-{split}")
    priority: 10  # frees the shard stores (hard links) and lets the consumers start
    threads: 1
    resources:
        **sizing.snakemake_resources("merge_words", config),
    conda:
        ENV_ANALYSIS
    shell:
        CMD


# merge_words on the random-init baseline's shard stores: same command (inputs and outputs through
# IN / OUT), priority, threads and env; only the paths, log, benchmark and sizing name differ.
use rule merge_words as merge_words_random with:
    input:
        stores=every_word_shard(rules.extract_words_random.output.store),
        summaries=every_word_shard(rules.extract_words_random.output.summary),
    output:
        store=word_maps(directory(run_path("attention", "randwords-{split}"))),
        summary=run_path("attention", "randwords-{split}.summary.json"),
    log:
        log_path("merge_words_random-{split}"),
    benchmark:
        bench_path("merge_words_random-{split}")
    resources:
        **sizing.snakemake_resources("merge_words_random", config),


# The norm-based word stores of the shards (norms.enabled) -> one store per split; their counts are in
# the attention stores' summaries (merge_words), so no summary here.
if RUN_NORMS:

    use rule merge_words as merge_words_norm with:
        input:
            stores=every_word_shard(rules.extract_words.output.norms),
        output:
            store=word_maps(directory(run_path("attention", "normwords-{split}"))),
        params:
            cmd=bertlook_cmd("merge-stores", store=IN.stores, out=OUT.store),
        log:
            log_path("merge_words_norm-{split}"),
        benchmark:
            bench_path("merge_words_norm-{split}")
        resources:
            **sizing.snakemake_resources("merge_words_norm", config, kind="merge_words"),
