# Step `gradients`: |d MLM loss / d attention| to [SEP], ". ," and other tokens per layer (paper
# Fig 3). A model without a masked-LM head gets a table and figure that say why it did not run.
# One job per gradient shard (gradients.shards, default extraction.shards; the model runs on its range
# of segments; masks are drawn as in one run) writes sums and counts (partials/gradients-{shard}.npz); `gradients` adds them up.


rule gradients_shard:
    input:
        segments=rules.segments.output.segments,
    output:
        partial=run_path("partials", "gradients-{shard}.npz"),
    log:
        log_path("gradients-{shard}"),
    benchmark:
        bench_path("gradients-{shard}")
    conda:
        ENV_TORCH
    threads: 8
    resources:
        **step_resources("gradients_shard"),
    params:
        cmd=bertlook_cmd(
            "gradients",
            model_flags,
            omp_threads=True,
            segments=IN.segments,
            shard=WC.shard,
            out_partial=OUT.partial,
            seed=config["seed"],
            batch_size=config["gradients"]["batch_size"],
            max_examples=config["gradients"].get("max_examples"),
            mask_rate=config["gradients"]["mask_rate"],
            mask_mode=config["gradients"]["mask_mode"],
            segment_ids=config["extraction"]["segment_ids"],
            device=config["extraction"]["device"],
        ),
    shell:
        CMD


rule gradients:
    input:
        partials=every_shard(rules.gradients_shard.output.partial, GRADIENT_SHARD_LABELS),
    output:
        table=data_file(
            run_path("tables", "sep_gradients.csv"),
            "sep_gradients.rst",
            "Gradients of attention to [SEP] per layer (CSV)",
        ),
        figure=run_path("figures", "fig3_sep_gradients.png"),
        summary=run_path("tables", "sep_gradients.summary.json"),
        # head importance (Michel et al. 2019) from the same gradients: the report card's `importance`
        importance=run_path("tables", "head_importance.csv"),
    log:
        log_path("gradients"),
    benchmark:
        bench_path("gradients")
    conda:
        ENV_ANALYSIS
    threads: 1
    resources:
        **step_resources("gradients"),
    params:
        cmd=bertlook_cmd(
            "gradients",
            partial=IN.partials,
            out_table=OUT.table,
            out_figure=OUT.figure,
            summary=OUT.summary,
            out_importance=OUT.importance,
        ),
    shell:
        CMD
