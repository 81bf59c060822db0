# Stage `coref`: coreference antecedent selection per head (paper Table 2). The CoNLL-2012 corpus is
# LDC licensed: with no files configured the stage writes tables that say "not run" (never fails).

if COREF_FILES:

    rule coref_extract:
        input:
            COREF_FILES,
        output:
            store=directory(run_path("attention", "coref")),
            summary=run_path("attention", "coref.summary.json"),
        params:
            bertlook=BERTLOOK,
            model=model_args,
            conll=lambda wildcards, input: " ".join(f"--conll {shlex.quote(p)}" for p in input),
            max_seq_len=config["segments"]["max_seq_len"],
            from_split=config["word_attention"]["from_split"],
            head_rule=config["coref"]["head_rule"],
            batch_size=config["extraction"]["batch_size"],
            device=config["extraction"]["device"],
        log:
            log_path("coref_extract"),
        threads: 8
        resources:
            mem_mb=16000,
            runtime=240,
        conda:
            ENV_TORCH
        shell:
            "OMP_NUM_THREADS={threads} {params.bertlook} coref-extract {params.conll} {params.model} "
            "--out {output.store:q} --max-seq-len {params.max_seq_len} --from-split {params.from_split} "
            "--head-rule {params.head_rule} --batch-size {params.batch_size} --device {params.device} "
            "--summary {output.summary:q} > {log:q} 2>&1"


rule coref:
    input:
        store=[run_path("attention", "coref")] if COREF_FILES else [],
    output:
        table=report(
            run_path("tables", "table2.csv"),
            caption="../report/table2.rst",
            category="Tables",
            labels={"run": "{run}", "table": "Table 2"},
        ),
        markdown=run_path("tables", "table2.md"),
        heads=run_path("tables", "coref_heads.csv"),
        summary=run_path("tables", "table2.summary.json"),
    params:
        bertlook=BERTLOOK,
        source=lambda wildcards, input: (
            f"--attention {shlex.quote(input.store[0])} --candidates {config['coref']['candidates']}"
            if COREF_FILES
            else "--not-run 'no coreference corpus configured (set coref.conll to CoNLL-2012 files)'"
        ),
    log:
        log_path("coref"),
    threads: 1
    resources:
        mem_mb=4000,
        runtime=30,
    conda:
        ENV_ANALYSIS
    shell:
        "{params.bertlook} coref {params.source} --out-table {output.table:q} "
        "--out-markdown {output.markdown:q} --out-heads {output.heads:q} "
        "--summary {output.summary:q} > {log:q} 2>&1"
