# Step `probe-ablations` (beyond the paper): the Attn+GloVe probe of Table 3 trained on the attention
# features of one layer only (keep) and of every layer but one (drop), each with the probes' seeds, next
# to the reference with every layer (probes.layer_ablations; its own job: the probes job stays as long).


rule probe_ablations:
    input:
        unpack(probe_ablations_inputs),
    output:
        table=report(
            run_path("tables", "probe_ablations.csv"),
            caption="../report/probe_ablations.rst",
            category="Data files (CSV)",
            subcategory="{run}",
            labels={"result": "Per-layer ablations of the Attn + GloVe probe (CSV)"},
        ),
        markdown=run_path("tables", "probe_ablations.md"),
        summary=run_path("tables", "probe_ablations.summary.json"),
    params:
        cmd=bertlook_cmd(
            "probe-ablations",
            omp_threads=True,
            train_attention=IN.train,
            dev_attention=IN.dev,
            modes=",".join(config["probes"]["layer_ablations"]),
            **probe_settings(),
            out_table=OUT.table,
            out_markdown=OUT.markdown,
            summary=OUT.summary,
        ),
    log:
        log_path("probe_ablations"),
    benchmark:
        bench_path("probe_ablations")
    priority: 10  # as soon as the model's word stores exist: frees them (keep_maps: false)
    threads: 2
    resources:
        **sizing.snakemake_resources("probe_ablations", config),
    conda:
        ENV_TORCH
    shell:
        CMD
