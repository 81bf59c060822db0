# Step `heads`: every head scored as a dependency classifier per relation (paper Table 1, Fig 5).
# {maps}: "" on the attention maps, "_norm" on the norm-based word maps (norms.enabled): the same scoring,
# the paper's numbers joined for orientation only (the paper scored attention maps: never judged against them).


rule heads:
    input:
        unpack(heads_inputs),
    output:
        accuracy=data_file(
            run_path("tables", "head_accuracy{maps}.csv"),
            "maps_data_file.rst",
            maps_label("Accuracy of every head per relation{maps} (CSV)"),
        ),
        table=data_file(
            run_path("tables", "table1{maps}.csv"), "maps_data_file.rst", maps_label("Table 1 twin{maps} (CSV)")
        ),
        markdown=run_path("tables", "table1{maps}.md"),
        figure=run_path("figures", "fig5_syntax_heads{maps}.png"),
        summary=run_path("tables", "head_accuracy{maps}.summary.json"),
    log:
        log_path("heads{maps}"),
    benchmark:
        bench_path("heads{maps}")
    priority: 10  # as soon as the word stores exist: frees them (keep_maps: false; extract_words.smk)
    conda:
        ENV_ANALYSIS
    threads: 1
    resources:
        **step_resources("heads"),
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
            # the paper's comparability: its model on its trees, and attention maps
            paper_comparable=lambda wildcards, input, output: (
                not wildcards.maps and paper_comparable(wildcards, input, output)
            ),
        ),
    shell:
        CMD
