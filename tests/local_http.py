"""A throw-away HTTP server on 127.0.0.1 (random port) for download tests; bounded and shut down."""

from __future__ import annotations

import contextlib
import http.server
import threading
from pathlib import Path
from typing import Iterator


class FileHandler(http.server.BaseHTTPRequestHandler):
    """GET/HEAD /PATH: the file ``server.root/PATH`` (404 when absent or outside root); every request counted in ``server.hits``
    and its header names added to ``server.headers_seen`` (a token must never reach a plain file server)."""

    def log_message(self, *args):
        pass

    def _handle(self):
        srv = self.server
        with srv.lock:
            srv.hits[self.path] = srv.hits.get(self.path, 0) + 1
            srv.headers_seen.extend(k.lower() for k in self.headers.keys())
        root = Path(srv.root).resolve()
        path = (root / self.path.lstrip("/")).resolve()
        found = root in path.parents and path.is_file()  # nothing outside root ("/../")
        body, code = (path.read_bytes(), 200) if found else (b"not found", 404)
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = _handle
    do_HEAD = _handle


@contextlib.contextmanager
def local_http_server(root: Path, handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator:
    """Serve with ``handler`` (e.g. :class:`FileHandler`) in a thread; the server carries ``root``, ``hits``
    (requests per path), ``headers_seen``, ``lock`` and ``base`` (``http://127.0.0.1:PORT``)."""
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    srv.daemon_threads = True
    srv.root, srv.hits, srv.lock, srv.headers_seen = root, {}, threading.Lock(), []
    srv.base = f"http://127.0.0.1:{srv.server_address[1]}"
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(timeout=5)
