# Step `report-pages`: what `snakemake --report` shows of each run. Every table becomes an HTML page
# (percents, the numbers of its CSV / Markdown twin) and every figure a page-sized PNG, under
# results/{run}/report/ (and the summaries' report/ folders); each page is registered with a human
# label and its caption (common.smk: run_report_pages, syntax_report_pages, summary_report_pages).


rule report_pages:
    input:
        sources=[run_path(p.source) for p in run_report_pages()],
    output:
        **report_page_outputs_of(run_report_pages()),
    log:
        log_path("report_pages"),
    benchmark:
        bench_path("report_pages")
    wildcard_constraints:
        run=runs_pattern(MODEL_RUNS),
    conda:
        ENV_ANALYSIS
    threads: 1
    resources:
        **step_resources("report_pages"),
    params:
        cmd=bertlook_cmd("report-pages", **PAGE_FLAGS),
        # read by the Fig 3 caption (workflow/report/fig3_sep_gradients.rst) when the report is built
        gradients=gradients_shown,
    shell:
        CMD


# The syntax runs of `treebanks` (each a model on another treebank): Table 1, head accuracy, Fig 5.
if SYNTAX_RUNS:

    rule report_pages_syntax:
        input:
            sources=[run_path(p.source) for p in syntax_report_pages()],
        output:
            **report_page_outputs_of(syntax_report_pages()),
        log:
            log_path("report_pages"),
        benchmark:
            bench_path("report_pages")
        wildcard_constraints:
            run=runs_pattern(SYNTAX_RUNS),
        conda:
            ENV_ANALYSIS
        threads: 1
        resources:
            **step_resources("report_pages_syntax"),
        params:
            cmd=bertlook_cmd("report-pages", **PAGE_FLAGS),
        shell:
            CMD


rule report_pages_summary:
    input:
        sources=[p.source for p in summary_report_pages()],
    output:
        **report_page_outputs_of(summary_report_pages(), own_paths=True, subcategory=summary_page_subcategory),
    log:
        os.path.join(SUMMARY_DIR, "logs", "report_pages_summary.log"),
    benchmark:
        os.path.join(SUMMARY_DIR, "benchmarks", "report_pages_summary.tsv")
    conda:
        ENV_ANALYSIS
    threads: 1
    resources:
        **step_resources("report_pages_summary"),
    params:
        cmd=bertlook_cmd("report-pages", **PAGE_FLAGS),
    shell:
        CMD
