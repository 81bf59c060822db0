# Step `resources`: the measured resources of a run (wall, CPU, max RSS, I/O per rule) from the
# Snakemake benchmark files every rule writes; runs after every other output of the run.

# The resources tables of a run wait for every other output `all` asks for of that run, those of the
# cross-model summary for every other output of the configuration, except the report's pages (made
# from the resources tables too, so after them: their own job is not in the tables). The summary leaves
# the runs' report_pages jobs out too: it does not wait for them, and a rerun of one rewrites its
# benchmark file while the summary may be reading it.
RESOURCES_TABLES = ("resources.csv", "resources.md")


use rule _analysis_step as resources with:
    input:
        outputs=lambda wildcards: [
            path
            for path in all_outputs()
            if path.startswith(os.path.join(RESULTS, wildcards.run) + os.sep)
            and path not in [os.path.join(RESULTS, wildcards.run, name) for name in RESOURCES_TABLES]
            and not is_report_page(path)
        ],
    output:
        csv=data_file(run_path("resources.csv"), "resources.rst", "Measured resources per job (CSV)"),
        markdown=run_path("resources.md"),
    log:
        log_path("resources"),
    benchmark:
        bench_path("resources")
    params:
        cmd=bertlook_cmd("resources", run_dir=RUN_DIR, exclude="resources", out_csv=OUT.csv, out_markdown=OUT.markdown),


use rule _analysis_step as resources_summary with:
    input:
        outputs=lambda wildcards: [
            path
            for path in all_outputs()
            if path not in [os.path.join(SUMMARY_DIR, name) for name in RESOURCES_TABLES] and not is_report_page(path)
        ],
    output:
        csv=data_file(
            os.path.join(SUMMARY_DIR, "resources.csv"),
            "resources_summary.rst",
            "Measured resources per rule, all runs (CSV)",
            subcategory="all models",
        ),
        markdown=os.path.join(SUMMARY_DIR, "resources.md"),
    log:
        os.path.join(SUMMARY_DIR, "logs", "resources_summary.log"),
    benchmark:
        os.path.join(SUMMARY_DIR, "benchmarks", "resources_summary.tsv")
    params:
        cmd=bertlook_cmd(
            "resources",
            run_dir=[os.path.join(RESULTS, run) for run in RUNS]
            + [SUMMARY_DIR, os.path.join(RESOURCES, "benchmarks")],
            exclude=["resources_summary", "report_pages", "report_pages_summary"],
            by_rule=True,
            out_csv=OUT.csv,
            out_markdown=OUT.markdown,
        ),
