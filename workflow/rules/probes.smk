# Stage `probes`: attention-based dependency probes (paper Table 3) and their baselines.

if not config["glove"].get("path"):

    rule download_glove:
        localrule: True  # network: runs where snakemake runs (login node), never as a cluster job
        output:
            archive=GLOVE_FILE,
            summary=f"{GLOVE_FILE}.download.json",
        params:
            cmd=bertlook_cmd(
                "download",
                url=config["glove"]["url"],
                out=OUT.archive,
                sha256=config["glove"].get("sha256"),
                summary=OUT.summary,
            ),
        log:
            f"{RESOURCES}/logs/download_glove.log",
        benchmark:
            f"{RESOURCES}/benchmarks/download_glove.tsv"
        threads: 1
        resources:
            **sizing.snakemake_resources("download_glove", config),
        retries: 2
        conda:
            ENV_ANALYSIS
        shell:
            CMD


rule random_init_model:
    output:
        directory(run_path("models", "random_init")),
    params:
        cmd=bertlook_cmd("random-init", model_flags, out=lambda wildcards, input, output: output[0], seed=config["seed"]),
    log:
        log_path("random_init_model"),
    benchmark:
        bench_path("random_init_model")
    threads: 1
    resources:
        **sizing.snakemake_resources("random_init_model", config),
    conda:
        ENV_TORCH
    shell:
        CMD


rule probes:
    input:
        unpack(probes_inputs),
    output:
        table=report(
            run_path("tables", "table3.csv"),
            caption="../report/table3.rst",
            category="Tables",
            labels={"run": "{run}", "table": "Table 3"},
        ),
        markdown=run_path("tables", "table3.md"),
        summary=run_path("tables", "table3.summary.json"),
    params:
        cmd=bertlook_cmd(
            "probes",
            omp_threads=True,
            train_attention=IN.train,
            dev_attention=IN.dev,
            random_train_attention=lambda wildcards, input, output: input.get("random_train"),
            random_dev_attention=lambda wildcards, input, output: input.get("random_dev"),
            glove=GLOVE_ARG,
            glove_member=config["glove"].get("member"),
            seeds=",".join(str(s) for s in config["probes"]["seeds"]),
            epochs=config["probes"]["epochs"],
            batch_size=config["probes"]["batch_size"],
            lr=config["probes"]["lr"],
            mst=config["probes"]["mst"],
            out_table=OUT.table,
            out_markdown=OUT.markdown,
            summary=OUT.summary,
        ),
    log:
        log_path("probes"),
    benchmark:
        bench_path("probes")
    threads: 2
    resources:
        **sizing.snakemake_resources("probes", config),
    conda:
        ENV_TORCH
    shell:
        CMD
