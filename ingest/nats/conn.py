"""Connecting to NATS: the server list, credentials, TLS, reconnects, and error wording.

Part of the NATS adapter (`ingest.nats.streams` re-exports everything here). nats-py's errors
are translated here, once: `describe` words any of them, `publish_error` a failed
JetStream publish; a missing credentials or TLS file is a `SettingsError`.

Example:
    >>> split_urls("nats://a:4222,nats://b:4222")
    ('nats://a:4222', 'nats://b:4222')
"""

from __future__ import annotations

import contextlib
import importlib.util
import logging
import ssl
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import nats.errors
from nats.aio.client import Client
from nats.js import errors as js_errors

from engine.errors import PublishUncertain, SettingsError, Unavailable

__all__ = ["ConnectOptions", "connect", "describe", "publish_error", "split_urls"]

_log = logging.getLogger("hookaudit.nats")


def split_urls(url: str | list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """A server list from a comma-separated string or a list of them.

    Example:
        >>> split_urls("nats://a:4222, nats://b:4222")
        ('nats://a:4222', 'nats://b:4222')
    """
    parts = [url] if isinstance(url, str) else list(url)
    servers = tuple(s.strip() for p in parts for s in p.split(",") if s.strip())
    if not servers:
        raise ValueError("NATS URL: expected one or more URLs like nats://127.0.0.1:4222")
    return servers


def _redact(url: str) -> str:
    """`url` with any password replaced, for error messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


@dataclass(frozen=True, kw_only=True, slots=True)
class ConnectOptions:
    """How to reach NATS: servers, credentials, TLS, timeouts. Shared by every CLI command.

    `max_reconnect` counts reconnect attempts per server after the first connection
    (-1: forever); the first connection itself fails fast, so a command never hangs.

    Example:
        >>> ConnectOptions(servers=("nats://127.0.0.1:4222",)).name
        'hookaudit'
    """

    servers: tuple[str, ...]
    creds: str | None = None
    nkey_seed: str | None = None
    user: str | None = None
    password: str | None = None
    token: str | None = None
    tls_ca: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    name: str = "hookaudit"
    connect_timeout: float = 2.0
    max_reconnect: int = 60
    reconnect_wait: float = 2.0
    #: The data dir of an embedded server to follow: each reconnect attempt reads its
    #: server.json, so a client finds the server again if it came back on another port.
    follow: Path | None = None
    #: Where this client's replies arrive. None: ``_INBOX.<public key>`` for an nkey (an
    #: emitter key may subscribe there only: `ingest.nats.auth.inbox_prefix`), else _INBOX.
    inbox_prefix: str | None = None

    async def connect(self) -> Client:
        """Connect, or raise `Unavailable` naming the servers and why.

        Example:
            >>> nc = await ConnectOptions(servers=("nats://127.0.0.1:4222",)).connect()  # doctest: +SKIP
        """
        kwargs = self._client_kwargs()
        first_errors: list[str] = []
        connected = False

        last: list[str] = []  # the last trouble logged: an outage is one line, not one a try

        async def on_error(exc: Exception) -> None:
            if "permissions violation" in str(exc).lower():
                DENIED[nc] = describe(exc)  # what a request timing out was refused
            if not connected:
                first_errors.append(describe(exc))
            elif last != [describe(exc)]:
                last[:] = [describe(exc)]
                _log.warning("NATS connection: %s", last[0])

        async def on_reconnected() -> None:
            url = nc.connected_url
            if last and url is not None:
                _log.warning("NATS connection: reconnected to %s", _redact(url.geturl()))
            last.clear()

        nc = Client()
        if self.follow is not None:
            kwargs["reconnect_to_server_handler"] = _follower(nc, self.follow, self.reconnect_wait)
        try:
            await nc.connect(error_cb=on_error, reconnected_cb=on_reconnected, **kwargs)
        except (OSError, nats.errors.Error) as e:
            with contextlib.suppress(Exception):
                await nc.close()
            shown = ", ".join(_redact(s) for s in self.servers)
            why = "; ".join(dict.fromkeys(first_errors)) or describe(e)
            raise Unavailable(f"cannot connect to NATS at {shown}: {why}") from e
        connected = True
        # nats-py applies one retry policy to the first connection and to reconnects
        # (with max_reconnect_attempts=0 it even retries the first one forever). The
        # first connection was made with a fail-fast policy; reconnects get the real one.
        nc.options["max_reconnect_attempts"] = self.max_reconnect
        nc.options["reconnect_time_wait"] = self.reconnect_wait
        return nc

    def _client_kwargs(self) -> dict[str, Any]:
        for label, file in (
            ("--creds", self.creds),
            ("--nkey", self.nkey_seed),
            ("--tls-ca", self.tls_ca),
            ("--tls-cert", self.tls_cert),
            ("--tls-key", self.tls_key),
        ):
            if file is not None and not Path(file).is_file():
                raise SettingsError(file, label, "file not found")
        if (self.creds or self.nkey_seed) and importlib.util.find_spec("nkeys") is None:
            raise SettingsError(
                self.creds or self.nkey_seed or "",
                "--creds" if self.creds else "--nkey",
                "NATS credentials need the 'nkeys' package: pip install 'nats-py[nkeys]'",
            )
        kwargs: dict[str, Any] = {
            "servers": list(self.servers),
            "name": self.name,
            "connect_timeout": self.connect_timeout,
            # First connection: each server is tried twice (the least nats-py allows
            # with a bounded count), 0.1 s apart. See connect() for reconnects.
            "max_reconnect_attempts": 1,
            "reconnect_time_wait": 0.1,
            "user_credentials": self.creds,
            "nkeys_seed": self.nkey_seed,
            "user": self.user,
            "password": self.password,
            "token": self.token,
        }
        tls = self._tls_context()
        if tls is not None:
            kwargs["tls"] = tls
        inbox = self.inbox_prefix or _key_inbox(self.nkey_seed)
        if inbox:
            kwargs["inbox_prefix"] = inbox
        return kwargs

    def _tls_context(self) -> ssl.SSLContext | None:
        if self.tls_key and not self.tls_cert:
            raise SettingsError(self.tls_key, "--tls-key", "a TLS key needs --tls-cert too")
        wants_tls = any(s.startswith("tls://") for s in self.servers)
        if not (wants_tls or self.tls_ca or self.tls_cert):
            return None
        try:
            ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=self.tls_ca)
        except (OSError, ssl.SSLError) as e:
            raise SettingsError(self.tls_ca or "", "--tls-ca", f"cannot load CA: {e}") from e
        if self.tls_cert:
            try:
                ctx.load_cert_chain(self.tls_cert, self.tls_key)
            except (OSError, ssl.SSLError) as e:
                raise SettingsError(
                    self.tls_cert, "--tls-cert", f"cannot load certificate/key: {e}"
                ) from e
        return ctx


def _key_inbox(seed_file: str | None) -> str | None:
    """``_INBOX.<public key>`` of an nkey seed file (None if there is none or it is unreadable:
    connecting then says what is wrong with it)."""
    if seed_file is None:
        return None
    from ingest.nats.auth import inbox_prefix, public_key

    try:
        return inbox_prefix(public_key(Path(seed_file).read_bytes()))
    except Exception:  # not a seed: nats-py's own error names the file
        return None


def _follower(nc: Client, data_dir: Path, wait: float) -> Any:
    """A nats-py reconnect handler that moves to where the data dir's server now listens."""
    from urllib.parse import urlparse

    from nats.aio.client import Server, Srv

    from ingest.nats.embedded import live_server
    from ingest.nats.wire import server_pool

    def choose(servers: list[Server], info: dict[str, Any]) -> tuple[Server | None, float]:
        live = live_server(data_dir)
        if live is None:
            return None, wait  # down: keep trying the last address
        uri = urlparse(live.url)
        pool = server_pool(nc)
        if not any(s.uri.netloc == uri.netloc for s in pool):
            _log.warning("NATS server of %s moved to %s: following it", data_dir, live.url)
            pool.append(Srv(uri=uri))
        return Server(uri=uri), 0.0 if not any(
            s.uri.netloc == uri.netloc for s in servers
        ) else wait

    return choose


def describe(exc: BaseException) -> str:
    if isinstance(exc, nats.errors.NoServersError):
        return "no server answered"
    if (
        isinstance(exc, nats.errors.AuthorizationError)
        or "authorization violation" in str(exc).lower()
    ):
        return "authorization violation: the server refused these credentials (none given, or a key it does not list)"
    if "permissions violation" in str(exc).lower():
        return f"permission denied: {str(exc).strip().removeprefix('nats: ')}"
    if isinstance(exc, TimeoutError) and not str(exc):
        return "timed out waiting for the server's INFO (is it a NATS server?)"
    text = str(exc).strip() or type(exc).__name__
    return text.removeprefix("nats: ")


#: The last permission the server refused each client (a refused request only times out).
DENIED: weakref.WeakKeyDictionary[Client, str] = weakref.WeakKeyDictionary()


def denied(nc: object) -> str | None:
    """The last "permission denied" the server sent `nc`, if any.

    Example:
        >>> denied(object()) is None
        True
    """
    return DENIED.get(nc) if isinstance(nc, Client) else None


def publish_error(exc: BaseException, subject: str, timeout: float) -> Unavailable:
    """THE translation of a failed JetStream publish (emit, serve, spool flush use it).

    Example:
        >>> str(publish_error(nats.errors.TimeoutError(), "hooks.events.Stop", 2.0))
        'no PubAck from JetStream within 2s for hooks.events.Stop'
    """
    if isinstance(exc, (js_errors.NoStreamResponseError, nats.errors.NoRespondersError)):
        return Unavailable(f"no JetStream stream stores {subject}")
    if isinstance(exc, (nats.errors.TimeoutError, TimeoutError)):
        return PublishUncertain(f"no PubAck from JetStream within {timeout:g}s for {subject}")
    if isinstance(exc, js_errors.APIError):
        return Unavailable(f"JetStream refused the event: {exc.description}")
    # Anything else (the connection lost mid-request, ...): the message may have gone out.
    return PublishUncertain(f"publish to {subject} failed: {describe(exc)}")


async def connect(
    url: str | list[str],
    *,
    creds: str | None = None,
    nkey_seed: str | None = None,
    user: str | None = None,
    password: str | None = None,
    token: str | None = None,
    tls_ca: str | None = None,
    tls_cert: str | None = None,
    tls_key: str | None = None,
    name: str = "hookaudit",
    connect_timeout: float = 2.0,
    max_reconnect: int = 60,
    reconnect_wait: float = 2.0,
) -> Client:
    """Connect to NATS; `url` may be a comma-separated list. Close the client when done.

    Example:
        >>> nc = await connect("nats://127.0.0.1:4222")  # doctest: +SKIP
        >>> await nc.close()  # doctest: +SKIP
    """
    opts = ConnectOptions(
        servers=split_urls(url),
        creds=creds,
        nkey_seed=nkey_seed,
        user=user,
        password=password,
        token=token,
        tls_ca=tls_ca,
        tls_cert=tls_cert,
        tls_key=tls_key,
        name=name,
        connect_timeout=connect_timeout,
        max_reconnect=max_reconnect,
        reconnect_wait=reconnect_wait,
    )
    return await opts.connect()
