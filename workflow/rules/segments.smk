# Step `segments`: Wikipedia dump -> paper-style [CLS] A [SEP] B [SEP] segments (JSON Lines).

if not config["wikipedia"].get("path") and not HF_DATASET:

    rule download_wikipedia:
        output:
            dump=WIKI_DUMP,
            summary=f"{WIKI_DUMP}.download.json",
        log:
            f"{RESOURCES}/logs/download_wikipedia.log",
        benchmark:
            f"{RESOURCES}/benchmarks/download_wikipedia.tsv"
        retries: 2
        localrule: True  # network: runs where snakemake runs (login node), never as a cluster job
        conda:
            ENV_ANALYSIS
        threads: 1
        resources:
            **step_resources("download_wikipedia"),
        params:
            cmd=bertlook_cmd(
                "download",
                url=config["wikipedia"]["url"],
                out=OUT.dump,
                sha256=config["wikipedia"].get("sha256"),
                sha1sums_url=config["wikipedia"].get("sha1sums_url"),
                summary=OUT.summary,
            ),
        shell:
            CMD


rule segments:
    input:
        unpack(corpus_input_files),
    output:
        segments=run_path("corpus", "segments.jsonl"),
        summary=run_path("corpus", "segments.summary.json"),
    log:
        log_path("segments"),
    benchmark:
        bench_path("segments")
    conda:
        ENV_TORCH
    threads: 1
    resources:
        **step_resources("segments"),
    params:
        cmd=bertlook_cmd(
            "segments",
            model_flags,
            dump=None if HF_DATASET else IN.dump,
            hf_dataset=HF_DATASET_JSON,
            out=OUT.segments,
            summary=OUT.summary,
            n_segments=config["segments"]["n_segments"],
            max_seq_len=config["segments"]["max_seq_len"],
            seed=config["seed"],
            max_articles=config["wikipedia"].get("max_articles"),
            language=config["segments"]["language"],
            splitter=config["segments"]["splitter"],
        ),
    shell:
        CMD
