"""Sharded on-disk store of per-example attention maps (no pickle, streamed).

Layout of a store directory::

    meta.json          # {"format": "bertlook-attention/1", "num_layers", "num_heads", "dtype": "float16",
                       #  "n_examples", "level": "token"|"word", "excluded": {...}, ...extra meta}
    index.jsonl        # one JSON object per example, in storage order:
                       #  {"id", "n", "shard", "offset", "tokens": [...], ...extra fields}
    shard-00000.bin    # raw little-endian float16 values, examples back to back

Example ``i`` occupies ``num_layers * num_heads * n * n`` values starting at element ``offset``
of its shard, laid out C-contiguously as ``[layer, head, from_token, to_token]``: row = attention
FROM a token, column = attention TO a token (rows sum to 1 up to float16 rounding).

Writers stream: each map is written as soon as it is added, only the small index is kept in RAM,
and the whole directory is built under a temporary name and renamed into place on ``close()``,
so an interrupted run never leaves a half-written store behind.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator

import numpy as np

FORMAT = "bertlook-attention/1"
DTYPE = np.dtype("<f2")


class AttentionStoreError(ValueError):
    """Raised for a missing or inconsistent attention store."""


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
        self.out_dir.parent.mkdir(parents=True, exist_ok=True)
        self._tmp = Path(tempfile.mkdtemp(prefix=f".{self.out_dir.name}.tmp-", dir=self.out_dir.parent))
        self.num_layers = int(num_layers)
        self.num_heads = int(num_heads)
        self.level = level
        self.shard_bytes = int(shard_bytes)
        self.meta = dict(meta or {})
        self._index: list[dict[str, Any]] = []
        self._shard_id = -1
        self._shard_fh = None
        self._shard_len = 0  # elements written to the current shard
        self._closed = False
        self._new_shard()

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
        if self._shard_len > 0 and (self._shard_len + attn.size) * DTYPE.itemsize > self.shard_bytes:
            self._new_shard()
        data = np.ascontiguousarray(attn, dtype=DTYPE)
        self._shard_fh.write(data.tobytes(order="C"))
        entry = dict(record)
        entry.update({"n": int(n), "shard": self._shard_id, "offset": self._shard_len})
        self._index.append(entry)
        self._shard_len += data.size

    def close(self, excluded: dict[str, Any] | None = None, extra_meta: dict[str, Any] | None = None) -> Path:
        """Finish the store: write index and meta, then atomically move it to ``out_dir``."""
        if self._closed:
            return self.out_dir
        self._shard_fh.close()
        with open(self._tmp / "index.jsonl", "w", encoding="utf-8") as fh:
            for entry in self._index:
                fh.write(json.dumps(entry, ensure_ascii=False) + "\n")
        meta = {
            "format": FORMAT,
            "num_layers": self.num_layers,
            "num_heads": self.num_heads,
            "dtype": "float16",
            "level": self.level,
            "n_examples": len(self._index),
            "n_shards": self._shard_id + 1,
            "excluded": excluded or {},
        }
        meta.update(self.meta)
        meta.update(extra_meta or {})
        with open(self._tmp / "meta.json", "w", encoding="utf-8") as fh:
            json.dump(meta, fh, indent=2, ensure_ascii=False)
        if self.out_dir.exists():
            shutil.rmtree(self.out_dir)
        os.replace(self._tmp, self.out_dir)
        self._closed = True
        return self.out_dir

    def abort(self) -> None:
        if self._shard_fh is not None and not self._shard_fh.closed:
            self._shard_fh.close()
        shutil.rmtree(self._tmp, ignore_errors=True)
        self._closed = True

    def __enter__(self) -> "AttentionWriter":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.abort()
        elif not self._closed:
            self.close()


class AttentionStore:
    """Read-only view of a store directory; maps are memory-mapped, one example at a time."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        meta_path = self.path / "meta.json"
        if not meta_path.is_file():
            raise AttentionStoreError(f"{self.path}: not an attention store (no meta.json)")
        with open(meta_path, encoding="utf-8") as fh:
            self.meta: dict[str, Any] = json.load(fh)
        if self.meta.get("format") != FORMAT:
            raise AttentionStoreError(f"{meta_path}: unknown format {self.meta.get('format')!r}")
        self.num_layers = int(self.meta["num_layers"])
        self.num_heads = int(self.meta["num_heads"])
        self.records: list[dict[str, Any]] = []
        with open(self.path / "index.jsonl", encoding="utf-8") as fh:
            for lineno, line in enumerate(fh, 1):
                try:
                    self.records.append(json.loads(line))
                except json.JSONDecodeError as err:
                    raise AttentionStoreError(f"{self.path / 'index.jsonl'}:{lineno}: {err}") from None
        self._shards: dict[int, np.memmap] = {}

    @property
    def num_heads_total(self) -> int:
        return self.num_layers * self.num_heads

    def __len__(self) -> int:
        return len(self.records)

    def _shard(self, shard_id: int) -> np.ndarray:
        if shard_id not in self._shards:
            p = self.path / f"shard-{shard_id:05d}.bin"
            if not p.is_file():
                raise AttentionStoreError(f"{p}: shard file missing")
            self._shards[shard_id] = np.memmap(p, dtype=DTYPE, mode="r")
        return self._shards[shard_id]

    def get(self, i: int) -> np.ndarray:
        """Attention of example ``i`` as a read-only float16 view ``[layers, heads, n, n]``."""
        rec = self.records[i]
        n = int(rec["n"])
        size = self.num_layers * self.num_heads * n * n
        shard = self._shard(int(rec["shard"]))
        start = int(rec["offset"])
        if start + size > shard.size:
            raise AttentionStoreError(f"{self.path}: example {rec.get('id')!r} runs past the end of its shard")
        return shard[start : start + size].reshape(self.num_layers, self.num_heads, n, n)

    def __iter__(self) -> Iterator[tuple[dict[str, Any], np.ndarray]]:
        for i, rec in enumerate(self.records):
            yield rec, self.get(i)
