# Step `contributions` (beyond the paper; Ferrando et al. 2022, Mohebbi et al. 2023): ALTI, ALTI per head, ALTI
# over layers and value zeroing beside the attention weights, the norm-based maps and rollout, through the surface
# statistics (contribution_stats.csv, contribution_heads.csv, fig_contributions.png) and Table 1 per map kind
# (table1_contributions.*). A step of its own that runs the model on seeded samples (contributions.segments
# segments, contributions.sentences dev sentences, the run's seed), not a reader inside the extraction stream:
# value zeroing costs n extra layer passes per layer and example. Switched by contributions.enabled. One example
# per forward pass (the CLI's default batch size): ALTI's distance tensors grow with the batch (MiniLM: 0.85 GB
# peak one at a time, 1.6 GB in batches of 8) and the CPU is no faster batched.


use rule _model_step as contributions with:
    input:
        segments=rules.segments.output.segments,
        treebank=run_path("treebank", "dev.conllu"),
    output:
        stats=data_table("contribution_stats", "ALTI and value zeroing: shares and entropy per layer (CSV)"),
        heads=run_path("tables", "contribution_heads.csv"),
        table=run_path("tables", "table1_contributions.csv"),
        markdown=run_path("tables", "table1_contributions.md"),
        summary=run_path("tables", "contribution_stats.summary.json"),
        explorer=run_path("partials", "contribution_explorer.npz"),
    log:
        log_path("contributions"),
    benchmark:
        bench_path("contributions")
    params:
        cmd=model_cmd(
            "contributions",
            segments=IN.segments,
            treebank=IN.treebank,
            out_stats=OUT.stats,
            out_heads=OUT.heads,
            out_table=OUT.table,
            out_markdown=OUT.markdown,
            summary=OUT.summary,
            out_explorer=OUT.explorer,
            n_segments=config["contributions"]["segments"],
            n_sentences=config["contributions"]["sentences"],
            value_zeroing_segments=config["contributions"]["value_zeroing_segments"],
            seed=config["seed"],
            device=config["extraction"]["device"],
            from_split=config["word_attention"]["from_split"],
            text=WORD_TEXT_ARG,
            **head_scoring(),
            treebank_kind=TREEBANK_KIND_ARG,
        ),


# The figure, from the table, in the analysis env (the model's env has no matplotlib).
use rule _analysis_step as contributions_figure with:
    input:
        stats=rules.contributions.output.stats,
    output:
        figure=run_path("figures", "fig_contributions.png"),
    log:
        log_path("contributions_figure"),
    benchmark:
        bench_path("contributions_figure")
    params:
        cmd=bertlook_cmd("contributions", figure_from=IN.stats, out_figure=OUT.figure),
