# Step `rollout` (beyond the paper; Abnar & Zuidema 2020): attention rollout, no model run of its own.
# extract_segments computes its sums and counts per extraction shard from the maps in memory
# (partials/rollout-{shard}.npz), reduced once by rollout (tables/rollout_stats.csv,
# figures/fig_rollout.png); rollout_words: Table 1 on the rollout maps of the dev word store ("head" L-1 =
# the rollout up to layer L).


use rule _analysis_step as rollout with:
    input:
        partials=every_shard(run_path("partials", "rollout-{shard}.npz")),  # extract_segments, rollout.enabled
    output:
        table=data_table("rollout_stats", "Rollout statistics per layer (CSV)"),
        figure=run_path("figures", "fig_rollout.png"),
        summary=run_path("tables", "rollout_stats.summary.json"),
    log:
        log_path("rollout"),
    benchmark:
        bench_path("rollout")
    params:
        cmd=bertlook_cmd("rollout", partial=IN.partials, out=OUT.table, out_figure=OUT.figure, summary=OUT.summary),


use rule _analysis_step as rollout_words with:
    input:
        dev=run_path("attention", "words-dev"),
    output:
        **table_outputs("table1_rollout", "Table 1 on the rollout maps (CSV)"),
        accuracy=run_path("tables", "rollout_accuracy.csv"),
    log:
        log_path("rollout_words"),
    benchmark:
        bench_path("rollout_words")
    priority: 10  # beside heads: the dev word store is freed once its readers ran (keep_maps: false)
    params:
        cmd=bertlook_cmd(
            "rollout",
            word_attention=IN.dev,
            out_table=OUT.table,
            out_markdown=OUT.markdown,
            out_accuracy=OUT.accuracy,
            summary=OUT.summary,
            **head_scoring(),
            seed=config["seed"],
            treebank_kind=TREEBANK_KIND_ARG,
            treebank_name=TREEBANK_NAME_ARG,
        ),
