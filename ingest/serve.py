"""`hookaudit serve`: an HTTP gateway that Claude Code `http` hooks POST their input to.

Rules of this file:
- One NATS connection and ONE wildcard inbox subscription serve every request; a
  waiting request is a future in a dict keyed by its event id, and that dict is bounded
  (`max_pending`). Subscribing per request would cost a server round trip each time.
- Claude Code reads an http hook's answer from the body only: 2xx with a JSON object, or
  an empty body for "no decision" (spec §3.5). A status code can never block, so every
  decision, including a failure under ``fail="closed"``, is a 200 with a JSON body.
  Non-2xx answers are kept for requests that are not hook events (too large, bad JSON,
  unknown event, no token): Claude Code reports them as a non-blocking error and goes on.
  Under ``fail="closed"`` a hook input that is refused (too large, too deep, duplicate
  keys, wrong field types, not UTF-8) and an internal error get the event's blocking form
  instead whenever the event can be told (the URL's /hooks/<Event>, else the body's
  ``hook_event_name``): hostile input must not fail open. ``fail`` covers the decision
  path too (NATS down, timeout, overload, worker error).
- The body is the JSON one Claude Code hook returns for the worker's decision: the http
  form of `engine.claude_output.express`, the function that also gives `hookaudit emit`
  and `eval --format claude` their command-hook output (where a command hook says it with
  exit code 2 or plain text, neither of which an http hook has, the JSON that blocks).
- Header values never reach a subject, a log line or a response verbatim: they are
  decoded, stripped of control characters and capped (`clean_header`).

Events an http hook cannot block at all (current profile; `blocking_object` gives None):
Notification, SessionStart and Setup (Claude Code does not even run http hooks there),
SessionEnd, StopFailure, SubagentStart, PostCompact, PermissionDenied, WorktreeRemove,
InstructionsLoaded, CwdChanged, FileChanged, MessageDisplay, DirectoryAdded and the
agent-core events; PreCompact too under the legacy profile, and ConfigChange when its
source is policy_settings (Claude Code applies those whatever a hook says). TeammateIdle
and TaskCompleted block on exit 2 by *keeping the teammate working*; an http hook has no
such form, so a block there is sent as ``continue: false`` and stops the teammate.

Example:
    >>> render(Outcome(event=new_event({"hook_event_name": "Stop", "session_id": "s"}),
    ...     settings_id="x", blocked=True, reason="tests are failing"))
    b'{"decision":"block","reason":"tests are failing"}'
    >>> failure_answer("PreToolUse", "open", "timed out")
    b''
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import ipaddress
import logging
import re
import socket
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

import msgspec
import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg

from engine.claude_output import blocking_object, closed_body, express_outcome
from engine.errors import InvalidEvent, Unavailable
from engine.events import CATALOG
from engine.payload import parse_payload
from engine.records import Fallback, HookEvent, Outcome, encode_msgpack, new_event
from ingest.http1 import Http1Server, Limits, fd_ceiling
from ingest.nats import ConnectOptions, Names, event_subject, provision, publish_error
from ingest.protocol import MSG_ID, REPLY_HEADER, SIG_HEADER, Reply
from ingest.rejects import rejection
from ingest.replysig import Verifier
from ingest.spool import Sent, Spool, has_pending

__all__ = [
    "Gateway",
    "HttpServer",
    "NotPublished",
    "ServeApp",
    "ServeOptions",
    "blocking_object",
    "check_listen",
    "clean_header",
    "failure_answer",
    "flush_spool",
    "parse_listen",
    "publish_event",
    "render",
]

_log = logging.getLogger("hookaudit.serve")

Fail = Literal["open", "closed"]
Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

HEADER_CAP = 256
_reply_decoder = msgspec.msgpack.Decoder(Reply)
_json_encoder = msgspec.json.Encoder()

# -- the answer an http hook gives (pure) -------------------------------------------


def failure_answer(event: str, fail: Fail, why: str, profile: str = "current") -> bytes:
    """The body when no decision came: empty (open), or the event's blocking form (closed).

    >>> failure_answer("PreToolUse", "closed", "timed out")[:40]
    b'{"hookSpecificOutput":{"hookEventName":"'
    """
    if fail == "open":
        return b""
    return closed_body(event, f"no decision ({why})", profile)


def render(outcome: Outcome) -> bytes:
    """The http hook body for a worker's Outcome: the http form of `express_outcome`."""
    return express_outcome(outcome).body


def clean_header(value: bytes | None) -> str | None:
    """A header value made safe to store and log: UTF-8, no control characters, capped.

    >>> clean_header(b"alice\\r\\nX-Evil: 1\\x00")
    'aliceX-Evil: 1'
    """
    if value is None:
        return None
    text = value.decode("utf-8", errors="replace")
    text = "".join(c for c in text if c.isprintable())
    return text.strip()[:HEADER_CAP]


# -- listening address ----------------------------------------------------------------


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


# -- the NATS side ---------------------------------------------------------------------


class NotPublished(Unavailable):
    """The event never reached JetStream (NATS down, the publish refused): no record yet."""


class Gateway:
    """Publishes events and waits for their Replies on one shared inbox subscription.

    Example:
        >>> gw = Gateway(nc, names("t1"))  # doctest: +SKIP
        >>> await gw.start(); reply = await gw.decide(event)  # doctest: +SKIP
    """

    def __init__(
        self,
        nc: Client,
        names: Names,
        *,
        timeout: float = 10.0,
        max_pending: int = 1024,
        verifier: Verifier | None = None,
    ) -> None:
        self.nc = nc
        self.verifier = verifier
        self.js = nc.jetstream()
        self.names = names
        self.timeout = timeout
        self.max_pending = max_pending
        self.inbox = nc.new_inbox()
        self.pending: dict[str, asyncio.Future[Reply]] = {}
        self._sub: Any = None

    async def start(self) -> None:
        self._sub = await self.nc.subscribe(
            f"{self.inbox}.*", cb=self._on_reply, pending_msgs_limit=max(65536, self.max_pending)
        )
        await self.nc.flush()

    @property
    def status(self) -> str:
        """connected | reconnecting | draining | closed | disconnected"""
        nc = self.nc
        if nc.is_connected:
            return "connected"
        if nc.is_reconnecting:
            return "reconnecting"
        if nc.is_draining:
            return "draining"
        return "closed" if nc.is_closed else "disconnected"

    async def _on_reply(self, msg: Msg) -> None:
        key = msg.subject.rpartition(".")[2]
        fut = self.pending.get(key)
        if fut is None or fut.done():
            _log.info("late or unknown reply on %s ignored", msg.subject)
            return
        if self.verifier is not None and not self.verifier.verify(
            msg.data, (msg.headers or {}).get(SIG_HEADER)
        ):
            _log.warning("reply for event %s not signed by a trusted worker: ignored", key)
            return
        try:
            reply = _reply_decoder.decode(msg.data)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            _log.warning("undecodable reply for event %s ignored: %s", key, exc)
            return
        if reply.event_id != key:
            _log.warning("reply for event %s arrived on %s; ignored", reply.event_id, key)
            return
        fut.set_result(reply)

    async def decide(self, event: HookEvent) -> Reply:
        """Publish `event` and wait for its Reply; `Unavailable` says why there is none."""
        if not self.nc.is_connected:
            raise NotPublished(f"NATS is {self.status}")
        if len(self.pending) >= self.max_pending:
            raise Unavailable(f"{len(self.pending)} requests already waiting (--max-pending)")
        if event.id in self.pending:
            raise Unavailable(f"event {event.id} is already waiting")
        fut: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        self.pending[event.id] = fut
        subject = event_subject(self.names, event.event)
        headers = {MSG_ID: event.id, REPLY_HEADER: f"{self.inbox}.{event.id}"}
        try:
            async with asyncio.timeout(self.timeout):
                try:
                    await self.js.publish(
                        subject, encode_msgpack(event), headers=headers, timeout=self.timeout
                    )
                except nats.errors.TimeoutError:
                    raise  # the decision's deadline says it, below
                except nats.errors.Error as exc:
                    raise NotPublished(str(publish_error(exc, subject, self.timeout))) from exc
                return await fut
        except TimeoutError as exc:
            raise Unavailable(f"no decision within {self.timeout:g} s") from exc
        finally:
            self.pending.pop(event.id, None)

    async def close(self) -> None:
        if self._sub is not None and not self.nc.is_closed:
            with contextlib.suppress(nats.errors.Error):
                await self._sub.unsubscribe()
        for fut in self.pending.values():
            fut.cancel()


# -- the HTTP side ---------------------------------------------------------------------


_EVENT_NAME = re.compile(rb'"hook_event_name"\s*:\s*"([A-Za-z]{1,64})"')


def guess_event(body: bytes) -> str | None:
    """The hook event a body that cannot be parsed says it is, when it says so plainly.

    Only used to fail closed in the right form; a known event name or None.

    >>> guess_event(b'{"hook_event_name": "PreToolUse", "tool_input": [[[[')
    'PreToolUse'
    """
    m = _EVENT_NAME.search(body[: 1 << 20])
    name = m.group(1).decode() if m else None
    return name if name in CATALOG else None


def _named(path: str) -> str | None:
    if path.startswith("/hooks/") and "/" not in path[7:] and path[7:] in CATALOG:
        return path[7:]
    return None


def _json_error(message: str) -> bytes:
    return _json_encoder.encode({"error": message})


class ServeApp:
    """The raw ASGI application: routes, limits, auth; no framework.

    POST /hooks, POST / and POST /hooks/<EventName> take a hook input; GET /healthz
    reports NATS.
    """

    def __init__(self, gateway: Gateway, options: ServeOptions) -> None:
        self.gateway = gateway
        self.options = options
        token = options.token
        self._token = hashlib.sha256(token.encode()).digest() if token else None
        self.http_stats: Callable[[], dict[str, int]] | None = None  # set by HttpServer
        self._records: set[asyncio.Future[None]] = set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        sent: list[bool] = []

        async def tracked(message: MutableMapping[str, Any]) -> None:
            sent.append(True)
            await send(message)

        try:
            await self._handle(scope, receive, tracked)
        except Exception as exc:  # a bug must not turn into a 500, which fails open
            _log.exception("request %s: internal error", scope.get("path"))
            if sent:
                raise  # the answer has begun: nothing more can be said
            why = f"internal error: {type(exc).__name__}"
            await self._refuse(send, 500, why, _named(scope.get("path", "")), b"")

    async def _refuse(
        self, send: Send, status: int, why: str, named: str | None, body: bytes
    ) -> None:
        """Answer a request that has no decision: under ``fail="closed"`` the event's
        blocking form when the event can be told (from the URL, else the body), so hostile
        input cannot fail open; otherwise (or when it cannot be told) the error `status`."""
        if status == 400 and body:  # a whole body refused: its stub goes into the log
            try:
                r = rejection(body, why, stage="serve")
                name = named or guess_event(body) or "unknown"
                stub = new_event({"hook_event_name": name}, raw="{}", source="http", rejected=r)
                self._record(stub)
            except Exception as exc:  # recording is best effort; the answer is not
                _log.warning("could not record a refused request: %s", exc)
        if self.options.fail == "closed":
            event = named or guess_event(body)
            body = b"" if event is None else closed_body(event, why)
            if body:
                _log.warning("%s request refused (%s); failing closed", event, why)
                await _respond(send, 200, body)
                return
        await _respond(send, status, _json_error(why))

    async def _handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        path: str = scope["path"]
        method: str = scope["method"]
        if path == "/healthz":
            await self._health(send, method)
            return
        if path in ("/", "/hooks", "/hooks/"):
            named = None
        elif path.startswith("/hooks/") and "/" not in path[7:]:
            named = path[7:]
        else:
            await _respond(send, 404, _json_error(f"no route {path!r}: POST hook input to /hooks"))
            return
        if method != "POST":
            await _respond(
                send, 405, _json_error("POST the hook input JSON"), [(b"allow", b"POST")]
            )
            return
        headers: dict[bytes, bytes] = dict(scope["headers"])
        if not self._authorized(headers.get(b"authorization")):
            await _respond(
                send,
                401,
                _json_error("missing or wrong bearer token"),
                [(b"www-authenticate", b'Bearer realm="hookaudit"')],
            )
            return
        body = await self._read_body(headers, receive, send, named)
        if body is None:
            return
        try:
            payload = parse_payload(body, "request body")
        except InvalidEvent as exc:
            await self._refuse(send, 400, str(exc), named, body)
            return
        text = body.decode("utf-8")  # valid: parse_payload checked it
        name = payload["hook_event_name"]
        if named is not None and named != name:
            await _respond(
                send,
                400,
                _json_error(
                    f"request body: hook_event_name is {name!r} but the URL says {named!r}"
                ),
            )
            return
        try:
            answer, extra = await self._event(scope, headers, payload, text)
        except Exception as exc:  # a bug must not turn into a 500, which fails open
            _log.exception("%s request: internal error", name)
            await self._refuse(send, 500, f"internal error: {type(exc).__name__}", name, b"")
            return
        await _respond(send, 200, answer, extra)

    async def _event(
        self, scope: Scope, headers: dict[bytes, bytes], payload: dict[str, Any], text: str
    ) -> tuple[bytes, list[tuple[bytes, bytes]]]:
        client = scope.get("client")
        event = new_event(
            payload,
            raw=text,
            source="http",
            host=clean_header(headers.get(b"x-hookaudit-host")) or (client[0] if client else ""),
            user=clean_header(headers.get(b"x-hookaudit-user")) or "",
        )
        answer = await self._decide(event)
        return answer, [(b"x-hookaudit-event-id", event.id.encode())]

    async def _decide(self, event: HookEvent) -> bytes:
        published = True
        try:
            reply = await self.gateway.decide(event)
            if reply.outcome is None:
                raise Unavailable(f"worker error: {reply.error or 'no outcome'}")
            return render(reply.outcome)
        except NotPublished as exc:
            why, published = str(exc), False
        except Unavailable as exc:
            why = str(exc)
        except Exception as exc:  # a bug must not turn into a 500, which fails open
            _log.exception("event %s: cannot render the decision", event.id)
            why = f"internal error: {type(exc).__name__}"
        _log.warning("event %s (%s): %s; failing %s", event.id, event.event, why, self.options.fail)
        answer = failure_answer(event.event, self.options.fail, why)
        blocked = bool(answer)
        fb = Fallback(
            by="serve",
            why=why,
            fail=self.options.fail,
            blocked=blocked,
            decision=("deny" if event.event == "PreToolUse" else "block") if blocked else None,
            reason=f"hookaudit: no decision ({why}); failing {self.options.fail}",
            # Published: the worker records the event, this notice says what the agent got.
            # Never published: the event itself carries the answer (as emit's spool does).
            notice=published,
        )
        self._record(msgspec.structs.replace(event, fallback=fb))
        return answer

    def _record(self, event: HookEvent) -> None:
        """Tell the log what serve answered by itself (a fallback, or the stub of refused
        input), in the background: the answer never waits for it. With NATS down, or when
        publishing it fails, it goes to the data dir's spool (flushed when NATS is back)."""
        task = asyncio.ensure_future(self._publish_record(event))
        self._records.add(task)
        task.add_done_callback(self._records.discard)

    async def _publish_record(self, event: HookEvent) -> None:
        try:
            if not self.gateway.nc.is_connected:
                raise Unavailable(f"NATS is {self.gateway.status}")
            await publish_event(self.gateway, event)
            return
        except Exception as exc:
            why = str(exc) or type(exc).__name__
        if self.options.data_dir is None:
            _log.warning("event %s: serve's own answer not recorded: %s", event.id, why)
            return
        try:
            await asyncio.to_thread(Spool(self.options.data_dir).append, event)
        except Exception as exc:  # logged, never raised: the answer is already given
            _log.error("event %s: serve's own answer lost: %s; spool: %s", event.id, why, exc)

    def _authorized(self, value: bytes | None) -> bool:
        if self._token is None:
            return True
        scheme, _, given = (value or b"").partition(b" ")
        digest = hashlib.sha256(given.strip()).digest()
        return scheme.lower() == b"bearer" and hmac.compare_digest(digest, self._token)

    async def _read_body(
        self, headers: dict[bytes, bytes], receive: Receive, send: Send, named: str | None
    ) -> bytes | None:
        limit = self.options.max_body
        too_big = f"request body larger than {limit} bytes (--max-body)"
        declared = headers.get(b"content-length", b"")
        if declared.isdigit() and int(declared) > limit:
            await self._refuse(send, 413, too_big, named, b"")
            return None
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk: bytes = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                await self._refuse(send, 413, too_big, named, b"".join(chunks) + chunk)
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)

    async def _health(self, send: Send, method: str) -> None:
        if method not in ("GET", "HEAD"):
            await _respond(send, 405, _json_error("GET /healthz"), [(b"allow", b"GET")])
            return
        status = self.gateway.status
        ok = status == "connected"
        report: dict[str, Any] = {"ok": ok, "nats": status}
        if self.http_stats is not None:
            report["http"] = self.http_stats()
        body = _json_encoder.encode(report)
        await _respond(send, 200 if ok else 503, body)


async def publish_event(gateway: Gateway, event: HookEvent) -> Sent:
    """Publish a record-only event or a spooled one (a `spool.Publish`); Unavailable if not.

    A fallback notice repeats an event already stored: it has its own message id.
    """
    notice = event.fallback is not None and event.fallback.notice
    headers = {MSG_ID: f"{event.id}:fallback" if notice else event.id}
    subject = event_subject(gateway.names, event.event)
    try:
        ack = await gateway.js.publish(subject, encode_msgpack(event), headers=headers, timeout=2.0)
    except (nats.errors.Error, OSError) as exc:
        raise publish_error(exc, subject, 2.0) from exc
    return Sent(duplicate=bool(ack.duplicate))


async def flush_spool(gateway: Gateway, data_dir: Path) -> None:
    """Send what serve (or emit) spooled for `data_dir` once NATS is back; every second."""
    spool = Spool(data_dir)
    while True:
        await asyncio.sleep(1.0)
        if not gateway.nc.is_connected or not has_pending(data_dir):
            continue
        try:
            report = await spool.flush(lambda e: publish_event(gateway, e), budget=5.0)
        except Exception as exc:  # the next round tries again
            _log.warning("spool flush: %s", exc)
            continue
        if report.published or report.error:
            _log.info("spool flush: %s", report)


async def _respond(
    send: Send, status: int, body: bytes, extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    headers = [(b"content-length", str(len(body)).encode())]
    if body:
        headers.append((b"content-type", b"application/json"))
    headers.extend(extra or [])
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


# -- running it ------------------------------------------------------------------------


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
