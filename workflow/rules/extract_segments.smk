# Step `extract-segments`: attention maps [layers, heads, n, n] (float16, sharded) for every segment.
# extraction.shards = K: K jobs, shard {shard} = the i-th of K contiguous ranges of segments.jsonl;
# extraction.keep_maps: false makes each shard's store temp() (deleted once its consumers ran).
# On SLURM (profiles/slurm) extract_segments asks for a GPU.


rule extract_segments:
    input:
        segments=rules.segments.output.segments,
    output:
        store=segment_maps(directory(run_path("attention", "segments-{shard}"))),
        summary=run_path("attention", "segments-{shard}.summary.json"),
        # norm-based maps (norms.enabled), written in the same forward pass
        **({"norms": segment_maps(directory(run_path("attention", "norms-{shard}")))} if RUN_NORMS else {}),
    params:
        cmd=bertlook_cmd(
            "extract-segments",
            model_flags,
            omp_threads=True,
            segments=IN.segments,
            out=OUT.store,
            batch_size=config["extraction"]["batch_size"],
            segment_ids=config["extraction"]["segment_ids"],
            max_seq_len=config["segments"]["max_seq_len"],
            device=config["extraction"]["device"],
            shard_mb=config["extraction"]["shard_mb"],
            max_unk_rate=config["extraction"]["max_unk_rate"],
            shard=WC.shard,
            summary=OUT.summary,
            norms_out=OUT.norms if RUN_NORMS else None,
        ),
    log:
        log_path("extract_segments-{shard}"),
    benchmark:
        bench_path("extract_segments-{shard}")
    threads: 8
    resources:
        **sizing.snakemake_resources("extract_segments", config),
    conda:
        ENV_TORCH
    shell:
        CMD


# The shards' summaries -> the summary and store meta.json of the whole extraction (no maps read:
# the manifest takes the model provenance from segments.meta.json).
rule gather_extraction:
    input:
        summaries=every_shard(rules.extract_segments.output.summary),
    output:
        summary=run_path("attention", "segments.summary.json"),
        meta=run_path("attention", "segments.meta.json"),
    params:
        cmd=bertlook_cmd("gather-extraction", part_summary=IN.summaries, summary=OUT.summary, meta=OUT.meta),
    log:
        log_path("gather_extraction"),
    benchmark:
        bench_path("gather_extraction")
    threads: 1
    resources:
        **sizing.snakemake_resources("gather_extraction", config),
    conda:
        ENV_ANALYSIS
    shell:
        CMD
