# Stage `figures`: PNG twins of the paper's Figs 1, 2, 4 and 6, registered in the report.


rule figures:
    input:
        store=rules.extract_segments.output.store,
        stats=rules.surface_stats.output.table,
        stats_summary=rules.surface_stats.output.summary,
        clusters=rules.cluster_heads.output.clusters,
    output:
        **{
            name.removesuffix(".png"): report(
                run_path("figures", name),
                caption=f"../report/{caption}",
                category="Figures",
                labels={"run": "{run}", "figure": label},
            )
            for name, (label, caption) in FIGURE_REPORT.items()
        },
    params:
        cmd=bertlook_cmd(
            "figures",
            attention=IN.store,
            stats=IN.stats,
            stats_summary=IN.stats_summary,
            clusters=IN.clusters,
            out_dir=lambda wildcards, input, output: os.path.dirname(output[0]),
            example_heads=example_heads_arg(),
            example_index=config["figures"]["example_index"],
        ),
    log:
        log_path("figures"),
    benchmark:
        bench_path("figures")
    threads: 1
    resources:
        mem_mb=4000,
        runtime=30,
    conda:
        ENV_ANALYSIS
    shell:
        CMD
