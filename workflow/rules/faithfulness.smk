# Step `faithfulness` (beyond the paper; issue 44 "which measure to trust"): on a seeded sample of segments
# (contributions.faithfulness_segments), remove sampled tokens one at a time (contributions.ablated_tokens)
# and correlate what it does (the final-layer change of every other token, the loss change) with each map
# kind (attention, norm, rollout, ALTI, ALTI rollout, value zeroing, gradient x attention); remove each head
# (contributions.head_ablation) against the head report's gradient importance. Runs the model; switched by
# contributions.enabled. A model without its pre-training head: the loss rows say "not run" and why.
# One core, priority 4: a sample-sized job (the demo's ~11 CPU-s) that needs only the segments runs beside the
# one-core treebank job (priority 5) instead of holding a 2-core machine (the demo: its 11 s hidden); its golden
# numbers hold across 1 / 2 threads (scripts/contribution_spread.py).


use rule _model_step as faithfulness with:
    input:
        segments=rules.segments.output.segments,
    output:
        table=data_file(run_path("tables", "faithfulness.csv"), "faithfulness.rst", "Which measure to trust (CSV)"),
        markdown=run_path("tables", "faithfulness.md"),
        heads=data_file(run_path("tables", "head_ablation.csv"), "faithfulness.rst", "Head ablation (CSV)"),
        summary=run_path("tables", "faithfulness.summary.json"),
    log:
        log_path("faithfulness"),
    benchmark:
        bench_path("faithfulness")
    priority: 4
    threads: 1  # beside the one-core treebank job (priority 5; see the top of this file)
    params:
        cmd=model_cmd(
            "faithfulness",
            segments=IN.segments,
            out_table=OUT.table,
            out_markdown=OUT.markdown,
            out_heads=OUT.heads,
            summary=OUT.summary,
            n_segments=config["contributions"]["faithfulness_segments"],
            value_zeroing_layers=config["contributions"]["faithfulness_value_zeroing"],
            **settings("contributions", "ablated_tokens", "head_ablation", "bootstrap"),
            seed=config["seed"],
            segment_ids=config["extraction"]["segment_ids"],
            device=config["extraction"]["device"],
        ),


# The figure, from the table, in the analysis env (the model's env has no matplotlib).
use rule _analysis_step as faithfulness_figure with:
    input:
        table=rules.faithfulness.output.table,
    output:
        figure=run_path("figures", "fig_faithfulness.png"),
    log:
        log_path("faithfulness_figure"),
    benchmark:
        bench_path("faithfulness_figure")
    params:
        cmd=bertlook_cmd("faithfulness", figure_from=IN.table, out_figure=OUT.figure),
