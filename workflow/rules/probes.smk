# Step `probes`: attention-based dependency probes (paper Table 3) and their baselines.

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


# The random-init baseline (probes.random_init): its probe on the random-init model's word stores
# (extract_words_random; no model copy is saved), rows written for `probes`, which adds them to Table 3.
rule probes_random:
    input:
        unpack(probes_random_inputs),
    output:
        rows=PROBES_RANDOM_ROWS,
    params:
        cmd=bertlook_cmd(
            "probes",
            omp_threads=True,
            probes="random_init_attn_glove",
            random_train_attention=IN.train,
            random_dev_attention=IN.dev,
            **probe_settings(),
            rows_out=OUT.rows,
        ),
    log:
        log_path("probes_random"),
    benchmark:
        bench_path("probes_random")
    priority: 10  # as soon as the random-init stores exist: frees them (keep_maps: false)
    threads: 2
    resources:
        **sizing.snakemake_resources("probes_random", config),
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
            category="Data files (CSV)",
            subcategory="{run}",
            labels={"result": "Table 3 twin (CSV)"},
        ),
        markdown=run_path("tables", "table3.md"),
        summary=run_path("tables", "table3.summary.json"),
    params:
        cmd=bertlook_cmd(
            "probes",
            omp_threads=True,
            train_attention=IN.train,
            dev_attention=IN.dev,
            add_rows=lambda wildcards, input, output: input.get("random_rows"),
            **probe_settings(),
            out_table=OUT.table,
            out_markdown=OUT.markdown,
            summary=OUT.summary,
        ),
    log:
        log_path("probes"),
    benchmark:
        bench_path("probes")
    priority: 10  # as soon as the model's word stores exist (and the random-init rows): frees them
    threads: 2
    resources:
        **sizing.snakemake_resources("probes", config),
    conda:
        ENV_TORCH
    shell:
        CMD


# Table 3 on the norm-based word maps (norms.enabled and norms.probes): every probe but the random-init
# one (no random-init norm maps are extracted).
if RUN_NORM_PROBES:

    use rule probes as probes_norm with:
        input:
            unpack(norm_probes_inputs),
        output:
            table=report(
                run_path("tables", "table3_norm.csv"),
                caption="../report/table3_norm.rst",
                category="Data files (CSV)",
                subcategory="{run}",
                labels={"result": "Table 3 on the norm-based maps (CSV)"},
            ),
            markdown=run_path("tables", "table3_norm.md"),
            summary=run_path("tables", "table3_norm.summary.json"),
        params:
            cmd=bertlook_cmd(
                "probes",
                omp_threads=True,
                train_attention=IN.train,
                dev_attention=IN.dev,
                probes=NORM_PROBES,
                **probe_settings(),
                out_table=OUT.table,
                out_markdown=OUT.markdown,
                summary=OUT.summary,
            ),
        log:
            log_path("probes_norm"),
        benchmark:
            bench_path("probes_norm")
        resources:
            **sizing.snakemake_resources("probes_norm", config, kind="probes"),
