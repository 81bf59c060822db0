# Stage `extract`: attention maps [layers, heads, n, n] (float16, sharded) for every segment.
# On SLURM (profiles/slurm) this rule asks for a GPU.


rule extract_segments:
    input:
        segments=rules.segments.output.segments,
    output:
        store=directory(run_path("attention", "segments")),
        summary=run_path("attention", "segments.summary.json"),
    params:
        bertlook=BERTLOOK,
        model=model_args,
        batch_size=config["extraction"]["batch_size"],
        segment_ids=config["extraction"]["segment_ids"],
        max_seq_len=config["segments"]["max_seq_len"],
        device=config["extraction"]["device"],
        shard_mb=config["extraction"]["shard_mb"],
    log:
        log_path("extract_segments"),
    threads: 8
    resources:
        mem_mb=16000,
        runtime=240,
    conda:
        ENV_TORCH
    shell:
        "OMP_NUM_THREADS={threads} {params.bertlook} extract --segments {input.segments:q} {params.model} "
        "--out {output.store:q} --batch-size {params.batch_size} --segment-ids {params.segment_ids} "
        "--max-seq-len {params.max_seq_len} --device {params.device} --shard-mb {params.shard_mb} "
        "--summary {output.summary:q} > {log:q} 2>&1"
