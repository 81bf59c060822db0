# Step `figures`: PNG twins of the paper's Figs 1, 2, 4 and 6 (the report shows page-sized copies).
# Fig 1's example (figures.example_index, in the unsharded store's order) is saved by the extraction
# shard that holds it (extract_segments: partials/fig1-{shard}.npz), so the figures need no maps.


include: "functions/figures.smk"


use rule _analysis_step as figures with:
    input:
        **(
            {
                "norm_stats": run_path("tables", "attention_stats_norm.csv"),
                "norm_summaries": every_shard(rules.extract_segments.output.summary),
            }
            if RUN_NORMS
            else {}
        ),
        examples=every_shard(rules.extract_segments.output.example),
        stats=run_path("tables", "attention_stats.csv"),
        stats_summary=run_path("tables", "attention_stats.summary.json"),
        clusters=run_path("tables", "head_clusters.csv"),
        # norms.enabled: the norm-based statistics and the extraction summaries (their ||f(x)|| sums)
    output:
        # the report shows page-sized copies of them (report_pages.smk), not these full-resolution PNGs
        **{name.removesuffix(".png"): run_path("figures", name) for name in FIGURES},
        **({"fig_norms": run_path("figures", "fig_norms.png")} if RUN_NORMS else {}),
    log:
        log_path("figures"),
    benchmark:
        bench_path("figures")
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
            **(
                {"norm_stats": IN.norm_stats, "norm_summaries": IN.norm_summaries, "out_fig_norms": OUT.fig_norms}
                if RUN_NORMS
                else {}
            ),
        ),
