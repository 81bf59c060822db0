"""Fuzzing the attention store reader: a mutated store either reads as valid maps or is refused with a
BertlookError (``error:`` + exit 2 in the CLI) -- never another exception (IndexError, KeyError, ...).

Each test starts from a small valid store (two shards, three examples) and mutates bytes, lines or JSON
values of ``meta.json``, ``index.jsonl`` and the shards. Derandomized: the same cases on every run.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bertlook.attention.store import META_KEYS, AttentionStore, AttentionWriter, row_sum_tolerance
from bertlook.errors import BertlookError

L, H = 2, 2
SIZES = (3, 4, 2)
FILES = ("meta.json", "index.jsonl", "shard-00000.bin", "shard-00001.bin")
FUZZ = settings(derandomize=True, max_examples=100, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    rng = np.random.default_rng(0)
    out = tmp_path_factory.mktemp("fuzz") / "store"
    # 2 * 2 * 3 * 3 * 2 = 72 bytes: the second example starts shard 1, the third joins it
    with AttentionWriter(out, num_layers=L, num_heads=H, shard_bytes=200) as w:
        for i, n in enumerate(SIZES):
            a = rng.random((L, H, n, n)) + 0.05
            w.add({"id": f"e{i}", "tokens": [f"t{k}" for k in range(n)]}, a / a.sum(-1, keepdims=True))
    assert json.loads((out / "meta.json").read_text())["n_shards"] == 2
    return out


def check_store(path: Path) -> str:
    """Open and read every example; valid maps or a BertlookError, nothing else. Returns the outcome."""
    try:
        store = AttentionStore(path)
        for i in range(len(store)):
            rec = store.records[i]
            a = store.get(i)
            n = rec["n"]
            assert a.dtype == np.float16 and a.shape == (store.num_layers, store.num_heads, n, n)
            assert len(rec["tokens"]) == n
            f = a.astype(np.float64)
            assert np.isfinite(f).all() and (f >= 0).all()
            assert np.abs(f.sum(-1) - 1).max() <= row_sum_tolerance(n)
        for rec, a in store:  # iteration reads the same checked maps
            assert a.shape[-1] == rec["n"]
        store.close()
        return "ok"
    except BertlookError as err:
        assert str(err) and str(path) in str(err), err  # the message names the store
        return "refused"


def mutated_copy(template: Path, tmp: str, file: str, mutate) -> Path:
    out = Path(tmp) / "store"
    shutil.copytree(template, out)
    p = out / file
    p.write_bytes(mutate(p.read_bytes()))
    return out


# ------------------------------------------------------------------------------------- byte mutations
byte_edits = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 10**6), st.integers(0, 7)),
    st.tuples(st.just("set"), st.integers(0, 10**6), st.integers(0, 255)),
    st.tuples(st.just("delete"), st.integers(0, 10**6), st.integers(1, 40)),
    st.tuples(st.just("insert"), st.integers(0, 10**6), st.binary(min_size=1, max_size=20)),
    st.tuples(st.just("truncate"), st.integers(0, 10**6), st.none()),
    st.tuples(st.just("append"), st.none(), st.binary(min_size=1, max_size=20)),
)


def apply_bytes(data: bytes, edits) -> bytes:
    b = bytearray(data)
    for kind, pos, arg in edits:
        if kind == "append":
            b += arg
            continue
        i = pos % (len(b) + 1)
        if kind == "flip" and i < len(b):
            b[i] ^= 1 << arg
        elif kind == "set" and i < len(b):
            b[i] = arg
        elif kind == "delete":
            del b[i:i + arg]
        elif kind == "insert":
            b[i:i] = arg
        elif kind == "truncate":
            del b[i:]
    return bytes(b)


@FUZZ
@given(file=st.sampled_from(FILES), edits=st.lists(byte_edits, min_size=1, max_size=4))
def test_byte_mutations(template, file, edits):
    with tempfile.TemporaryDirectory() as tmp:
        check_store(mutated_copy(template, tmp, file, lambda d: apply_bytes(d, edits)))


# ------------------------------------------------------------------------------ float16 values in shards
special = st.sampled_from([np.nan, np.inf, -np.inf, -0.0, 0.0, -1.0, 1.0, 0.5, 1e-7, 65504.0, 2.0, 1e-3])


@FUZZ
@given(shard=st.sampled_from(FILES[2:]), pos=st.integers(0, 10**6), value=special | st.floats(-10, 10))
def test_value_mutations(template, shard, pos, value):
    def put(d: bytes) -> bytes:
        a = np.frombuffer(d, dtype="<f2").copy()
        a[pos % len(a)] = value
        return a.tobytes()

    with tempfile.TemporaryDirectory() as tmp:
        out = check_store(mutated_copy(template, tmp, shard, put))
        if not (np.isfinite(value) and value >= 0):
            assert out == "refused"


# ------------------------------------------------------------------------------------ JSON mutations
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 2**40) | st.floats(allow_nan=True) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=8,
)
near_ints = st.integers(-2, 80) | st.sampled_from([10**9, 2**63, -(2**63)])


@FUZZ
@given(key=st.sampled_from([*META_KEYS, "other"]), value=json_values | near_ints, drop=st.booleans())
def test_meta_value_mutations(template, key, value, drop):
    def change(d: bytes) -> bytes:
        meta = json.loads(d)
        if drop:
            meta.pop(key, None)
        else:
            meta[key] = value
        return json.dumps(meta).encode()

    with tempfile.TemporaryDirectory() as tmp:
        check_store(mutated_copy(template, tmp, "meta.json", change))


@FUZZ
@given(
    line=st.integers(0, 3),
    key=st.sampled_from(["id", "n", "shard", "offset", "tokens", "extra"]),
    value=json_values | near_ints | st.lists(st.text(max_size=3), max_size=6),
    op=st.sampled_from(["set", "drop", "delete_line", "duplicate_line", "swap_lines", "raw"]),
    raw=st.text(max_size=30),
)
def test_index_mutations(template, line, key, value, op, raw):
    def change(d: bytes) -> bytes:
        lines = d.decode().splitlines()
        i = line % len(lines)
        if op in ("set", "drop"):
            rec = json.loads(lines[i])
            if op == "set":
                rec[key] = value
            else:
                rec.pop(key, None)
            lines[i] = json.dumps(rec)
        elif op == "delete_line":
            del lines[i]
        elif op == "duplicate_line":
            lines.insert(i, lines[i])
        elif op == "swap_lines":
            j = (i + 1) % len(lines)
            lines[i], lines[j] = lines[j], lines[i]
        else:
            lines[i] = raw
        return ("\n".join(lines) + "\n").encode()

    with tempfile.TemporaryDirectory() as tmp:
        check_store(mutated_copy(template, tmp, "index.jsonl", change))


def test_template_is_valid(template):
    assert check_store(template) == "ok"
