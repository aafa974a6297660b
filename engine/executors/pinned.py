"""The pinned transport of HTTP hooks: connections only to the address that was vetted.

Split from `engine.executors.http` at its seam (the rules are in its header): an httpcore
network backend that connects only to the ``Target.connect_ip`` pinned for the current
request (a ContextVar set around the request, so it follows the task), refuses every other
connection and never resolves a name, so DNS rebinding has no window; and the httpx
transport around it, which caps the body it reads.
"""

from __future__ import annotations

import contextlib
import contextvars
import ipaddress
import ssl
import typing
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass

import httpcore
import httpx

__all__ = ["PIN", "Pin", "PinnedTransport"]

# --------------------------------------------------------------------------- pinned transport


@dataclass(frozen=True, slots=True)
class Pin:
    host: str  # as httpcore passes it to connect_tcp: ASCII, no brackets
    port: int
    ip: str


PIN: contextvars.ContextVar[Pin | None] = contextvars.ContextVar("hookaudit_http_pin", default=None)


class _PinnedBackend(httpcore.AsyncNetworkBackend):
    """Connects to the pinned, vetted address of the current request, or refuses."""

    def __init__(self) -> None:
        self._inner = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        pin = PIN.get()
        if pin is None or pin.host != host.lower() or pin.port != port:
            raise httpcore.ConnectError(f"refusing unvetted connection to {host}:{port}")
        try:
            ipaddress.ip_address(pin.ip)  # a literal, so the inner backend cannot resolve it
        except ValueError as exc:
            raise httpcore.ConnectError(f"no vetted address for {host}:{port}") from exc
        return await self._inner.connect_tcp(
            pin.ip,
            port,
            timeout=timeout,
            local_address=local_address,
            socket_options=socket_options,
        )

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("HTTP hooks never use unix sockets")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


# httpcore's exceptions, as httpx names them (httpx's own table is private).
_ERRORS: tuple[tuple[type[Exception], type[httpx.HTTPError]], ...] = (
    (httpcore.ConnectTimeout, httpx.ConnectTimeout),
    (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout),
    (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.ReadError, httpx.ReadError),
    (httpcore.WriteError, httpx.WriteError),
    (httpcore.RemoteProtocolError, httpx.RemoteProtocolError),
    (httpcore.LocalProtocolError, httpx.LocalProtocolError),
    (httpcore.UnsupportedProtocol, httpx.UnsupportedProtocol),
    (httpcore.TimeoutException, httpx.TimeoutException),
    (httpcore.NetworkError, httpx.NetworkError),
    (httpcore.ProtocolError, httpx.ProtocolError),
)


@contextlib.contextmanager
def _mapped() -> Iterator[None]:
    try:
        yield
    except Exception as exc:
        for core, mapped in _ERRORS:
            if isinstance(exc, core):
                raise mapped(str(exc)) from exc
        raise


class _Body(httpx.AsyncByteStream):
    def __init__(self, stream: AsyncIterator[bytes] | typing.AsyncIterable[bytes]) -> None:
        self._stream = stream

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with _mapped():
            async for chunk in self._stream:
                yield chunk

    async def aclose(self) -> None:
        close = getattr(self._stream, "aclose", None)
        if close is not None:
            with _mapped():
                await close()


class PinnedTransport(httpx.AsyncBaseTransport):
    """httpx transport over an httpcore pool whose sockets go to pinned addresses only."""

    def __init__(self, ssl_context: ssl.SSLContext, limits: httpx.Limits) -> None:
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=ssl_context,
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=_PinnedBackend(),
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        req = httpcore.Request(
            method=request.method,
            url=httpcore.URL(
                scheme=request.url.raw_scheme,
                host=request.url.raw_host,
                port=request.url.port,
                target=request.url.raw_path,
            ),
            headers=request.headers.raw,
            content=typing.cast("typing.AsyncIterable[bytes]", request.stream),
            extensions=request.extensions,
        )
        with _mapped():
            resp = await self._pool.handle_async_request(req)
        return httpx.Response(
            status_code=resp.status,
            headers=resp.headers,
            stream=_Body(typing.cast("typing.AsyncIterable[bytes]", resp.stream)),
            extensions=resp.extensions,
        )

    async def aclose(self) -> None:
        with _mapped():
            await self._pool.aclose()
