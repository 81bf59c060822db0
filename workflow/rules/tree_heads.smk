# Step `tree-heads` (beyond the paper; Htut et al. 2019): a whole dependency tree decoded from every single
# head's dev word maps (Chu-Liu-Edmonds with the gold root: UAS; undirected maximum spanning tree: UUAS),
# against right-branching and the adjacent chain; the best heads per layer in a table and a figure.


TREE_HEADS_NOTE = lambda wildcards, input, output: (
    f"Model {MODELS[wildcards.run]['name_or_path']}; trees: {treebank_name(wildcards.run)}."
)


use rule _analysis_step as tree_heads with:
    input:
        dev=run_path("attention", "words-dev"),
    output:
        **table_outputs("tree_heads", "Single-head trees, every head (CSV)"),
        best=data_table("tree_heads_best", "Single-head trees, best head per layer (CSV)"),
        # the report shows a page-sized copy (report_pages.smk), not this full-resolution PNG
        figure=run_path("figures", "fig_tree_heads.png"),
    log:
        log_path("tree_heads"),
    benchmark:
        bench_path("tree_heads")
    priority: 10  # beside heads: the dev word store is freed once its readers ran (keep_maps: false)
    params:
        cmd=bertlook_cmd(
            "tree-heads",
            dev_attention=IN.dev,
            max_sentences=config["tree_heads"]["max_sentences"],
            out_table=OUT.table,
            out_best=OUT.best,
            out_markdown=OUT.markdown,
            out_figure=OUT.figure,
            summary=OUT.summary,
            note=TREE_HEADS_NOTE,
        ),
