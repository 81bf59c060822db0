# Step `treebank`: its own functions and values, included by workflow/rules/treebank.smk (Snakemake's
# linter wants rules and functions in separate files).
from bertlook.pipeline.preflight import ud_download_dir
from bertlook.reporting import compare as _compare

# Every treebank-dependent value is looked up per run (TREEBANK_OF): the main `treebank` for the model
# runs, a `treebanks` entry for the syntax runs.
TREEBANK = config["treebank"]


def treebank_kind(run):
    """ptb_sd / ud / silver: the relation inventory of a run's trees."""
    return _compare.config_treebank_kind(TREEBANK_OF[run])


def treebank_name(run):
    tb = TREEBANK_OF[run]
    return {
        "silver": f"silver Wikipedia trees (spaCy {tb['silver']['spacy_model']})",
        "ud": f"{tb['ud']['repo']} {tb['ud']['release']}",
        "local": f"local {treebank_kind(run)} treebank",
    }[tb["source"]]


TREEBANK_KIND_ARG = lambda wildcards, input, output: treebank_kind(wildcards.run)
TREEBANK_NAME_ARG = lambda wildcards, input, output: treebank_name(wildcards.run)
# Runs whose treebank is downloaded (ud): the treebank_ud rule, on the login node (localrule).
UD_TREEBANK_RUNS = [run for run in RUNS if TREEBANK_OF[run]["source"] == "ud"]
BUILT_TREEBANK_RUNS = [run for run in RUNS if TREEBANK_OF[run]["source"] != "ud"]


def treebank_inputs(wildcards):
    tb = TREEBANK_OF[wildcards.run]
    if tb["source"] == "silver":
        return {**corpus_inputs(), "segments": run_path("corpus", "segments.jsonl").format(run=wildcards.run)}
    if tb["source"] == "local":
        local = tb["local"]
        return {k: local[k] for k in ("train", "dev") if local[k]}
    return {}


def treebank_flags(wildcards, input, output):
    """Flags of `bertlook treebank` for the run's treebank source."""
    tb = TREEBANK_OF[wildcards.run]
    flags = {"source": tb["source"]}
    if tb["source"] == "silver":
        silver = tb["silver"]
        flags.update(
            dump=None if HF_DATASET else input.dump,
            hf_dataset=HF_DATASET_JSON,
            segments=input.segments,
            train_sentences=silver["train_sentences"],
            dev_sentences=silver["dev_sentences"],
            max_words=silver["max_words"],
            seed=config["seed"],
            spacy_model=silver["spacy_model"],
            max_articles=silver["max_articles"],
            language=config["segments"]["language"],
            splitter=config["segments"]["splitter"],
        )
    elif tb["source"] == "local":
        flags.update(dev=input.dev, train=input.get("train"), format=tb["local"]["format"])
    else:
        ud = tb["ud"]
        flags.update(
            ud_repo=ud["repo"],
            ud_release=ud["release"],
            ud_train_file=ud["train_file"],
            ud_dev_file=ud["dev_file"],
            ud_base_url=ud["base_url"],
            download_dir=str(ud_download_dir(config, tb)),
            train_sha256=ud["train_sha256"],
            dev_sha256=ud["dev_sha256"],
        )
    flags["strip_subtypes"] = tb["strip_subtypes"]
    # UD trees: relations of UD v1 releases renamed to v2 (dobj -> obj, ...), counted in the summary, so
    # that treebanks of different UD versions compare relation by relation
    flags["ud_v2_relations"] = _compare.config_treebank_kind(tb) == "ud"
    return flags
