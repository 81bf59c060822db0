# Stage `probes`: attention-based dependency probes (paper Table 3) and their baselines.

if not config["glove"].get("path"):

    rule download_glove:
        output:
            archive=GLOVE_FILE,
            summary=f"{GLOVE_FILE}.download.json",
        params:
            bertlook=BERTLOOK,
            url=config["glove"]["url"],
            checks=optional_flag("--sha256", config["glove"].get("sha256")),
        log:
            f"{RESOURCES}/logs/download_glove.log",
        threads: 1
        resources:
            mem_mb=500,
            runtime=120,
        retries: 2
        conda:
            ENV_ANALYSIS
        shell:
            "{params.bertlook} download --url {params.url:q} --out {output.archive:q} {params.checks} "
            "--summary {output.summary:q} > {log:q} 2>&1"


rule random_init_model:
    output:
        directory(run_path("models", "random_init")),
    params:
        bertlook=BERTLOOK,
        model=model_args,
        seed=config["seed"],
    log:
        log_path("random_init_model"),
    threads: 1
    resources:
        mem_mb=4000,
        runtime=30,
    conda:
        ENV_TORCH
    shell:
        "{params.bertlook} random-init {params.model} --out {output:q} --seed {params.seed} > {log:q} 2>&1"


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
        bertlook=BERTLOOK,
        random=lambda wildcards, input: (
            f"--random-train-attention {shlex.quote(input.random_train)} "
            f"--random-dev-attention {shlex.quote(input.random_dev)}"
            if "random_train" in input.keys()
            else ""
        ),
        glove=GLOVE_ARG,
        member=optional_flag("--glove-member", config["glove"].get("member")),
        seeds=",".join(str(s) for s in config["probes"]["seeds"]),
        epochs=config["probes"]["epochs"],
        batch_size=config["probes"]["batch_size"],
        lr=config["probes"]["lr"],
        mst="--mst" if config["probes"]["mst"] else "",
    log:
        log_path("probes"),
    threads: 2
    resources:
        mem_mb=8000,
        runtime=120,
    conda:
        ENV_TORCH
    shell:
        "OMP_NUM_THREADS={threads} {params.bertlook} probes --train-attention {input.train:q} "
        "--dev-attention {input.dev:q} {params.random} --glove {params.glove:q} {params.member} "
        "--seeds {params.seeds} --epochs {params.epochs} --batch-size {params.batch_size} "
        "--lr {params.lr} {params.mst} --out-table {output.table:q} --out-markdown {output.markdown:q} "
        "--summary {output.summary:q} > {log:q} 2>&1"
