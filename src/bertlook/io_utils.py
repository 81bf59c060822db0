"""Atomic output helpers: write to a temporary sibling, rename into place on success."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import math
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator

from bertlook.errors import BertlookError

# errno values meaning "the disk (or quota) is full"
NO_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


def write_error(path: str | os.PathLike, err: OSError, what: str = "output"):
    """A :class:`BertlookError` for an OSError while writing ``path`` (ENOSPC: "no space left on device")."""
    reason = err.strerror or str(err) or type(err).__name__
    if err.errno in NO_SPACE_ERRNOS:
        return BertlookError(f"{path}: cannot write {what}: no space left on device ({reason}); "
                             "nothing was written (free some space and run the step again)")
    return BertlookError(f"{path}: cannot write {what}: {reason}; nothing was written")


def temp_prefix(target: str | os.PathLike, kind: str = "") -> str:
    """Prefix of the temporary names made for ``target`` by this process: ``.NAME.{kind}PID-``."""
    return f".{Path(target).name}.{kind}{os.getpid()}-"


def _process_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, OSError):
        return True  # exists (another user's), or cannot tell: keep its files
    return True


def remove_stale_temporaries(target: str | os.PathLike) -> list[Path]:
    """Remove what an interrupted (killed) writer of ``target`` left beside it.

    Matches only names made for this very target: directories ``.NAME.tmp-PID-XXXXXXXX``
    (:class:`bertlook.attention.store.AttentionWriter`) and files ``.NAME.PID-XXXXXXXX.tmp``
    (:func:`atomic_path`), also without ``PID-`` (older runs); the random part never holds a dot, so
    ``.NAME.ext.PID-XXXXXXXX.tmp`` of a target ``NAME.ext`` is left alone. A temporary whose writer
    process (PID) is still running on this machine is kept, so two runs sharing a download cache do
    not remove each other's files. Called when a writer for ``target`` starts. Returns the removed paths.
    """
    target = Path(target)
    name = re.escape(target.name)
    pattern = re.compile(rf"\.{name}\.(?:tmp-(?:(\d+)-)?[A-Za-z0-9_]+|(?:(\d+)-)?[A-Za-z0-9_]+\.tmp)")
    try:
        entries = [(p, m) for p in target.parent.iterdir() if (m := pattern.fullmatch(p.name))]
    except OSError:  # no parent directory yet, or unreadable: nothing to clean
        return []
    removed = []
    for p, m in entries:
        pid = m.group(1) or m.group(2)
        if pid is not None and _process_alive(int(pid)):
            continue
        try:
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            else:
                p.unlink()
            removed.append(p)
        except OSError:  # already gone, or not ours to remove: leave it
            pass
    return removed


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it to ``path`` if the block succeeds.

    On an exception the temporary file is removed and ``path`` is left untouched. Temporary files of
    ``path`` left by a killed earlier run are removed first. An OSError of this function, or a full
    disk (ENOSPC / EDQUOT / EFBIG) inside the block, becomes a :class:`BertlookError` naming ``path``.
    """
    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temporaries(target)
        fd, tmp = tempfile.mkstemp(prefix=temp_prefix(target), suffix=".tmp", dir=target.parent)
        os.close(fd)
    except OSError as err:
        raise write_error(target, err) from None
    tmp_path = Path(tmp)
    try:
        try:
            yield tmp_path
        except OSError as err:
            if err.errno in NO_SPACE_ERRNOS:
                raise write_error(target, err) from None
            raise
        try:
            if tmp_path.exists():  # mkstemp creates 0600 files: give the usual umask permissions
                os.chmod(tmp_path, 0o666 & ~umask())
            os.replace(tmp_path, target)
        except OSError as err:
            raise write_error(target, err) from None
    finally:
        if tmp_path.exists():
            try:
                tmp_path.unlink()
            except OSError:
                pass


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    """Hex sha256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(chunk), b""):
            digest.update(block)
    return digest.hexdigest()


def read_csv_strings(path: str | os.PathLike, *, required=(), what: str = "file"):
    """A CSV as a DataFrame of strings (empty cells stay ``""``), header stripped; checks that the
    ``required`` columns exist. Errors (:class:`BertlookError`) name the file (and line 1 for the header)."""
    import pandas as pd  # lazy: io_utils is read at DAG build, pandas only for the tables

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


def umask() -> int:
    """The process umask (read without changing it for good)."""
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
    """Write a pandas DataFrame as CSV (no index), atomically, floats with 6 significant digits (``%.6g``)."""
    with atomic_path(path) as tmp:
        frame.to_csv(tmp, index=False, float_format="%.6g")


def write_csv_full(path: str | os.PathLike, frame) -> None:
    """Write a pandas DataFrame as CSV (no index), atomically, floats at full precision (shortest round-trip repr)."""
    with atomic_path(path) as tmp:
        frame.to_csv(tmp, index=False)


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        Path(tmp).write_text(text, encoding="utf-8")


def json_safe(obj: Any) -> Any:
    """``obj`` with every non-finite float replaced by None and numpy scalars by Python ones (in dicts,
    lists and tuples, tuples becoming lists)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_safe(v) for v in obj]
    if hasattr(obj, "item"):  # numpy scalars
        return json_safe(obj.item())
    return obj
