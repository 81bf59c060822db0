# Step `heads`: every head scored as a dependency classifier per relation (paper Table 1, Fig 5).


rule heads:
    input:
        unpack(heads_inputs),
    output:
        accuracy=report(
            run_path("tables", "head_accuracy.csv"),
            caption="../report/head_accuracy.rst",
            category="Data files (CSV)",
            subcategory="{run}",
            labels={"result": "Accuracy of every head per relation (CSV)"},
        ),
        table=report(
            run_path("tables", "table1.csv"),
            caption="../report/table1.rst",
            category="Data files (CSV)",
            subcategory="{run}",
            labels={"result": "Table 1 twin (CSV)"},
        ),
        markdown=run_path("tables", "table1.md"),
        figure=run_path("figures", "fig5_syntax_heads.png"),
        summary=run_path("tables", "head_accuracy.summary.json"),
    params:
        cmd=bertlook_cmd(
            "heads",
            dev_attention=IN.dev,
            train_attention=lambda wildcards, input, output: input.get("train"),
            out_accuracy=OUT.accuracy,
            out_table=OUT.table,
            out_markdown=OUT.markdown,
            out_figure=OUT.figure,
            summary=OUT.summary,
            min_count=config["heads"]["min_count"],
            offsets=",".join(str(k) for k in config["heads"]["offsets"]),
            poss_from_possessive=config["heads"]["poss_from_possessive"],
            no_poss_from_possessive=not config["heads"]["poss_from_possessive"],
            bootstrap=config["heads"]["bootstrap"],
            alpha=config["heads"]["alpha"],
            exclude_punct_candidates=config["heads"]["exclude_punct_candidates"],
            seed=config["seed"],
            treebank_kind=TREEBANK_KIND_ARG,
            treebank_name=TREEBANK_NAME_ARG,
            paper_comparable=paper_comparable,
        ),
    log:
        log_path("heads"),
    benchmark:
        bench_path("heads")
    priority: 10  # as soon as the word stores exist: frees them (keep_maps: false; extract_words.smk)
    threads: 1
    resources:
        **sizing.snakemake_resources("heads", config),
    conda:
        ENV_ANALYSIS
    shell:
        CMD


# Table 1 on the norm-based word maps (norms.enabled): the same scoring, paper numbers joined for
# orientation (the paper scored attention maps: never judged against them).
if RUN_NORMS:

    use rule heads as heads_norm with:
        input:
            unpack(norm_heads_inputs),
        output:
            accuracy=run_path("tables", "head_accuracy_norm.csv"),
            table=report(
                run_path("tables", "table1_norm.csv"),
                caption="../report/table1_norm.rst",
                category="Data files (CSV)",
                subcategory="{run}",
                labels={"result": "Table 1 on the norm-based maps (CSV)"},
            ),
            markdown=run_path("tables", "table1_norm.md"),
            figure=run_path("figures", "fig5_syntax_heads_norm.png"),
            summary=run_path("tables", "head_accuracy_norm.summary.json"),
        params:
            cmd=bertlook_cmd(
                "heads",
                dev_attention=IN.dev,
                train_attention=lambda wildcards, input, output: input.get("train"),
                out_accuracy=OUT.accuracy,
                out_table=OUT.table,
                out_markdown=OUT.markdown,
                out_figure=OUT.figure,
                summary=OUT.summary,
                min_count=config["heads"]["min_count"],
                offsets=",".join(str(k) for k in config["heads"]["offsets"]),
                poss_from_possessive=config["heads"]["poss_from_possessive"],
                no_poss_from_possessive=not config["heads"]["poss_from_possessive"],
                bootstrap=config["heads"]["bootstrap"],
                alpha=config["heads"]["alpha"],
                exclude_punct_candidates=config["heads"]["exclude_punct_candidates"],
                seed=config["seed"],
                treebank_kind=TREEBANK_KIND_ARG,
                treebank_name=TREEBANK_NAME_ARG,
            ),
        log:
            log_path("heads_norm"),
        benchmark:
            bench_path("heads_norm")
        resources:
            **sizing.snakemake_resources("heads_norm", config, kind="heads"),
