# Step `surface-stats`: per-head surface statistics (paper Figs 2 and 4): sums and counts per extraction
# shard (partials/stats-{shard}.npz), added up and divided once by surface_stats.


rule surface_stats_shard:
    input:
        store=rules.extract_segments.output.store,
    output:
        partial=run_path("partials", "stats-{shard}.npz"),
    params:
        cmd=bertlook_cmd("surface-stats", attention=IN.store, out_partial=OUT.partial),
    log:
        log_path("surface_stats-{shard}"),
    benchmark:
        bench_path("surface_stats-{shard}")
    threads: 1
    resources:
        **sizing.snakemake_resources("surface_stats_shard", config),
    priority: 10  # before the next extraction shard: frees a temp() store early (keep_maps: false)
    conda:
        ENV_ANALYSIS
    shell:
        CMD


rule surface_stats:
    input:
        partials=every_shard(rules.surface_stats_shard.output.partial),
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

    use rule surface_stats_shard as surface_stats_norm_shard with:
        input:
            store=rules.extract_segments.output.norms,
        output:
            partial=run_path("partials", "stats_norm-{shard}.npz"),
        log:
            log_path("surface_stats_norm-{shard}"),
        benchmark:
            bench_path("surface_stats_norm-{shard}")
        resources:
            **sizing.snakemake_resources("surface_stats_norm_shard", config, kind="surface_stats_shard"),

    use rule surface_stats as surface_stats_norm with:
        input:
            partials=every_shard(rules.surface_stats_norm_shard.output.partial),
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
