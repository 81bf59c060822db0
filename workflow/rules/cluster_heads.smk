# Step `cluster-heads`: Jensen-Shannon divergence between heads and its MDS embedding (paper Fig 6).
# The JS matrix is a sum over examples: one partial sum per extraction shard (partials/js-{shard}.npz, the
# heavy part, computed by extract_segments from the maps in memory), added up by cluster_heads, which embeds
# it with MDS. clustering.max_examples = N: the first N segments of segments.jsonl, whatever the sharding.
# {maps}: "" on the attention maps, "_norm" on the norm-based maps (norms.enabled), each with the behaviour
# labels of its own surface statistics.


rule cluster_heads:
    input:
        partials=every_shard(run_path("partials", "js{maps}-{shard}.npz")),
        stats=run_path("tables", "attention_stats{maps}.csv"),
    output:
        js=data_file(
            run_path("tables", "js_divergence{maps}.csv"),
            "maps_data_file.rst",
            maps_label("JS divergence between heads{maps} (CSV)"),
        ),
        clusters=data_file(
            run_path("tables", "head_clusters{maps}.csv"),
            "maps_data_file.rst",
            maps_label("Head embedding and behaviour labels{maps} (CSV)"),
        ),
    log:
        log_path("cluster_heads{maps}"),
    benchmark:
        bench_path("cluster_heads{maps}")
    conda:
        ENV_TORCH
    threads: 1
    resources:
        **step_resources("cluster_heads"),
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
    shell:
        CMD
