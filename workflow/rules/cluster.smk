# Stage `cluster`: Jensen-Shannon divergence between heads and its MDS embedding (paper Fig 6).


rule cluster_heads:
    input:
        store=rules.extract_segments.output.store,
        stats=rules.surface_stats.output.table,
    output:
        js=report(
            run_path("tables", "js_divergence.csv"),
            caption="../report/js_divergence.rst",
            category="Tables",
            labels={"run": "{run}", "table": "js_divergence"},
        ),
        clusters=report(
            run_path("tables", "head_clusters.csv"),
            caption="../report/head_clusters.rst",
            category="Tables",
            labels={"run": "{run}", "table": "head_clusters"},
        ),
    params:
        bertlook=BERTLOOK,
        seed=config["seed"],
        max_examples=optional_flag("--max-examples", config["clustering"].get("max_examples")),
        n_init=config["clustering"]["mds_n_init"],
        max_iter=config["clustering"]["mds_max_iter"],
        eps=config["clustering"]["mds_eps"],
    log:
        log_path("cluster_heads"),
    threads: 8
    resources:
        mem_mb=8000,
        runtime=120,
    conda:
        ENV_TORCH
    shell:
        "OMP_NUM_THREADS={threads} {params.bertlook} cluster --attention {input.store:q} --stats {input.stats:q} "
        "--out-js {output.js:q} --out-clusters {output.clusters:q} --seed {params.seed} "
        "{params.max_examples} --mds-n-init {params.n_init} --mds-max-iter {params.max_iter} "
        "--mds-eps {params.eps} > {log:q} 2>&1"
