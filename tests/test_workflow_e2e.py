"""End to end: the real `snakemake` on a tiny configuration (tiny random BERT, 3 articles of
gensim's packaged Wikipedia excerpt), then the HTML report; every declared output checked."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from bertlook.attention.store import open_store
from workflow_helpers import ENV, GENSIM_DUMP, ROOT, RUN, SNAKEMAKE, snakemake, tiny_config  # noqa: F401

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory, tiny_bert_dir):
    workdir = tmp_path_factory.mktemp("e2e")
    (workdir / "config.yaml").write_text(yaml.safe_dump(tiny_config(workdir, tiny_bert_dir)))
    proc = snakemake(workdir)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    return workdir, workdir / "results" / RUN


def test_every_declared_output_is_well_formed(finished_run):
    _, run = finished_run
    stats = pd.read_csv(run / "tables" / "attention_stats.csv")
    assert list(stats.columns) == ["layer", "head", "cls", "sep", "punct", "self", "prev", "next",
                                   "sep_sep", "rest_sep", "entropy", "cls_entropy", "max_attention",
                                   "positional_offset", "positional_fraction"]
    assert len(stats) == 4 and stats[["layer", "head"]].min().min() == 1
    frac = stats[["cls", "sep", "punct", "self", "prev", "next", "sep_sep", "rest_sep"]]
    assert ((frac >= 0) & (frac <= 1.0001)).all().all()

    js = pd.read_csv(run / "tables" / "js_divergence.csv", index_col=0)
    assert js.shape == (4, 4) and list(js.columns) == ["1-1", "1-2", "2-1", "2-2"]
    m = js.to_numpy()
    assert np.allclose(m, m.T) and np.allclose(np.diag(m), 0) and (m >= 0).all()

    clusters = pd.read_csv(run / "tables" / "head_clusters.csv")
    assert list(clusters.columns) == ["layer", "head", "x", "y", "behavior"] and len(clusters) == 4

    for name in ["fig1_example_heads.png", "fig2_special_tokens.png", "fig4_entropy.png",
                 "fig6_head_clusters.png"]:
        assert (run / "figures" / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name

    segments = [json.loads(line) for line in (run / "corpus" / "segments.jsonl").read_text().splitlines()]
    assert len(segments) == 12 and all(len(s["tokens"]) <= 128 for s in segments)

    acc = pd.read_csv(run / "tables" / "head_accuracy.csv")
    assert list(acc.columns) == ["relation", "layer", "head", "direction", "accuracy", "count", "fragile"]
    assert (acc["fragile"] >= 0).all() and (acc["fragile"] <= acc["count"]).all()
    assert set(acc["direction"]) == {"dep2head", "head2dep"}
    assert ((acc["accuracy"] >= 0) & (acc["accuracy"] <= 1)).all()
    assert len(acc[acc["relation"] == "All"]) == 2 * 4  # 4 heads x 2 directions
    table1 = pd.read_csv(run / "tables" / "table1.csv")
    assert table1["relation"].iloc[0] == "All"
    for rel in ("det", "pobj", "dobj"):  # the design card's rows, present for every corpus
        assert rel in set(table1["relation"]), rel
    assert {"heldout_head", "heldout_accuracy", "ci_low", "ci_high", "baseline_offset"} <= set(table1.columns)
    assert (table1["ci_low"] <= table1["accuracy"] + 1e-12).all()
    assert "silver" in (run / "tables" / "table1.md").read_text()
    for split in ("train", "dev"):
        conllu = (run / "treebank" / f"{split}.conllu").read_text()
        assert "# source = silver" in conllu and "\tdet\t" in conllu
    assert (run / "figures" / "fig5_syntax_heads.png").read_bytes()[:4] == b"\x89PNG"

    table3 = pd.read_csv(run / "tables" / "table3.csv")
    probes = set(table3["probe"])
    assert {"right_branching", "distances_glove", "random_init_attn_glove", "attn", "attn_glove",
            "attn_glove_released"} <= probes
    trained = table3[table3["probe"] != "right_branching"]
    assert (trained["n_seeds"] == 2).all() and trained["uas_mean"].between(0, 1).all()
    assert "Paper" in (run / "tables" / "table3.md").read_text() or "paper" in (run / "tables" / "table3.md").read_text()

    table2 = pd.read_csv(run / "tables" / "table2.csv")  # the hand-written CoNLL-2012 fixture
    assert {"nearest", "head_match", "rule_based", "best_head"} <= set(table2["system"])
    coref_heads = pd.read_csv(run / "tables" / "coref_heads.csv")
    assert len(coref_heads) == 4

    # the tiny BertModel has no MLM head: the gradients stage says so instead of inventing numbers
    grads = pd.read_csv(run / "tables" / "sep_gradients.csv")
    assert "no masked-LM head" in str(grads["note"].iloc[0])
    assert (run / "figures" / "fig3_sep_gradients.png").read_bytes()[:4] == b"\x89PNG"

    comparison = pd.read_csv(run / "comparison.csv")
    assert {"Table 1", "Table 2", "Table 3", "Figure facts"} <= set(comparison["section"])
    assert "FAIL" not in set(comparison["status"])  # a tiny random model is never comparable
    assert "Nothing comparable to the paper" in (run / "comparison.md").read_text()
    summary = pd.read_csv(run.parent / "tiny-all-models" / "models_summary.csv")
    assert len(summary) > 0

    # beyond the paper: rollout, the head report card (norm maps: test_norm_outputs)
    rollout = pd.read_csv(run / "tables" / "rollout_stats.csv")
    assert list(rollout["layer"]) == [1, 2]
    assert np.allclose(rollout[["cls", "sep", "punct", "other"]].sum(axis=1), 1.0, atol=1e-6)
    assert (run / "figures" / "fig_rollout.png").read_bytes()[:4] == b"\x89PNG"
    t1r = pd.read_csv(run / "tables" / "table1_rollout.csv")
    assert t1r["relation"].iloc[0] == "All" and set(t1r["best_head"]) <= {"1-1", "2-1"}
    report = pd.read_csv(run / "tables" / "head_report.csv")
    assert len(report) == 4 and {"importance", "confidence", "positional_offset", "sink", "behaviour",
                                 "best_relation", "best_accuracy", "coref_accuracy"} <= set(report.columns)
    assert report["importance"].isna().all()  # no masked-LM head: not run, said in the summary
    assert "masked-LM" in json.dumps(json.loads((run / "tables" / "head_report.summary.json").read_text()))
    assert (run / "figures" / "fig_head_report.png").read_bytes()[:4] == b"\x89PNG"
    # single-head trees (Htut et al. 2019) and the probe controls of issue 16
    trees = pd.read_csv(run / "tables" / "tree_heads.csv")
    assert len(trees) == 4 and trees[["uas_dep2head", "uas_head2dep", "uuas"]].stack().between(0, 1).all()
    best = pd.read_csv(run / "tables" / "tree_heads_best.csv")
    assert best["row"].tolist() == ["layer 1", "layer 2", "all layers", "right_branching", "adjacent_chain"]
    assert (run / "figures" / "fig_tree_heads.png").read_bytes()[:4] == b"\x89PNG"
    assert {"distances_only", "attn_glove_mlp"} <= probes
    ablations = pd.read_csv(run / "tables" / "probe_ablations.csv")
    assert list(zip(ablations["ablation"], ablations["layer"].astype(str))) == [
        ("all", "all"), ("keep", "1"), ("keep", "2"), ("drop", "1"), ("drop", "2")]
    assert (ablations["n_seeds"] == 2).all()
    assert ablations["uas_mean"].iloc[0] == pytest.approx(table3.set_index("probe").loc["attn_glove", "uas_mean"],
                                                          abs=1e-5)

    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["steps"]["treebank"]["parser"]["name"]
    assert manifest["steps"]["gradients"]["status"] == "not run"
    assert manifest["run"] == RUN and manifest["seed"] == 0
    assert len(manifest["corpus"]["dump_sha256"]) == 64
    assert manifest["packages"]["torch"].startswith("2.13")
    assert manifest["device"] == "cpu"
    assert manifest["model"]["provenance"]["source"] == "local"
    for log in ["segments", "extract_segments-1of1", "gather_extraction", "surface_stats", "cluster_heads",
                "rollout", "figures", "extract_words-dev", "probes", "manifest"]:
        assert (run / "logs" / f"{log}.log").is_file(), log
    # the one pass over the segment maps (extraction.keep_maps: false, the default): its statistics, JS and
    # rollout sums and the Fig 1 example, no segment store; one word shard: no merge job, no shard store
    partials = sorted(p.name for p in (run / "partials").glob("*-1of1.npz"))
    assert {"fig1-1of1.npz", "js-1of1.npz", "js_norm-1of1.npz", "rollout-1of1.npz", "stats-1of1.npz",
            "stats_norm-1of1.npz"} <= set(partials)
    assert not list((run / "attention").glob("segments-1of1")) and not list((run / "attention").glob("norms-1of1"))
    assert not [p for p in (run / "attention").iterdir() if p.is_dir()]  # word stores: temp(), read and deleted
    extraction = json.loads((run / "attention" / "segments.summary.json").read_text())
    assert extraction["n_examples"] == 12 and extraction["map_bytes"] > 0 and extraction["estimated_map_bytes"] == 0
    assert json.loads((run / "attention" / "segments.meta.json").read_text())["stored"] is False
    # the random-init maps: the run's model re-initialised in memory (no saved copy), provenance recorded
    assert not (run / "models").exists()
    rand_summary = json.loads((run / "attention" / "randwords-train.summary.json").read_text())
    assert rand_summary["random_init"]["seed"] == 0
    # one probes job: Table 3 with the random-init row, Table 3 on the norm maps, the ablations
    t3 = json.loads((run / "tables" / "table3.summary.json").read_text())
    assert t3["engine"] == "batched"
    assert table3.set_index("probe").loc["random_init_attn_glove", "n_seeds"] == 2
    assert (run / "tables" / "table3_norm.csv").is_file() and (run / "tables" / "probe_ablations.csv").is_file()
    assert "--run-dir" in out and "tiny-rand2" in out.split("models-summary", 1)[1].split("\n", 1)[0]


@pytest.mark.slow  # a second whole tiny run (1.5 min here): make test-all, CI
def test_killed_run_leaves_no_corrupt_outputs_and_resumes(finished_run, tmp_path, tiny_bert_dir):
    """Kill snakemake (SIGKILL, as a crash) mid-run: every output already there is complete and
    loadable, no temporary file is left in place of an output, and a rerun finishes with the same
    numbers as an uninterrupted run."""
    import signal
    import time

    from bertlook.attention.store import AttentionStore

    (tmp_path / "config.yaml").write_text(yaml.safe_dump(tiny_config(tmp_path, tiny_bert_dir)))
    cmd = [SNAKEMAKE, "--snakefile", str(ROOT / "Snakefile"), "--directory", str(tmp_path),
           "--configfile", str(tmp_path / "config.yaml"), "--cores", "2"]
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
                            start_new_session=True)
    run = tmp_path / "results" / RUN
    deadline = time.time() + 120
    while time.time() < deadline and not (run / "partials" / "stats-1of1.npz").exists():
        time.sleep(0.2)
    time.sleep(1.0)  # somewhere in the middle of the DAG
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)

    for csv in run.rglob("*.csv"):
        pd.read_csv(csv)  # complete tables only
    for js in run.rglob("*.json"):
        if not js.name.startswith("."):
            json.loads(js.read_text())
    for meta in run.glob("attention/*/meta.json"):
        store = AttentionStore(meta.parent)
        for _, attn in store:
            assert np.isfinite(attn).all()

    # the lock the killed run left is reported with what to do (make demo / make reproduce call this)
    check = [str(ROOT / "scripts" / "check_stale_lock.sh"), str(tmp_path), "config.yaml"]
    stale = subprocess.run(check, capture_output=True, text=True)
    assert stale.returncode == 2 and "make unlock" in stale.stderr, stale.stderr
    subprocess.run(cmd + ["--unlock"], capture_output=True, env=env, timeout=120)
    assert subprocess.run(check, capture_output=True).returncode == 0
    done = subprocess.run(cmd + ["--rerun-incomplete"], capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    _, reference = finished_run
    for table in ["attention_stats.csv", "table1.csv", "head_accuracy.csv", "table3.csv", "js_divergence.csv"]:
        assert (run / "tables" / table).read_text() == (reference / "tables" / table).read_text(), table


def test_norm_outputs(finished_run):
    """norms.enabled (the default): norm maps beside the attention maps, and their twins."""
    _, run = finished_run
    stats = pd.read_csv(run / "tables" / "attention_stats.csv")
    norm = pd.read_csv(run / "tables" / "attention_stats_norm.csv")
    assert list(norm.columns) == list(stats.columns) and len(norm) == len(stats)
    assert not np.allclose(norm["cls"], stats["cls"])  # another map, not a copy
    meta = json.loads((run / "attention" / "segments.summary.json").read_text())
    assert len(meta["norms"]["value_norm_sums"]) == 2  # one row per layer, gathered over the shards
    assert len(pd.read_csv(run / "tables" / "head_clusters_norm.csv")) == 4
    table1 = pd.read_csv(run / "tables" / "table1_norm.csv")
    assert table1["relation"].iloc[0] == "All"
    table3 = pd.read_csv(run / "tables" / "table3_norm.csv")
    assert "random_init_attn_glove" not in set(table3["probe"]) and table3["uas_mean"].notna().any()
    assert (run / "figures" / "fig_norms.png").read_bytes()[:4] == b"\x89PNG"
    comparison = pd.read_csv(run / "comparison.csv")
    kob = comparison[comparison["section"] == "Norms (Kobayashi et al. 2020)"]
    assert len(kob) == 3 and set(kob["status"]) <= {"not comparable", "not measured"}
    manifest = json.loads((run / "manifest.json").read_text())
    assert {"stats_norm", "heads_norm", "rollout", "head_report"} <= set(manifest["steps"])
