# Stage `manifest`: provenance of a run (model, corpus checksum, config, versions, device).


rule manifest:
    input:
        dump=WIKI_DUMP,
        store=rules.extract_segments.output.store,
        segments=rules.segments.output.summary,
        extraction=rules.extract_segments.output.summary,
        stats=rules.surface_stats.output.summary,
        treebank=rules.treebank.output.summary,
        words_dev=run_path("attention", "words-dev.summary.json"),
        heads=rules.heads.output.summary,
        coref=rules.coref.output.summary,
        gradients=rules.gradients.output.summary,
        probes=lambda wildcards: (
            [run_path("tables", "table3.summary.json").format(run=wildcards.run)] if RUN_PROBES else []
        ),
    output:
        run_path("manifest.json"),
    params:
        bertlook=BERTLOOK,
        probes=lambda wildcards, input: "".join(f" --summary probes={shlex.quote(p)}" for p in input.probes),
        config_json=lambda wildcards: json.dumps(config, sort_keys=True),
    log:
        log_path("manifest"),
    threads: 1
    resources:
        mem_mb=1000,
        runtime=10,
    conda:
        ENV_ANALYSIS
    shell:
        "{params.bertlook} manifest --run {wildcards.run} --config-json {params.config_json:q} "
        "--corpus {input.dump:q} --attention {input.store:q} "
        "--summary segments={input.segments:q} --summary extraction={input.extraction:q} "
        "--summary stats={input.stats:q} --summary treebank={input.treebank:q} "
        "--summary words_dev={input.words_dev:q} --summary heads={input.heads:q}{params.probes} "
        "--summary coref={input.coref:q} --summary gradients={input.gradients:q} "
        "--out {output:q} > {log:q} 2>&1"
