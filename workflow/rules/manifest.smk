# Step `manifest`: provenance of a run (model, corpus checksum, config, versions, device).


include: "functions/manifest.smk"


use rule _analysis_step as manifest with:
    input:
        unpack(corpus_input_files),
        attention_meta=rules.gather_extraction.output.meta,  # not the maps: they may be temp()
        segments=rules.segments.output.summary,
        extraction=rules.gather_extraction.output.summary,
        stats=run_path("tables", "attention_stats.summary.json"),
        treebank=rules.treebank.output.summary,
        words_dev=run_path("attention", "words-dev.summary.json"),
        heads=run_path("tables", "head_accuracy.summary.json"),
        coref=rules.coref.output.summary,
        gradients=rules.gradients.output.summary,
        probes=lambda wildcards: (
            [run_path("tables", "table3.summary.json").format(run=wildcards.run)] if RUN_PROBES else []
        ),
        beyond=lambda wildcards: [p.format(run=wildcards.run) for p in beyond_summaries()],
    output:
        run_path("manifest.json"),
    log:
        log_path("manifest"),
    benchmark:
        bench_path("manifest")
    params:
        cmd=bertlook_cmd(
            "manifest",
            run=WC.run,
            config_json=json.dumps(config, sort_keys=True),
            corpus=None if HF_DATASET else IN.dump,
            attention=IN.attention_meta,
            summary=manifest_summaries,
            out=lambda wildcards, input, output: output[0],
        ),
