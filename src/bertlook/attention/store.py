"""Sharded on-disk store of per-example attention maps (no pickle, streamed).

A store directory holds ``meta.json``, ``index.jsonl`` and raw little-endian float16 ``shard-*.bin``
files, each example ``[layer, head, from_token, to_token]``. :class:`AttentionWriter` appends maps
one at a time (built under a temporary name, renamed into place on ``close()``); :func:`open_store`, the
one entry point of every step, returns a validated :class:`AttentionStore` that reads and checks one
map at a time (:func:`row_sum_tolerance`).

Definitions (layout, order, checks): docs/definitions.md#attention-store
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections import OrderedDict
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from bertlook.errors import BertlookError
from bertlook.io_utils import remove_stale_temporaries, temp_prefix, umask, write_error

FORMAT = "bertlook-attention/1"
DTYPE = np.dtype("<f2")
LEVELS = ("token", "word")
MAX_OPEN_SHARDS = 4  # open shard file handles kept per store (least recently used closed first)


class AttentionStoreError(BertlookError, ValueError):
    """Raised for a missing, inconsistent or corrupt attention store (a user error: ``error:`` + exit 2).

    Also a ``ValueError`` for callers that catch that.
    """


# ---------------------------------------------------------------------------- row-sum tolerance
# Every stored row is a probability distribution (row = attention FROM a token): softmax rows of the
# model (float32), or word-level rows built from them (column sums, then the mean / first / renormalised
# max of rows: all sum to 1 in float32). Storing in float16 rounds each value x to nearest: the error is
# at most 2**-11 * |x| for normal numbers and 2**-25 for subnormals (x < 2**-14), so a stored row sums to
# 1 within 2**-11 + n * 2**-25; float32 softmax / conversion and the float32 sum of the check add at most
# about n * 2**-24. row_sum_tolerance(n) = 4 * (2**-11 + n * 2**-24) keeps a factor 4 over that bound
# (1.98e-3 at n = 128, 2.1e-3 at n = 512) and still refuses a lost, doubled or garbled value of any
# size that matters (> 0.002). Measured on real stores: max |sum - 1| is about 5e-4 (see tests).
def row_sum_tolerance(n: int) -> float:
    """Largest accepted ``|sum(row) - 1|`` for a stored float16 row of ``n`` values."""
    return 4.0 * (2.0**-11 + n * 2.0**-24)


def _write_error(path: Path | str, err: OSError) -> AttentionStoreError:
    """An OSError while writing a store as a user error naming the path ("no space left on device")."""
    return AttentionStoreError(str(write_error(path, err, what="attention store")))


class AttentionWriter:
    """Append attention maps ``[layers, heads, n, n]`` to a new store at ``out_dir``.

    Use as a context manager; on an exception the temporary directory is removed and
    nothing appears at ``out_dir``.
    """

    def __init__(
        self,
        out_dir: str | os.PathLike,
        *,
        num_layers: int,
        num_heads: int,
        level: str = "token",
        shard_bytes: int = 256 * 2**20,
        meta: dict[str, Any] | None = None,
    ) -> None:
        self.out_dir = Path(out_dir)
        self._tmp = None
        self._shard_fh = None
        self._closed = False
        if level not in LEVELS or int(num_layers) < 1 or int(num_heads) < 1:
            raise AttentionStoreError(f"{self.out_dir}: bad store layout: level {level!r} (use one of "
                                      f"{', '.join(LEVELS)}), {num_layers} layers, {num_heads} heads")
        try:
            self.out_dir.parent.mkdir(parents=True, exist_ok=True)
            # a killed earlier run of this step left its temporary directory: remove it
            remove_stale_temporaries(self.out_dir)
            self._tmp = Path(tempfile.mkdtemp(prefix=temp_prefix(self.out_dir, "tmp-"), dir=self.out_dir.parent))
            # mkdtemp makes 0700: give the directory the permissions its files get (umask)
            os.chmod(self._tmp, 0o777 & ~umask())
        except OSError as err:
            self.abort()
            raise _write_error(self.out_dir, err) from None
        self.num_layers = int(num_layers)
        self.num_heads = int(num_heads)
        self.level = level
        self.shard_bytes = int(shard_bytes)
        self.meta = dict(meta or {})
        self._index: list[dict[str, Any]] = []
        self._shard_id = -1
        self._shard_len = 0  # elements written to the current shard
        self._closed = False
        self._guarded(self._new_shard)

    def _guarded(self, fn, *args):
        """Run a writing step; an OSError (e.g. ENOSPC) removes the temporary store and becomes an
        :class:`AttentionStoreError` naming ``out_dir`` -- nothing half-written remains."""
        try:
            return fn(*args)
        except OSError as err:
            self.abort()
            raise _write_error(self.out_dir, err) from None

    def _new_shard(self) -> None:
        if self._shard_fh is not None:
            self._shard_fh.close()
        self._shard_id += 1
        self._shard_fh = open(self._tmp / f"shard-{self._shard_id:05d}.bin", "wb")
        self._shard_len = 0

    def add(self, record: dict[str, Any], attn: np.ndarray) -> None:
        """Write one example. ``record`` must hold ``id`` and ``tokens`` (len n)."""
        attn = np.asarray(attn)
        if attn.ndim != 4 or attn.shape[:2] != (self.num_layers, self.num_heads) or attn.shape[2] != attn.shape[3]:
            raise AttentionStoreError(
                f"example {record.get('id')!r}: expected attention of shape "
                f"[{self.num_layers}, {self.num_heads}, n, n], got {list(attn.shape)}"
            )
        n = attn.shape[2]
        if "tokens" not in record or len(record["tokens"]) != n:
            raise AttentionStoreError(
                f"example {record.get('id')!r}: {len(record.get('tokens', []))} tokens for an attention map of size {n}"
            )
        rid = record.get("id")
        if not (isinstance(rid, str) or _is_int(rid)) or not all(isinstance(t, str) for t in record["tokens"]):
            raise AttentionStoreError(f"example {rid!r}: the id must be a string or an integer and the tokens strings")
        if self._closed:
            raise AttentionStoreError(f"{self.out_dir}: the attention store is already closed")
        if self._shard_len > 0 and (self._shard_len + attn.size) * DTYPE.itemsize > self.shard_bytes:
            self._guarded(self._new_shard)
        data = np.ascontiguousarray(attn, dtype=DTYPE)  # [layer, head, query_pos, key_pos]
        self._guarded(self._shard_fh.write, data.tobytes(order="C"))
        entry = dict(record)
        entry.update({"n": int(n), "shard": self._shard_id, "offset": self._shard_len})
        self._index.append(entry)
        self._shard_len += data.size

    def close(self, excluded: dict[str, Any] | None = None, extra_meta: dict[str, Any] | None = None) -> Path:
        """Finish the store: write index and meta, then atomically move it to ``out_dir``."""
        if self._closed:
            return self.out_dir
        return self._guarded(self._finish, excluded, extra_meta)

    def _finish(self, excluded: dict[str, Any] | None, extra_meta: dict[str, Any] | None) -> Path:
        self._shard_fh.close()
        layout = {
            "format": FORMAT,
            "num_layers": self.num_layers,
            "num_heads": self.num_heads,
            "dtype": "float16",
            "level": self.level,
            "n_examples": len(self._index),
            "n_shards": self._shard_id + 1,
        }
        # extra meta never overrides the layout keys the reader validates
        meta = {**layout, "excluded": excluded or {}, **self.meta, **(extra_meta or {}), **layout}
        publish_store(self._tmp, self.out_dir, self._index, meta)
        self._closed = True
        return self.out_dir

    def abort(self) -> None:
        if self._shard_fh is not None and not self._shard_fh.closed:
            try:
                self._shard_fh.close()
            except OSError:  # ENOSPC again while flushing: the directory goes anyway
                pass
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
        self._closed = True

    def __enter__(self) -> "AttentionWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.abort()
        elif not self._closed:
            self.close()


def publish_store(tmp: Path, out_dir: Path, entries: Sequence[dict[str, Any]], meta: dict[str, Any]) -> None:
    """Write ``index.jsonl`` (``entries``) and ``meta.json`` into the store built in ``tmp``, then swap it into
    ``out_dir`` atomically: a previous store there is moved aside first (a name remove_stale_temporaries
    knows), put back when the swap fails, removed when it succeeds."""
    with open(tmp / "index.jsonl", "w", encoding="utf-8") as fh:
        for entry in entries:
            fh.write(json.dumps(entry, ensure_ascii=False) + "\n")
    with open(tmp / "meta.json", "w", encoding="utf-8") as fh:
        json.dump(meta, fh, indent=2, ensure_ascii=False)
    old = None
    if out_dir.exists() or out_dir.is_symlink():
        old = Path(tempfile.mkdtemp(prefix=temp_prefix(out_dir, "tmp-") + "old", dir=out_dir.parent))
        os.replace(out_dir, old / "store")
    try:
        os.replace(tmp, out_dir)
    except OSError:
        if old is not None:  # put the previous store back
            os.replace(old / "store", out_dir)
            shutil.rmtree(old, ignore_errors=True)
        raise
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


# keys every meta.json has, with the accepted JSON types (bool is never an int here)
META_KEYS: dict[str, tuple[type, ...]] = {
    "format": (str,),
    "num_layers": (int,),
    "num_heads": (int,),
    "dtype": (str,),
    "level": (str,),
    "n_examples": (int,),
    "n_shards": (int,),
    "excluded": (dict,),
}
SHARD_NAME = re.compile(r"shard-(\d+)\.bin")


def _pread_into(fd: int, buf: memoryview, offset: int) -> int:
    """Read into ``buf`` from ``offset`` of ``fd`` (no shared file position, no memory map)."""
    if hasattr(os, "preadv"):
        return os.preadv(fd, [buf], offset)
    data = os.pread(fd, len(buf), offset)  # pragma: no cover - platforms without preadv
    buf[: len(data)] = data
    return len(data)


def _row_sums_of_bits(u: np.ndarray) -> np.ndarray:
    """Row sums (float32, last axis) of float16 values given as their bits ``u`` (uint16), all finite
    and >= 0: ``(u << 13)`` read as float32 times 2**112 is exactly the value (subnormals included)."""
    bits = u.astype(np.uint32)
    bits <<= 13
    values = bits.view(np.float32)
    values *= np.float32(2.0**112)
    return np.add.reduce(values, axis=-1)  # [..., query_pos]


def row_sums(attn: np.ndarray) -> np.ndarray:
    """Row sums in float32 of a checked (finite, non-negative) float16 map, fast."""
    u = np.ascontiguousarray(attn, dtype=DTYPE).view(np.uint16) & 0x7FFF  # [..., query_pos, key_pos] as float16 bits
    return _row_sums_of_bits(u)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _type_name(v: Any) -> str:
    return {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer", float: "number",
            type(None): "null"}.get(type(v), type(v).__name__)


class AttentionStore:
    """Read-only access to a store directory, validated when opened; one example read at a time.

    Opening checks ``meta.json`` (every key, its type), ``index.jsonl`` (``n_examples`` lines, each with
    ``id``, ``n``, ``shard``, ``offset``, ``tokens``) and the shards (exactly ``n_shards`` files, each
    exactly the size of its examples laid back to back, no gap, no overlap). Every map read (``get``,
    iteration) is checked: finite, non-negative, each row summing to 1 within
    :func:`row_sum_tolerance`. Any problem is an :class:`AttentionStoreError` naming the file (and
    line) or the example id.

    Maps are read with plain ``pread`` calls into fresh arrays (no memory map), so resident memory
    stays at about one example whatever the store's size; a few shard file handles are kept open.
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self._files: OrderedDict[int, int] = OrderedDict()  # shard id -> open file descriptor (LRU)
        meta_path = self.path / "meta.json"
        if not meta_path.is_file():
            raise AttentionStoreError(f"{self.path}: not an attention store (no meta.json)")
        self.meta: dict[str, Any] = self._read_meta(meta_path)
        self.num_layers = self.meta["num_layers"]
        self.num_heads = self.meta["num_heads"]
        self.level: str = self.meta["level"]
        self.records: list[dict[str, Any]] = self._read_index(self.path / "index.jsonl")
        self._check_shards()

    # ------------------------------------------------------------------ validation on open
    @staticmethod
    def _read_json_text(path: Path) -> str:
        try:
            with open(path, encoding="utf-8") as fh:
                return fh.read()
        except UnicodeDecodeError as err:
            raise AttentionStoreError(f"{path}: not UTF-8 text ({err.reason} at byte {err.start})") from None
        except OSError as err:
            raise AttentionStoreError(f"{path}: cannot read: {err.strerror or err}") from None

    def _read_meta(self, meta_path: Path) -> dict[str, Any]:
        text = self._read_json_text(meta_path)
        try:
            meta = json.loads(text)
        except (ValueError, RecursionError) as err:  # JSONDecodeError, over-long integers
            raise AttentionStoreError(f"{meta_path}: not valid JSON: {err}") from None
        if not isinstance(meta, dict):
            raise AttentionStoreError(f"{meta_path}: expected a JSON object, got {_type_name(meta)}")
        if meta.get("format") != FORMAT:
            raise AttentionStoreError(f"{meta_path}: unknown format {meta.get('format')!r} (expected {FORMAT!r})")
        for key, types in META_KEYS.items():
            if key not in meta:
                raise AttentionStoreError(f"{meta_path}: missing key {key!r}")
            v = meta[key]
            if not isinstance(v, types) or isinstance(v, bool):
                raise AttentionStoreError(
                    f"{meta_path}: {key!r} must be {'an integer' if types == (int,) else _type_name(types[0]())}, "
                    f"got {_type_name(v)} {v!r}"
                )
        for key, low in (("num_layers", 1), ("num_heads", 1), ("n_examples", 0), ("n_shards", 1)):
            if meta[key] < low:
                raise AttentionStoreError(f"{meta_path}: {key!r} must be >= {low}, got {meta[key]}")
        if meta["dtype"] != "float16":
            raise AttentionStoreError(f"{meta_path}: unsupported dtype {meta['dtype']!r} (expected 'float16')")
        if meta["level"] not in LEVELS:
            raise AttentionStoreError(f"{meta_path}: 'level' must be one of {', '.join(LEVELS)}, got {meta['level']!r}")
        return meta

    def _read_index(self, index_path: Path) -> list[dict[str, Any]]:
        if not index_path.is_file():
            raise AttentionStoreError(f"{index_path}: index file missing")
        text = self._read_json_text(index_path)
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()  # the final newline
        n_shards = self.meta["n_shards"]
        records = []
        for lineno, line in enumerate(lines, 1):
            where = f"{index_path}:{lineno}"
            try:
                rec = json.loads(line)
            except (ValueError, RecursionError) as err:  # JSONDecodeError, over-long integers
                raise AttentionStoreError(f"{where}: not valid JSON: {err}") from None
            if not isinstance(rec, dict):
                raise AttentionStoreError(f"{where}: expected a JSON object, got {_type_name(rec)}")
            for key in ("id", "n", "shard", "offset", "tokens"):
                if key not in rec:
                    raise AttentionStoreError(f"{where}: missing key {key!r}")
            rid = rec["id"]
            if not (isinstance(rid, str) or _is_int(rid)):
                raise AttentionStoreError(f"{where}: 'id' must be a string or an integer, got {_type_name(rid)}")
            for key, low in (("n", 1), ("shard", 0), ("offset", 0)):
                v = rec[key]
                if not _is_int(v) or v < low:
                    raise AttentionStoreError(
                        f"{where}: example {rid!r}: {key!r} must be an integer >= {low}, got {v!r}"
                    )
            if rec["shard"] >= n_shards:
                raise AttentionStoreError(
                    f"{where}: example {rid!r}: shard {rec['shard']} but meta.json says n_shards = {n_shards}"
                )
            tokens = rec["tokens"]
            if not isinstance(tokens, list) or len(tokens) != rec["n"]:
                got = f"{len(tokens)} tokens" if isinstance(tokens, list) else _type_name(tokens)
                raise AttentionStoreError(f"{where}: example {rid!r}: 'tokens' must be a list of n = {rec['n']} "
                                          f"strings, got {got}")
            if not all(isinstance(t, str) for t in tokens):
                raise AttentionStoreError(f"{where}: example {rid!r}: 'tokens' must be strings")
            records.append(rec)
        want = self.meta["n_examples"]
        if len(records) != want:
            raise AttentionStoreError(f"{index_path}: {len(records)} lines, but meta.json says n_examples = {want}")
        return records

    def _check_shards(self) -> None:
        """Exactly ``n_shards`` shard files, each holding exactly its examples back to back."""
        n_shards = self.meta["n_shards"]
        try:
            found = sorted(p.name for p in self.path.iterdir() if SHARD_NAME.fullmatch(p.name))
        except OSError as err:
            raise AttentionStoreError(f"{self.path}: cannot list the store: {err.strerror or err}") from None

        def name(k: int) -> str:
            return f"shard-{k:05d}.bin"

        # first the names that should not be there, then the missing ones (never loops over a huge n_shards)
        extra = [f for f in found if not (int(SHARD_NAME.fullmatch(f).group(1)) < n_shards
                                          and f == name(int(SHARD_NAME.fullmatch(f).group(1))))]
        if extra:
            raise AttentionStoreError(
                f"{self.path / extra[0]}: unexpected shard file ({len(extra)} beyond the n_shards = {n_shards} "
                "of meta.json)"
            )
        if len(found) != n_shards:
            present = set(found)
            missing = next(k for k in range(len(found) + 1) if name(k) not in present)
            raise AttentionStoreError(
                f"{self.path / name(missing)}: shard file missing (meta.json says n_shards = {n_shards}, "
                f"{len(found)} found)"
            )
        expected = {k: self.path / name(k) for k in range(n_shards)}
        per_head = self.num_layers * self.num_heads
        by_shard: dict[int, list[tuple[int, int, int]]] = {k: [] for k in range(n_shards)}
        for lineno, rec in enumerate(self.records, 1):
            by_shard[rec["shard"]].append((rec["offset"], per_head * rec["n"] ** 2, lineno))
        index_path = self.path / "index.jsonl"
        for k, spans in by_shard.items():
            p = expected[k]
            try:
                st = os.stat(p)
            except OSError as err:
                raise AttentionStoreError(f"{p}: cannot read shard: {err.strerror or err}") from None
            if not os.path.isfile(p):
                raise AttentionStoreError(f"{p}: shard is not a regular file")
            spans.sort()
            pos = 0
            for offset, size, lineno in spans:
                rid = self.records[lineno - 1]["id"]
                if offset != pos:
                    what = "overlaps the previous example" if offset < pos else f"leaves a gap of {offset - pos} values"
                    raise AttentionStoreError(
                        f"{index_path}:{lineno}: example {rid!r} starts at offset {offset} of {p.name}, "
                        f"expected {pos} (it {what})"
                    )
                pos += size
            want = pos * DTYPE.itemsize
            if st.st_size != want:
                if st.st_size < want:
                    how = "is truncated"
                elif st.st_size % DTYPE.itemsize:
                    how = "is odd-sized"
                else:
                    how = "has trailing bytes"
                raise AttentionStoreError(
                    f"{p}: shard {how}: {st.st_size} bytes, but its {len(spans)} example(s) in index.jsonl "
                    f"take {want} bytes"
                )

    # ------------------------------------------------------------------ reading
    @property
    def num_heads_total(self) -> int:
        return self.num_layers * self.num_heads

    def __len__(self) -> int:
        return len(self.records)

    def _fd(self, shard_id: int) -> int:
        fd = self._files.get(shard_id)
        if fd is not None:
            self._files.move_to_end(shard_id)
            return fd
        p = self.path / f"shard-{shard_id:05d}.bin"
        try:
            fd = os.open(p, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except OSError as err:
            raise AttentionStoreError(f"{p}: cannot read shard: {err.strerror or err}") from None
        self._files[shard_id] = fd
        while len(self._files) > MAX_OPEN_SHARDS:
            _, old = self._files.popitem(last=False)
            os.close(old)
        return fd

    def close(self) -> None:
        """Close the open shard files (reading again reopens them)."""
        while self._files:
            os.close(self._files.popitem()[1])

    def __enter__(self) -> "AttentionStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:  # pragma: no cover - best effort
        try:
            self.close()
        except Exception:
            pass

    def _read(self, rec: dict[str, Any]) -> np.ndarray:
        n = rec["n"]
        count = self.num_layers * self.num_heads * n * n
        out = np.empty(count, dtype=DTYPE)
        view = memoryview(out).cast("B")
        fd = self._fd(rec["shard"])
        pos, start = 0, rec["offset"] * DTYPE.itemsize
        p = self.path / f"shard-{rec['shard']:05d}.bin"
        while pos < len(view):
            try:
                got = _pread_into(fd, view[pos:], start + pos)
            except OSError as err:
                raise AttentionStoreError(f"{p}: example {rec['id']!r}: cannot read: {err.strerror or err}") from None
            if got == 0:
                raise AttentionStoreError(
                    f"{p}: example {rec['id']!r}: the shard ends early (changed since it was opened?)"
                )
            pos += got
        return out.reshape(self.num_layers, self.num_heads, n, n)  # [layer, head, query_pos, key_pos]

    def check_map(self, rec: dict[str, Any], attn: np.ndarray) -> None:
        """Refuse a map ``[L, H, n, n]`` with a non-finite or negative value, or a row whose sum is off 1
        by more than :func:`row_sum_tolerance`; the error names the store and the example id.

        Vectorised on the float16 bits (about 0.6 ms for 6 x 12 x 128 x 128 values): a value is finite
        and >= 0 exactly when its bit pattern is <= 0x7BFF (or is -0.0, 0x8000); such bits convert
        exactly to float32 by a shift and a multiplication by 2**112 (subnormals included).
        """
        u = np.ascontiguousarray(attn, dtype=DTYPE).view(np.uint16)  # [layer, head, query_pos, key_pos] as float16 bits
        where = f"{self.path}: example {rec.get('id')!r}"
        if u.size and u.max() > 0x7BFF:
            nonfinite = (u & 0x7C00) == 0x7C00
            negative = (u > 0x8000) & ~nonfinite
            for bad, what in ((nonfinite, "non-finite"), (negative, "negative")):
                if bad.any():
                    l, h, i, j = np.argwhere(bad)[0]
                    value = float(u[l, h, i, j].view(DTYPE))
                    raise AttentionStoreError(
                        f"{where}: {what} attention value {value} (layer {l + 1}, head {h + 1}, row {i}, column {j})"
                    )
            u = u & 0x7FFF  # only -0.0 left
        sums = _row_sums_of_bits(u)  # [layer, head, query_pos]
        dev = np.abs(sums - np.float32(1.0))
        n = u.shape[-1]
        tol = row_sum_tolerance(n)
        if dev.size and dev.max() > tol:
            l, h, i = np.unravel_index(int(dev.argmax()), dev.shape)
            raise AttentionStoreError(
                f"{where}: attention row does not sum to 1 (layer {l + 1}, head {h + 1}, row {i}: "
                f"sum {float(sums[l, h, i]):.6g}, tolerance {tol:.2g})"
            )

    def get(self, i: int) -> np.ndarray:
        """Attention of example ``i`` as a fresh float16 array ``[layers, heads, n, n]`` (checked)."""
        rec = self.records[i]
        attn = self._read(rec)
        self.check_map(rec, attn)
        return attn

    def __iter__(self) -> Iterator[tuple[dict[str, Any], np.ndarray]]:
        for i, rec in enumerate(self.records):
            yield rec, self.get(i)


def open_store(
    path_or_store: "AttentionStore | str | os.PathLike", *, level: str | None = None, what: str = "attention store"
) -> AttentionStore:
    """Open (and validate) an attention store: the one entry point of every step that reads maps.

    ``path_or_store``: a store directory, or an already open :class:`AttentionStore` (returned as is).
    ``level``: require ``meta.json`` level ``"token"`` or ``"word"``. ``what`` names the store in
    messages (e.g. ``"train attention store"``). Every problem is an :class:`AttentionStoreError`
    (a :class:`BertlookError`) naming the path.
    """
    if isinstance(path_or_store, AttentionStore):
        store = path_or_store
    else:
        try:
            store = AttentionStore(path_or_store)
        except AttentionStoreError as err:
            if what != "attention store":
                raise AttentionStoreError(f"{what}: {err}") from None
            raise
        except OSError as err:
            raise AttentionStoreError(f"{path_or_store}: cannot read {what}: {err.strerror or err}") from None
    if level is not None and store.level != level:
        hint = ("; word-level stores are made by `bertlook extract-words` (or `coref-extract`) from the "
                "token-level maps" if level == "word" else "")
        raise AttentionStoreError(
            f"{store.path}: expected a {level}-level {what} (meta level {level!r}), got level {store.level!r}{hint}"
        )
    return store


# --------------------------------------------------------------------------------------------
# sizes and order (the extraction plans with them, merging stores keeps the order)

#: bytes per float16 value of a store's maps
STORE_ITEMSIZE = 2
INDEX_ENTRY_OVERHEAD = 64  # bytes per index line besides the record: "n", "shard", "offset", newline
META_OVERHEAD = 4096


def estimate_store_bytes(records: Sequence[dict[str, Any]], sizes: Sequence[int], num_layers: int,
                         num_heads: int, *, meta: dict[str, Any] | None = None) -> dict[str, int]:
    """Size of an attention store of ``records`` whose maps are ``sizes[i] x sizes[i]`` (float16).

    ``map_bytes`` (the shards, exact) = ``sum(layers * heads * m * m * 2)``; ``index_bytes`` is an
    upper estimate of ``index.jsonl`` + ``meta.json`` (records as JSON plus a fixed overhead).
    """
    per = int(num_layers) * int(num_heads) * STORE_ITEMSIZE
    map_bytes = sum(per * int(m) * int(m) for m in sizes)
    index_bytes = sum(len(json.dumps(r, ensure_ascii=False, default=str).encode("utf-8")) + INDEX_ENTRY_OVERHEAD
                      for r in records)
    meta_bytes = META_OVERHEAD + len(json.dumps(meta or {}, indent=2, ensure_ascii=False, default=str).encode("utf-8"))
    return {"map_bytes": map_bytes, "index_bytes": index_bytes + meta_bytes,
            "total_bytes": map_bytes + index_bytes + meta_bytes}


def id_sort_key(value: Any) -> tuple[int, Any]:
    """Sort key of an example id: numbers first (by value), then everything else as text."""
    if isinstance(value, bool):
        return (1, str(value))
    if isinstance(value, (int, float)):
        return (0, value)
    return (1, str(value))
