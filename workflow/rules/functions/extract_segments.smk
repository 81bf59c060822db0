# Step `extract_segments`: its own functions and values, included by workflow/rules/extract_segments.smk (Snakemake's
# linter wants rules and functions in separate files).
def segment_pass_outputs():
    """The outputs of extract_segments (the one pass over the segment maps) besides its summary and the
    paper's partial sums: the norm-based twins (norms.enabled), the rollout partial (rollout.enabled), the ALTI
    statistics (contributions.enabled, on contributions.stream_segments segments) and the stores of the maps
    themselves (extraction.keep_maps; with it off no segment map is written at all)."""
    out = {}
    if RUN_NORMS:
        out["norm_stats"] = run_path("partials", "stats_norm-{shard}.npz")
        out["norm_js"] = run_path("partials", "js_norm-{shard}.npz")
    if RUN_ROLLOUT:
        out["rollout"] = run_path("partials", "rollout-{shard}.npz")
    if SWITCH["contributions"]:
        out["alti_stats"] = run_path("partials", "stats_alti-{shard}.npz")
    if KEEP_MAPS:
        out["store"] = directory(run_path("attention", "segments-{shard}"))
        if RUN_NORMS:
            out["norms"] = directory(run_path("attention", "norms-{shard}"))
    return out


def segment_pass_flags():
    """The extract-segments flags of segment_pass_outputs()."""
    flags = {}
    if RUN_NORMS:
        flags.update(norm_stats_partial=OUT.norm_stats, norm_js_partial=OUT.norm_js)
    if RUN_ROLLOUT:
        flags.update(rollout_partial=OUT.rollout, rollout_max_examples=config["rollout"]["max_examples"])
    if SWITCH["contributions"]:
        alti_segments = config["contributions"]["stream_segments"]
        flags.update(alti_stats_partial=OUT.alti_stats, alti_max_examples=alti_segments)
    if KEEP_MAPS:
        flags["out"] = OUT.store
        if RUN_NORMS:
            flags["norms_out"] = OUT.norms
    return flags
