# Stage `extract`: attention maps [layers, heads, n, n] (float16, sharded) for every segment.
# On SLURM (profiles/slurm) this rule asks for a GPU.


rule extract_segments:
    input:
        segments=rules.segments.output.segments,
    output:
        store=directory(run_path("attention", "segments")),
        summary=run_path("attention", "segments.summary.json"),
    params:
        cmd=bertlook_cmd(
            "extract",
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
            summary=OUT.summary,
        ),
    log:
        log_path("extract_segments"),
    benchmark:
        bench_path("extract_segments")
    threads: 8
    resources:
        mem_mb=16000,
        runtime=240,
    conda:
        ENV_TORCH
    shell:
        CMD
