# Step `compare`: every paper number beside the reproduced one (PASS / FAIL / not comparable), and,
# when the config lists several models, a cross-model summary.


RUN_DIR = lambda wildcards, input, output: run_path().format(run=wildcards.run)  # --run-dir of the job's run


use rule _analysis_step as compare with:
    input:
        manifest=rules.manifest.output[0],
        stats=run_path("tables", "attention_stats.csv"),
        table1=run_path("tables", "table1.csv"),
        table2=rules.coref.output.table,
        table3=lambda wildcards: ([run_path("tables", "table3.csv").format(run=wildcards.run)] if RUN_PROBES else []),
        # the second reference (Kobayashi et al. 2020) reads the norm-based statistics
        norm_stats=lambda wildcards: (
            [run_path("tables", "attention_stats_norm.csv").format(run=wildcards.run)] if RUN_NORMS else []
        ),
    output:
        csv=data_file(run_path("comparison.csv"), "comparison.rst", "Comparison with the paper (CSV)"),
        markdown=run_path("comparison.md"),
    log:
        log_path("compare"),
    benchmark:
        bench_path("compare")
    params:
        cmd=bertlook_cmd("compare", run_dir=RUN_DIR, out_csv=OUT.csv, out_markdown=OUT.markdown),


use rule _analysis_step as models_summary with:
    input:
        comparisons=expand(run_path("comparison.csv"), run=MODEL_RUNS),
        # each run's head detectors and model family (head_detectors.enabled)
        detectors=branch(
            SWITCH["head_detectors"],
            then=expand(run_path("tables", "head_detectors.summary.json"), run=MODEL_RUNS),
        ),
    output:
        csv=data_file(
            os.path.join(SUMMARY_DIR, "models_summary.csv"),
            "models_summary.rst",
            "Models side by side (CSV)",
            subcategory="all models",
        ),
        markdown=os.path.join(SUMMARY_DIR, "models_summary.md"),
        figure=os.path.join(SUMMARY_DIR, "fig_models_summary.png"),
    log:
        os.path.join(SUMMARY_DIR, "logs", "models_summary.log"),
    benchmark:
        os.path.join(SUMMARY_DIR, "benchmarks", "models_summary.tsv")
    params:
        cmd=bertlook_cmd(
            "models-summary",
            run_dir=[os.path.join(RESULTS, run) for run in MODEL_RUNS],
            labels=",".join(m["label"] for m in config["models"]),
            out_csv=OUT.csv,
            out_markdown=OUT.markdown,
            out_figure=OUT.figure,
        ),
