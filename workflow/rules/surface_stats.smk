# Step `surface-stats`: per-head surface statistics (paper Figs 2 and 4): sums and counts per extraction
# shard (partials/stats-{shard}.npz, computed by extract_segments from the maps in memory), added up and
# divided once here.


rule surface_stats:
    input:
        partials=every_shard(rules.extract_segments.output.stats),
    output:
        table=report(
            run_path("tables", "attention_stats.csv"),
            caption="../report/attention_stats.rst",
            category="Data files (CSV)",
            subcategory="{run}",
            labels={"result": "Surface statistics per head (CSV)"},
        ),
        summary=run_path("tables", "attention_stats.summary.json"),
    params:
        cmd=bertlook_cmd("surface-stats", partial=IN.partials, out=OUT.table, summary=OUT.summary),
    log:
        log_path("surface_stats"),
    benchmark:
        bench_path("surface_stats")
    threads: 1
    resources:
        **sizing.snakemake_resources("surface_stats", config),
    conda:
        ENV_ANALYSIS
    shell:
        CMD


# The same statistics on the norm-based maps (norms.enabled; Kobayashi et al. 2020):
# attention_stats_norm.csv has exactly the columns of attention_stats.csv.
if RUN_NORMS:

    use rule surface_stats as surface_stats_norm with:
        input:
            partials=every_shard(rules.extract_segments.output.norm_stats),
        output:
            table=report(
                run_path("tables", "attention_stats_norm.csv"),
                caption="../report/attention_stats_norm.rst",
                category="Data files (CSV)",
                subcategory="{run}",
                labels={"result": "Surface statistics per head, norm-based maps (CSV)"},
            ),
            summary=run_path("tables", "attention_stats_norm.summary.json"),
        log:
            log_path("surface_stats_norm"),
        benchmark:
            bench_path("surface_stats_norm")
        resources:
            **sizing.snakemake_resources("surface_stats_norm", config, kind="surface_stats"),
