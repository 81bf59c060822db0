# Stage `extract` on sentences: word-level attention maps ([CLS] w1..wn [SEP], split words merged:
# TO = sum over the word's tokens, FROM = word_attention.from_split) for each treebank split.
# {maps} = "words" (the run's model) or "randwords" (the random-init baseline model of the probes).


rule extract_words:
    input:
        unpack(extract_words_inputs),
    output:
        store=directory(run_path("attention", "{maps}-{split}")),
        summary=run_path("attention", "{maps}-{split}.summary.json"),
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
            summary=OUT.summary,
        ),
    log:
        log_path("extract_{maps}-{split}"),
    benchmark:
        bench_path("extract_{maps}-{split}")
    threads: 8
    resources:
        mem_mb=16000,
        runtime=240,
    conda:
        ENV_TORCH
    shell:
        CMD
