# Step `extract-segments`: the one pass over the segment maps. The model runs once per shard and every batch
# of maps goes, in memory, to the statistics of the segments: the partial sums of the surface statistics
# (Figs 2, 4), of the JS divergences (Fig 6), of the rollout statistics, the norm-based twins of the first
# two (norms.enabled), and the Fig 1 example (partials/*-{shard}.npz, reduced by surface_stats,
# cluster_heads, rollout and figures). The maps themselves [layer, head, n, n] (float16) are written to
# attention stores only with extraction.keep_maps (attention/segments-{shard}, attention/norms-{shard}).
# extraction.shards = K: K jobs, shard {shard} = the i-th of K contiguous ranges of segments.jsonl.
# On SLURM (profiles/slurm) extract_segments asks for a GPU.


include: "functions/extract_segments.smk"


use rule _model_step as extract_segments with:
    input:
        segments=rules.segments.output.segments,
    output:
        **segment_pass_outputs(),
        summary=run_path("attention", "segments-{shard}.summary.json"),
        stats=run_path("partials", "stats-{shard}.npz"),
        js=run_path("partials", "js-{shard}.npz"),
        example=run_path("partials", "fig1-{shard}.npz"),
    log:
        log_path("extract_segments-{shard}"),
    benchmark:
        bench_path("extract_segments-{shard}")
    params:
        cmd=model_cmd(
            "extract-segments",
            segments=IN.segments,
            **settings("extraction", "batch_size", "segment_ids"),
            max_seq_len=config["segments"]["max_seq_len"],
            device=config["extraction"]["device"],
            **settings("extraction", "model_dtype", "shard_mb", "max_unk_rate"),
            shard=WC.shard,
            summary=OUT.summary,
            stats_partial=OUT.stats,
            js_partial=OUT.js,
            js_max_examples=config["clustering"]["max_examples"],
            js_rows=config["clustering"].get("js_rows"),
            js_seed=config["seed"] if config["clustering"].get("js_rows") else None,
            fig1_example=OUT.example,
            example_index=config["figures"]["example_index"],
            **segment_pass_flags(),
        ),


# The shards' summaries -> the summary and store meta.json of the whole extraction (no maps read:
# the manifest takes the model provenance from segments.meta.json).
use rule _analysis_step as gather_extraction with:
    input:
        summaries=every_shard(rules.extract_segments.output.summary),
    output:
        summary=run_path("attention", "segments.summary.json"),
        meta=run_path("attention", "segments.meta.json"),
    log:
        log_path("gather_extraction"),
    benchmark:
        bench_path("gather_extraction")
    params:
        cmd=bertlook_cmd("gather-extraction", part_summary=IN.summaries, summary=OUT.summary, meta=OUT.meta),
