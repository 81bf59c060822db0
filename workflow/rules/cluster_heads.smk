# Step `cluster-heads`: Jensen-Shannon divergence between heads and its MDS embedding (paper Fig 6).
# The JS matrix is a sum over examples: one partial sum per extraction shard (partials/js-{shard}.npz, the
# heavy part, computed by extract_segments from the maps in memory), added up by cluster_heads, which embeds
# it with MDS. clustering.max_examples = N: the first N segments of segments.jsonl, whatever the sharding.
# {maps}: "" on the attention maps, "_norm" on the norm-based maps (norms.enabled), each with the behaviour
# labels of its own surface statistics.


use rule _torch_step as cluster_heads with:
    input:
        partials=every_shard(run_path("partials", "js{maps}-{shard}.npz")),
        stats=run_path("tables", "attention_stats{maps}.csv"),
    output:
        js=maps_table("js_divergence", "JS divergence between heads{maps} (CSV)"),
        clusters=maps_table("head_clusters", "Head embedding and behaviour labels{maps} (CSV)"),
    log:
        log_path("cluster_heads{maps}"),
    benchmark:
        bench_path("cluster_heads{maps}")
    params:
        cmd=bertlook_cmd(
            "cluster-heads",
            omp_threads=True,
            partial=IN.partials,
            stats=IN.stats,
            out_js=OUT.js,
            out_clusters=OUT.clusters,
            seed=config["seed"],
            **settings("clustering", "mds_n_init", "mds_max_iter", "mds_eps"),
        ),
