# Step `explorer` (beyond the paper): results/{run}/explorer.html, one self-contained page about every head
# (a layer x head grid coloured by a chosen metric; a head's card, relations, nearest heads and its maps on
# short dev sentences and on windows of the Fig 1 segment), from the run's tables. explorer_sample takes the maps
# of a few short dev sentences from the word stores as soon as they exist (priority 10: the temporary stores are
# freed early) and the segment windows from the Fig 1 example files.


include: "functions/explorer.smk"


use rule _analysis_step as explorer_sample with:
    input:
        unpack(explorer_sample_inputs),
    output:
        sample=run_path("partials", "explorer_sample.json"),
    log:
        log_path("explorer_sample"),
    benchmark:
        bench_path("explorer_sample")
    priority: 10
    params:
        cmd=bertlook_cmd(
            "explorer",
            dev_attention=IN.dev,
            norm_attention=lambda wildcards, input, output: input.get("norm_dev"),
            segment_example=IN.examples,
            contributions=lambda wildcards, input, output: input.get("contributions"),
            sample_out=OUT.sample,
        ),


use rule _analysis_step as explorer with:
    input:
        sample=rules.explorer_sample.output.sample,
        report=run_path("tables", "head_report.csv"),
        accuracy=run_path("tables", "head_accuracy.csv"),
        table1=run_path("tables", "table1.csv"),
        clusters=run_path("tables", "head_clusters.csv"),
        stats=run_path("tables", "attention_stats.csv"),
        norm_stats=branch(SWITCH["norms"], then=run_path("tables", "attention_stats_norm.csv")),
    output:
        html=run_path("explorer.html"),
        data=run_path("explorer.json"),
    log:
        log_path("explorer"),
    benchmark:
        bench_path("explorer")
    params:
        cmd=bertlook_cmd(
            "explorer",
            sample=IN.sample,
            head_report=IN.report,
            head_accuracy=IN.accuracy,
            table1=IN.table1,
            clusters=IN.clusters,
            stats=IN.stats,
            norm_stats=IN.norm_stats if SWITCH["norms"] else None,
            run=WC.run,
            out=OUT.html,
            out_data=OUT.data,
        ),


# A fan-out's runs side by side (config `models` with two or more): results/{name}-all-models/explorer.html,
# two panes, each with a model menu, from the runs' explorer.json. Defined only for such a configuration.
if models_explorer_outputs():

    use rule _analysis_step as explorer_models with:
        input:
            data=expand(run_path("explorer.json"), run=MODEL_RUNS),
        output:
            html=models_explorer_outputs()[0],
        log:
            os.path.join(SUMMARY_DIR, "logs", "explorer_models.log"),
        benchmark:
            os.path.join(SUMMARY_DIR, "benchmarks", "explorer_models.tsv")
        params:
            cmd=bertlook_cmd(
                "explorer",
                side_by_side=IN.data,
                title=f"{config['run_name']}: {', '.join(MODEL_LABELS)}",
                out=OUT.html,
            ),
