# Stage `corpora`: Wikipedia dump -> paper-style [CLS] A [SEP] B [SEP] segments (JSON Lines).

if not config["wikipedia"].get("path"):

    rule download_wikipedia:
        output:
            dump=WIKI_DUMP,
            summary=f"{WIKI_DUMP}.download.json",
        params:
            bertlook=BERTLOOK,
            url=config["wikipedia"]["url"],
            checks=" ".join(
                flag
                for flag in [
                    optional_flag("--sha256", config["wikipedia"].get("sha256")),
                    optional_flag("--sha1sums-url", config["wikipedia"].get("sha1sums_url")),
                ]
                if flag
            ),
        log:
            f"{RESOURCES}/logs/download_wikipedia.log",
        threads: 1
        resources:
            mem_mb=500,
            runtime=120,
        retries: 2
        conda:
            ENV_ANALYSIS
        shell:
            "{params.bertlook} download --url {params.url:q} --out {output.dump:q} {params.checks} "
            "--summary {output.summary:q} > {log:q} 2>&1"


rule segments:
    input:
        dump=WIKI_DUMP,
    output:
        segments=run_path("corpus", "segments.jsonl"),
        summary=run_path("corpus", "segments.summary.json"),
    params:
        bertlook=BERTLOOK,
        model=model_args,
        n_segments=config["segments"]["n_segments"],
        max_seq_len=config["segments"]["max_seq_len"],
        seed=config["seed"],
        max_articles=optional_flag("--max-articles", config["wikipedia"].get("max_articles")),
    log:
        log_path("segments"),
    threads: 1
    resources:
        mem_mb=4000,
        runtime=60,
    conda:
        ENV_TORCH
    shell:
        "{params.bertlook} corpora --dump {input.dump:q} {params.model} --out {output.segments:q} "
        "--summary {output.summary:q} --n-segments {params.n_segments} "
        "--max-seq-len {params.max_seq_len} --seed {params.seed} {params.max_articles} > {log:q} 2>&1"
