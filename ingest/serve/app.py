"""serve's ASGI app: routes, limits, auth, and the answer an http hook gives.

Rules of this file (the rest of serve's are in `ingest.serve.server`):
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
  form of `engine.claude_output.express` (`render`).
- Header values never reach a subject, a log line or a response verbatim: they are
  decoded, stripped of control characters and capped (`clean_header`).
- What serve answered by itself (a fallback, the stub of refused input) is recorded in
  the background, through NATS or else the data dir's spool: the answer never waits.

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
import hashlib
import hmac
import logging
import re
from collections.abc import Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Any

import msgspec

from engine.claude_output import closed_body
from engine.errors import InvalidEvent, Unavailable
from engine.events import CATALOG
from engine.payload import parse_payload
from engine.records import Fallback, HookEvent, new_event
from ingest.rejects import rejection
from ingest.serve.answers import HTTP_AGENTS, Fail, agent_of, failure_answer, render
from ingest.serve.gateway import Gateway, NotPublished, publish_event
from ingest.spool.store import Spool

if TYPE_CHECKING:
    from ingest.serve.server import ServeOptions

__all__ = ["Fail", "ServeApp", "clean_header", "guess_event"]

_log = logging.getLogger("hookaudit.serve")

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]

HEADER_CAP = 256
_json_encoder = msgspec.json.Encoder()


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
        self,
        send: Send,
        status: int,
        why: str,
        named: str | None,
        body: bytes,
        extra: list[tuple[bytes, bytes]] | None = None,
        record: bool = False,
    ) -> None:
        """Answer a request that has no decision: under ``fail="closed"`` the event's
        blocking form when the event can be told (from the URL, else the body), so hostile
        input or a misdirected hook cannot fail open; otherwise (or when it cannot be told)
        the error `status`. A body refused as a whole (400, or `record`) goes into the log as
        a rejected stub; an unauthenticated one does not (anyone may send it)."""
        event = named or guess_event(body)
        answer = b""
        if self.options.fail == "closed" and event is not None:
            answer = closed_body(event, why)
        if (status == 400 or record) and body:
            try:
                r = rejection(body, why, stage="serve")
                name = event or "unknown"
                said = Fallback(by="serve", why=why, fail=self.options.fail, blocked=bool(answer),
                                decision=(("deny" if name == "PreToolUse" else "block")
                                          if answer else None))  # fmt: skip
                stub = new_event({"hook_event_name": name}, raw="{}", source="http", rejected=r)
                self._record(msgspec.structs.replace(stub, fallback=said))
            except Exception as exc:  # recording is best effort; the answer is not
                _log.warning("could not record a refused request: %s", exc)
        if answer:
            _log.warning("%s request refused (%s); failing closed", event, why)
            await _respond(send, 200, answer, extra)
            return
        await _respond(send, status, _json_error(why), extra)

    async def _handle(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        path: str = scope["path"]
        method: str = scope["method"]
        if path == "/healthz":
            await self._health(send, method)
            return
        route_ok = True
        if path in ("/", "/hooks", "/hooks/"):
            named = None
        elif path.startswith("/hooks/") and "/" not in path[7:]:
            named = path[7:]
        else:
            route_ok, named = False, None
        if method != "POST":  # no hook is waiting: the plain error
            if route_ok:
                await _respond(send, 405, _json_error("POST the hook input JSON"),
                               [(b"allow", b"POST")])  # fmt: skip
            else:
                await _respond(send, 404, _json_error(f"no route {path!r}"))
            return
        # A POST is a hook waiting for its answer: from here, whatever goes wrong (a wrong
        # token, URL or ?agent=) is answered by `_refuse`, which under --fail closed is the
        # event's blocking form; an error status would let the call run.
        headers: dict[bytes, bytes] = dict(scope["headers"])
        body = await self._read_body(headers, receive, send, named)
        if body is None:
            return
        if not self._authorized(headers.get(b"authorization")):
            await self._refuse(send, 401, "missing or wrong bearer token", named, body,
                               [(b"www-authenticate", b'Bearer realm="hookaudit"')])  # fmt: skip
            return
        agent, said = agent_of(scope), None
        if not route_ok or agent is None:
            why = (f"no route {path!r}: POST hook input to /hooks" if not route_ok else
                   f"no http hooks for that agent: ?agent= takes {', '.join(HTTP_AGENTS)}")  # fmt: skip
            await self._refuse(send, 404, why, named, body, record=True)
            return
        try:
            payload = parse_payload(body, "request body")
            text = body.decode("utf-8")  # valid: parse_payload checked it
            if agent != "claude_code":
                from engine.dialects.registry import get
                from engine.payload import check_types

                said = get(agent).normalise(payload)
                check_types(said.payload, "request body")
        except InvalidEvent as exc:
            await self._refuse(send, 400, str(exc), named, body)
            return
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
            answer, extra = await self._event(
                scope, headers, payload, text, said if agent != "claude_code" else None, agent
            )
        except Exception as exc:  # a bug must not turn into a 500, which fails open
            _log.exception("%s request: internal error", name)
            await self._refuse(send, 500, f"internal error: {type(exc).__name__}", name, b"")
            return
        await _respond(send, 200, answer, extra)

    async def _event(
        self,
        scope: Scope,
        headers: dict[bytes, bytes],
        payload: dict[str, Any],
        text: str,
        said: Any = None,
        agent: str = "claude_code",
    ) -> tuple[bytes, list[tuple[bytes, bytes]]]:
        """Publish the event and wait for its answer; `said`: another agent's input as its
        dialect normalised it (`agent`'s)."""
        client = scope.get("client")
        host = clean_header(headers.get(b"x-hookaudit-host")) or (client[0] if client else "")
        user = clean_header(headers.get(b"x-hookaudit-user")) or ""
        if said is None:
            event = new_event(payload, raw=text, source="http", host=host, user=user)
        else:  # another agent's: the canonical input, its own kept verbatim (as emit --agent)
            event = new_event(said.payload, source="http", host=host, user=user, agent=agent,
                              agent_event=said.agent_event, agent_tool=said.agent_tool,
                              agent_payload=text)  # fmt: skip
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


async def _respond(
    send: Send, status: int, body: bytes, extra: list[tuple[bytes, bytes]] | None = None
) -> None:
    headers = [(b"content-length", str(len(body)).encode())]
    if body:
        headers.append((b"content-type", b"application/json"))
    headers.extend(extra or [])
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
