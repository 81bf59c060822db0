# Step `cluster-heads`: Jensen-Shannon divergence between heads and its MDS embedding (paper Fig 6).
# The JS matrix is a sum over examples: one partial sum per extraction shard (partials/js-{shard}.npz, the
# heavy part, computed by extract_segments from the maps in memory), added up by cluster_heads, which embeds
# it with MDS. clustering.max_examples = N: the first N segments of segments.jsonl, whatever the sharding.


rule cluster_heads:
    input:
        partials=every_shard(rules.extract_segments.output.js),
        stats=rules.surface_stats.output.table,
    output:
        js=report(
            run_path("tables", "js_divergence.csv"),
            caption="../report/js_divergence.rst",
            category="Data files (CSV)",
            subcategory="{run}",
            labels={"result": "JS divergence between heads (CSV)"},
        ),
        clusters=report(
            run_path("tables", "head_clusters.csv"),
            caption="../report/head_clusters.rst",
            category="Data files (CSV)",
            subcategory="{run}",
            labels={"result": "Head embedding and behaviour labels (CSV)"},
        ),
    params:
        cmd=bertlook_cmd(
            "cluster-heads",
            omp_threads=True,
            partial=IN.partials,
            stats=IN.stats,
            out_js=OUT.js,
            out_clusters=OUT.clusters,
            seed=config["seed"],
            mds_n_init=config["clustering"]["mds_n_init"],
            mds_max_iter=config["clustering"]["mds_max_iter"],
            mds_eps=config["clustering"]["mds_eps"],
        ),
    log:
        log_path("cluster_heads"),
    benchmark:
        bench_path("cluster_heads")
    threads: 1
    resources:
        **sizing.snakemake_resources("cluster_heads", config),
    conda:
        ENV_TORCH
    shell:
        CMD


# The same clustering on the norm-based maps (norms.enabled), with their own statistics' labels.
if RUN_NORMS:

    use rule cluster_heads as cluster_heads_norm with:
        input:
            partials=every_shard(rules.extract_segments.output.norm_js),
            stats=rules.surface_stats_norm.output.table,
        output:
            js=run_path("tables", "js_divergence_norm.csv"),
            clusters=report(
                run_path("tables", "head_clusters_norm.csv"),
                caption="../report/head_clusters_norm.rst",
                category="Data files (CSV)",
                subcategory="{run}",
                labels={"result": "Head embedding and behaviour labels, norm-based maps (CSV)"},
            ),
        log:
            log_path("cluster_heads_norm"),
        benchmark:
            bench_path("cluster_heads_norm")
        resources:
            **sizing.snakemake_resources("cluster_heads_norm", config, kind="cluster_heads"),
