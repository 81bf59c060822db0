# Step `gradients`: |d MLM loss / d attention| to [SEP], ". ," and other tokens per layer (paper
# Fig 3). A model without a masked-LM head gets a table and figure that say why it did not run.
# One job per gradient shard (gradients.shards, default extraction.shards; the model runs on its range
# of segments; masks are drawn as in one run) writes sums and counts (partials/gradients-{shard}.npz); `gradients` adds them up.


# gradients.shards: the gradient step writes sums only (no maps), so its job count is its own (null:
# extraction.shards).
GRADIENT_SHARD_LABELS = shard_labels(int(config["gradients"].get("shards") or SHARDS))


use rule _model_step as gradients_shard with:
    input:
        segments=rules.segments.output.segments,
    output:
        partial=run_path("partials", "gradients-{shard}.npz"),
    log:
        log_path("gradients-{shard}"),
    benchmark:
        bench_path("gradients-{shard}")
    params:
        cmd=model_cmd(
            "gradients",
            segments=IN.segments,
            shard=WC.shard,
            out_partial=OUT.partial,
            seed=config["seed"],
            **settings("gradients", "batch_size", "max_examples", "mask_rate", "mask_mode"),
            segment_ids=config["extraction"]["segment_ids"],
            device=config["extraction"]["device"],
        ),


use rule _analysis_step as gradients with:
    input:
        partials=every_shard(rules.gradients_shard.output.partial, GRADIENT_SHARD_LABELS),
    output:
        table=data_table("sep_gradients", "Gradients of attention to [SEP] per layer (CSV)"),
        figure=run_path("figures", "fig3_sep_gradients.png"),
        summary=run_path("tables", "sep_gradients.summary.json"),
        # head importance (Michel et al. 2019) from the same gradients: the report card's `importance`
        importance=run_path("tables", "head_importance.csv"),
    log:
        log_path("gradients"),
    benchmark:
        bench_path("gradients")
    params:
        cmd=bertlook_cmd(
            "gradients",
            partial=IN.partials,
            out_table=OUT.table,
            out_figure=OUT.figure,
            summary=OUT.summary,
            out_importance=OUT.importance,
        ),
