# Step `report_pages`: its own functions and values, included by workflow/rules/report_pages.smk (Snakemake's
# linter wants rules and functions in separate files).
REPORT_DIR = "report"
ReportPage = steps.Page  # the declarations' page type; the summaries' pages below use full paths


def page_output_name(page):
    """A page's output name in its rule: a valid identifier, unique in the rule (from the whole page
    path: the summary rule has a languages.html for every model)."""
    return "page_{}".format(re.sub(r"\W", "_", os.path.splitext(page.page)[0]))


def syntax_report_pages():
    """The report entries of every run's syntax steps (model runs and `treebanks` runs)."""
    return steps.syntax_pages(STEPS)


def run_report_pages():
    """The report entries of a model run (declared with their steps in bertlook.pipeline.steps)."""
    return steps.run_pages(STEPS, SWITCH)


def summary_report_pages():
    """The report entries of the cross-model summary and, with `treebanks`, of each model's
    cross-language summary (full paths)."""
    here = lambda *parts: os.path.join(SUMMARY_DIR, *parts)
    mine = lambda name: here(REPORT_DIR, name)
    pages = [
        ReportPage(
            here("models_summary.md"),
            mine("models_summary.html"),
            "Comparison across models",
            "Models side by side (table)",
            caption="models_summary.rst",
        ),
        ReportPage(
            here("fig_models_summary.png"),
            mine("fig_models_summary.png"),
            "Comparison across models",
            "Models side by side (figure)",
            caption="fig_models_summary.rst",
        ),
        ReportPage(
            here("resources.md"),
            mine("resources.html"),
            "Resources",
            "Measured resources per rule, all runs",
            caption="resources_summary.rst",
        ),
    ] + [
        ReportPage(
            path,
            mine("explorer.html"),
            "Comparison across models",
            "Head explorer, models side by side (interactive)",
            caption="explorer_models.rst",
        )
        for path in models_explorer_outputs()
    ]
    for label in (MODEL_LABELS if config["treebanks"] else []):
        src = lambda name: os.path.join(LANGUAGES_DIR, label, name)
        dst = lambda name: os.path.join(LANGUAGES_DIR, label, REPORT_DIR, name)
        pages += [
            ReportPage(
                src("languages.md"),
                dst("languages.html"),
                "Across languages",
                f"Best heads across treebanks, {label} (table)",
                caption="languages.rst",
            ),
            ReportPage(
                src("fig_languages.png"),
                dst("fig_languages.png"),
                "Across languages",
                f"Best heads across treebanks, {label} (figure)",
                caption="fig_languages.rst",
            ),
        ]
    return pages


def report_page_outputs():
    """Every page of the report (the report/ folders), for `all`."""
    return (
        [run_path(REPORT_DIR, p.page).format(run=run) for run in MODEL_RUNS for p in run_report_pages()]
        + [run_path(REPORT_DIR, p.page).format(run=run) for run in SYNTAX_RUNS for p in syntax_report_pages()]
        + [p.page for p in summary_report_pages()]
    )


def is_report_page(path):
    """A page of the report (made from the resources tables too: never an input of `resources`)."""
    return os.path.basename(os.path.dirname(str(path))) == REPORT_DIR


def report_page_outputs_of(pages, own_paths=False, subcategory=None):
    """The report()-flagged outputs of ``pages``: under results/{run}/report/ (``own_paths``: at
    the page's own full path), listed under subcategory "{run}" or "{run}: <group>" (``subcategory``: a
    function of the page giving it instead), with one label, {"result": <the page's label>}.

    One label only: Snakemake's report turns a second label with exactly two values, each on half of
    a list's entries (a table and a figure of one run, say), into a toggle between them."""
    out = {}
    for p in pages:
        where = subcategory(p) if subcategory else "{{run}}{}".format(f": {p.subcategory}" if p.subcategory else "")
        out[page_output_name(p)] = report(
            p.page if own_paths else run_path(REPORT_DIR, p.page),
            caption=f"../report/{p.caption_file}",
            category=p.category,
            subcategory=where,
            labels={"result": p.label},
        )
    return out


def gradients_shown(wildcards, input, output):
    """What Fig 3 shows in this run, for its caption: "ran" or the reason it did not (from the gradient
    step's summary; "unknown" before it exists, e.g. in a dry run)."""
    path = run_path("tables", "sep_gradients.summary.json").format(run=wildcards.run)
    try:
        with open(path, encoding="utf-8") as f:
            summary = json.load(f)
    except (OSError, ValueError):
        return {"status": "unknown", "reason": ""}
    ran = summary.get("status") != "not run"
    return {"status": "ran" if ran else "not run", "reason": "" if ran else str(summary.get("reason", ""))}


PAGE_FLAGS = dict(
    source=lambda wildcards, input, output: list(input.sources),
    page=lambda wildcards, input, output: list(output),
)


def summary_page_subcategory(page):
    """ "all models", or "model <label>" for a page of that model's cross-language summary."""
    model = next((m for m in MODEL_LABELS if page.page.startswith(os.path.join(LANGUAGES_DIR, m) + os.sep)), None)
    return f"model {model}" if model else "all models"
