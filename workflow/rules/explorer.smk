# Step `explorer` (beyond the paper): results/{run}/explorer.html, one self-contained page about every head
# (a layer x head grid coloured by a chosen metric; a head's card, relations and nearest heads), from the
# run's tables.


rule explorer:
    input:
        report=run_path("tables", "head_report.csv"),
        accuracy=run_path("tables", "head_accuracy.csv"),
        clusters=run_path("tables", "head_clusters.csv"),
        stats=run_path("tables", "attention_stats.csv"),
        norm_stats=branch(SWITCH["norms"], then=run_path("tables", "attention_stats_norm.csv")),
    output:
        html=run_path("explorer.html"),
    params:
        cmd=bertlook_cmd(
            "explorer",
            head_report=IN.report,
            head_accuracy=IN.accuracy,
            clusters=IN.clusters,
            stats=IN.stats,
            norm_stats=IN.norm_stats if SWITCH["norms"] else None,
            run=WC.run,
            out=OUT.html,
        ),
    log:
        log_path("explorer"),
    benchmark:
        bench_path("explorer")
    threads: 1
    resources:
        **step_resources("explorer"),
    conda:
        ENV_ANALYSIS
    shell:
        CMD
