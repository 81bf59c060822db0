# Step `treebank`: dependency trees (silver spaCy parses, a UD release, or local PTB-SD / UD files)
# normalised to CoNLL-U train/dev splits under results/{run}/treebank/.


rule treebank:
    localrule: TREEBANK["source"] == "ud"  # ud downloads the treebank: login node, not a cluster job
    input:
        unpack(treebank_inputs),
    output:
        train=run_path("treebank", "train.conllu"),
        dev=run_path("treebank", "dev.conllu"),
        summary=run_path("treebank", "treebank.summary.json"),
    params:
        cmd=bertlook_cmd(
            "treebank", treebank_flags, out_train=OUT.train, out_dev=OUT.dev, summary=OUT.summary
        ),
    log:
        log_path("treebank"),
    benchmark:
        bench_path("treebank")
    threads: 1
    resources:
        **sizing.snakemake_resources("treebank", config),
    retries: 1
    conda:
        ENV_TORCH
    shell:
        CMD
