# Stage `treebank`: dependency trees (silver spaCy parses, a UD release, or local PTB-SD / UD files)
# normalised to CoNLL-U train/dev splits under results/{run}/treebank/.


rule treebank:
    input:
        unpack(treebank_inputs),
    output:
        train=run_path("treebank", "train.conllu"),
        dev=run_path("treebank", "dev.conllu"),
        summary=run_path("treebank", "treebank.summary.json"),
    params:
        bertlook=BERTLOOK,
        source_args=treebank_source_args,
    log:
        log_path("treebank"),
    threads: 1
    resources:
        mem_mb=4000,
        runtime=60,
    retries: 1
    conda:
        ENV_TORCH
    shell:
        "{params.bertlook} treebank {params.source_args} --out-train {output.train:q} "
        "--out-dev {output.dev:q} --summary {output.summary:q} > {log:q} 2>&1"
