# Step `probes`: attention-based dependency probes (paper Table 3) and their baselines.

if not config["glove"].get("path"):

    rule download_glove:
        output:
            archive=GLOVE_FILE,
            summary=f"{GLOVE_FILE}.download.json",
        log:
            f"{RESOURCES}/logs/download_glove.log",
        benchmark:
            f"{RESOURCES}/benchmarks/download_glove.tsv"
        retries: 2
        localrule: True  # network: runs where snakemake runs (login node), never as a cluster job
        conda:
            ENV_ANALYSIS
        threads: 1
        resources:
            **step_resources("download_glove"),
        params:
            cmd=bertlook_cmd(
                "download",
                url=config["glove"]["url"],
                out=OUT.archive,
                sha256=config["glove"].get("sha256"),
                summary=OUT.summary,
            ),
        shell:
            CMD


# One job trains every probe of the run at once (bertlook.analyses.probes.batch: every variant x seed steps
# together, one sentence per Adam step as the paper): Table 3 and its controls on the model's word stores,
# the random-init probe on the random-init model's stores (probes.random_init), Table 3 on the norm-based
# stores (norms.enabled and norms.probes: table3_norm.*) and the per-layer ablations of Attn+GloVe
# (probes.layer_ablations: probe_ablations.*, the step `probe-ablations` run inside this job).
rule probes:
    input:
        unpack(probes_inputs),
    output:
        **probes_extra_outputs(),
        table=data_file(run_path("tables", "table3.csv"), "table3.rst", "Table 3 twin (CSV)"),
        markdown=run_path("tables", "table3.md"),
        summary=run_path("tables", "table3.summary.json"),
    log:
        log_path("probes"),
    benchmark:
        bench_path("probes")
    priority: 10  # as soon as the word stores exist: frees them (keep_maps: false)
    conda:
        ENV_TORCH
    threads: 2
    resources:
        **step_resources("probes"),
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
    shell:
        CMD
