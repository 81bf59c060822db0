# Step `coref`: coreference antecedent selection per head (paper Table 2). The CoNLL-2012 corpus is
# LDC licensed: with no files configured the stage writes tables that say "not run" (never fails).


include: "functions/coref.smk"


if COREF_FILES:

    use rule _model_step as coref_extract with:
        input:
            coref_input_files,
        output:
            store=word_maps(directory(run_path("attention", "coref"))),  # temp() without extraction.keep_maps
            summary=run_path("attention", "coref.summary.json"),
        log:
            log_path("coref_extract"),
        benchmark:
            bench_path("coref_extract")
        params:
            cmd=model_cmd(
                "coref-extract",
                conll=lambda wildcards, input, output: list(input),
                out=OUT.store,
                max_seq_len=config["segments"]["max_seq_len"],
                from_split=config["word_attention"]["from_split"],
                head_rule=config["coref"]["head_rule"],
                batch_size=config["extraction"]["batch_size"],
                device=config["extraction"]["device"],
                **settings("extraction", "model_dtype", "max_unk_rate"),
                summary=OUT.summary,
            ),


use rule _analysis_step as coref with:
    input:
        store=[run_path("attention", "coref")] if COREF_FILES else [],
    output:
        **table_outputs("table2", "Table 2 twin (CSV)"),
        heads=run_path("tables", "coref_heads.csv"),
    log:
        log_path("coref"),
    benchmark:
        bench_path("coref")
    params:
        cmd=bertlook_cmd(
            "coref",
            coref_flags,
            out_table=OUT.table,
            out_markdown=OUT.markdown,
            out_heads=OUT.heads,
            summary=OUT.summary,
        ),
