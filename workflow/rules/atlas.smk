# Step `atlas` (beyond the paper): results/{run_name}-atlas/atlas.html, every model of the fan-out on one page
# (`bertlook atlas`: a row per model, with why a model did not run), after every model's run. Defined with two
# or more models (config atlas.enabled: null) or atlas.enabled: true. After a failed run the onerror handler
# of workflow/Snakefile runs the same command, so that the page shows the models that did run.


include: "functions/atlas.smk"


if atlas_on():

    use rule _analysis_step as atlas with:
        input:
            runs=atlas_inputs(),
        output:
            html=atlas_outputs()[0],
            csv=atlas_outputs()[1],
            data=atlas_outputs()[2],
        log:
            os.path.join(SUMMARY_DIR, "logs", "atlas.log"),
        benchmark:
            os.path.join(SUMMARY_DIR, "benchmarks", "atlas.tsv")
        params:
            cmd=bertlook_cmd("atlas", **ATLAS_ARGS),
