# Step `head-report` (beyond the paper): one row per head joining what the other steps measured
# (importance from the gradients step, confidence / positional / sink / entropy from the surface
# statistics, behaviour from the clustering, best relation from Table 1's per-head accuracies,
# coreference accuracy, the head detectors' scores), plus one heatmap per metric. Nothing is recomputed.


use rule _analysis_step as head_report with:
    input:
        stats=run_path("tables", "attention_stats.csv"),
        clusters=run_path("tables", "head_clusters.csv"),
        accuracy=run_path("tables", "head_accuracy.csv"),
        coref=run_path("tables", "coref_heads.csv"),
        importance=run_path("tables", "head_importance.csv"),
        # prev-token / duplicate-token / induction columns (head_detectors.enabled)
        detectors=branch(SWITCH["head_detectors"], then=run_path("tables", "head_detectors.csv")),
        contribution_heads=branch(SWITCH["contributions"], then=run_path("tables", "contribution_heads.csv")),
        head_ablation=branch(SWITCH["contributions"], then=run_path("tables", "head_ablation.csv")),
    output:
        table=data_table("head_report", "Per-head report card (CSV)"),
        figure=run_path("figures", "fig_head_report.png"),
        summary=run_path("tables", "head_report.summary.json"),
    log:
        log_path("head_report"),
    benchmark:
        bench_path("head_report")
    params:
        cmd=bertlook_cmd(
            "head-report",
            stats=IN.stats,
            clusters=IN.clusters,
            head_accuracy=IN.accuracy,
            coref_heads=IN.coref,
            importance=IN.importance,
            detectors=IN.detectors if SWITCH["head_detectors"] else None,
            contribution_heads=IN.contribution_heads if SWITCH["contributions"] else None,
            head_ablation=IN.head_ablation if SWITCH["contributions"] else None,
            out=OUT.table,
            summary=OUT.summary,
            out_figure=OUT.figure,
            min_count=config["head_report"]["min_count"] or config["heads"]["min_count"],
        ),
