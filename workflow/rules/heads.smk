# Step `heads`: every head scored as a dependency classifier per relation (paper Table 1, Fig 5).
# {maps}: "" on the attention maps, "_norm" on the norm-based word maps (norms.enabled): the same scoring,
# the paper's numbers joined for orientation only (the paper scored attention maps: never judged against them).


include: "functions/heads.smk"


use rule _analysis_step as heads with:
    input:
        unpack(heads_inputs),
    output:
        accuracy=maps_table("head_accuracy", "Accuracy of every head per relation{maps} (CSV)"),
        table=maps_table("table1", "Table 1 twin{maps} (CSV)"),
        markdown=run_path("tables", "table1{maps}.md"),
        figure=run_path("figures", "fig5_syntax_heads{maps}.png"),
        summary=run_path("tables", "head_accuracy{maps}.summary.json"),
    log:
        log_path("heads{maps}"),
    benchmark:
        bench_path("heads{maps}")
    priority: 10  # as soon as the word stores exist: frees them (keep_maps: false; extract_words.smk)
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
            **head_scoring(),
            **settings("heads", "alpha", "exclude_punct_candidates"),
            seed=config["seed"],
            treebank_kind=TREEBANK_KIND_ARG,
            treebank_name=TREEBANK_NAME_ARG,
            # the paper's comparability: its model on its trees, and attention maps
            paper_comparable=lambda wildcards, input, output: (
                not wildcards.maps and paper_comparable(wildcards, input, output)
            ),
        ),
