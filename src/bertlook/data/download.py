"""HTTP download with retries, sha256/sha1 verification and atomic write (``bertlook download``).

Only the standard library is used (``urllib``). The body is streamed in chunks to a temporary file
beside the destination (:func:`bertlook.io_utils.atomic_path`) while its sha256 and sha1 are computed;
the file is renamed into place only when the download is complete and every given checksum matches.

Retries: connection errors, timeouts, truncated bodies and HTTP 5xx are retried with exponential
backoff (``backoff * 2**attempt`` seconds); any other HTTP error (4xx) fails at once.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import logging
import os
import socket
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from bertlook import __version__
from bertlook.errors import BertlookError
from bertlook.io_utils import atomic_path

log = logging.getLogger(__name__)

CHUNK_SIZE = 1 << 20  # 1 MiB
PROGRESS_EVERY = 512 << 20  # log a progress line every 512 MiB
USER_AGENT = f"bertlook/{__version__} (re-run of Clark et al. 2019; Python urllib)"

OFFLINE_HINT = (
    "If this machine has no network access, point the config at a local copy of the file "
    "(`wikipedia.path` for a MediaWiki dump (.xml.bz2), `treebank.source: local`, `glove.path`), "
    "or run `make demo` (the offline configuration, config/offline.yaml)."
)


class _Retryable(Exception):
    """Internal: a failure worth another attempt (connection error, timeout, 5xx, short body)."""

    def __init__(self, reason: str, *, network: bool = False):
        super().__init__(reason)
        self.reason = reason
        self.network = network  # True when the server could not be reached at all


def file_digests(path: Path) -> tuple[str, str, int]:
    """``(sha256, sha1, size in bytes)`` of a file, read once."""
    sha256, sha1, size = hashlib.sha256(), hashlib.sha1(), 0
    with open(path, "rb") as fh:
        while True:
            chunk = fh.read(CHUNK_SIZE)
            if not chunk:
                break
            sha256.update(chunk)
            sha1.update(chunk)
            size += len(chunk)
    return sha256.hexdigest(), sha1.hexdigest(), size


def _norm_hex(value: str | None, name: str, length: int) -> str | None:
    if value is None:
        return None
    value = value.strip().lower()
    if len(value) != length or any(c not in "0123456789abcdef" for c in value):
        raise BertlookError(f"bad {name} checksum {value!r}: expected {length} hexadecimal digits")
    return value


def _request(url: str, method: str = "GET"):
    return urllib.request.Request(url, method=method, headers={"User-Agent": USER_AGENT})


def _classify(url: str, err: BaseException) -> BaseException:
    """Map an exception raised while talking to ``url`` to ``_Retryable`` or a final BertlookError."""
    if isinstance(err, urllib.error.HTTPError):
        if 500 <= err.code < 600:
            return _Retryable(f"HTTP {err.code} {err.reason}")
        return BertlookError(f"download of {url} failed: HTTP {err.code} {err.reason} (not retried)")
    if isinstance(err, urllib.error.URLError):
        reason = err.reason
        if isinstance(reason, str) and reason.startswith("unknown url type"):
            return BertlookError(f"cannot download {url!r}: {reason}")
        if url.lower().startswith("file:"):
            return BertlookError(f"cannot read {url}: {reason}")
        if isinstance(reason, (socket.timeout, TimeoutError)):
            return _Retryable(f"timed out ({reason})", network=True)
        if isinstance(reason, OSError) or isinstance(reason, str):
            return _Retryable(f"{reason}", network=True)
        return _Retryable(str(err), network=True)
    if isinstance(err, (socket.timeout, TimeoutError)):
        return _Retryable(f"timed out while reading ({err})")
    if isinstance(err, (http.client.IncompleteRead, http.client.RemoteDisconnected,
                        ConnectionError, http.client.HTTPException)):
        return _Retryable(f"connection broken: {err!r}")
    if isinstance(err, ValueError):  # e.g. "unknown url type"
        return BertlookError(f"cannot download {url!r}: {err}")
    return err


def _unreachable_message(url: str, attempts: int, reason: str, *, hint: bool = True) -> str:
    plural = "s" if attempts != 1 else ""
    return f"cannot reach {url} ({reason}; {attempts} attempt{plural})" + (". " + OFFLINE_HINT if hint else "")


def _with_retries(url: str, func, *, retries: int, backoff: float):
    """Call ``func()`` up to ``retries`` times; ``func`` raises ``_Retryable`` for transient failures."""
    attempts = max(1, int(retries))
    last: _Retryable | None = None
    for attempt in range(attempts):
        try:
            return func()
        except BertlookError:
            raise
        except Exception as exc:  # noqa: BLE001 - classified below
            mapped = exc if isinstance(exc, _Retryable) else _classify(url, exc)
            if not isinstance(mapped, _Retryable):
                if mapped is exc:
                    raise
                raise mapped from exc
            last = mapped
            if attempt + 1 < attempts:
                delay = backoff * (2 ** attempt)
                log.warning("%s: %s; retrying in %.1f s (attempt %d of %d)",
                            url, mapped.reason, delay, attempt + 2, attempts)
                if delay > 0:
                    time.sleep(delay)
    assert last is not None
    if last.network:
        raise BertlookError(_unreachable_message(url, attempts, last.reason))
    raise BertlookError(f"download of {url} failed after {attempts} attempt"
                        f"{'s' if attempts != 1 else ''}: {last.reason}")


def _stream_to(url: str, tmp: Path, timeout: float) -> tuple[str, str, int]:
    sha256, sha1, size = hashlib.sha256(), hashlib.sha1(), 0
    with urllib.request.urlopen(_request(url), timeout=timeout) as resp:
        expected_len = resp.headers.get("Content-Length") if getattr(resp, "headers", None) else None
        with open(tmp, "wb") as out:
            while True:
                chunk = resp.read(CHUNK_SIZE)
                if not chunk:
                    break
                out.write(chunk)
                sha256.update(chunk)
                sha1.update(chunk)
                size += len(chunk)
                if size % PROGRESS_EVERY < len(chunk):
                    log.info("%s: %d MiB received%s", url, size >> 20,
                             f" of {int(expected_len) >> 20} MiB" if expected_len
                             and expected_len.isdigit() else "")
    if expected_len is not None and expected_len.isdigit() and int(expected_len) != size:
        raise _Retryable(f"incomplete body: got {size} of {expected_len} bytes")
    return sha256.hexdigest(), sha1.hexdigest(), size


def download(
    url: str,
    dest: str | os.PathLike,
    *,
    sha256: str | None = None,
    sha1: str | None = None,
    retries: int = 3,
    timeout: float = 60.0,
    backoff: float = 1.0,
) -> dict[str, Any]:
    """Download ``url`` to ``dest`` atomically and verify the given checksums.

    Returns ``{"url", "path", "sha256", "sha1", "bytes"}``. When ``dest`` already exists and matches
    ``sha256`` (or, without ``sha256``, ``sha1``), nothing is downloaded. ``retries`` is the total
    number of attempts (3: the first try and two retries). A checksum mismatch raises :class:`BertlookError` (naming the url, the
    expected and the actual digest) and leaves nothing new at ``dest``.
    """
    sha256 = _norm_hex(sha256, "sha256", 64)
    sha1 = _norm_hex(sha1, "sha1", 40)
    dest = Path(dest)

    def result(d256: str, d1: str, size: int) -> dict[str, Any]:
        return {"url": url, "path": str(dest), "sha256": d256, "sha1": d1, "bytes": size}

    if dest.is_file() and (sha256 or sha1):
        d256, d1, size = file_digests(dest)
        if (sha256 and d256 == sha256) or (not sha256 and d1 == sha1):
            log.info("%s already present with the expected checksum; not downloading", dest)
            return result(d256, d1, size)
        log.info("%s exists but its checksum differs; downloading again", dest)

    with atomic_path(dest) as tmp:
        d256, d1, size = _with_retries(url, lambda: _stream_to(url, tmp, timeout),
                                       retries=retries, backoff=backoff)
        for name, expected, actual in (("sha256", sha256, d256), ("sha1", sha1, d1)):
            if expected and expected != actual:
                raise BertlookError(
                    f"checksum mismatch for {url}: expected {name} {expected}, got {actual} "
                    f"({size} bytes); nothing written to {dest}"
                )
    log.info("downloaded %s -> %s (%d bytes, sha256 %s)", url, dest, size, d256)
    return result(d256, d1, size)


def summary_path(dest: str | os.PathLike) -> Path:
    """``{dest}.download.json``: the summary beside a downloaded file (what the download rules and
    ``bertlook fetch`` write: ``{url, path, sha256, sha1, bytes}``)."""
    dest = Path(dest)
    return dest.with_name(dest.name + ".download.json")


def present_as_recorded(dest: str | os.PathLike, url: str) -> dict[str, Any] | None:
    """The recorded summary of ``dest`` when ``dest`` is there and is the file that summary
    describes (same ``url``, same sha256 and size, hashed now), else None.

    Lets a file fetched earlier (``bertlook fetch``, or a download rule) count as present when the
    configuration pins no checksum, instead of downloading it again on a machine without network.
    """
    dest = Path(dest)
    try:
        recorded = json.loads(summary_path(dest).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(recorded, dict) or recorded.get("url") != url or not dest.is_file():
        return None
    d256, d1, size = file_digests(dest)
    if recorded.get("sha256") != d256 or recorded.get("bytes") != size:
        return None
    return {"url": url, "path": str(dest), "sha256": d256, "sha1": d1, "bytes": size}


def parse_sha1sums(text: str, filename: str, *, source: str = "sha1sums") -> str:
    """Return the sha1 of ``filename`` from ``sha1sum``-style text ("<hex>  <filename>" per line)."""
    wanted = filename.rsplit("/", 1)[-1]
    for lineno, line in enumerate(text.splitlines(), start=1):
        parts = line.strip().split(None, 1)
        if len(parts) != 2:
            continue
        digest, name = parts[0].lower(), parts[1].strip().lstrip("*")
        if name == filename or name.rsplit("/", 1)[-1] == wanted:
            if len(digest) != 40 or any(c not in "0123456789abcdef" for c in digest):
                raise BertlookError(f"{source}:{lineno}: {digest!r} is not a sha1 digest")
            return digest
    raise BertlookError(f"{source}: no sha1 listed for {wanted!r}")


def fetch_sha1_from_sums(sums_url: str, filename: str, timeout: float = 60.0,
                         *, retries: int = 3, backoff: float = 1.0) -> str:
    """Read a Wikimedia ``*-sha1sums.txt`` at ``sums_url`` and return the sha1 of ``filename``."""
    def fetch() -> bytes:
        with urllib.request.urlopen(_request(sums_url), timeout=timeout) as resp:
            return resp.read(16 << 20)

    data = _with_retries(sums_url, fetch, retries=retries, backoff=backoff)
    return parse_sha1sums(data.decode("utf-8", errors="replace"), filename, source=sums_url)


def check_reachable(url: str, timeout: float = 10) -> str | None:
    """Preflight: ``None`` when a HEAD (or GET) of ``url`` answers with success, else a one-line reason."""
    last = "no answer"
    for method in ("HEAD", "GET"):
        try:
            with urllib.request.urlopen(_request(url, method), timeout=timeout):
                return None
        except urllib.error.HTTPError as err:
            if method == "HEAD" and err.code in (403, 405, 501):
                last = f"HTTP {err.code} {err.reason}"
                continue  # some servers refuse HEAD; try GET
            return f"{url} answers HTTP {err.code} {err.reason}"
        except urllib.error.URLError as err:
            return _unreachable_message(url, 1, str(err.reason), hint=False)
        except (OSError, ValueError) as err:
            return _unreachable_message(url, 1, str(err), hint=False)
    return f"{url}: {last}"
