# Step `probes`: its own functions and values, included by workflow/rules/probes.smk (Snakemake's
# linter wants rules and functions in separate files).
from bertlook.pipeline.preflight import glove_download_target

GLOVE = config["glove"]
_glove_target = glove_download_target(config)
GLOVE_FILE = str(_glove_target) if _glove_target else None
GLOVE_ARG = GLOVE["path"] or GLOVE_FILE


def probes_inputs(wildcards):
    """The word stores the probes job reads: the model's, the random-init model's (probes.random_init) and the
    norm-based ones (norms.probes), and GloVe."""
    words = lambda maps, split: run_path("attention", f"{maps}-{split}").format(run=wildcards.run)
    inputs = {"train": words("words", "train"), "dev": words("words", "dev")}
    if RUN_RANDOM_INIT:
        inputs.update(random_train=words("randwords", "train"), random_dev=words("randwords", "dev"))
    if RUN_NORM_PROBES:
        inputs.update(norm_train=words("normwords", "train"), norm_dev=words("normwords", "dev"))
    if GLOVE_FILE:
        inputs["glove"] = GLOVE_FILE
    return inputs


def probes_extra_outputs():
    """table3_norm.* (norms.probes) and probe_ablations.* (probes.layer_ablations) of the probes job."""
    out = {}
    if RUN_NORM_PROBES:
        out.update(
            norm_table=data_table("table3_norm", "Table 3 on the norm-based maps (CSV)"),
            norm_markdown=run_path("tables", "table3_norm.md"),
            norm_summary=run_path("tables", "table3_norm.summary.json"),
        )
    if RUN_PROBE_ABLATIONS:
        out.update(
            ablations_table=data_table("probe_ablations", "Per-layer ablations of the Attn + GloVe probe (CSV)"),
            ablations_markdown=run_path("tables", "probe_ablations.md"),
            ablations_summary=run_path("tables", "probe_ablations.summary.json"),
        )
    return out


def probes_extra_flags():
    flags = {}
    if RUN_RANDOM_INIT:
        flags.update(random_train_attention=IN.random_train, random_dev_attention=IN.random_dev)
    if RUN_NORM_PROBES:
        flags.update(
            norm_train_attention=IN.norm_train,
            norm_dev_attention=IN.norm_dev,
            out_norm_table=OUT.norm_table,
            out_norm_markdown=OUT.norm_markdown,
            norm_summary=OUT.norm_summary,
        )
    if RUN_PROBE_ABLATIONS:
        flags.update(
            ablations=",".join(config["probes"]["layer_ablations"]),
            out_ablations_table=OUT.ablations_table,
            out_ablations_markdown=OUT.ablations_markdown,
            ablations_summary=OUT.ablations_summary,
        )
    return flags


def probe_settings():
    """The probe training flags of the probes job (config probes.*, GloVe)."""
    return dict(
        glove=GLOVE_ARG,
        glove_member=config["glove"].get("member"),
        seeds=",".join(str(s) for s in config["probes"]["seeds"]),
        **settings("probes", "epochs", "batch_size", "lr", "mst"),
    )
