"""HTTP hooks (spec §6.5): POST the event JSON to a URL, and nowhere else.

Rules of this file:
- Every refusal happens before a byte is sent: the allowlist, then (direct connections
  only) the SSRF address check, both from ``engine.executors.ssrf``. A refusal is a
  RawResult whose ``error_kind`` is the ``Blocked.kind``.
- The socket goes to the address that was checked (`engine.executors.pinned`). Direct
  requests run on a connection pool whose network backend connects only to the ``Target.connect_ip`` pinned for the
  current request (a ContextVar set around the request, so it follows the task) and
  refuses every other connection; it never resolves a name, so DNS rebinding has no
  window. If httpx reads the URL's host differently from the vetting parser, the request
  is refused (a parser differential must not pick the Host header or TLS name).
- With an environment proxy the guard is skipped, as in Claude Code: the proxy resolves.
- Every status is an answer, redirects are never followed, the body is capped
  (``body_cap`` kept, counted on up to ``discard_cap`` more). Decoding is
  ``engine.decode``'s job: ``http_status`` + ``stdout`` (the body text).
- One deadline (``inv.timeout``) covers DNS, connect, send and the whole body. Failures
  are outcomes (``timeout``, ``http_transport``), never exceptions.

Differences from Claude Code, on purpose: the ``Host``, ``Content-Length``,
``Transfer-Encoding`` and ``Connection`` headers cannot be set by a hook (framing and
virtual-host smuggling); header values holding other control characters are dropped,
surrounding spaces and tabs are trimmed (receivers ignore them; h11 will not send them);
warnings (unlisted env vars, dropped headers, truncation) go to ``RawResult.stderr``.

Example:
    >>> ex = HttpExecutor(allow_loopback=False)
    >>> ex.allow_loopback
    False
"""

from __future__ import annotations

import asyncio
import os
import re
import ssl
import time
from collections import ChainMap
from collections.abc import Mapping, Sequence

import httpx

from engine.effects import Invocation, RawResult
from engine.executors.pinned import PIN, Pin, PinnedTransport
from engine.executors.ssrf import (
    Blocked,
    Resolver,
    Target,
    interpolate_headers,
    parse_host_literal,
    proxy_for,
    system_resolver,
    url_allowed,
    vet_url,
)
from engine.records import ENGINE_VERSION
from engine.settings import HttpHook

__all__ = ["HttpExecutor"]

_FORBIDDEN_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection"})
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


def _ms(t0: float) -> float:
    return round((time.perf_counter() - t0) * 1000.0, 3)


# --------------------------------------------------------------------------- executor


def _tuple_or_none(value: object) -> tuple[str, ...] | None:
    if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        return tuple(value)
    return None


def _both(a: Sequence[str] | None, b: Sequence[str] | None) -> Sequence[str] | None:
    """Two allowlists that must both allow: None is 'no restriction from this layer'."""
    if a is None:
        return b
    if b is None:
        return a
    return [name for name in a if name in set(b)]


def _same_host(vetted: str, seen: str) -> bool:
    """Whether httpx's ASCII host names the host the SSRF parser vetted."""
    if vetted == seen:
        return True
    a, b = parse_host_literal(vetted), parse_host_literal(seen)
    if a is not None or b is not None:
        return a is not None and a == b
    try:
        return vetted.encode("idna").decode("ascii").lower() == seen
    except UnicodeError:
        return False


class HttpExecutor:
    """Runs `http` hooks; share one per process (its keep-alive pool serves one event loop
    at a time: a new loop gets a new pool).

    Policy: ``allowed_urls`` / ``env_allowlist`` are ``allowedHttpHookUrls`` /
    ``httpHookAllowedEnvVars`` fixed for this executor; when an Invocation carries
    ``allowed_http_urls`` / ``http_env_allowlist`` (per-evaluation policy), both layers
    must allow. ``environ`` is read once (default ``os.environ``): it alone picks the
    proxy; header interpolation sees it with the Invocation's ``env`` layered on top.

    Example:
        >>> import asyncio
        >>> from engine.records import HookIdentity
        >>> hook = HttpHook(type="http", url="http://evil.example/h")
        >>> inv = Invocation(index=0, event="Stop", hook=hook,
        ...     identity=HookIdentity(type="http", source="user", url=hook.url), source="user",
        ...     matcher=None, timeout=5, payload={}, input_json=b"{}", cwd="/")
        >>> ex = HttpExecutor(allowed_urls=["http://127.0.0.1:*/*"], environ={})
        >>> asyncio.run(ex.run(inv)).error_kind
        'url_not_allowed'
    """

    def __init__(
        self,
        *,
        resolver: Resolver = system_resolver,
        allow_loopback: bool = True,
        allowed_urls: Sequence[str] | None = None,
        env_allowlist: Sequence[str] | None = None,
        environ: Mapping[str, str] | None = None,
        body_cap: int = 1 << 20,
        discard_cap: int = 16 << 20,
        verify: ssl.SSLContext | bool = True,
        limits: httpx.Limits | None = None,
    ) -> None:
        self.resolver = resolver
        self.allow_loopback = allow_loopback
        self.allowed_urls = None if allowed_urls is None else tuple(allowed_urls)
        self.env_allowlist = None if env_allowlist is None else tuple(env_allowlist)
        self.environ = dict(os.environ if environ is None else environ)
        self.body_cap = body_cap
        self.discard_cap = discard_cap
        self.verify = verify
        self.limits = limits or httpx.Limits(max_connections=100, max_keepalive_connections=20)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._direct: httpx.AsyncClient | None = None
        self._proxied: dict[str, httpx.AsyncClient] = {}
        self._ssl: ssl.SSLContext | None = None
        self._user_agent = f"hookaudit/{ENGINE_VERSION}"
        # Pure per-URL work, memoised: how httpx reads a URL, and IP-literal vetting.
        self._client_view: dict[str, tuple[str, int]] = {}
        self._literal_pins: dict[tuple[str, tuple[str, ...] | None], Pin] = {}

    # ---------------------------------------------------------------- clients

    def _ssl_context(self) -> ssl.SSLContext:
        if self._ssl is None:
            if isinstance(self.verify, ssl.SSLContext):
                self._ssl = self.verify
            else:
                self._ssl = httpx.create_ssl_context(verify=self.verify)
        return self._ssl

    def _own_loop(self) -> None:
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            # Pooled sockets belong to the loop that opened them: a new loop starts afresh,
            # and the old clients are closed on their own loop if it still runs.
            old = [c for c in (self._direct, *self._proxied.values()) if c is not None]
            if old and self._loop is not None and self._loop.is_running():
                for client in old:
                    asyncio.run_coroutine_threadsafe(client.aclose(), self._loop)
            self._loop, self._direct, self._proxied = loop, None, {}

    def _direct_client(self) -> httpx.AsyncClient:
        self._own_loop()
        if self._direct is None:
            self._direct = httpx.AsyncClient(
                transport=PinnedTransport(self._ssl_context(), self.limits),
                follow_redirects=False,
                trust_env=False,
                timeout=None,
            )
        return self._direct

    def _proxy_client(self, proxy: str) -> httpx.AsyncClient:
        self._own_loop()
        client = self._proxied.get(proxy)
        if client is None:
            client = httpx.AsyncClient(
                proxy=proxy,
                verify=self._ssl_context(),
                follow_redirects=False,
                trust_env=False,
                timeout=None,
                limits=self.limits,
            )
            self._proxied[proxy] = client
        return client

    async def aclose(self) -> None:
        """Close the pooled connections of the current event loop.

        >>> asyncio.run(HttpExecutor().aclose())
        """
        clients = [c for c in (self._direct, *self._proxied.values()) if c is not None]
        self._direct, self._proxied = None, {}
        for client in clients:
            await client.aclose()

    # ---------------------------------------------------------------- one hook

    def _policy(self, inv: Invocation) -> tuple[Sequence[str] | None, Sequence[str] | None]:
        # Per-evaluation policy, when the planner puts Effective's keys on the Invocation.
        urls = _tuple_or_none(inv.allowed_http_urls)
        names = _tuple_or_none(inv.http_env_allowlist)
        return urls, _both(self.env_allowlist, names)

    def _headers(
        self, hook: HttpHook, env: Mapping[str, str], policy_names: Sequence[str] | None
    ) -> tuple[list[tuple[bytes, bytes]], list[str]]:
        given, warnings = interpolate_headers(hook.headers, hook.allowedEnvVars, policy_names, env)
        merged: dict[str, tuple[str, str]] = {
            "content-type": ("Content-Type", "application/json"),
            "user-agent": ("User-Agent", self._user_agent),
        }
        for name, value in given.items():  # applied after ours, so they may override
            key = name.lower()
            if key in _FORBIDDEN_HEADERS:
                warnings.append(f"HTTP hook header {name!r} cannot be set by a hook; dropped")
            elif _CONTROL.search(value):
                warnings.append(f"HTTP hook header {name!r} holds a control character; dropped")
            else:
                # Receivers strip surrounding whitespace (RFC 9110 OWS) and h11 refuses to
                # send it, so "Bearer $UNLISTED" goes out as "Bearer".
                merged[key] = (name, value.strip(" \t"))
        raw = [(n.encode("ascii"), v.encode("utf-8")) for n, v in merged.values()]
        return raw, warnings

    async def run(self, inv: Invocation) -> RawResult:
        """POST ``inv.input_json`` to the hook's URL; never raises for the hook's failure.

        >>> import asyncio
        >>> from engine.records import HookIdentity
        >>> hook = HttpHook(type="http", url="http://169.254.169.254/latest/meta-data")
        >>> inv = Invocation(index=0, event="Stop", hook=hook,
        ...     identity=HookIdentity(type="http", source="user", url=hook.url), source="user",
        ...     matcher=None, timeout=5, payload={}, input_json=b"{}", cwd="/")
        >>> asyncio.run(HttpExecutor(environ={}).run(inv)).error_kind
        'ssrf_blocked_address'
        """
        t0 = time.perf_counter()
        hook = inv.hook
        if not isinstance(hook, HttpHook):
            return RawResult(
                error_kind="unknown_type",
                error=f"HttpExecutor cannot run a {type(hook).__name__}",
                duration_ms=_ms(t0),
            )
        warnings: list[str] = []
        try:
            async with asyncio.timeout(inv.timeout):
                return await self._send(inv, hook, t0, warnings)
        except TimeoutError:
            return RawResult(
                error_kind="timeout",
                error=f"HTTP hook timed out after {inv.timeout:g} s",
                stderr="\n".join(warnings),
                duration_ms=_ms(t0),
            )

    async def _send(
        self, inv: Invocation, hook: HttpHook, t0: float, warnings: list[str]
    ) -> RawResult:
        env: Mapping[str, str] = ChainMap(inv.env, self.environ) if inv.env else self.environ
        patterns, names = self._policy(inv)
        url = hook.url
        try:
            if self.allowed_urls is not None and not url_allowed(url, self.allowed_urls):
                raise Blocked(
                    "url_not_allowed",
                    f"HTTP hook blocked: {url} does not match any pattern in allowedHttpHookUrls",
                )
            # The process environment only: a settings group's `env` must not be able to
            # route hooks through a proxy, which would switch the address check off.
            proxy = proxy_for(url, self.environ)
            key = (url, None if patterns is None else tuple(patterns))
            pin = self._literal_pins.get(key) if proxy is None else None
            if pin is None:
                target = await vet_url(
                    url,
                    patterns=patterns,
                    resolver=self.resolver,
                    allow_loopback=self.allow_loopback,
                    proxy=proxy,
                )
                if proxy is None:
                    pin = self._pin(target)
                    if parse_host_literal(target.host) is not None:
                        # No DNS involved: the same URL always vets the same way.
                        if len(self._literal_pins) >= 1024:
                            self._literal_pins.clear()
                        self._literal_pins[key] = pin
        except Blocked as blocked:
            return RawResult(error_kind=blocked.kind, error=blocked.message, duration_ms=_ms(t0))
        headers, notes = self._headers(hook, env, names)
        warnings.extend(notes)
        try:
            client = self._direct_client() if proxy is None else self._proxy_client(proxy)
        except (ValueError, TypeError, httpx.InvalidURL) as exc:
            return self._failed(f"HTTP hook proxy {proxy!r} is not usable: {exc}", warnings, t0)
        token = PIN.set(pin)
        try:
            status, body, count = await self._exchange(client, url, inv.input_json, headers)
        except (httpx.HTTPError, httpx.InvalidURL, httpx.StreamError) as exc:
            return self._failed(
                f"HTTP hook request to {url} failed: {_describe(exc)}", warnings, t0
            )
        finally:
            PIN.reset(token)
        if count > len(body):
            warnings.append(
                f"HTTP hook response body truncated to {len(body)} of {count}"
                f"{'+' if count >= self.body_cap + self.discard_cap else ''} bytes"
            )
        text = "\n".join(warnings)
        return RawResult(
            http_status=status,
            stdout=body.decode("utf-8", "replace"),
            stdout_bytes=count,
            truncated=count > len(body),
            stderr=text,
            stderr_bytes=len(text.encode("utf-8")),
            duration_ms=_ms(t0),
        )

    def _pin(self, target: Target) -> Pin:
        parsed = self._client_view.get(target.url)
        if parsed is None:
            try:
                seen = httpx.URL(target.url)
            except httpx.InvalidURL as exc:
                raise Blocked("bad_url", f"HTTP hook blocked: {target.url!r}: {exc}") from exc
            parsed = (
                seen.raw_host.decode("ascii").lower(),
                seen.port or (443 if seen.scheme == "https" else 80),
            )
            if len(self._client_view) >= 1024:
                self._client_view.clear()
            self._client_view[target.url] = parsed
        host, port = parsed
        if not _same_host(target.host, host) or port != target.port:
            raise Blocked(
                "bad_url",
                f"HTTP hook blocked: {target.url!r} is read as host {target.host!r} port "
                f"{target.port} by the guard but {host!r} port {port} by the HTTP client",
            )
        return Pin(host=host, port=port, ip=target.connect_ip)

    async def _exchange(
        self,
        client: httpx.AsyncClient,
        url: str,
        content: bytes,
        headers: list[tuple[bytes, bytes]],
    ) -> tuple[int, bytes, int]:
        kept = bytearray()
        count = 0
        limit = self.body_cap + self.discard_cap
        async with client.stream("POST", url, content=content, headers=headers) as response:
            async for chunk in response.aiter_bytes():
                room = self.body_cap - len(kept)
                if room > 0:
                    kept += chunk[:room]
                count += len(chunk)
                if count >= limit:
                    break  # closing mid-body drops the connection instead of reading on
            return response.status_code, bytes(kept), count

    @staticmethod
    def _failed(message: str, warnings: list[str], t0: float) -> RawResult:
        return RawResult(
            error_kind="http_transport",
            error=message,
            stderr="\n".join(warnings),
            duration_ms=_ms(t0),
        )


def _describe(exc: BaseException) -> str:
    text = str(exc) or (str(exc.__cause__) if exc.__cause__ else "")
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
