"""A throw-away HTTP server on 127.0.0.1 (random port) for download tests; bounded and shut down."""

from __future__ import annotations

import contextlib
import http.server
import threading
from pathlib import Path
from typing import Iterator


@contextlib.contextmanager
def local_http_server(root: Path, handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator:
    """Serve with ``handler`` in a thread; the server carries ``root``, ``hits`` (requests per path),
    ``lock`` and ``base`` (``http://127.0.0.1:PORT``)."""
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    srv.daemon_threads = True
    srv.root, srv.hits, srv.lock = root, {}, threading.Lock()
    srv.base = f"http://127.0.0.1:{srv.server_address[1]}"
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(timeout=5)
