# Step `rollout` (beyond the paper; Abnar & Zuidema 2020): attention rollout, no model run of its own.
# extract_segments computes its sums and counts per extraction shard from the maps in memory
# (partials/rollout-{shard}.npz), reduced once by rollout (tables/rollout_stats.csv,
# figures/fig_rollout.png); rollout_words: Table 1 on the rollout maps of the dev word store ("head" L-1 =
# the rollout up to layer L).


rule rollout:
    input:
        partials=every_shard(run_path("partials", "rollout-{shard}.npz")),  # extract_segments, rollout.enabled
    output:
        table=data_file(
            run_path("tables", "rollout_stats.csv"),
            "rollout_stats.rst",
            "Rollout statistics per layer (CSV)",
        ),
        figure=run_path("figures", "fig_rollout.png"),
        summary=run_path("tables", "rollout_stats.summary.json"),
    log:
        log_path("rollout"),
    benchmark:
        bench_path("rollout")
    conda:
        ENV_ANALYSIS
    threads: 1
    resources:
        **step_resources("rollout"),
    params:
        cmd=bertlook_cmd("rollout", partial=IN.partials, out=OUT.table, out_figure=OUT.figure, summary=OUT.summary),
    shell:
        CMD


rule rollout_words:
    input:
        dev=run_path("attention", "words-dev"),
    output:
        table=data_file(
            run_path("tables", "table1_rollout.csv"),
            "table1_rollout.rst",
            "Table 1 on the rollout maps (CSV)",
        ),
        markdown=run_path("tables", "table1_rollout.md"),
        accuracy=run_path("tables", "rollout_accuracy.csv"),
        summary=run_path("tables", "table1_rollout.summary.json"),
    log:
        log_path("rollout_words"),
    benchmark:
        bench_path("rollout_words")
    priority: 10  # beside heads: the dev word store is freed once its readers ran (keep_maps: false)
    conda:
        ENV_ANALYSIS
    threads: 1
    resources:
        **step_resources("rollout_words"),
    params:
        cmd=bertlook_cmd(
            "rollout",
            word_attention=IN.dev,
            out_table=OUT.table,
            out_markdown=OUT.markdown,
            out_accuracy=OUT.accuracy,
            summary=OUT.summary,
            min_count=config["heads"]["min_count"],
            offsets=",".join(str(k) for k in config["heads"]["offsets"]),
            poss_from_possessive=config["heads"]["poss_from_possessive"],
            no_poss_from_possessive=not config["heads"]["poss_from_possessive"],
            bootstrap=config["heads"]["bootstrap"],
            seed=config["seed"],
            treebank_kind=TREEBANK_KIND_ARG,
            treebank_name=TREEBANK_NAME_ARG,
        ),
    shell:
        CMD
