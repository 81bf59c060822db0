"""Scale-out (extraction.shards): shard ranges, partial sums reduced against the unsharded
computation, merged word-level stores, gathered summaries, the Fig 1 example of a sharded run."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from bertlook.attention import shards
from bertlook.pipeline import sharding
from bertlook.attention.store import AttentionStore, AttentionWriter, open_store
from bertlook.analyses.cluster_heads import js_divergence_matrix, js_divergence_partial, reduce_js_divergence
from bertlook.errors import BertlookError
from bertlook.analyses.surface_stats import compute_surface_stats, reduce_surface_stats, surface_stats_partial
from bertlook.testing.tiny_models import make_segment

LAYERS, HEADS = 2, 3
TOKENS = ["[CLS]", ".", "a", ",", "b", "[SEP]", "c", "d", "e", ",", "f", "[SEP]"]


def _maps(rng, n, alpha=0.5):
    return rng.dirichlet(np.full(n, alpha), size=(LAYERS, HEADS, n))


def _token_examples(lengths, seed=0):
    """(record, map) pairs in segment-file order; ids = positions."""
    rng = np.random.default_rng(seed)
    out = []
    for i, n in enumerate(lengths):
        toks = TOKENS[: n - 1] + ["[SEP]"] if n > 2 else ["[CLS]", "[SEP]"][:n]
        out.append(({"id": i, "tokens": toks}, _maps(rng, n)))
    return out


def _write(path, examples, *, level="token", meta=None, sort=True, shard_bytes=256 * 2**20):
    """A store as extract_to_store writes it: length-sorted (longest first, ties by id)."""
    if sort:
        examples = sorted(examples, key=lambda ex: (-int(ex[0].get("n_wordpieces", len(ex[0]["tokens"]))),
                                                    (0, ex[0]["id"]) if isinstance(ex[0]["id"], int)
                                                    else (1, str(ex[0]["id"]))))
    with AttentionWriter(path, num_layers=LAYERS, num_heads=HEADS, level=level, shard_bytes=shard_bytes,
                         meta={"order": "length-sorted", **(meta or {})}) as w:
        for rec, attn in examples:
            w.add(rec, attn)
    return AttentionStore(path)


def _shards(examples, k):
    return [examples[slice(*sharding.shard_range(len(examples), i, k))] for i in range(1, k + 1)]


LENGTHS = (5, 9, 7, 12, 6, 9, 8, 10, 11, 7, 12)


@pytest.fixture()
def token_examples():
    return _token_examples(LENGTHS)


# ------------------------------------------------------------------------------------------ ranges
def test_shard_ranges_cover_the_input_contiguously():
    for n in (0, 1, 5, 12, 1000):
        for k in (1, 2, 3, 4, 7, 16):
            ranges = [sharding.shard_range(n, i, k) for i in range(1, k + 1)]
            assert ranges[0][0] == 0 and ranges[-1][1] == n
            assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
            sizes = [b - a for a, b in ranges]
            assert max(sizes) - min(sizes) <= 1


def test_parse_shard_and_labels():
    assert sharding.parse_shard("2/4") == (2, 4) == sharding.parse_shard("2of4") == sharding.parse_shard("02of4")
    assert sharding.shard_labels(1) == ["1of1"]
    assert sharding.shard_labels(12)[:2] == ["01of12", "02of12"] and sharding.shard_labels(12)[-1] == "12of12"
    for bad in ("0/4", "5/4", "1/0", "a/b", "3"):
        with pytest.raises(BertlookError):
            sharding.parse_shard(bad)


# ------------------------------------------------------------------------- surface stats, JS sums
@pytest.mark.parametrize("k", [2, 3, 4])
def test_surface_stats_reduced_over_shards_equal_the_unsharded_statistics(tmp_path, token_examples, k):
    whole = _write(tmp_path / "whole", token_examples)
    want, want_summary = compute_surface_stats(whole)
    partials = [surface_stats_partial(_write(tmp_path / f"s{i}", part))
                for i, part in enumerate(_shards(token_examples, k))]
    got, summary = reduce_surface_stats(partials)
    assert list(got.columns) == list(want.columns)
    assert (got[["layer", "head"]].to_numpy() == want[["layer", "head"]].to_numpy()).all()
    np.testing.assert_allclose(got.iloc[:, 2:].to_numpy(), want.iloc[:, 2:].to_numpy(), rtol=1e-12, atol=1e-15)
    for key in ("n_examples", "n_examples_in_store", "excluded_from_column", "num_layers", "num_heads"):
        assert summary[key] == want_summary[key], key  # counts: exact
    assert summary["uniform_entropy"] == pytest.approx(want_summary["uniform_entropy"], rel=1e-12)
    assert summary["mean_tokens"] == want_summary["mean_tokens"]


def test_one_partial_reduces_to_bitwise_the_same_numbers(tmp_path, token_examples):
    """K = 1 (the default): the reduction adds one partial to zeros -- identical floats."""
    store = _write(tmp_path / "whole", token_examples)
    want, want_summary = compute_surface_stats(store)
    meta, arrays = surface_stats_partial(store)
    path = sharding.save_partial(tmp_path / "p.npz", "surface-stats", meta, arrays)
    got, summary = reduce_surface_stats([sharding.load_partial(path, "surface-stats")])
    assert got.equals(want) and summary == want_summary
    D = js_divergence_matrix(store)
    jm, ja = js_divergence_partial(store)
    sharding.save_partial(tmp_path / "js.npz", "js-divergence", jm, ja)
    R, info = reduce_js_divergence([sharding.load_partial(tmp_path / "js.npz", "js-divergence")])
    assert np.array_equal(R, D) and info["n_examples"] == len(store)


def test_undefined_columns_are_counted_across_shards(tmp_path):
    """An example without [SEP] (sep_sep undefined) in one shard only: the counts still add up."""
    rng = np.random.default_rng(3)
    examples = [({"id": 0, "tokens": ["[CLS]", "a", "b", "c"]}, _maps(rng, 4)),
                ({"id": 1, "tokens": ["[CLS]", "a", "[SEP]"]}, _maps(rng, 3)),
                ({"id": 2, "tokens": ["[CLS]", ".", "b", "[SEP]"]}, _maps(rng, 4))]
    want, want_summary = compute_surface_stats(_write(tmp_path / "w", examples))
    got, summary = reduce_surface_stats([surface_stats_partial(_write(tmp_path / f"s{i}", part))
                                         for i, part in enumerate(_shards(examples, 3))])
    np.testing.assert_allclose(got.iloc[:, 2:].to_numpy(), want.iloc[:, 2:].to_numpy(), rtol=1e-12)
    assert summary["excluded_from_column"] == want_summary["excluded_from_column"]
    assert summary["excluded_from_column"]["sep_sep (no [SEP] token)"] == 1


@pytest.mark.parametrize("k", [2, 4])
def test_js_sums_reduced_over_shards_equal_the_unsharded_matrix(tmp_path, token_examples, k):
    whole = _write(tmp_path / "whole", token_examples)
    want = js_divergence_matrix(whole)
    partials = [js_divergence_partial(_write(tmp_path / f"s{i}", part))
                for i, part in enumerate(_shards(token_examples, k))]
    got, info = reduce_js_divergence(partials)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-13)
    assert info["n_examples"] == len(token_examples) == info["n_examples_in_store"]


def test_max_examples_means_the_first_segments_of_the_file_whatever_the_sharding(tmp_path, token_examples):
    from bertlook.data.segments import write_segments

    seg_path = tmp_path / "segments.jsonl"
    write_segments(seg_path, [{"id": rec["id"], "doc": "d", "text_a": "a", "text_b": "b", "tokens": rec["tokens"],
                               "segment_ids": [0] * len(rec["tokens"]), "truncated": False}
                              for rec, _ in token_examples])
    N = 5
    first = _write(tmp_path / "first", token_examples[:N])
    want = js_divergence_matrix(first)
    whole = _write(tmp_path / "whole", token_examples)
    # one store, --segments: the first N segments of the file (not the N longest of the store)
    np.testing.assert_allclose(js_divergence_matrix(whole, max_examples=N, segments=seg_path), want, rtol=1e-12)
    partials = [js_divergence_partial(_write(tmp_path / f"s{i}", part), max_examples=N, segments=seg_path)
                for i, part in enumerate(_shards(token_examples, 4))]
    got, info = reduce_js_divergence(partials)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-13)
    assert info["n_examples"] == N and [m["n_examples"] for m, _ in partials] == [2, 3, 0, 0]
    stats_want, _ = compute_surface_stats(first)
    stats_got, summary = reduce_surface_stats([surface_stats_partial(_write(tmp_path / f"t{i}", part),
                                                                     max_examples=N, segments=seg_path)
                                               for i, part in enumerate(_shards(token_examples, 3))])
    np.testing.assert_allclose(stats_got.iloc[:, 2:].to_numpy(), stats_want.iloc[:, 2:].to_numpy(), rtol=1e-12)
    assert summary["n_examples"] == N


def test_reduce_refuses_mixed_or_empty_partials(tmp_path, token_examples):
    a = surface_stats_partial(_write(tmp_path / "a", token_examples[:3]))
    other = _token_examples([5, 6])
    rng = np.random.default_rng(0)
    with AttentionWriter(tmp_path / "b", num_layers=LAYERS + 1, num_heads=HEADS) as w:
        for rec, _ in other:
            n = len(rec["tokens"])
            w.add(rec, rng.dirichlet(np.ones(n), size=(LAYERS + 1, HEADS, n)))
    b = surface_stats_partial(open_store(tmp_path / "b"))
    with pytest.raises(BertlookError, match="num_layers"):
        reduce_surface_stats([a, b], where=["a.npz", "b.npz"])
    empty = js_divergence_partial(_write(tmp_path / "a2", token_examples[:3]), max_examples=0)
    with pytest.raises(BertlookError, match="no examples"):
        reduce_js_divergence([empty])
    with pytest.raises(BertlookError, match="partial"):
        sharding.load_partial(tmp_path / "missing.npz", "surface-stats")
    sharding.save_partial(tmp_path / "js.npz", "js-divergence", *js_divergence_partial(open_store(tmp_path / "a")))
    with pytest.raises(BertlookError, match="expected 'surface-stats'"):
        sharding.load_partial(tmp_path / "js.npz", "surface-stats")
    (tmp_path / "junk.npz").write_bytes(b"not a zip")
    with pytest.raises(BertlookError, match="not a partial"):
        sharding.load_partial(tmp_path / "junk.npz", "surface-stats")


def test_partial_files_hold_no_pickle(tmp_path, token_examples):
    meta, arrays = surface_stats_partial(_write(tmp_path / "a", token_examples))
    path = sharding.save_partial(tmp_path / "p.npz", "surface-stats", meta, arrays)
    with np.load(path, allow_pickle=False) as data:  # would raise on an object array
        assert all(data[name].dtype != object for name in data.files)
    with pytest.raises(BertlookError, match="object"):
        sharding.save_partial(tmp_path / "q.npz", "x", {}, {"bad": np.array([{"a": 1}], dtype=object)})


# ------------------------------------------------------------------------------------ merge stores
def _word_examples(n_sent=9, seed=1):
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n_sent):
        w = 2 + (i * 5) % 6
        rec = {"id": f"s{i}", "tokens": ["[CLS]", *[f"w{j}" for j in range(w)], "[SEP]"],
               "heads": [0] + [1] * (w - 1), "rels": ["root"] + ["dep"] * (w - 1),
               "n_wordpieces": w + 2 + (i % 3), "split_words": i % 3}
        out.append((rec, _maps(rng, w + 2)))
    return out


def _word_meta(examples, excluded_ids=()):
    return {"model": {"spec": "m"}, "special_tokens": {"cls": "[CLS]", "sep": "[SEP]"}, "n_sentences": len(examples),
            "n_words": sum(len(r["tokens"]) - 2 for r, _ in examples),
            "n_split_words": sum(r["split_words"] for r, _ in examples),
            "unknown_tokens": {"unk_tokens": 1, "non_special_tokens": 10, "unk_rate": 0.1, "unk_examples": []}}


@pytest.mark.parametrize("link", [True, False])
def test_merged_word_store_equals_the_unsharded_store(tmp_path, link):
    examples = _word_examples()
    whole = _write(tmp_path / "whole", examples, level="word", meta=_word_meta(examples))
    parts = []
    for i, part in enumerate(_shards(examples, 4)):
        # tiny shard files: several per shard store
        parts.append(_write(tmp_path / f"p{i}", part, level="word", meta=_word_meta(part), shard_bytes=400))
    result = shards.merge_stores([p.path for p in parts], tmp_path / "merged", link=link)
    merged = open_store(tmp_path / "merged", level="word")
    assert [r["id"] for r in merged.records] == [r["id"] for r in whole.records]  # the unsharded order
    for (ra, a), (rb, b) in zip(merged, whole):
        assert ra["tokens"] == rb["tokens"] and ra["heads"] == rb["heads"]
        assert np.array_equal(a, b)
    assert merged.meta["n_examples"] == len(examples) and merged.meta["level"] == "word"
    assert merged.meta["n_sentences"] == len(examples) and merged.meta["n_words"] == whole.meta["n_words"]
    assert merged.meta["unknown_tokens"]["unk_tokens"] == 4 and merged.meta["unknown_tokens"]["unk_rate"] == 0.1
    assert result["n_shard_files"] == sum(p.meta["n_shards"] for p in parts)
    shard0 = tmp_path / "merged" / "shard-00000.bin"
    if link:
        assert result["linked"] == result["n_shard_files"] and os.stat(shard0).st_nlink == 2
    else:
        assert result["copied"] == result["n_shard_files"] and os.stat(shard0).st_nlink == 1
    # the shard stores can go (Snakemake temp()): the merged store keeps its data
    for p in parts:
        for f in Path(p.path).iterdir():
            f.unlink()
    assert len(list(open_store(tmp_path / "merged"))) == len(examples)


def test_merge_stores_refuses_overlaps_and_mixed_layouts(tmp_path, token_examples):
    a = _write(tmp_path / "a", token_examples[:4])
    b = _write(tmp_path / "b", token_examples[3:])
    with pytest.raises(BertlookError, match="also in"):
        shards.merge_stores([a.path, b.path], tmp_path / "m")
    w = _write(tmp_path / "w", _word_examples(3), level="word")
    with pytest.raises(BertlookError, match="level"):
        shards.merge_stores([a.path, w.path], tmp_path / "m")
    assert not (tmp_path / "m").exists()


def test_merge_of_an_empty_shard(tmp_path, token_examples):
    full = _write(tmp_path / "a", token_examples[:2])
    empty = _write(tmp_path / "e", [])
    shards.merge_stores([full.path, empty.path], tmp_path / "m")
    assert len(open_store(tmp_path / "m")) == 2
    shards.merge_stores([empty.path], tmp_path / "m0")
    assert len(open_store(tmp_path / "m0")) == 0


# ---------------------------------------------------------------------------------- summaries
def test_merge_summaries_sums_counts_checks_settings_and_recomputes_rates():
    s1 = {"n_examples": 3, "tokens": 30, "seconds": 1.0, "tokens_per_second": 30.0, "batch_size": 4,
          "excluded_ids": [7], "unk_tokens": 1, "non_special_tokens": 20, "unk_rate": 0.05, "n_words": 10,
          "n_split_words": 1, "split_word_fraction": 0.1, "unk_examples": [{"id": 1}] * 4,
          "shard": {"index": 1, "count": 2}, "store_meta": {"n_examples": 3},
          "treebank_counts": {"sentences": 20}, "out_dir": "a", "disk_free_bytes": 100, "map_bytes": 800}
    s2 = {**s1, "n_examples": 2, "tokens": 10, "seconds": 3.0, "excluded_ids": [9], "unk_tokens": 0,
          "n_split_words": 4, "unk_examples": [{"id": 2}] * 3, "shard": {"index": 2, "count": 2}, "out_dir": "b",
          "disk_free_bytes": 50, "map_bytes": 200}
    m = sharding.merge_summaries([s1, s2])
    assert m["map_bytes"] == 1000  # float16 bytes of the shards' maps: a sum, so K shards give K = 1's count
    assert m["n_examples"] == 5 and m["tokens"] == 40 and m["seconds"] == 4.0 and m["tokens_per_second"] == 10.0
    assert m["excluded_ids"] == [7, 9] and len(m["unk_examples"]) == 5 and m["batch_size"] == 4
    assert m["unk_rate"] == 1 / 40 and m["split_word_fraction"] == 0.25
    assert "shard" not in m and "store_meta" not in m and m["treebank_counts"] == {"sentences": 20}
    assert m["out_dir"] == ["a", "b"] and m["disk_free_bytes"] == 50
    one = sharding.merge_summaries([s1])
    assert one == {k: v for k, v in s1.items() if k not in ("shard", "store_meta")}


# ------------------------------------------------------------------- extraction on a tiny model
TEXTS = [("the cat sat on the mat .", "the dog ran ."), ("john saw mary .", "she read a book in paris ."),
         ("the king and the queen went to london .", "they said it was a very good city , and then they came home ."),
         ("a man .", "a woman ."), ("it was a big house .", "there were many people ."),
         ("the man saw the dog .", "it ran to the house , then home .")]


@pytest.fixture(scope="module")
def segments_file(tmp_path_factory, tiny_mlm_dir):
    from bertlook.data.segments import write_segments
    from bertlook.attention.modeling import load_tokenizer, resolve_model

    tok = load_tokenizer(resolve_model(str(tiny_mlm_dir)))
    path = tmp_path_factory.mktemp("segs") / "segments.jsonl"
    write_segments(path, [make_segment(tok, i, a, b) for i, (a, b) in enumerate(TEXTS)])
    return path


def test_sharded_extraction_gathers_into_the_unsharded_store_and_summary(tmp_path, tiny_mlm_dir, segments_file):
    from bertlook.attention.extraction import extract_segments

    common = dict(batch_size=1, device="cpu", progress_every=0, max_seq_len=20)  # segments 2 and 5 are over 20
    whole = extract_segments(segments_file, str(tiny_mlm_dir), tmp_path / "whole", **common)
    paths = []
    for i in range(1, 4):
        s = extract_segments(segments_file, str(tiny_mlm_dir), tmp_path / f"s{i}", shard=(i, 3), **common)
        assert s["shard"]["index"] == i and s["store_meta"]["shard"]["count"] == 3
        paths.append(tmp_path / f"s{i}.json")
        paths[-1].write_text(json.dumps(s))
    summary, meta = sharding.gather_extraction(paths)
    for key in ("n_input", "n_examples", "excluded_too_long", "tokens", "padded_tokens", "n_segments",
                "unk_tokens", "non_special_tokens", "estimated_map_bytes", "num_layers", "num_heads"):
        assert summary[key] == whole[key], key
    assert summary["excluded_ids"] == whole["excluded_ids"] == [2, 5]
    w = open_store(tmp_path / "whole")
    assert meta["n_examples"] == len(w) and meta["excluded"]["too_long"] == 2 and meta["model"] == w.meta["model"]
    maps = {rec["id"]: a for i in range(1, 4) for rec, a in open_store(tmp_path / f"s{i}")}
    for rec, a in w:  # batch 1: the same maps
        assert np.array_equal(maps[rec["id"]], a)
    with pytest.raises(BertlookError, match="expected 1/3"):
        sharding.gather_extraction(paths[1:] + paths[:1])


def test_fig1_example_is_found_by_exactly_one_shard(tmp_path, tiny_mlm_dir, segments_file):
    from bertlook.attention.extraction import extract_segments
    from bertlook.attention.fig1_example import fig1_example_partial, load_fig1_example

    common = dict(batch_size=2, device="cpu", progress_every=0)
    extract_segments(segments_file, str(tiny_mlm_dir), tmp_path / "whole", **common)
    w = open_store(tmp_path / "whole")
    for i in range(1, 4):
        extract_segments(segments_file, str(tiny_mlm_dir), tmp_path / f"s{i}", shard=(i, 3), **common)
    for index in (0, 3, len(w) - 1):
        files = []
        for i in range(1, 4):
            meta, arrays = fig1_example_partial(tmp_path / f"s{i}", segments_file, index)
            files.append(sharding.save_partial(tmp_path / f"f{i}.npz", "fig1-example", meta, arrays))
        meta, attn = load_fig1_example(files)
        assert meta["id"] == w.records[index]["id"] and meta["tokens"] == w.records[index]["tokens"]
        np.testing.assert_allclose(attn.astype(np.float32), w.get(index).astype(np.float32), atol=2e-3)
    with pytest.raises(BertlookError, match="out of range"):
        fig1_example_partial(tmp_path / "s1", segments_file, len(w))


def test_sharded_word_extraction_merges_into_the_unsharded_store(tmp_path, tiny_bert_dir):
    from bertlook.attention.extract_words import extract_word_attention

    conllu = tmp_path / "dev.conllu"
    sents = [["The", "cat", "sat", "."], ["John's", "dog", "sang", "42"], ["a", "man", "."], ["it", "was", "big"],
             ["the", "queen", "went", "to", "london", "."]]
    lines = []
    for k, words in enumerate(sents):
        lines.append(f"# sent_id = s{k}")
        for j, w in enumerate(words, 1):
            lines.append(f"{j}\t{w}\t{w}\tX\tX\t_\t{0 if j == 1 else 1}\t{'root' if j == 1 else 'dep'}\t_\t_")
        lines.append("")
    conllu.write_text("\n".join(lines) + "\n", encoding="utf-8")
    common = dict(batch_size=1, device="cpu", progress_every=0, max_seq_len=8)  # the last sentence is too long
    whole = extract_word_attention(conllu, str(tiny_bert_dir), tmp_path / "whole", **common)
    stores, summaries = [], []
    for i in range(1, 3):
        s = extract_word_attention(conllu, str(tiny_bert_dir), tmp_path / f"p{i}", shard=(i, 2), **common)
        stores.append(tmp_path / f"p{i}")
        summaries.append(s)
    shards.merge_stores(stores, tmp_path / "merged")
    merged, w = open_store(tmp_path / "merged"), open_store(tmp_path / "whole")
    assert [r["id"] for r in merged.records] == [r["id"] for r in w.records]
    for (ra, a), (rb, b) in zip(merged, w):
        assert ra == {**rb, "shard": ra["shard"], "offset": ra["offset"]} and np.array_equal(a, b)
    assert merged.meta["excluded"] == w.meta["excluded"]
    assert merged.meta["n_sentences"] == w.meta["n_sentences"] == 5
    gathered = sharding.merge_summaries(summaries)
    for key in ("n_sentences", "n_extracted", "n_words", "n_split_words", "split_word_fraction", "excluded_too_long",
                "excluded_too_long_ids", "tokens", "padded_tokens", "treebank_counts", "unk_tokens"):
        assert gathered[key] == whole[key], key


def test_sharded_gradients_reduce_to_the_unsharded_numbers(tiny_mlm_dir, segments_file):
    from bertlook.analyses.gradients import gradient_partial, reduce_gradients, sep_gradient_importance

    common = dict(seed=3, batch_size=1, device="cpu", progress_every=0, max_examples=5)
    want, want_summary = sep_gradient_importance(segments_file, str(tiny_mlm_dir), **common)
    for average in ("pooled", "segment"):
        want, want_summary = sep_gradient_importance(segments_file, str(tiny_mlm_dir), grad_average=average, **common)
        partials = [gradient_partial(segments_file, str(tiny_mlm_dir), shard=(i, 3), grad_average=average, **common)
                    for i in range(1, 4)]
        assert [m["n_examples"] for m, _ in partials] == [1, 2, 2]
        got, summary = reduce_gradients(partials)
        assert (got[["layer", "target"]] == want[["layer", "target"]]).all().all()
        np.testing.assert_allclose(got[["mean_abs_grad", "attention_mass"]].to_numpy(),
                                   want[["mean_abs_grad", "attention_mass"]].to_numpy(), rtol=1e-6, atol=1e-12)
        for key in ("n_examples", "masked_tokens", "mask_actions", "tokens", "segments_without_target",
                    "entries_per_layer", "excluded_too_long", "maskable_fraction_masked"):
            assert summary[key] == want_summary[key], key
        assert summary["mean_loss"] == pytest.approx(want_summary["mean_loss"], rel=1e-6)
