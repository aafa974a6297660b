"""Loopback HTTP servers for tests: a real `ThreadingHTTPServer` on 127.0.0.1, on a free
port (or the one given), in a daemon thread, stopped by `stop`.

Example:
    >>> class Ok(Quiet):
    ...     def do_GET(self) -> None:
    ...         self.send_response(204)
    ...         self.end_headers()
    >>> server = serve(Ok)
    >>> import urllib.request
    >>> urllib.request.urlopen(f"http://127.0.0.1:{port(server)}/").status
    204
    >>> stop(server)
"""

from __future__ import annotations

import ssl
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["Quiet", "QuietServer", "port", "serve", "serving", "stop"]


class Quiet(BaseHTTPRequestHandler):
    """A request handler that logs nothing (the test asserts what it needs)."""

    def log_message(self, *args: Any) -> None:
        pass


class QuietServer(ThreadingHTTPServer):
    """A client that hangs up early (a timeout or a body cap under test) is no error here."""

    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def serve(
    handler: type[BaseHTTPRequestHandler],
    *,
    port: int = 0,
    tls: ssl.SSLContext | None = None,
) -> ThreadingHTTPServer:
    """A started server on 127.0.0.1:`port` (0: a free one), HTTPS with `tls`."""
    server = QuietServer(("127.0.0.1", port), handler)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    return server


def port(server: ThreadingHTTPServer) -> int:
    return int(server.server_address[1])


def stop(server: ThreadingHTTPServer) -> None:
    server.shutdown()
    server.server_close()


@contextmanager
def serving(handler: type[BaseHTTPRequestHandler], **kw: Any) -> Iterator[ThreadingHTTPServer]:
    """`serve` for the length of a with-block."""
    server = serve(handler, **kw)
    try:
        yield server
    finally:
        stop(server)
