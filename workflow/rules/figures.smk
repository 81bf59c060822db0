# Step `figures`: PNG twins of the paper's Figs 1, 2, 4 and 6 (the report shows page-sized copies).
# Fig 1's example (figures.example_index, in the unsharded store's order) is saved by the extraction
# shard that holds it (partials/fig1-{shard}.npz), so the figures need no maps.


rule fig1_example_shard:
    input:
        store=rules.extract_segments.output.store,
        segments=rules.segments.output.segments,
    output:
        example=run_path("partials", "fig1-{shard}.npz"),
    params:
        cmd=bertlook_cmd(
            "fig1-example",
            attention=IN.store,
            segments=IN.segments,
            example_index=config["figures"]["example_index"],
            out=OUT.example,
        ),
    log:
        log_path("fig1_example-{shard}"),
    benchmark:
        bench_path("fig1_example-{shard}")
    threads: 1
    resources:
        **sizing.snakemake_resources("fig1_example_shard", config),
    priority: 10  # before the next extraction shard: frees a temp() store early (keep_maps: false)
    conda:
        ENV_ANALYSIS
    shell:
        CMD


rule figures:
    input:
        examples=every_shard(rules.fig1_example_shard.output.example),
        stats=rules.surface_stats.output.table,
        stats_summary=rules.surface_stats.output.summary,
        clusters=rules.cluster_heads.output.clusters,
        # norms.enabled: the norm-based statistics and the extraction summaries (their ||f(x)|| sums)
        **({"norm_stats": run_path("tables", "attention_stats_norm.csv"),
            "norm_summaries": every_shard(rules.extract_segments.output.summary)} if RUN_NORMS else {}),
    output:
        # the report shows page-sized copies of them (report_pages.smk), not these full-resolution PNGs
        **{name.removesuffix(".png"): run_path("figures", name) for name in FIGURES},
        **({"fig_norms": run_path("figures", "fig_norms.png")} if RUN_NORMS else {}),
    params:
        cmd=bertlook_cmd(
            "figures",
            example=IN.examples,
            stats=IN.stats,
            stats_summary=IN.stats_summary,
            clusters=IN.clusters,
            out_dir=lambda wildcards, input, output: os.path.dirname(output[0]),
            example_heads=example_heads_arg(),
            example_index=config["figures"]["example_index"],
            **({"norm_stats": IN.norm_stats, "norm_summaries": IN.norm_summaries,
                "out_fig_norms": OUT.fig_norms} if RUN_NORMS else {}),
        ),
    log:
        log_path("figures"),
    benchmark:
        bench_path("figures")
    threads: 1
    resources:
        **sizing.snakemake_resources("figures", config),
    conda:
        ENV_ANALYSIS
    shell:
        CMD
