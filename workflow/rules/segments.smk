# Step `segments`: Wikipedia dump -> paper-style [CLS] A [SEP] B [SEP] segments, or document windows for long
# contexts (segments.layout: window), as JSON Lines.

if not config["wikipedia"].get("path") and not HF_DATASET:

    use rule _download as download_wikipedia with:
        output:
            file=WIKI_DUMP,
            summary=f"{WIKI_DUMP}.download.json",
        log:
            f"{RESOURCES}/logs/download_wikipedia.log",
        benchmark:
            f"{RESOURCES}/benchmarks/download_wikipedia.tsv"
        localrule: True
        params:
            cmd=download_cmd("wikipedia"),


use rule _torch_step as segments with:
    input:
        unpack(corpus_input_files),
    output:
        segments=run_path("corpus", "segments.jsonl"),
        summary=run_path("corpus", "segments.summary.json"),
    log:
        log_path("segments"),
    benchmark:
        bench_path("segments")
    params:
        cmd=bertlook_cmd(
            "segments",
            model_flags,
            dump=None if HF_DATASET else IN.dump,
            hf_dataset=HF_DATASET_JSON,
            out=OUT.segments,
            summary=OUT.summary,
            **settings("segments", "n_segments", "max_seq_len"),
            seed=config["seed"],
            max_articles=config["wikipedia"].get("max_articles"),
            **settings("segments", "language", "splitter"),
            # the paper's pair layout passes no flag: the command line (a rerun trigger) of today's runs unchanged
            layout=None if config["segments"].get("layout", "pair") == "pair" else config["segments"]["layout"],
        ),
