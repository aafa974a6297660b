"""`hookaudit serve` against a real nats-server: HTTP in, HookEvent on NATS, Reply back.

A responder task plays the worker: it subscribes to the events subjects and answers
msgpack(Reply) on the inbox named in the event's Hookaudit-Reply header.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from engine.aggregate import Decision
from engine.claude_output import blocking_object, decision_of, express, render_claude
from engine.events import CATALOG
from engine.records import (
    HookEvent,
    Outcome,
    Profile,
    decode_event_msgpack,
    encode_msgpack,
    new_event,
)
from ingest.nats.streams import ConnectOptions, Names, provision
from ingest.protocol import MSG_ID, REPLY_HEADER, Reply
from ingest.serve.answers import failure_answer, render
from ingest.serve.app import clean_header
from ingest.serve.server import HttpServer, ServeOptions, check_listen, parse_listen
from tests.support.waiting import until

if TYPE_CHECKING:
    from tests.conftest import NatsServer

REPO = Path(__file__).resolve().parents[2]
Answer = Callable[[HookEvent], Awaitable[Reply | None]]


def pretool(command: str = "ls", **extra: Any) -> dict[str, Any]:
    return {
        "hook_event_name": "PreToolUse",
        "session_id": "s1",
        "cwd": "/tmp",
        "tool_name": "Bash",
        "tool_input": {"command": command},
        "tool_use_id": "tu1",
        **extra,
    }


def outcome(ev: HookEvent, **fields: Any) -> Reply:
    return Reply(event_id=ev.id, outcome=Outcome(event=ev, settings_id="test", **fields))


class Responder:
    """Plays the worker: records every event and answers with `answer(event)`."""

    def __init__(self, nc: Client, names: Names, answer: Answer) -> None:
        self.nc, self.names, self.answer = nc, names, answer
        self.seen: list[tuple[HookEvent, dict[str, str]]] = []
        self.sub: Any = None
        self.tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self.sub = await self.nc.subscribe(self.names.events_subjects, cb=self._on_event)
        await self.nc.flush()

    async def _on_event(self, msg: Msg) -> None:
        ev = decode_event_msgpack(msg.data)
        headers = dict(msg.headers or {})
        self.seen.append((ev, headers))
        task = asyncio.create_task(self._reply(ev, headers[REPLY_HEADER]))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _reply(self, ev: HookEvent, inbox: str) -> None:
        reply = await self.answer(ev)
        if reply is not None and not self.nc.is_closed:
            await self.nc.publish(inbox, encode_msgpack(reply))

    async def stop(self) -> None:
        if self.sub is not None and self.nc.is_connected:
            await self.sub.unsubscribe()
        for t in list(self.tasks):
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


async def _allow(ev: HookEvent) -> Reply | None:
    return outcome(ev, decision="allow", reason="fine")


class Rig:
    """A serve instance plus a responder on the session nats-server, torn down in order."""

    def __init__(self, nats_server: NatsServer, nc: Client, names: Names) -> None:
        self.nats_server, self.nc, self.names = nats_server, nc, names
        self.stack = AsyncExitStack()
        self.responder: Responder | None = None
        self.server: HttpServer | None = None
        self.client: httpx.AsyncClient | None = None

    async def start(self, answer: Answer | None = _allow, **opts: Any) -> httpx.AsyncClient:
        if answer is not None:
            self.responder = Responder(self.nc, self.names, answer)
            await self.responder.start()
            self.stack.push_async_callback(self.responder.stop)
        options = ServeOptions(host="127.0.0.1", port=0, names=self.names, **opts)
        connect = ConnectOptions(
            servers=(self.nats_server.url,), max_reconnect=-1, reconnect_wait=0.1
        )
        self.server = HttpServer(options, connect)
        url = await self.server.start()
        self.stack.push_async_callback(self.server.stop)
        self.client = httpx.AsyncClient(
            base_url=url.removesuffix("/hooks"),
            timeout=15.0,
            limits=httpx.Limits(max_connections=250, max_keepalive_connections=250),
        )
        self.stack.push_async_callback(self.client.aclose)
        return self.client

    @property
    def seen(self) -> list[tuple[HookEvent, dict[str, str]]]:
        assert self.responder is not None
        return self.responder.seen


@pytest.fixture
async def rig(nats_server: NatsServer, nc: Client, names: Names) -> AsyncIterator[Rig]:
    r = Rig(nats_server, nc, names)
    try:
        yield r
    finally:
        await r.stack.aclose()


# -- round trips -----------------------------------------------------------------------


async def test_allow_round_trip_and_event_record(rig: Rig) -> None:
    client = await rig.start()
    body = (
        '{"hook_event_name":"PreToolUse",  "session_id":"s1","tool_name":"Bash",\n'
        '"tool_input":{"command":"ls"},"unknown_field":[1,2.50,"x"],"cwd":"/w"}'
    )
    r = await client.post(
        "/hooks",
        content=body,
        headers={"X-Hookaudit-User": "alice", "Content-Type": "application/json"},
    )
    assert r.status_code == 200
    assert r.headers["content-type"] == "application/json"
    assert r.json() == {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "allow",
            "permissionDecisionReason": "fine",
        }
    }
    ((ev, headers),) = rig.seen
    assert ev.payload == body  # verbatim, whitespace and unknown fields included
    assert (ev.source, ev.user, ev.host) == ("http", "alice", "127.0.0.1")
    assert (ev.event, ev.session_id, ev.tool_name, ev.cwd) == ("PreToolUse", "s1", "Bash", "/w")
    assert headers[MSG_ID] == ev.id == r.headers["x-hookaudit-event-id"]
    assert headers[REPLY_HEADER].startswith("_INBOX.")
    assert headers[REPLY_HEADER].endswith("." + ev.id)


async def test_event_is_stored_in_the_stream(rig: Rig, nc: Client, names: Names) -> None:
    client = await rig.start()
    r = await client.post("/hooks", json=pretool(), headers={"X-Hookaudit-Host": "laptop-7"})
    assert r.status_code == 200
    info = await nc.jetstream().stream_info(names.events_stream)
    assert info.state.messages == 1
    ((ev, _),) = rig.seen
    assert ev.host == "laptop-7"


async def test_deny_round_trip(rig: Rig) -> None:
    async def deny(ev: HookEvent) -> Reply:
        return outcome(ev, blocked=True, decision="deny", reason="rm -rf is not allowed")

    client = await rig.start(deny)
    r = await client.post("/hooks/PreToolUse", json=pretool("rm -rf /"))
    assert r.status_code == 200
    hso = r.json()["hookSpecificOutput"]
    assert hso["permissionDecision"] == "deny"
    assert hso["permissionDecisionReason"] == "rm -rf is not allowed"


async def test_updated_input_round_trip(rig: Rig) -> None:
    async def rewrite(ev: HookEvent) -> Reply:
        return outcome(ev, decision="allow", updated_input={"command": "ls -la --color=never"})

    client = await rig.start(rewrite)
    r = await client.post("/", json=pretool("ls"))
    hso = r.json()["hookSpecificOutput"]
    assert hso["permissionDecision"] == "allow"
    assert hso["updatedInput"] == {"command": "ls -la --color=never"}


async def test_stop_block_round_trip(rig: Rig) -> None:
    async def block(ev: HookEvent) -> Reply:
        return outcome(ev, blocked=True, decision="deny", reason="run the tests first")

    client = await rig.start(block)
    r = await client.post(
        "/hooks", json={"hook_event_name": "Stop", "session_id": "s", "stop_hook_active": False}
    )
    assert r.json() == {"decision": "block", "reason": "run the tests first"}


async def test_exit2_only_block_becomes_continue_false(rig: Rig) -> None:
    async def block(ev: HookEvent) -> Reply:
        return outcome(ev, blocked=True, decision="deny", reason="tests are red")

    client = await rig.start(block)
    r = await client.post(
        "/hooks",
        json={
            "hook_event_name": "TaskCompleted",
            "session_id": "s",
            "task_id": "t1",
            "task_subject": "x",
        },
    )
    assert r.json() == {"continue": False, "stopReason": "tests are red"}


async def test_no_decision_is_an_empty_body(rig: Rig) -> None:
    async def nothing(ev: HookEvent) -> Reply:
        return outcome(ev)

    client = await rig.start(nothing)
    r = await client.post(
        "/hooks",
        json={
            "hook_event_name": "Notification",
            "session_id": "s",
            "message": "hi",
            "notification_type": "idle_prompt",
        },
    )
    assert r.status_code == 200
    assert r.content == b""


async def test_another_agents_http_hook_speaks_its_dialect(rig: Rig) -> None:
    """`?agent=qwen_code`: Qwen Code's input is recorded as Qwen Code's (canonical payload,
    its own tool name, its input verbatim); a rewrite Qwen Code cannot apply is a deny, said
    in its (Claude Code's) form; an agent serve has no http hooks for is a 404."""
    rewrite = {"command": "ls -l"}

    async def rewrites(ev: HookEvent) -> Reply:
        return outcome(ev, decision="allow", updated_input=rewrite)

    client = await rig.start(rewrites)
    qwen = {"session_id": "q1", "cwd": "/tmp", "hook_event_name": "PreToolUse",
            "tool_name": "run_shell_command", "tool_input": {"command": "ls"},
            "tool_use_id": "toolu_1", "tool_call_id": "call_1"}  # fmt: skip
    r = await client.post("/hooks?agent=qwen_code", json=qwen)
    hso = r.json()["hookSpecificOutput"]
    assert hso["permissionDecision"] == "deny" and "rewrites" in hso["permissionDecisionReason"]
    ((ev, _),) = [(e, h) for e, h in rig.seen if e.session_id == "q1"]
    assert (ev.agent, ev.agent_tool, ev.tool_name, ev.source) == (
        "qwen_code",
        "run_shell_command",
        "Bash",
        "http",
    )
    assert json.loads(ev.agent_payload or "{}") == qwen
    r = await client.post("/hooks?agent=gemini_cli", json=qwen)
    assert r.status_code == 404 and "qwen_code" in r.text


async def test_prompt_context_round_trip(rig: Rig) -> None:
    async def context(ev: HookEvent) -> Reply:
        return outcome(ev, additional_context=["repo uses pnpm"])

    client = await rig.start(context)
    r = await client.post(
        "/hooks",
        json={"hook_event_name": "UserPromptSubmit", "session_id": "s", "prompt": "install deps"},
    )
    assert r.json() == {
        "hookSpecificOutput": {
            "hookEventName": "UserPromptSubmit",
            "additionalContext": "repo uses pnpm",
        }
    }


# -- bad requests ----------------------------------------------------------------------


async def test_body_limit_413(rig: Rig) -> None:
    client = await rig.start(max_body=1000)
    big = pretool("x" * 2000)
    r = await client.post("/hooks", json=big)
    assert r.status_code == 413
    assert "--max-body" in r.json()["error"]

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: counted while read
        data = json.dumps(big).encode()
        for i in range(0, len(data), 300):
            yield data[i : i + 300]

    r = await client.post("/hooks", content=chunks())
    assert r.status_code == 413
    r = await client.post("/hooks", json=pretool("ok"))  # the server is still fine
    assert r.status_code == 200
    assert len(rig.seen) == 1


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"hook_event_name": "PreToolUse",', "request body: malformed JSON"),
        (b"[1, 2]", "request body: expected a JSON object"),
        (b'{"session_id": "s"}', "request body: hook_event_name: missing or not a string"),
        (
            b'{"hook_event_name": "Nope"}',
            "request body: hook_event_name: unknown hook event 'Nope'",
        ),
        (b'{"hook_event_name": "Stop", "x": "\xff"}', "request body: not UTF-8"),
        (b"", "request body: empty input"),
        (
            b'{"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": "rm -rf /"}',
            "request body: tool_input: expected a JSON object, got string",
        ),
    ],
)
async def test_bad_body_400_names_the_problem(rig: Rig, body: bytes, message: str) -> None:
    client = await rig.start()
    r = await client.post("/hooks", content=body)
    assert r.status_code == 400
    assert r.json()["error"].startswith(message)
    assert rig.seen == []


async def test_url_event_must_match_body(rig: Rig) -> None:
    client = await rig.start()
    r = await client.post("/hooks/Stop", json=pretool())
    assert r.status_code == 400
    assert "'PreToolUse' but the URL says 'Stop'" in r.json()["error"]


async def test_routes_and_methods(rig: Rig) -> None:
    client = await rig.start()
    assert (await client.get("/hooks")).status_code == 405
    assert (await client.get("/hooks")).headers["allow"] == "POST"
    assert (await client.post("/elsewhere", json=pretool())).status_code == 404
    assert (await client.post("/hooks/a/b", json=pretool())).status_code == 404
    assert (await client.post("/healthz")).status_code == 405


# -- token -----------------------------------------------------------------------------


async def test_token_required_and_accepted(rig: Rig) -> None:
    client = await rig.start(token="s3cret-token")
    r = await client.post("/hooks", json=pretool())
    assert r.status_code == 401
    assert r.headers["www-authenticate"].startswith("Bearer")
    for wrong in ("Bearer nope", "Basic s3cret-token", "Bearer s3cret-token-and-more", "Bearer"):
        r = await client.post("/hooks", json=pretool(), headers={"Authorization": wrong})
        assert r.status_code == 401, wrong
    assert rig.seen == []
    r = await client.post(
        "/hooks", json=pretool(), headers={"Authorization": "Bearer s3cret-token"}
    )
    assert r.status_code == 200
    assert r.json()["hookSpecificOutput"]["permissionDecision"] == "allow"
    r = await client.post(
        "/hooks", json=pretool(), headers={"Authorization": "bearer s3cret-token"}
    )
    assert r.status_code == 200  # the scheme is case-insensitive (RFC 9110)
    assert (await client.get("/healthz")).status_code == 200  # health needs no token


def test_listen_rules() -> None:
    assert parse_listen("127.0.0.1:8787") == ("127.0.0.1", 8787)
    assert parse_listen("[::1]:9") == ("::1", 9)
    assert parse_listen(":8787") == ("0.0.0.0", 8787)
    for bad in ("8787", "127.0.0.1:", "host.example:80", "127.0.0.1:70000", "[::1]"):
        with pytest.raises(ValueError, match="--listen"):
            parse_listen(bad)
    check_listen("127.0.0.1", None)
    check_listen("::1", None)
    check_listen("0.0.0.0", "tok")
    for host in ("0.0.0.0", "::", "10.1.2.3"):
        with pytest.raises(ValueError, match="without a bearer token"):
            check_listen(host, None)
    with pytest.raises(ValueError, match="--token"):
        ServeOptions(host="0.0.0.0")


# -- health, NATS down, timeouts -------------------------------------------------------


async def test_healthz_both_states_and_nats_down(rig: Rig, nats_server: NatsServer) -> None:
    # a 60 s decision timeout: an answer that waited for it would come after the test's
    # own 30 s limit on each request below
    client = await rig.start(timeout=60.0)
    closed = HttpServer(
        ServeOptions(host="127.0.0.1", port=0, names=rig.names, timeout=60.0, fail="closed"),
        ConnectOptions(servers=(nats_server.url,), max_reconnect=-1, reconnect_wait=0.1),
    )
    closed_url = await closed.start()
    rig.stack.push_async_callback(closed.stop)
    r = await client.get("/healthz")
    assert (r.status_code, r.json()["ok"], r.json()["nats"]) == (200, True, "connected")
    assert r.json()["http"]["connections"] >= 1  # this client's; the limits' counters too
    assert rig.responder is not None
    await rig.responder.stop()
    nats_server.stop()
    try:
        deadline = time.monotonic() + 10
        while (r := await client.get("/healthz")).status_code != 503:
            assert time.monotonic() < deadline, r.text
            await asyncio.sleep(0.05)
        assert r.json()["ok"] is False
        assert r.json()["nats"] in ("reconnecting", "disconnected")

        r = await asyncio.wait_for(client.post("/hooks", json=pretool()), 30)  # fail open
        assert (r.status_code, r.content) == (200, b"")

        r = await asyncio.wait_for(client.post(closed_url, json=pretool()), 30)
        hso = r.json()["hookSpecificOutput"]
        assert hso["permissionDecision"] == "deny"
        assert "no decision (NATS is " in hso["permissionDecisionReason"]
    finally:
        nats_server.restart()
    deadline = time.monotonic() + 15
    while (await client.get("/healthz")).status_code != 200:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.05)


async def test_timeout_fail_open(rig: Rig) -> None:
    async def never(ev: HookEvent) -> None:
        return None

    client = await rig.start(never, timeout=0.3)
    t0 = time.monotonic()
    r = await client.post("/hooks", json=pretool())
    assert (r.status_code, r.content) == (200, b"")
    assert time.monotonic() - t0 >= 0.3  # it waited out the timeout before failing open
    assert len(rig.seen) == 1  # the event was still published (and stored)


async def test_a_misdirected_hook_is_blocked_when_failing_closed(rig: Rig) -> None:
    """A hook that reaches serve with a wrong token, URL or ?agent= has no decision: under
    --fail closed it is the event's blocking answer with status 200, since an error status
    is a non-blocking error to Claude Code and Qwen Code (the call would run). The
    unauthenticated request is not recorded (anyone can send it); the others are, as
    rejected. With no hook waiting (not a POST) it stays a plain error."""
    client = await rig.start(token="s3cret-token", fail="closed")
    auth = {"Authorization": "Bearer s3cret-token"}
    cases = [
        ("/hooks", {}, "missing or wrong bearer token"),
        ("/hooks", {"Authorization": "Bearer nope"}, "missing or wrong bearer token"),
        ("/hook", auth, "no route '/hook'"),
        ("/hooks/PreToolUse/x", auth, "no route"),
        ("/hooks?agent=qwen", auth, "no http hooks for that agent"),
        ("/hooks/PreToolUse?agent=gemini_cli", auth, "no http hooks for that agent"),
    ]
    for path, headers, why in cases:
        r = await client.post(path, json=pretool(), headers=headers)
        assert r.status_code == 200, (path, r.text)
        hso = r.json()["hookSpecificOutput"]
        assert hso["permissionDecision"] == "deny" and why in hso["permissionDecisionReason"]
    r = await client.post("/hooks", json=pretool())
    assert r.headers["www-authenticate"].startswith("Bearer")
    r = await client.post("/hook", json={"hook_event_name": "Stop", "session_id": "s"},
                          headers=auth)  # fmt: skip
    assert r.json()["decision"] == "block"
    await until(lambda: len(rig.seen) == 5, timeout=10)
    assert all(ev.rejected is not None and ev.rejected.stage == "serve" for ev, _ in rig.seen)
    assert sorted(ev.event for ev, _ in rig.seen) == ["PreToolUse"] * 4 + ["Stop"]
    assert (await client.get("/hook", headers=auth)).status_code == 404
    assert (await client.get("/hooks?agent=qwen", headers=auth)).status_code == 405


async def test_timeout_fail_closed(rig: Rig) -> None:
    async def never(ev: HookEvent) -> None:
        return None

    client = await rig.start(never, timeout=0.3, fail="closed")
    r = await client.post("/hooks", json=pretool())
    hso = r.json()["hookSpecificOutput"]
    assert hso["permissionDecision"] == "deny"
    assert "no decision within 0.3 s" in hso["permissionDecisionReason"]
    r = await client.post("/hooks", json={"hook_event_name": "Stop", "session_id": "s"})
    assert r.json()["decision"] == "block"
    r = await client.post(
        "/hooks",
        json={
            "hook_event_name": "Notification",
            "session_id": "s",
            "message": "m",
            "notification_type": "idle_prompt",
        },
    )
    assert r.content == b""  # Notification cannot be blocked: nothing to close


async def test_worker_error_and_stray_replies(rig: Rig, nc: Client) -> None:
    async def broken(ev: HookEvent) -> Reply:
        # A stray reply for another event on the same inbox must not answer this one.
        inbox = rig.seen[-1][1][REPLY_HEADER]
        await nc.publish(inbox, encode_msgpack(Reply(event_id="someone-else", error="x")))
        await nc.publish(inbox, b"\xc1 not msgpack")
        return Reply(event_id=ev.id, error="settings failed to load")

    client = await rig.start(broken, fail="closed", timeout=2.0)
    r = await client.post("/hooks", json=pretool())
    reason = r.json()["hookSpecificOutput"]["permissionDecisionReason"]
    assert "worker error: settings failed to load" in reason


async def test_no_stream_fails_at_once(rig: Rig) -> None:
    client = await rig.start(None, provision=False, fail="closed", timeout=60.0)
    r = await client.post("/hooks", json=pretool())
    reason = r.json()["hookSpecificOutput"]["permissionDecisionReason"]
    # the publish's own error, not the 60 s decision timeout's "no decision within"
    assert f"no JetStream stream stores {rig.names.events_prefix}.PreToolUse" in reason


async def test_pending_is_bounded(rig: Rig) -> None:
    release = asyncio.Event()

    async def slow(ev: HookEvent) -> Reply:
        await release.wait()
        return outcome(ev, decision="allow")

    client = await rig.start(slow, max_pending=2, fail="closed", timeout=5.0)
    first = [asyncio.create_task(client.post("/hooks", json=pretool())) for _ in range(2)]
    while len(rig.seen) < 2:
        await asyncio.sleep(0.01)
    r = await client.post("/hooks", json=pretool())
    assert "--max-pending" in r.json()["hookSpecificOutput"]["permissionDecisionReason"]
    release.set()
    for done in await asyncio.gather(*first):
        assert done.json()["hookSpecificOutput"]["permissionDecision"] == "allow"


async def test_200_concurrent_requests_each_get_their_own_answer(rig: Rig) -> None:
    rng = random.Random(7)

    async def echo(ev: HookEvent) -> Reply:
        await asyncio.sleep(rng.random() * 0.05)  # answer out of order
        command = json.loads(ev.payload)["tool_input"]["command"]
        return outcome(ev, blocked=True, decision="deny", reason=f"{ev.id}|{command}")

    client = await rig.start(echo)
    rs = await asyncio.gather(
        *(client.post("/hooks", json=pretool(f"echo {i}")) for i in range(200))
    )
    for i, r in enumerate(rs):
        assert r.status_code == 200
        reason = r.json()["hookSpecificOutput"]["permissionDecisionReason"]
        assert reason == f"{r.headers['x-hookaudit-event-id']}|echo {i}"
    assert len({ev.id for ev, _ in rig.seen}) == 200
    assert rig.server is not None and rig.server.gateway is not None
    assert rig.server.gateway.pending == {}


# -- hostile input ---------------------------------------------------------------------


def _raw_request(url: str, head: bytes, body: bytes) -> bytes:
    host, port = url.removeprefix("http://").split("/")[0].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(head + b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    return data


async def test_hostile_headers(rig: Rig) -> None:
    client = await rig.start()
    assert rig.server is not None
    url = rig.server.url
    body = json.dumps(pretool()).encode()
    start = b"POST /hooks HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
    # CRLF inside the value: on the wire that ends the header; the rest is another header.
    raw = await asyncio.to_thread(
        _raw_request, url, start + b"X-Hookaudit-User: eve\r\nX-Injected: 1\r\n", body
    )
    assert raw.startswith(b"HTTP/1.1 200")
    assert b"x-injected" not in raw.lower()
    # A bare CR or LF, NUL, or raw bytes: rejected by the parser or cleaned, never stored raw.
    for value in (b"eve\rmallory", b"eve\x00x", b"eve\nX-Other: 2", b"\xff\xfe\x7fbob\t"):
        raw = await asyncio.to_thread(
            _raw_request, url, start + b"X-Hookaudit-User: " + value + b"\r\n", body
        )
        assert raw.split(b" ", 2)[1] in (b"200", b"400"), raw[:200]
    r = await client.post(
        "/hooks",
        json=pretool(),
        headers={b"X-Hookaudit-User": "b\u2028o\u0085b".encode(), b"X-Hookaudit-Host": b"h" * 5000},
    )
    assert r.status_code == 200
    for ev, _ in rig.seen:
        for text in (ev.user, ev.host):
            assert text.isprintable(), repr(text)
            assert len(text) <= 256
    assert rig.seen[0][0].user == "eve"
    assert rig.seen[-1][0].user == "bob"
    assert (await client.get("/healthz")).status_code == 200  # still serving


def test_clean_header() -> None:
    assert clean_header(None) is None
    assert clean_header(b"  al\tice \r\n") == "alice"
    assert clean_header("zoë".encode()) == "zoë"
    assert clean_header(b"\xff") == "\ufffd"
    assert len(clean_header(b"x" * 1000) or "") == 256


# -- the http answer (pure) ------------------------------------------------------------


def _translate(event: str, stdout: str, stderr: str, exit_code: int, profile: str) -> bytes:
    """The oracle: what a command hook's (stdout, stderr, exit code) says, as an http body
    (serve's translation before `express` gave both forms from one function)."""
    text = stdout.strip()
    obj: dict[str, Any] | None = None
    verbatim = False
    if text.startswith("{"):
        parsed = json.loads(text)
        if isinstance(parsed, dict):
            obj, verbatim = parsed, True
    es = CATALOG.get(event)
    if obj is None and text:
        if event == "WorktreeCreate":
            lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
            obj = {"hookSpecificOutput": {"hookEventName": event, "worktreePath": lines[-1]}}
        elif es is not None and es.plain_stdout_context:
            obj = {"hookSpecificOutput": {"hookEventName": event, "additionalContext": text}}
    if exit_code == 2:
        reason = stderr.strip() or "Blocked by hook"
        effect = es.exit2_for(profile) if es is not None else "ignored"
        if es is not None and not es.informational and effect != "ignored":
            out = dict(obj or {})
            if effect == "user":
                out.setdefault("systemMessage", reason)
            else:
                block = blocking_object(event, reason, profile)
                hso = out.get("hookSpecificOutput")
                hso = hso if isinstance(hso, dict) else {}
                blocks = (
                    out.get("decision") == "block" or out.get("continue") is False
                    or hso.get("permissionDecision") == "deny"
                    or (hso.get("decision") or {}).get("behavior") == "deny"
                    or hso.get("action") in ("decline", "cancel")
                )  # fmt: skip
                if block is not None and not blocks:
                    if out.get("decision") == "approve":
                        del out["decision"]
                    for key, value in block.items():
                        if key == "hookSpecificOutput" and "hookSpecificOutput" in out:
                            merged = {**out[key], **value}
                            merged.pop("updatedInput", None)
                            out[key] = merged
                        else:
                            out[key] = value
            verbatim = verbatim and out == obj
            obj = out
    if not obj:
        return b""
    return text.encode() if verbatim else json.dumps(obj, separators=(",", ":")).encode()


DECISIONS = [
    Decision(),
    Decision(blocked=True, decision="deny", reason="no"),
    Decision(blocked=True),
    Decision(decision="allow", reason="fine", updated_input={"command": "ls -l"}),
    Decision(decision="ask", reason="a human"),
    Decision(decision="defer"),
    Decision(additional_context=["use pnpm", "and tests"]),
    Decision(system_messages=["careful"], errors=["hook x failed"]),
    Decision(continue_=False, stop_reason="stop now"),
    Decision(specific={"worktreePath": "/w/a\n/w/tree"}),
    Decision(specific={"customInstructions": "keep the API notes"}),
    Decision(specific={"action": "accept", "content": {"k": 1}}),
    Decision(blocked=True, reason="keep going", additional_context=["ctx"]),
]


@pytest.mark.parametrize("profile", ["current", "legacy"])
def test_http_body_says_what_the_command_output_says(profile: Profile) -> None:
    """One function gives both forms; the http one is what the command one means."""
    for event in [*CATALOG, "NotAnEvent"]:
        for d in DECISIONS:
            form = express(event, d, profile=profile)
            assert form[:3] == render_claude(event, d, profile=profile)
            want = _translate(event, form.stdout, form.stderr, form.exit_code, profile)
            got = form.body
            assert (json.loads(got) if got else None) == (json.loads(want) if want else None), (
                event, d,
            )  # fmt: skip


def test_http_body_examples() -> None:
    def body(event: str, profile: Profile = "current", **kw: Any) -> Any:
        got = express(event, Decision(**kw), profile=profile).body
        return json.loads(got) if got else None

    assert body("PreToolUse", decision="allow") == {
        "hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "allow"}
    }
    assert body("Notification", errors=["debug note"]) is None
    assert body("UserPromptSubmit", additional_context=["use pnpm"]) == {
        "hookSpecificOutput": {"hookEventName": "UserPromptSubmit", "additionalContext": "use pnpm"}
    }
    assert body("WorktreeCreate", specific={"worktreePath": "/w/tree"}) == {
        "hookSpecificOutput": {"hookEventName": "WorktreeCreate", "worktreePath": "/w/tree"}
    }
    assert body("WorktreeCreate", blocked=True, reason="no") is None  # no path: creation fails
    assert body("TeammateIdle", blocked=True, reason="keep going") == {
        "continue": False,
        "stopReason": "keep going",
    }
    assert body("TeammateIdle", "legacy", blocked=True, reason="x") == {
        "continue": False,
        "stopReason": "x",
    }
    assert body("Elicitation", blocked=True, reason="no", system_messages=["m"]) == {
        "systemMessage": "m",
        "hookSpecificOutput": {"hookEventName": "Elicitation", "action": "decline"},
    }
    assert body("PreCompact", blocked=True) == {"decision": "block", "reason": "Blocked by hook"}
    assert body("Stop", blocked=True, reason="own") == {"decision": "block", "reason": "own"}
    ev = new_event({"hook_event_name": "Stop", "session_id": "s"})
    out = Outcome(event=ev, settings_id="x", blocked=True, reason="r", profile="legacy")
    assert decision_of(out) == Decision(blocked=True, reason="r")
    assert render(out) == b'{"decision":"block","reason":"r"}'


def test_which_events_an_http_hook_cannot_block() -> None:
    cannot = {e for e in CATALOG if blocking_object(e, "r") is None}
    assert cannot == {
        "Notification",
        "SessionStart",
        "SessionEnd",
        "StopFailure",
        "SubagentStart",
        "PostCompact",
        "PermissionDenied",
        "Setup",
        "WorktreeRemove",
        "InstructionsLoaded",
        "CwdChanged",
        "FileChanged",
        "MessageDisplay",
        "DirectoryAdded",
        "PreModelCall",
        "PostModelCall",
        "PermissionDecision",
    }
    assert blocking_object("PreCompact", "r", "legacy") is None
    assert blocking_object("PermissionRequest", "r") == {
        "hookSpecificOutput": {
            "hookEventName": "PermissionRequest",
            "decision": {"behavior": "deny", "message": "r"},
        }
    }
    assert failure_answer("SessionEnd", "closed", "x") == b""
    assert b"because the hook fails closed" in failure_answer("Stop", "closed", "timeout")


# -- the command: startup line, SIGTERM -------------------------------------------------


async def test_cli_serves_and_sigterm_finishes_in_flight(
    nats_server: NatsServer, nc: Client, names: Names
) -> None:
    await provision(nc.jetstream(), prefix=names.prefix)

    async def slow(ev: HookEvent) -> Reply:
        await asyncio.sleep(1.0)
        return outcome(ev, blocked=True, decision="deny", reason="slow no")

    responder = Responder(nc, names, slow)
    await responder.start()
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOOKAUDIT_")}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hookaudit",
            "serve",
            "--nats",
            nats_server.url,
            "--prefix",
            names.prefix,
            "--listen",
            "127.0.0.1:0",
            "--timeout",
            "5",
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        line = (await asyncio.to_thread(proc.stdout.readline)).decode()
        assert line.startswith("hookaudit serve: listening on http://127.0.0.1:"), line
        url = line.split()[-1]
        async with httpx.AsyncClient(timeout=10) as client:
            pending = asyncio.create_task(client.post(url, json=pretool()))
            while not responder.seen:
                await asyncio.sleep(0.01)
            proc.send_signal(signal.SIGTERM)
            r = await pending
            assert r.json()["hookSpecificOutput"]["permissionDecisionReason"] == "slow no"
        code = await asyncio.to_thread(proc.wait, 15)
        assert code == 0, proc.stderr.read() if proc.stderr else ""
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", int(url.split(":")[2].split("/")[0])), 1)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()
        await responder.stop()


def test_cli_refuses_public_listen_without_token() -> None:
    from click.testing import CliRunner

    from hookaudit.serve_cmd import serve_cmd

    result = CliRunner().invoke(
        serve_cmd,
        ["--listen", "0.0.0.0:8787", "--nats", "nats://x"],
        env={"HOOKAUDIT_SERVE_TOKEN": ""},
    )
    assert result.exit_code == 2
    assert "without a bearer token" in result.output
    result = CliRunner().invoke(serve_cmd, ["--listen", "nowhere"])
    assert result.exit_code == 2
    assert "HOST:PORT" in result.output


async def test_the_shipped_snippets_url_gets_a_blocking_answer_for_a_body_serve_cannot_read(
    rig: Rig,
) -> None:
    """The shipped http hook posts PreToolUse to /hooks/PreToolUse: a malformed or oversized
    body there is the event's deny with status 200. At /hooks the same body is a 400/413,
    which Claude Code treats as a non-blocking error: the call would run."""
    repo = Path(__file__).resolve().parents[2]
    doc = json.loads((repo / "infra/claude/managed-settings.serve.json").read_text())
    url = doc["hooks"]["PreToolUse"][0]["hooks"][0]["url"]
    path = "/" + url.split("/", 3)[3]
    assert path == "/hooks/PreToolUse"
    client = await rig.start(fail="closed", max_body=1000)
    big = {"tool_input": {"command": "x" * 2000}, "hook_event_name": "PreToolUse"}
    # bodies that do not tell their event: serve can only know it from the URL
    for body in (b'{"tool_name": "Bash", "tool_input": {"command": "rm', json.dumps(big).encode()):
        r = await client.post(path, content=body)
        assert r.status_code == 200, r.text
        assert r.json()["hookSpecificOutput"]["permissionDecision"] == "deny", r.text
        bare = await client.post("/hooks", content=body)
        assert bare.status_code in (400, 413)
