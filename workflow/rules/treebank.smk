# Step `treebank`: dependency trees (silver spaCy parses, a UD release, or local PTB-SD / UD files)
# normalised to CoNLL-U train/dev splits under results/{run}/treebank/. One job per run: the model runs
# on the main `treebank`, the syntax runs on their `treebanks` entry (TREEBANK_OF, common.smk).


include: "functions/treebank.smk"


use rule _torch_step as treebank with:
    input:
        unpack(treebank_inputs),
    output:
        train=run_path("treebank", "train.conllu"),
        dev=run_path("treebank", "dev.conllu"),
        summary=run_path("treebank", "treebank.summary.json"),
    log:
        log_path("treebank"),
    benchmark:
        bench_path("treebank")
    wildcard_constraints:
        run=runs_pattern(BUILT_TREEBANK_RUNS),
    priority: 5  # first when ready: it starts the longest chain, one core (faithfulness beside it)
    retries: 1
    params:
        cmd=bertlook_cmd("treebank", treebank_flags, out_train=OUT.train, out_dev=OUT.dev, summary=OUT.summary),


# A UD release is downloaded: on the login node, not as a cluster job (compute nodes are often offline).
if UD_TREEBANK_RUNS:

    use rule treebank as treebank_ud with:
        log:
            log_path("treebank_ud"),
        benchmark:
            bench_path("treebank_ud")
        wildcard_constraints:
            run=runs_pattern(UD_TREEBANK_RUNS),
        localrule: True
