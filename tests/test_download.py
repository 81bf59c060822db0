"""bertlook.data.download against a local http.server (127.0.0.1, random port, one thread)."""

from __future__ import annotations

import argparse
import hashlib
import http.server
import json
import socket
from pathlib import Path

import pytest
from local_http import local_http_server

from bertlook.cli import download as download_cli
from bertlook.data import download as dl
from bertlook.errors import BertlookError

PAYLOAD = b"<mediawiki>fake dump</mediawiki>\n" * 1000


class _Handler(http.server.BaseHTTPRequestHandler):
    """/files/NAME: a file; /flaky/N/NAME: 503 for the first N requests, then the file;
    /missing: 404; /short/NAME: announces more bytes than it sends."""

    def log_message(self, *args):  # keep pytest output clean
        pass

    def _send(self, body: bytes, code: int = 200, length: int | None = None):
        self.send_response(code)
        self.send_header("Content-Length", str(len(body) if length is None else length))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _handle(self):
        srv = self.server
        with srv.lock:
            srv.hits[self.path] = srv.hits.get(self.path, 0) + 1
            hits = srv.hits[self.path]
        parts = self.path.strip("/").split("/")
        if parts[0] == "files" and len(parts) == 2 and (srv.root / parts[1]).is_file():
            return self._send((srv.root / parts[1]).read_bytes())
        if parts[0] == "flaky" and len(parts) == 3:
            if hits <= int(parts[1]):
                return self._send(b"busy", code=503)
            return self._send((srv.root / parts[2]).read_bytes())
        if parts[0] == "short" and len(parts) == 2:
            body = (srv.root / parts[1]).read_bytes()
            self._send(body[:100], length=len(body))
            self.close_connection = True
            return None
        return self._send(b"not found", code=404)

    do_GET = _handle
    do_HEAD = _handle


@pytest.fixture()
def server(tmp_path):
    root = tmp_path / "served"
    root.mkdir()
    (root / "dump.xml").write_bytes(PAYLOAD)
    with local_http_server(root, _Handler) as srv:
        yield srv


@pytest.fixture()
def closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return port  # nothing listens there any more: connections are refused


SHA256 = hashlib.sha256(PAYLOAD).hexdigest()
SHA1 = hashlib.sha1(PAYLOAD).hexdigest()
FAST = dict(timeout=5.0, backoff=0.01)


def _leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def test_good_download_with_sha256(server, tmp_path):
    dest = tmp_path / "out" / "dump.xml"
    info = dl.download(f"{server.base}/files/dump.xml", dest, sha256=SHA256, **FAST)
    assert dest.read_bytes() == PAYLOAD
    assert info == {"url": f"{server.base}/files/dump.xml", "path": str(dest), "sha256": SHA256,
                    "sha1": SHA1, "bytes": len(PAYLOAD)}
    assert _leftovers(dest.parent) == ["dump.xml"]  # no temporary file left


def test_sha256_mismatch_leaves_nothing(server, tmp_path):
    dest = tmp_path / "dump.xml"
    wrong = "0" * 64
    url = f"{server.base}/files/dump.xml"
    with pytest.raises(BertlookError) as exc:
        dl.download(url, dest, sha256=wrong, **FAST)
    msg = str(exc.value)
    assert url in msg and wrong in msg and SHA256 in msg
    assert not dest.exists()
    assert _leftovers(tmp_path) == ["served"]


def test_sha1_verified_and_mismatch(server, tmp_path):
    url = f"{server.base}/files/dump.xml"
    info = dl.download(url, tmp_path / "a.xml", sha1=SHA1, **FAST)
    assert info["sha1"] == SHA1
    with pytest.raises(BertlookError, match="expected sha1 " + "f" * 40):
        dl.download(url, tmp_path / "b.xml", sha1="f" * 40, **FAST)
    assert not (tmp_path / "b.xml").exists()


def test_bad_checksum_argument(tmp_path):
    with pytest.raises(BertlookError, match="64 hexadecimal"):
        dl.download("http://127.0.0.1:9/x", tmp_path / "x", sha256="abc")


def test_retry_after_503_succeeds(server, tmp_path):
    dest = tmp_path / "dump.xml"
    info = dl.download(f"{server.base}/flaky/2/dump.xml", dest, sha256=SHA256, retries=3, **FAST)
    assert info["bytes"] == len(PAYLOAD) and dest.read_bytes() == PAYLOAD
    assert server.hits["/flaky/2/dump.xml"] == 3


def test_503_exhausts_retries(server, tmp_path):
    dest = tmp_path / "dump.xml"
    with pytest.raises(BertlookError, match=r"after 2 attempts: HTTP 503"):
        dl.download(f"{server.base}/flaky/5/dump.xml", dest, retries=2, **FAST)
    assert server.hits["/flaky/5/dump.xml"] == 2
    assert not dest.exists()


def test_404_fails_at_once(server, tmp_path):
    dest = tmp_path / "dump.xml"
    with pytest.raises(BertlookError, match="HTTP 404"):
        dl.download(f"{server.base}/missing", dest, retries=3, **FAST)
    assert server.hits["/missing"] == 1  # no retry
    assert not dest.exists()


def test_short_body_is_retried_then_fails(server, tmp_path):
    dest = tmp_path / "dump.xml"
    with pytest.raises(BertlookError, match="after 2 attempts"):
        dl.download(f"{server.base}/short/dump.xml", dest, retries=2, **FAST)
    assert server.hits["/short/dump.xml"] == 2
    assert not dest.exists()


def test_skip_when_dest_matches(server, tmp_path):
    dest = tmp_path / "dump.xml"
    dest.write_bytes(PAYLOAD)
    url = f"{server.base}/files/dump.xml"
    info = dl.download(url, dest, sha256=SHA256, **FAST)
    assert info == {"url": url, "path": str(dest), "sha256": SHA256, "sha1": SHA1, "bytes": len(PAYLOAD)}
    assert server.hits == {}  # nothing requested
    info = dl.download(url, dest, sha1=SHA1, **FAST)
    assert info["sha256"] == SHA256 and server.hits == {}


def test_stale_dest_is_replaced(server, tmp_path):
    dest = tmp_path / "dump.xml"
    dest.write_bytes(b"stale")
    dl.download(f"{server.base}/files/dump.xml", dest, sha256=SHA256, **FAST)
    assert dest.read_bytes() == PAYLOAD
    assert server.hits["/files/dump.xml"] == 1


def test_parse_sha1sums():
    text = (f"{'a' * 40}  enwiki-20190101-pages-articles.xml.bz2\n"
            f"{SHA1}  enwiki-20190101-pages-articles1.xml-p10p30302.bz2\n"
            f"{'b' * 40} *enwiki-20190101-abstract.xml.gz\n\n")
    assert dl.parse_sha1sums(text, "enwiki-20190101-pages-articles1.xml-p10p30302.bz2") == SHA1
    assert dl.parse_sha1sums(text, "enwiki-20190101-pages-articles.xml.bz2") == "a" * 40
    assert dl.parse_sha1sums(text, "enwiki-20190101-abstract.xml.gz") == "b" * 40
    with pytest.raises(BertlookError, match="no sha1 listed for 'other.bz2'"):
        dl.parse_sha1sums(text, "other.bz2", source="sums.txt")
    with pytest.raises(BertlookError, match="sums.txt:1:"):
        dl.parse_sha1sums("xyz  f.bz2\n", "f.bz2", source="sums.txt")


def test_fetch_sha1_from_sums(server, tmp_path):
    (server.root / "sha1sums.txt").write_text(f"{'c' * 40}  other.xml\n{SHA1}  dump.xml\n")
    url = f"{server.base}/files/sha1sums.txt"
    assert dl.fetch_sha1_from_sums(url, "dump.xml", 5.0) == SHA1
    with pytest.raises(BertlookError, match=r"sha1sums\.txt: no sha1 listed for 'absent\.xml'"):
        dl.fetch_sha1_from_sums(url, "absent.xml", 5.0)


def test_unreachable_url_message(closed_port, tmp_path):
    url = f"http://127.0.0.1:{closed_port}/enwiki.xml.bz2"
    dest = tmp_path / "dump.xml"
    with pytest.raises(BertlookError) as exc:
        dl.download(url, dest, retries=2, **FAST)
    msg = str(exc.value)
    assert msg.startswith(f"cannot reach {url}")
    assert "wikipedia.path" in msg and "make demo" in msg
    assert not dest.exists()


def test_check_reachable(server, closed_port):
    assert dl.check_reachable(f"{server.base}/files/dump.xml", timeout=5) is None
    assert "HTTP 404" in dl.check_reachable(f"{server.base}/missing", timeout=5)
    reason = dl.check_reachable(f"http://127.0.0.1:{closed_port}/x", timeout=5)
    assert reason.startswith("cannot reach") and "\n" not in reason and "wikipedia.path" not in reason  # preflight adds "What to do"


def _parse(argv):
    parser = argparse.ArgumentParser(prog="bertlook")
    download_cli.register_cli(parser.add_subparsers(dest="step"))
    return parser.parse_args(argv)


def test_cli_download_with_sha1sums(server, tmp_path, capsys):
    (server.root / "sha1sums.txt").write_text(f"{SHA1}  dump.xml\n")
    out, summary = tmp_path / "res" / "dump.xml", tmp_path / "res" / "download.json"
    args = _parse(["download", "--url", f"{server.base}/files/dump.xml", "--out", str(out),
                   "--sha256", SHA256, "--sha1sums-url", f"{server.base}/files/sha1sums.txt",
                   "--retries", "2", "--timeout", "5", "--summary", str(summary)])
    assert args.func(args) == 0
    assert out.read_bytes() == PAYLOAD
    assert json.loads(summary.read_text()) == {"url": f"{server.base}/files/dump.xml",
                                               "path": str(out), "sha256": SHA256, "sha1": SHA1,
                                               "bytes": len(PAYLOAD)}
    assert "sha1 verified" in capsys.readouterr().out


def test_cli_help_lists_inputs_and_outputs(capsys):
    with pytest.raises(SystemExit):
        _parse(["download", "--help"])
    text = capsys.readouterr().out
    for word in ("Input:", "Output:", "--url", "--out", "--sha256", "--sha1sums-url", "--summary"):
        assert word in text
