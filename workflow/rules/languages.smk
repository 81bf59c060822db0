# Step `languages` (issue 13, `treebanks`): for one model on several treebanks (languages), each relation's
# best head per treebank and whether the same heads track the same relations across them (Ravishankar et
# al. 2021). Joins the runs' Table 1 per-head accuracies; nothing is recomputed.
# Its outputs: results/{run_name}-languages/{model label}/.


include: "functions/languages.smk"


if config["treebanks"]:  # one treebank: nothing to compare

    use rule _analysis_step as languages with:
        input:
            unpack(languages_inputs),
        output:
            best=data_file(
                os.path.join(LANGUAGES_DIR, "{model}", "best_heads.csv"),
                "languages.rst",
                "Best head per relation and treebank (CSV)",
                subcategory="model {model}",
            ),
            agreement=os.path.join(LANGUAGES_DIR, "{model}", "agreement.csv"),
            markdown=os.path.join(LANGUAGES_DIR, "{model}", "languages.md"),
            figure=os.path.join(LANGUAGES_DIR, "{model}", "fig_languages.png"),
            summary=os.path.join(LANGUAGES_DIR, "{model}", "languages.summary.json"),
        log:
            os.path.join(LANGUAGES_DIR, "{model}", "logs", "languages.log"),
        benchmark:
            os.path.join(LANGUAGES_DIR, "{model}", "benchmarks", "languages.tsv")
        wildcard_constraints:
            model=runs_pattern(MODEL_LABELS),
        params:
            cmd=bertlook_cmd(
                "languages",
                languages_flags,
                min_count=config["heads"]["min_count"],
                base_relations=True,  # treebanks differ in the subtypes they use: compare nsubj, not nsubj:pass
                out_best=OUT.best,
                out_agreement=OUT.agreement,
                out_markdown=OUT.markdown,
                out_figure=OUT.figure,
                summary=OUT.summary,
            ),
