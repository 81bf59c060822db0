# Stage `extract` on sentences: word-level attention maps ([CLS] w1..wn [SEP], split words merged:
# TO = sum over the word's tokens, FROM = word_attention.from_split) for each treebank split.
# {maps} = "words" (the run's model) or "randwords" (the random-init baseline model of the probes).
# One job per extraction shard ({shard}: a contiguous range of the split's sentences) writes a temp()
# store; merge_words gathers them into one store by hard links (no map copied) and one summary.


rule extract_words:
    input:
        unpack(extract_words_inputs),
    output:
        store=temp(directory(run_path("attention", "{maps}-{split}-{shard}"))),
        summary=run_path("attention", "{maps}-{split}-{shard}.summary.json"),
    params:
        cmd=bertlook_cmd(
            "extract-words",
            extract_words_model_flags,
            omp_threads=True,
            treebank=IN.treebank,
            out=OUT.store,
            from_split=config["word_attention"]["from_split"],
            batch_size=config["extraction"]["batch_size"],
            max_seq_len=config["segments"]["max_seq_len"],
            device=config["extraction"]["device"],
            shard_mb=config["extraction"]["shard_mb"],
            max_unk_rate=config["extraction"]["max_unk_rate"],
            shard=WC.shard,
            summary=OUT.summary,
        ),
    log:
        log_path("extract_{maps}-{split}-{shard}"),
    benchmark:
        bench_path("extract_{maps}-{split}-{shard}")
    threads: 8
    resources:
        **sizing.snakemake_resources("extract_words", config),
    conda:
        ENV_TORCH
    shell:
        CMD


rule merge_words:
    input:
        stores=every_shard(rules.extract_words.output.store),
        summaries=every_shard(rules.extract_words.output.summary),
    output:
        store=directory(run_path("attention", "{maps}-{split}")),
        summary=run_path("attention", "{maps}-{split}.summary.json"),
    params:
        cmd=bertlook_cmd(
            "merge-stores", store=IN.stores, part_summary=IN.summaries, out=OUT.store, summary=OUT.summary
        ),
    log:
        log_path("merge_{maps}-{split}"),
    benchmark:
        bench_path("merge_{maps}-{split}")
    threads: 1
    resources:
        **sizing.snakemake_resources("merge_words", config),
    conda:
        ENV_ANALYSIS
    shell:
        CMD
