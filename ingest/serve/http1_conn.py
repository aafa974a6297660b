"""One HTTP/1.1 client connection of `ingest.serve.http1.Http1Server`: h11 state, phases, ASGI.

Rules of this file are `ingest.serve.http1`'s (phases and their deadlines, bounded memory); this
is their per-connection half. The server owns admission and eviction; a connection tells
it when it opens (`Http1Server.admit`), which phase timed out (`Http1Server.expired`),
and when it is gone (`Http1Server.forget`).

Example:
    >>> Connection.__mro__[1].__name__
    'Protocol'
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Any, Literal

import h11

if TYPE_CHECKING:
    from ingest.serve.http1 import Http1Server

__all__ = ["App", "Connection", "Phase", "status_response"]

_log = logging.getLogger("hookaudit.serve.http")

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
App = Callable[
    [Scope, Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]],
    Awaitable[None],
]
Phase = Literal["head", "body", "app", "drain", "idle", "closed"]


def status_response(status: int, reason: bytes) -> list[bytes]:
    return [b"HTTP/1.1 %d %s\r\ncontent-length: 0\r\nconnection: close\r\n\r\n" % (status, reason)]


class Connection(asyncio.Protocol):
    """One client connection: h11 state, the phase deadline, the ASGI request cycle."""

    def __init__(self, server: Http1Server) -> None:
        self.server = server
        self.limits = server.limits
        self.h11 = h11.Connection(
            h11.SERVER, max_incomplete_event_size=server.limits.max_header_bytes
        )
        self.transport: asyncio.Transport | None = None
        self.phase: Phase = "head"
        self.since = time.monotonic()
        self._timer: asyncio.TimerHandle | None = None
        self._task: asyncio.Task[None] | None = None
        self._body = bytearray()
        self._body_done = False
        self._body_sent = False
        self._wake: asyncio.Event = asyncio.Event()
        self._lost = False
        self._read_paused = False
        self._write_ok: asyncio.Event = asyncio.Event()
        self._write_ok.set()
        self._head: h11.Request | None = None
        self._response_started = False
        self._status = 200
        self._headers: list[tuple[bytes, bytes]] = []
        self.peer: tuple[str, int] | None = None
        self.local: tuple[str, int] | None = None

    # -- asyncio.Protocol --------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        peer = transport.get_extra_info("peername")
        local = transport.get_extra_info("sockname")
        self.peer = (str(peer[0]), int(peer[1])) if isinstance(peer, tuple) else None
        self.local = (str(local[0]), int(local[1])) if isinstance(local, tuple) else None
        if not self.server.admit(self):
            transport.writelines(status_response(503, b"Service Unavailable"))
            transport.close()
            self.phase = "closed"
            return
        self._deadline(self.limits.header_timeout)

    def data_received(self, data: bytes) -> None:
        if self.phase == "closed":
            return
        if self.phase == "idle":
            self._enter("head", self.limits.header_timeout)
        self.h11.receive_data(data)
        self._pump()

    def eof_received(self) -> bool | None:
        if self.phase != "closed":
            with contextlib.suppress(h11.RemoteProtocolError):
                self.h11.receive_data(b"")
            self._pump()
        # A client that half-closes after its request still gets the answer.
        return True if self._task is not None else None

    def connection_lost(self, exc: Exception | None) -> None:
        self._lost = True
        self._close_state()
        self._wake.set()
        self._write_ok.set()

    def pause_writing(self) -> None:
        self._write_ok.clear()

    def resume_writing(self) -> None:
        self._write_ok.set()

    # -- phases --------------------------------------------------------------------------
    def _enter(self, phase: Phase, timeout: float | None) -> None:
        self.phase = phase
        self.since = time.monotonic()
        self._deadline(timeout)

    def _deadline(self, timeout: float | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if timeout is not None:
            loop = asyncio.get_running_loop()
            self._timer = loop.call_later(timeout, self._expired, self.phase)

    def _expired(self, phase: Phase) -> None:
        self._timer = None
        if self.phase != phase or self.transport is None:
            return
        self.server.expired[phase] = self.server.expired.get(phase, 0) + 1
        _log.info("%s timeout from %s: closing", phase, self.peer)
        self.abort()

    def _close(self) -> None:
        """Close after what is written has been sent."""
        if self.transport is not None:
            self.transport.close()
        self._close_state()

    def abort(self) -> None:
        """Drop the connection now, buffers and all."""
        if self.transport is not None:
            self.transport.abort()
        self._close_state()

    def _close_state(self) -> None:
        if self.phase != "closed":
            self.phase = "closed"
            self.server.forget(self)
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    # -- reading -------------------------------------------------------------------------
    def _pump(self) -> None:
        while self.phase != "closed":
            try:
                event = self.h11.next_event()
            except h11.RemoteProtocolError as exc:
                self._bad_request(exc)
                return
            if event is h11.NEED_DATA:
                return
            if event is h11.PAUSED:
                self._pause_reading()
                return
            if isinstance(event, h11.Request):
                self._start_request(event)
            elif isinstance(event, h11.Data) and self.phase == "drain":
                pass
            elif isinstance(event, h11.Data):
                self._body += event.data
                if len(self._body) >= self.limits.high_water:
                    self._pause_reading()
                self._wake.set()
            elif isinstance(event, h11.EndOfMessage) and self.phase == "drain":
                self._close()
                return
            elif isinstance(event, h11.EndOfMessage):
                self._body_done = True
                if self.phase == "body":
                    self._enter("app", None)
                self._wake.set()
            elif isinstance(event, h11.ConnectionClosed):
                if self._task is None:
                    self.abort()
                return  # else: answered, then closed (their side is not DONE)

    def _bad_request(self, exc: h11.RemoteProtocolError) -> None:
        status = exc.error_status_hint
        _log.info("bad request from %s: %s", self.peer, exc)
        if self.transport is not None and self.h11.our_state in (h11.IDLE, h11.SEND_RESPONSE):
            reason = b"Request Header Fields Too Large" if status == 431 else b"Bad Request"
            status = status if status in (400, 431) else 400
            self.transport.writelines(status_response(status, reason))
            self.transport.close()
        self._close_state()

    def _pause_reading(self) -> None:
        if not self._read_paused and self.transport is not None:
            self._read_paused = True
            self.transport.pause_reading()

    def _resume_reading(self) -> None:
        if self._read_paused and self.transport is not None and self.phase != "closed":
            self._read_paused = False
            self.transport.resume_reading()

    def _start_request(self, head: h11.Request) -> None:
        # h11 checks its cap only while a head is incomplete; one that arrived whole in a
        # single read is measured here.
        size = len(head.target) + sum(len(k) + len(v) + 4 for k, v in head.headers)
        if size > self.limits.max_header_bytes:
            self._bad_request(h11.RemoteProtocolError("head too large", error_status_hint=431))
            return
        self._head = head
        self._body.clear()
        self._body_done = self._body_sent = self._response_started = False
        self._enter("body", self.limits.body_timeout)
        path, _, query = head.target.partition(b"?")
        scope: Scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": head.http_version.decode("ascii", "replace"),
            "method": head.method.decode("ascii", "replace"),
            "scheme": "http",
            "path": path.decode("latin-1"),
            "raw_path": path,
            "query_string": query,
            "root_path": "",
            "headers": [(k.lower(), v) for k, v in head.headers],
            "client": self.peer,
            "server": self.local,
        }
        self._task = asyncio.get_running_loop().create_task(self._run(scope))

    async def receive(self) -> Message:
        if self.h11.they_are_waiting_for_100_continue and self.transport is not None:
            self.transport.write(self._out(h11.InformationalResponse(status_code=100, headers=[])))
        while True:
            if self._body or (self._body_done and not self._body_sent):
                chunk = bytes(self._body)
                self._body.clear()
                self._resume_reading()
                more = not self._body_done
                self._body_sent = not more
                return {"type": "http.request", "body": chunk, "more_body": more}
            if self._lost or self.phase == "closed":
                return {"type": "http.disconnect"}
            self._wake.clear()
            await self._wake.wait()

    # -- writing -------------------------------------------------------------------------
    async def send(self, message: Message) -> None:
        if self._lost or self.transport is None or self.phase == "closed":
            return
        kind = message["type"]
        if kind == "http.response.start":
            self._status = int(message["status"])
            self._headers = [(bytes(k), bytes(v)) for k, v in message.get("headers", [])]
            return
        if kind != "http.response.body":
            return
        out: list[bytes] = []
        if not self._response_started:
            self._response_started = True
            headers = list(self._headers)
            if not self._body_done or self.server.stopping:
                headers.append((b"connection", b"close"))
            out.append(self._out(h11.Response(status_code=self._status, headers=headers)))
        body: bytes = message.get("body", b"")
        if body and self._head is not None and self._head.method != b"HEAD":
            out.append(self._out(h11.Data(data=body)))
        if not message.get("more_body", False):
            out.append(self._out(h11.EndOfMessage()))
        self.transport.writelines(out)
        if not self._write_ok.is_set():
            try:
                async with asyncio.timeout(self.limits.body_timeout):
                    await self._write_ok.wait()
            except TimeoutError:
                self.server.expired["write"] = self.server.expired.get("write", 0) + 1
                self.abort()

    def _out(self, event: h11.Event) -> bytes:
        try:
            return self.h11.send(event) or b""
        except h11.LocalProtocolError as exc:
            raise RuntimeError(f"the app broke HTTP/1.1: {exc}") from exc

    async def _run(self, scope: Scope) -> None:
        try:
            await self.server.app(scope, self.receive, self.send)
            if not self._response_started and not self._lost:
                await self.send({"type": "http.response.start", "status": 500, "headers": []})
                await self.send({"type": "http.response.body", "body": b""})
        except Exception:
            _log.exception("the app failed on %s %s", scope["method"], scope["path"])
            if not self._response_started and not self._lost:
                await self.send({"type": "http.response.start", "status": 500, "headers": []})
                await self.send({"type": "http.response.body", "body": b""})
            else:
                self.abort()
        finally:
            self._task = None
            self._after_response()

    def _after_response(self) -> None:
        if self.phase == "closed" or self.transport is None:
            return
        if (
            self.h11.our_state in (h11.DONE, h11.MUST_CLOSE)
            and self.h11.their_state is h11.SEND_BODY
        ):
            # Answered before the body was read (413): read the rest away, then close.
            self._enter("drain", self.limits.body_timeout)
            self._resume_reading()
            self._pump()
            return
        if (
            self._lost
            or self.server.stopping
            or self.h11.our_state is not h11.DONE
            or self.h11.their_state is not h11.DONE
        ):
            self._close()
            return
        self.h11.start_next_cycle()
        self._head = None
        self._enter("idle", self.limits.keepalive_timeout)
        self._resume_reading()
        self._pump()  # a pipelined request may already be buffered
