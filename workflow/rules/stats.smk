# Stage `stats`: per-head surface statistics (paper Figs 2 and 4).


rule surface_stats:
    input:
        store=rules.extract_segments.output.store,
    output:
        table=report(
            run_path("tables", "attention_stats.csv"),
            caption="../report/attention_stats.rst",
            category="Tables",
            labels={"run": "{run}", "table": "attention_stats"},
        ),
        summary=run_path("tables", "attention_stats.summary.json"),
    params:
        cmd=bertlook_cmd("stats", attention=IN.store, out=OUT.table, summary=OUT.summary),
    log:
        log_path("surface_stats"),
    benchmark:
        bench_path("surface_stats")
    threads: 1
    resources:
        mem_mb=4000,
        runtime=60,
    conda:
        ENV_ANALYSIS
    shell:
        CMD
