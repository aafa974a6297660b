"""`hookaudit serve`: an HTTP gateway that Claude Code `http` hooks POST their input to.

Three parts: `ingest.serve.gateway` (the NATS side: publish, and ONE wildcard inbox
subscription for every waiting request), `ingest.serve.app` (the raw ASGI app: routes,
limits, auth, and the body an http hook answers with, failing closed on hostile input)
and this file (the listening address, the options, and `HttpServer`, which binds,
connects, provisions and runs the app on `ingest.serve.http1`).

Rules of this file:
- Beyond loopback only with a bearer token (`check_listen`, also in `ServeOptions`).
- Stopping lets requests in flight get their answer (up to ``--timeout`` + 5 s), then
  drains NATS; with a data dir, what serve answered alone while NATS was down is flushed
  from the spool every second.

Example:
    >>> parse_listen("127.0.0.1:8787")
    ('127.0.0.1', 8787)
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import socket
from dataclasses import dataclass, field, replace
from pathlib import Path

import nats.errors
from nats.aio.client import Client

from engine.errors import Unavailable
from ingest.nats.streams import ConnectOptions, Names, provision
from ingest.replysig import Verifier
from ingest.serve.app import Fail, ServeApp
from ingest.serve.gateway import Gateway, flush_spool
from ingest.serve.http1 import Http1Server, Limits, fd_ceiling

__all__ = ["HttpServer", "ServeOptions", "check_listen", "parse_listen"]

_log = logging.getLogger("hookaudit.serve")


def parse_listen(text: str) -> tuple[str, int]:
    """HOST:PORT (IPv6 in brackets) -> (host, port); an empty host means every interface.

    >>> parse_listen("[::1]:8787"), parse_listen("localhost:0")
    (('::1', 8787), ('127.0.0.1', 0))
    """
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"--listen {text!r}: expected HOST:PORT, e.g. 127.0.0.1:8787")
    host = host.removeprefix("[").removesuffix("]")
    if host == "localhost":
        host = "127.0.0.1"
    host = host or "0.0.0.0"
    try:
        ipaddress.ip_address(host)
    except ValueError:
        raise ValueError(
            f"--listen {text!r}: expected an IP address (127.0.0.1, [::1], 0.0.0.0), not a name"
        ) from None
    return host, int(port)


def check_listen(host: str, token: str | None) -> None:
    """Refuse to listen beyond loopback without a bearer token (ValueError says why)."""
    if not ipaddress.ip_address(host).is_loopback and not token:
        raise ValueError(
            f"refusing to listen on {host}, which is reachable from other machines, without "
            "a bearer token: pass --token (or set HOOKAUDIT_SERVE_TOKEN), or listen on 127.0.0.1"
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class ServeOptions:
    """How the gateway listens and decides.

    >>> ServeOptions(fail="closed").max_body
    1048576
    """

    host: str = "127.0.0.1"
    port: int = 8787
    names: Names = field(default_factory=Names)
    timeout: float = 10.0
    fail: Fail = "open"
    max_body: int = 1024 * 1024
    max_pending: int = 1024
    token: str | None = None
    provision: bool = True
    #: Trusted worker keys: only a reply signed by one of them decides (None: unsigned ok).
    verifier: Verifier | None = None
    limits: Limits = field(default_factory=Limits)
    #: Where to spool what serve answered by itself while NATS is down (None: nowhere).
    data_dir: Path | None = None

    def __post_init__(self) -> None:
        check_listen(self.host, self.token)

    @property
    def url(self) -> str:
        return _url(self.host, self.port)


def _url(host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/hooks"


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP, not 0: accepted sockets inherit it, and asyncio sets TCP_NODELAY only
    # on sockets whose proto says TCP. Without it, Nagle + delayed ACK add 40 ms a request.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise Unavailable(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    return sock


class HttpServer:
    """The whole gateway: the socket, the NATS connection, the HTTP server. Start, then stop.

    Example:
        >>> async with HttpServer(ServeOptions(port=0), connect) as srv:  # doctest: +SKIP
        ...     print(srv.url)
    """

    def __init__(self, options: ServeOptions, connect: ConnectOptions) -> None:
        self.options = options
        self.connect = connect
        self.url = options.url
        self.gateway: Gateway | None = None
        self._nc: Client | None = None
        self.http: Http1Server | None = None
        self._stop: asyncio.Event | None = None
        self._flusher: asyncio.Future[None] | None = None

    async def start(self) -> str:
        """Bind, connect to NATS, provision, start serving; return the hooks URL."""
        opts = self.options
        sock = _bind(opts.host, opts.port)
        try:
            self._nc = nc = await self.connect.connect()
            if opts.provision:
                await provision(nc.jetstream(), prefix=opts.names.prefix)
            self.gateway = Gateway(
                nc,
                opts.names,
                timeout=opts.timeout,
                max_pending=opts.max_pending,
                verifier=opts.verifier,
            )
            await self.gateway.start()
        except BaseException:
            sock.close()
            if self._nc is not None:
                await self._nc.close()
            raise
        limits = opts.limits
        cap = fd_ceiling(limits.max_connections)
        if cap < limits.max_connections:
            _log.warning(
                "--max-connections %d lowered to %d (open-file limit)", limits.max_connections, cap
            )
            limits = replace(limits, max_connections=cap)
        app = ServeApp(self.gateway, opts)
        self.http = Http1Server(app, limits)
        app.http_stats = self.http.stats
        try:
            await self.http.start(sock)
        except OSError as exc:
            sock.close()
            await self._nc.close()
            raise Unavailable(f"cannot serve on {opts.host}:{opts.port}: {exc}") from exc
        self._stop = asyncio.Event()
        if opts.data_dir is not None:
            self._flusher = asyncio.ensure_future(flush_spool(self.gateway, opts.data_dir))
        port = sock.getsockname()[1]
        self.url = _url(opts.host, port)
        return self.url

    def request_stop(self) -> None:
        """Stop accepting; requests in flight still get their answer (safe in a signal handler)."""
        if self._stop is not None:
            self._stop.set()

    async def wait(self) -> None:
        """Wait until serving ends, then close the inbox and drain NATS."""
        try:
            if self._stop is not None and self.http is not None:
                await self._stop.wait()
                # Requests in flight wait at most --timeout for their decision.
                await self.http.shutdown(grace=self.options.timeout + 5)
        finally:
            if self._flusher is not None:
                self._flusher.cancel()
            if self.gateway is not None:
                await self.gateway.close()
            if self._nc is not None and not self._nc.is_closed:
                with contextlib.suppress(nats.errors.Error, OSError, TimeoutError):
                    await self._nc.drain()

    async def stop(self) -> None:
        self.request_stop()
        await self.wait()

    async def __aenter__(self) -> HttpServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()
