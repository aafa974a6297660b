"""A small HTTP/1.1 server (h11 over asyncio) for one ASGI app, built for hostile clients.

Rules of this file:
- A connection is always in exactly one phase, and every phase but ``app`` has a deadline
  that closes the connection when it passes:
  ``head``  from accept (or from the first byte after an idle period) to the end of the
            request head: `Limits.header_timeout`, however slowly the bytes dribble in;
  ``body``  from the end of the head to the end of the body: `Limits.body_timeout`;
  ``app``   the app has the whole request; it bounds its own wait (serve's ``--timeout``),
            and writing its answer to a client that does not read is bounded by
            `Limits.body_timeout` again;
  ``drain``  after an answer given before the body was read (413): the rest of the body is
            read and discarded for at most `Limits.body_timeout`, then the connection is
            closed (closing with unread bytes would reset it before the client reads the
            answer);
  ``idle``  between a response and the next request's first byte: `Limits.keepalive_timeout`.
- Memory per connection is bounded: the request head by h11's incomplete-event cap
  (`Limits.max_header_bytes`, 431 beyond it), the buffered body by `Limits.high_water`
  (reading pauses until the app takes it; the app caps the total), and pipelined requests
  by pausing reading while a request is in the app.
- At most `Limits.max_connections` connections. At the cap a new connection evicts the
  oldest one that is idle, else the oldest one still sending its head; a connection whose
  request is being read or answered is never evicted. With nothing to evict the new one
  gets a 503 and is closed. A flood of slow or idle connections thus cannot starve a
  client that sends a whole request.
- The app is plain ASGI 3 (``http`` scope only); nothing here knows about hooks.
- This file is the server (limits, admission, eviction, shutdown); one connection's
  phases and its ASGI request cycle are `ingest.serve.http1_conn.Connection`.

Example:
    >>> Limits().header_timeout, Limits().max_connections
    (10.0, 1000)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import resource
import socket
from dataclasses import dataclass

from ingest.serve.http1_conn import App, Connection

__all__ = ["Http1Server", "Limits", "fd_ceiling"]

_log = logging.getLogger("hookaudit.serve.http")


@dataclass(frozen=True, kw_only=True, slots=True)
class Limits:
    """What one client may cost the server (seconds, bytes, connections)."""

    header_timeout: float = 10.0
    body_timeout: float = 10.0
    # Longer than any client's idle timeout (undici: 4 s), so a client never sends on a
    # connection the server is closing, which Claude Code would see as an error.
    keepalive_timeout: float = 75.0
    max_connections: int = 1000
    max_header_bytes: int = 16 * 1024
    high_water: int = 64 * 1024


def fd_ceiling(wanted: int, reserve: int = 64) -> int:
    """`wanted` connections, lowered so that they fit the process's open-file limit.

    >>> fd_ceiling(10) == 10
    True
    """
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return wanted
    return max(1, min(wanted, soft - reserve))


class Http1Server:
    """Serve `app` on a bound socket under `limits`; `shutdown` lets requests finish.

    Example:
        >>> srv = Http1Server(app, Limits(header_timeout=5))  # doctest: +SKIP
        >>> await srv.start(sock); ...; await srv.shutdown(grace=10)  # doctest: +SKIP
    """

    def __init__(self, app: App, limits: Limits) -> None:
        self.app = app
        self.limits = limits
        self.conns: dict[Connection, None] = {}  # insertion order = age
        self.stopping = False
        self.expired: dict[str, int] = {}
        self.evicted = 0
        self.refused = 0
        self._server: asyncio.Server | None = None
        self._idle = asyncio.Event()

    async def start(self, sock: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: Connection(self), sock=sock, backlog=1024)

    def admit(self, conn: Connection) -> bool:
        """Register `conn`, evicting an idle or slow connection at the cap (False: none)."""
        if self.stopping:
            return False
        if len(self.conns) >= self.limits.max_connections:
            victim = self._victim()
            if victim is None:
                self.refused += 1
                _log.warning("%d connections, none idle: refusing %s", len(self.conns), conn.peer)
                return False
            self.evicted += 1
            victim.abort()
        self.conns[conn] = None
        self._idle.clear()
        return True

    def _victim(self) -> Connection | None:
        head: Connection | None = None
        for c in self.conns:  # oldest first
            if c.phase == "idle":
                return c
            if c.phase == "head" and head is None:
                head = c
        return head

    def stats(self) -> dict[str, int]:
        """Open connections and what the limits did so far (for /healthz).

        >>> Http1Server(None, Limits()).stats()["connections"]  # type: ignore[arg-type]
        0
        """
        out = {"connections": len(self.conns), "evicted": self.evicted, "refused": self.refused}
        out.update({f"{phase}_timeouts": n for phase, n in sorted(self.expired.items())})
        return out

    def forget(self, conn: Connection) -> None:
        self.conns.pop(conn, None)
        if not self.conns:
            self._idle.set()

    async def shutdown(self, grace: float) -> None:
        """Stop accepting, close idle and unfinished connections, wait `grace` s for the rest."""
        self.stopping = True
        if self._server is not None:
            self._server.close()
        for c in list(self.conns):
            if c.phase in ("idle", "head"):
                c.abort()
        if self.conns:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(grace):
                    await self._idle.wait()
        for c in list(self.conns):
            c.abort()
        if self._server is not None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1.0):
                    await self._server.wait_closed()
