# Step `probes`: attention-based dependency probes (paper Table 3) and their baselines.


include: "functions/probes.smk"


if not config["glove"].get("path"):

    use rule _download as download_glove with:
        output:
            file=GLOVE_FILE,
            summary=f"{GLOVE_FILE}.download.json",
        log:
            f"{RESOURCES}/logs/download_glove.log",
        benchmark:
            f"{RESOURCES}/benchmarks/download_glove.tsv"
        localrule: True
        params:
            cmd=download_cmd("glove"),


# One job trains every probe of the run at once (bertlook.analyses.probes.batch: every variant x seed steps
# together, one sentence per Adam step as the paper): Table 3 and its controls on the model's word stores,
# the random-init probe on the random-init model's stores (probes.random_init), Table 3 on the norm-based
# stores (norms.enabled and norms.probes: table3_norm.*) and the per-layer ablations of Attn+GloVe
# (probes.layer_ablations: probe_ablations.*, the step `probe-ablations` run inside this job).
use rule _torch_step as probes with:
    input:
        unpack(probes_inputs),
    output:
        **probes_extra_outputs(),
        **table_outputs("table3", "Table 3 twin (CSV)"),
    log:
        log_path("probes"),
    benchmark:
        bench_path("probes")
    priority: 10  # as soon as the word stores exist: frees them (keep_maps: false)
    threads: 2
    params:
        cmd=bertlook_cmd(
            "probes",
            omp_threads=True,
            train_attention=IN.train,
            dev_attention=IN.dev,
            **probe_settings(),
            out_table=OUT.table,
            out_markdown=OUT.markdown,
            summary=OUT.summary,
            **probes_extra_flags(),
        ),
