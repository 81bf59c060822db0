"""Atomic output helpers: write to a temporary sibling, rename into place on success."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Iterator


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it to ``path`` if the block succeeds.

    On an exception the temporary file is removed and ``path`` is left untouched.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        if tmp_path.exists():  # mkstemp creates 0600 files: give the usual umask permissions
            os.chmod(tmp_path, 0o666 & ~_umask())
        os.replace(tmp_path, target)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file, read in chunks."""
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(chunk), b""):
            digest.update(block)
    return digest.hexdigest()


def read_csv_strings(path: str | os.PathLike, *, required=(), what: str = "file"):
    """A CSV as a DataFrame of strings (empty cells stay ``""``), header stripped; checks that the
    ``required`` columns exist. Errors (:class:`BertlookError`) name the file (and line 1 for the header)."""
    import pandas as pd

    from bertlook.errors import BertlookError

    path = Path(path)
    if not path.is_file():
        raise BertlookError(f"{path}: {what} not found")
    try:
        df = pd.read_csv(path, dtype=str, keep_default_na=False)
    except pd.errors.EmptyDataError:
        raise BertlookError(f"{path}: empty file (expected a CSV with a header)") from None
    except (pd.errors.ParserError, UnicodeDecodeError) as err:
        raise BertlookError(f"{path}: cannot parse CSV: {err}") from None
    df.columns = [str(c).strip() for c in df.columns]
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise BertlookError(f"{path}:1: missing column(s) {', '.join(missing)} (header has: {', '.join(df.columns)})")
    return df


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_json(path: str | os.PathLike, obj: Any) -> None:
    """Write ``obj`` as indented UTF-8 JSON, atomically."""
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(obj, fh, indent=2, ensure_ascii=False, sort_keys=False)
            fh.write("\n")


def write_csv(path: str | os.PathLike, frame) -> None:
    """Write a pandas DataFrame as CSV (no index), atomically, floats with full precision."""
    with atomic_path(path) as tmp:
        frame.to_csv(tmp, index=False, float_format="%.6g")


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        Path(tmp).write_text(text, encoding="utf-8")
