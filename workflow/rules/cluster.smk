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
        cmd=bertlook_cmd(
            "cluster",
            omp_threads=True,
            attention=IN.store,
            stats=IN.stats,
            out_js=OUT.js,
            out_clusters=OUT.clusters,
            seed=config["seed"],
            max_examples=config["clustering"]["max_examples"],
            mds_n_init=config["clustering"]["mds_n_init"],
            mds_max_iter=config["clustering"]["mds_max_iter"],
            mds_eps=config["clustering"]["mds_eps"],
        ),
    log:
        log_path("cluster_heads"),
    benchmark:
        bench_path("cluster_heads")
    threads: 8
    resources:
        mem_mb=8000,
        runtime=120,
    conda:
        ENV_TORCH
    shell:
        CMD
