# Stage `heads`: every head scored as a dependency classifier per relation (paper Table 1, Fig 5).


rule heads:
    input:
        unpack(heads_inputs),
    output:
        accuracy=report(
            run_path("tables", "head_accuracy.csv"),
            caption="../report/head_accuracy.rst",
            category="Tables",
            labels={"run": "{run}", "table": "head_accuracy"},
        ),
        table=report(
            run_path("tables", "table1.csv"),
            caption="../report/table1.rst",
            category="Tables",
            labels={"run": "{run}", "table": "Table 1"},
        ),
        markdown=run_path("tables", "table1.md"),
        figure=report(
            run_path("figures", "fig5_syntax_heads.png"),
            caption="../report/fig5_syntax_heads.rst",
            category="Figures",
            labels={"run": "{run}", "figure": "Fig 5: syntax heads"},
        ),
        summary=run_path("tables", "head_accuracy.summary.json"),
    params:
        bertlook=BERTLOOK,
        train=lambda wildcards, input: (
            f"--train-attention {shlex.quote(input.train)}" if "train" in input.keys() else ""
        ),
        min_count=config["heads"]["min_count"],
        offsets=",".join(str(k) for k in config["heads"]["offsets"]),
        poss=(
            "--poss-from-possessive"
            if config["heads"]["poss_from_possessive"]
            else "--no-poss-from-possessive"
        ),
        bootstrap=config["heads"]["bootstrap"],
        seed=config["seed"],
        kind=TREEBANK_KIND,
        name=TREEBANK_NAME,
        comparable=paper_comparable_flag,
    log:
        log_path("heads"),
    threads: 1
    resources:
        mem_mb=8000,
        runtime=60,
    conda:
        ENV_ANALYSIS
    shell:
        "{params.bertlook} heads --dev-attention {input.dev:q} {params.train} "
        "--out-accuracy {output.accuracy:q} --out-table {output.table:q} "
        "--out-markdown {output.markdown:q} --out-figure {output.figure:q} --summary {output.summary:q} "
        "--min-count {params.min_count} --offsets={params.offsets} {params.poss} "
        "--bootstrap {params.bootstrap} --seed {params.seed} --treebank-kind {params.kind} "
        "--treebank-name {params.name:q} {params.comparable} > {log:q} 2>&1"
