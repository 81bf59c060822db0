# Step `surface-stats`: per-head surface statistics (paper Figs 2 and 4): sums and counts per extraction
# shard (partials/stats-{shard}.npz, computed by extract_segments from the maps in memory), added up and
# divided once here. {maps}: "" on the attention maps, "_norm" on the norm-based maps (norms.enabled;
# Kobayashi et al. 2020): attention_stats_norm.csv has exactly the columns of attention_stats.csv.


use rule _analysis_step as surface_stats with:
    input:
        partials=every_shard(run_path("partials", "stats{maps}-{shard}.npz")),
    output:
        table=maps_table("attention_stats", "Surface statistics per head{maps} (CSV)"),
        summary=run_path("tables", "attention_stats{maps}.summary.json"),
    log:
        log_path("surface_stats{maps}"),
    benchmark:
        bench_path("surface_stats{maps}")
    params:
        cmd=bertlook_cmd("surface-stats", partial=IN.partials, out=OUT.table, summary=OUT.summary),
