"""Scale-out end to end: the real `snakemake` on the tiny configuration with extraction.shards = 1
and = 4 (keep_maps: false, extraction.word_shards: 2) gives the same tables; with keep_maps: false the
segment maps and the merged word maps are gone after the run, nothing is rerun because of it, and the
tables equal those of a keep_maps: true run.

The tiny model has a masked-LM head here, so the gradient stage runs too. Batches of one example
(extraction and gradients) make each map independent of the batching, so the only differences
between K = 1 and K = 4 can come from the order in which per-shard sums are added.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from bertlook.attention.store import open_store
from bertlook.reporting.golden import make_golden
from workflow_helpers import RUN, snakemake, tiny_config, without_contributions

# several full runs of the tiny DAG (minutes): `make test-all` and CI run it, `make test` does not
pytestmark = [pytest.mark.e2e, pytest.mark.slow]

# float tolerance: the per-shard sums are added in another order than the examples of one store
RTOL, ATOL = 1e-9, 1e-12
# integers of the summaries that legitimately depend on the sharding: the size estimate counts one
# meta.json / index overhead per shard store
SHARD_DEPENDENT_COUNTS = ("estimated_bytes",)
# the estimated size of the segment stores: k1 keeps its maps (keep_maps: true), k4 writes none (0); the word
# stores are written either way (their estimates must agree)
KEEP_MAPS_DEPENDENT_COUNTS = ("extraction/estimated_map_bytes",)


def _config(workdir: Path, model_dir: Path, *, shards: int, keep_maps: bool) -> Path:
    config = without_contributions(tiny_config(workdir, model_dir))
    word_shards = 2 if shards > 1 else None  # fewer word-level jobs than segment shards
    config["extraction"].update(shards=shards, word_shards=word_shards, keep_maps=keep_maps, batch_size=1)
    config["gradients"].update(batch_size=1)
    config["clustering"]["max_examples"] = 10  # the first 10 of the 12 segments: spans shards 1-4
    config["figures"]["example_index"] = 5
    config["probes"]["random_init"] = False  # keeps the test short; randwords take the same rules as words
    config["coref"]["conll"] = []
    path = workdir / "config.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _run(workdir: Path, *args: str) -> None:
    proc = snakemake(workdir, *args, timeout=1200)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, tiny_mlm_dir):
    out = {}
    for name, shards, keep in (("k1", 1, True), ("k4", 4, False)):
        workdir = tmp_path_factory.mktemp(name)
        _config(workdir, tiny_mlm_dir, shards=shards, keep_maps=keep)
        _run(workdir)
        out[name] = (workdir, workdir / "results" / RUN)
    return out


def compare_tables(a: Path, b: Path) -> dict[str, float]:
    """Every table of run ``a`` against run ``b``: same columns and rows, labels and counts equal,
    floats within RTOL/ATOL; returns the largest absolute difference per table."""
    diffs = {}
    tables = sorted(p.name for p in (a / "tables").glob("*.csv"))
    assert tables == sorted(p.name for p in (b / "tables").glob("*.csv"))
    for name in tables:
        da, db = pd.read_csv(a / "tables" / name), pd.read_csv(b / "tables" / name)
        assert list(da.columns) == list(db.columns) and da.shape == db.shape, name
        floats = [c for c in da.columns if pd.api.types.is_float_dtype(da[c])]
        others = [c for c in da.columns if c not in floats]
        assert da[others].astype(str).equals(db[others].astype(str)), name
        for c in floats:
            np.testing.assert_allclose(db[c].to_numpy(), da[c].to_numpy(), rtol=RTOL, atol=ATOL, err_msg=f"{name}:{c}")
        diffs[name] = max((float(np.nanmax(np.abs(da[c] - db[c]))) for c in floats if da[c].notna().any()), default=0.0)
    return diffs


def test_one_and_four_shards_give_the_same_tables_and_counts(runs):
    (_, k1), (_, k4) = runs["k1"], runs["k4"]
    diffs = compare_tables(k1, k4)
    assert set(diffs) >= {"attention_stats.csv", "js_divergence.csv", "head_clusters.csv", "sep_gradients.csv",
                          "head_accuracy.csv", "table1.csv", "table3.csv"}
    print("max abs differences, K=1 vs K=4:", diffs)
    # every number the golden check knows, the integer counts of the step summaries exactly
    g1, g4 = make_golden(k1), make_golden(k4)
    for group, data in g1["groups"].items():
        v1, v4 = data["values"], g4["groups"][group]["values"]
        assert set(v1) == set(v4), group
        for key, value in v1.items():
            if key.rsplit("/", 1)[-1] in SHARD_DEPENDENT_COUNTS:
                continue
            if key in KEEP_MAPS_DEPENDENT_COUNTS:
                assert value > 0 and v4[key] == 0, key  # k1 writes its segment store, k4 none
                continue
            if isinstance(value, float):
                assert v4[key] == pytest.approx(value, rel=RTOL, abs=ATOL), key
            else:
                assert v4[key] == value, key
    grads = pd.read_csv(k4 / "tables" / "sep_gradients.csv")
    assert grads["mean_abs_grad"].notna().all()  # the masked-LM model: the gradients ran, in 4 shards
    stats = pd.read_json(k4 / "tables" / "attention_stats.summary.json", typ="series")
    assert stats["n_examples"] == 12
    for name in ("fig1_example_heads.png", "fig3_sep_gradients.png", "fig6_head_clusters.png"):
        assert (k4 / "figures" / name).read_bytes()[:4] == b"\x89PNG"


def test_keep_maps_false_deletes_the_segment_maps_and_reruns_nothing(runs):
    workdir, k4 = runs["k4"]
    attention = k4 / "attention"
    assert not [p for p in attention.iterdir() if p.is_dir() and p.name.startswith("segments")]
    assert len(list(attention.glob("segments-*of4.summary.json"))) == 4
    # word-level shard stores (extraction.word_shards: 2) are temp() once merged, and with keep_maps:
    # false the merged stores too, once Table 1 and the probes read them; their summaries stay
    assert not [p for p in attention.iterdir() if p.is_dir() and p.name.startswith("words")]
    assert len(list(attention.glob("words-*-*of2.summary.json"))) == 4
    assert json.loads((attention / "words-dev.summary.json").read_text())["n_extracted"] == 15
    assert json.loads((attention / "words-train.summary.json").read_text())["n_extracted"] == 20
    proc = snakemake(workdir, "-n")
    assert proc.returncode == 0 and "Nothing to be done" in proc.stdout + proc.stderr, proc.stdout[-3000:]
    _, k1 = runs["k1"]
    assert len(open_store(k1 / "attention" / "segments-1of1")) == 12  # keep_maps: true keeps them
    assert len(open_store(k1 / "attention" / "words-dev", level="word")) == 15


def test_keep_maps_true_rerun_gives_identical_tables(runs, tiny_mlm_dir, tmp_path):
    """Switch the keep_maps: false run to keep_maps: true and re-extract (segments and words): the maps
    are kept and every table is byte-identical to the one written while the maps were deleted."""
    workdir, k4 = runs["k4"]
    before = tmp_path / "before"
    shutil.copytree(k4 / "tables", before)
    _config(workdir, tiny_mlm_dir, shards=4, keep_maps=True)
    _run(workdir, "--forcerun", "extract_segments", "extract_words")
    assert len([p for p in (k4 / "attention").glob("segments-*of4") if p.is_dir()]) == 4
    assert len(open_store(k4 / "attention" / "words-train", level="word")) == 20  # kept now
    for table in sorted(before.iterdir()):
        if table.name in ("table3.summary.json", "table3_norm.summary.json", "probe_ablations.summary.json",
                          "tree_heads.summary.json"):  # timings: equal without them
            strip = lambda o: ({k: strip(v) for k, v in o.items()
                                if k not in ("seconds", "sentences_per_s", "trees_per_s", "engine_timing")}
                               if isinstance(o, dict) else [strip(v) for v in o] if isinstance(o, list) else o)
            assert strip(json.loads((k4 / "tables" / table.name).read_text())) == strip(json.loads(table.read_text()))
            continue
        assert (k4 / "tables" / table.name).read_bytes() == table.read_bytes(), table.name
