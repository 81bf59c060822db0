# Step `report-pages`: what `snakemake --report` shows of each run. Every table becomes an HTML page
# (percents, the numbers of its CSV / Markdown twin) and every figure a page-sized PNG, under
# results/{run}/report/ (and the summaries' report/ folders); each page is registered with a human
# label and its caption (run_report_pages, syntax_report_pages, summary_report_pages below).
#
# `snakemake --report` shows images and HTML files in the page and offers anything else (a CSV) as a
# download only. The step report-pages turns each table into an HTML page (percents) and each figure into
# a page-sized PNG under {dir}/report/; those pages are what the report shows, with a human label each.
# The CSVs stay registered as downloads ("Data files (CSV)"); the full-resolution PNGs stay in figures/.


include: "functions/report_pages.smk"


use rule _analysis_step as report_pages with:
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
    params:
        cmd=bertlook_cmd("report-pages", **PAGE_FLAGS),
        # read by the Fig 3 caption (workflow/report/fig3_sep_gradients.rst) when the report is built
        gradients=gradients_shown,


# The syntax runs of `treebanks` (each a model on another treebank): Table 1, head accuracy, Fig 5.
if SYNTAX_RUNS:

    use rule _analysis_step as report_pages_syntax with:
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
        params:
            cmd=bertlook_cmd("report-pages", **PAGE_FLAGS),


use rule _analysis_step as report_pages_summary with:
    input:
        sources=[p.source for p in summary_report_pages()],
    output:
        **report_page_outputs_of(summary_report_pages(), own_paths=True, subcategory=summary_page_subcategory),
    log:
        os.path.join(SUMMARY_DIR, "logs", "report_pages_summary.log"),
    benchmark:
        os.path.join(SUMMARY_DIR, "benchmarks", "report_pages_summary.tsv")
    params:
        cmd=bertlook_cmd("report-pages", **PAGE_FLAGS),
