"""A local stand-in for the Hugging Face hub on 127.0.0.1, for the real ``huggingface_hub`` client.

Point the client at it with ``HF_ENDPOINT=http://127.0.0.1:PORT`` (``HF_HUB_OFFLINE`` unset), and
``snapshot_download`` / ``hf_hub_download`` / ``HfApi.model_info`` run their own code against it. It
speaks the part of the hub's HTTP API those calls use (read off huggingface_hub 2.x):

* ``GET /api/models/{repo}[/revision/{rev}]`` -- ``id``, ``sha`` and ``siblings`` (with ``size``,
  ``blobId`` and ``lfs`` when the client asks ``?blobs=True``);
* ``GET /api/models/{repo}/tree/{rev}`` -- the file listing (``type``, ``path``, ``size``, ``oid``,
  ``lfs`` for ``*.safetensors``) that ``snapshot_download`` reads;
* ``HEAD`` / ``GET /{repo}/resolve/{rev}/{file}`` -- ``X-Repo-Commit``, ``ETag`` / ``X-Linked-Etag``,
  ``X-Linked-Size``, ``Content-Length``, ``Accept-Ranges``; a ``Range: bytes=N-`` request is answered
  ``206`` with ``Content-Range`` (how the client resumes a dropped download).

Errors carry the hub's ``X-Error-Code`` so that the client raises its own exceptions: an unknown repo
``401 RepoNotFound`` (RepositoryNotFoundError), an unknown revision ``404 RevisionNotFound``
(RevisionNotFoundError), an unknown file ``404 EntryNotFound``, a gated repo ``401`` without a token /
``403`` with a wrong one, ``GatedRepo`` (GatedRepoError) unless ``Authorization: Bearer <its token>``.

A repo is a directory (e.g. a tiny model of :mod:`bertlook.testing.tiny_models`) served under one fake
commit sha, 40 hex digits derived from its files' names and bytes (so the same files give the same
sha). Every request is recorded (``server.requests``: method, path, headers) so that tests can check
which host saw which header; ``server.drop_once[(repo, file)] = N`` makes the next full ``GET`` of that
file send its headers and ``N`` bytes, then close the connection (a download interrupted mid-file),
``server.drop_always`` does it on every GET; ``server.fail`` holds (repo, file) pairs answered ``500``.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.server
import json
import re
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from local_http import local_http_server

_API = re.compile(r"^/api/models/(?P<repo>[^/]+(?:/[^/]+)?)(?:/(?P<kind>revision|tree)/(?P<rev>[^/]+)(?P<rest>/.*)?)?$")
_RESOLVE = re.compile(r"^/(?P<repo>.+?)/resolve/(?P<rev>[^/]+)/(?P<file>.+)$")


def git_blob_sha1(data: bytes) -> str:
    """The git object id of a blob (what the hub reports as a file's ``oid`` / ETag of a small file)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


@dataclass
class HubRepo:
    """One repo: its files (name -> bytes), its commit sha, and the token that opens it when gated."""

    repo_id: str
    files: dict[str, bytes]
    gated_token: str | None = None
    sha: str = field(init=False)

    def __post_init__(self) -> None:
        digest = hashlib.sha1()
        for name in sorted(self.files):
            digest.update(name.encode() + b"\0" + hashlib.sha256(self.files[name]).digest())
        self.sha = digest.hexdigest()

    @classmethod
    def from_dir(cls, repo_id: str, directory: Path, *, gated_token: str | None = None) -> "HubRepo":
        files = {p.relative_to(directory).as_posix(): p.read_bytes()
                 for p in sorted(directory.rglob("*")) if p.is_file()}
        return cls(repo_id, files, gated_token)

    def is_lfs(self, name: str) -> bool:
        return name.endswith(".safetensors")

    def etag(self, name: str) -> str:
        """An LFS file's ETag is its sha256, a regular file's its git blob id (as on the hub)."""
        data = self.files[name]
        return hashlib.sha256(data).hexdigest() if self.is_lfs(name) else git_blob_sha1(data)

    def entry(self, name: str, *, blobs: bool, tree: bool) -> dict:
        data = self.files[name]
        lfs = {"size": len(data), "pointerSize": 134}
        lfs["oid" if tree else "sha256"] = hashlib.sha256(data).hexdigest()
        if tree:
            out = {"type": "file", "path": name, "size": len(data), "oid": git_blob_sha1(data)}
            return dict(out, lfs=lfs) if self.is_lfs(name) else out
        out = {"rfilename": name}
        if blobs:
            out.update(size=len(data), blobId=git_blob_sha1(data))
            if self.is_lfs(name):
                out["lfs"] = lfs
        return out


class HubHandler(http.server.BaseHTTPRequestHandler):
    """The hub's API and file downloads for ``server.repos`` (repo id -> :class:`HubRepo`)."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _record(self) -> None:
        srv = self.server
        with srv.lock:
            srv.requests.append({"method": self.command, "path": self.path, "headers": dict(self.headers.items())})
            key = self.path.split("?", 1)[0]
            srv.hits[key] = srv.hits.get(key, 0) + 1

    def _send(self, code: int, body: bytes = b"", headers: dict | None = None) -> None:
        self.send_response(code)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _error(self, code: int, error_code: str, message: str, extra: dict | None = None) -> None:
        body = json.dumps({"error": message}).encode()
        self._send(code, body, dict({"Content-Type": "application/json", "X-Error-Code": error_code,
                                     "X-Error-Message": message}, **(extra or {})))

    def _repo_and_rev(self, repo_id: str, rev: str) -> HubRepo | None:
        """The repo when it exists, the request may see it and ``rev`` names its commit; else answered."""
        repo = self.server.repos.get(urllib.parse.unquote(repo_id))
        if repo is None:
            self._error(401, "RepoNotFound", "Repository not found")
            return None
        if repo.gated_token is not None:
            auth = self.headers.get("Authorization")
            if auth != f"Bearer {repo.gated_token}":
                code = 401 if auth is None else 403
                self._error(code, "GatedRepo", f"Access to model {repo.repo_id} is restricted. You must have "
                            "access to it and be authenticated to access it. Please log in.")
                return None
        if urllib.parse.unquote(rev) not in ("main", repo.sha):
            self._error(404, "RevisionNotFound", f"Invalid rev id: {urllib.parse.unquote(rev)}")
            return None
        return repo

    def _api(self, match: re.Match, query: dict) -> None:
        repo = self._repo_and_rev(match["repo"], match["rev"] or "main")
        if repo is None:
            return
        if match["kind"] == "tree":
            body = [repo.entry(n, blobs=True, tree=True) for n in sorted(repo.files)]
        else:
            blobs = query.get("blobs", ["False"])[0].lower() == "true"
            body = {"id": repo.repo_id, "modelId": repo.repo_id, "sha": repo.sha, "private": False,
                    "gated": "manual" if repo.gated_token else False,
                    "siblings": [repo.entry(n, blobs=blobs, tree=False) for n in sorted(repo.files)]}
        self._send(200, json.dumps(body).encode(), {"Content-Type": "application/json"})

    def _resolve(self, match: re.Match) -> None:
        repo = self._repo_and_rev(match["repo"], match["rev"])
        if repo is None:
            return
        name = urllib.parse.unquote(match["file"])
        if name not in repo.files:
            self._error(404, "EntryNotFound", f"{name} does not exist on {match['rev']}",
                        {"X-Repo-Commit": repo.sha})
            return
        if (repo.repo_id, name) in self.server.fail:
            self._error(500, "InternalError", "the hub is having a bad day")
            return
        data = repo.files[name]
        etag = repo.etag(name)
        headers = {"X-Repo-Commit": repo.sha, "ETag": f'"{etag}"', "Accept-Ranges": "bytes",
                   "Content-Type": "application/octet-stream"}
        if repo.is_lfs(name):
            headers.update({"X-Linked-Etag": f'"{etag}"', "X-Linked-Size": str(len(data))})
        start = 0
        rng = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range", "") or "")
        if rng and self.command == "GET":
            start = int(rng[1])
            headers["Content-Range"] = f"bytes {start}-{len(data) - 1}/{len(data)}"
        drop = None
        if self.command == "GET":
            with self.server.lock:
                drop = self.server.drop_always.get((repo.repo_id, name))
                if drop is None and start == 0:
                    drop = self.server.drop_once.pop((repo.repo_id, name), None)
        if drop is not None:  # headers promise the whole (rest of the) file; N bytes, then the connection is gone
            self.send_response(206 if start else 200)
            for key, value in headers.items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(data) - start))
            self.end_headers()
            self.wfile.write(data[start:start + drop])
            self.wfile.flush()
            self.close_connection = True
            with contextlib.suppress(OSError):
                self.connection.shutdown(2)
            return
        self._send(206 if start else 200, data[start:], headers)

    def _handle(self) -> None:
        self._record()
        parsed = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(parsed.query)
        if (m := _API.match(parsed.path)) and self.command == "GET":
            self._api(m, query)
        elif m := _RESOLVE.match(parsed.path):
            self._resolve(m)
        else:
            self._error(404, "NotFound", f"no route for {self.command} {parsed.path}")

    do_GET = _handle
    do_HEAD = _handle


@contextlib.contextmanager
def local_hub(repos: list[HubRepo]) -> Iterator:
    """Serve ``repos`` on 127.0.0.1 (random port). The server carries ``base`` (the ``HF_ENDPOINT``),
    ``repos`` (id -> HubRepo), ``requests`` (every request: method, path, headers), ``hits`` (per path,
    query stripped) and ``drop_once`` ((repo id, file) -> bytes sent before the connection drops)."""
    with local_http_server(Path("."), HubHandler) as srv:
        srv.repos = {r.repo_id: r for r in repos}
        srv.requests = []
        srv.drop_once = {}
        srv.drop_always = {}
        srv.fail = set()
        yield srv


def hub_headers_seen(srv, name: str) -> list[str]:
    """The values of request header ``name`` (case-insensitive) the server received, in order."""
    out = []
    for req in srv.requests:
        out.extend(v for k, v in req["headers"].items() if k.lower() == name.lower())
    return out
