"""`hookaudit emit` and `hookaudit spool` against a real nats-server, as real subprocesses.

Every test has its own stream names (`names` fixture); the emitter is run exactly as
Claude Code runs a command hook: a new process, the event on stdin.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import pytest
from click.testing import CliRunner
from nats.aio.client import Client
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from engine.errors import InvalidEvent
from engine.payload import MAX_EVENT_BYTES
from engine.records import (
    HookEvent,
    HookIdentity,
    HookRun,
    Outcome,
    decode_event_msgpack,
    encode_json,
    encode_msgpack,
    new_event,
)
from hookaudit.emit_cmd import emit as emit_cmd
from hookaudit.emit_cmd import spool as spool_cmd
from ingest.emit.answer import fail_result
from ingest.emit.stdin import validate
from ingest.nats.streams import Names, provision
from ingest.protocol import MSG_ID, REPLY_HEADER, Reply
from ingest.spool.store import Spool

if TYPE_CHECKING:
    from tests.conftest import NatsServer

REPO = Path(__file__).resolve().parents[2]


# -- helpers -------------------------------------------------------------------------------


def _registered() -> bool:
    """True once the lead has registered `emit` and `spool` in hookaudit/cli.py."""
    from hookaudit import cli

    return "emit" in cli.COMMANDS and "spool" in cli.COMMANDS


def _argv(command: str, *args: str) -> list[str]:
    if _registered():
        return [sys.executable, "-m", "hookaudit", command, *args]
    return [sys.executable, "-c", f"from hookaudit.emit_cmd import {command}; {command}()", *args]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOOKAUDIT_")}
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


@dataclass
class Proc:
    code: int
    stdout: str
    stderr: str


async def run(command: str, *args: str, stdin: bytes = b"", timeout: float = 60.0) -> Proc:
    """Run `hookaudit <command> args…` in a new process (async: a responder may run here)."""
    p = await asyncio.create_subprocess_exec(
        *_argv(command, *args),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=REPO,
        env=_env(),
    )
    out, err = await asyncio.wait_for(p.communicate(stdin), timeout)
    assert p.returncode is not None
    return Proc(p.returncode, out.decode(), err.decode())


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def event_json(name: str = "PreToolUse", **extra: Any) -> bytes:
    payload: dict[str, Any] = {"hook_event_name": name, "session_id": "s1", "cwd": "/tmp"}
    if name == "PreToolUse":
        payload |= {"tool_name": "Bash", "tool_input": {"command": "rm -rf /"}}
    payload |= extra
    return json.dumps(payload).encode()


async def stored(js: JetStreamContext, names: Names) -> list[tuple[HookEvent, dict[str, str], str]]:
    """Every message of the test's events stream: (event, headers, subject)."""
    try:
        info = await js.stream_info(names.events_stream)
    except NotFoundError:
        return []
    out: list[tuple[HookEvent, dict[str, str], str]] = []
    if info.state.messages == 0:
        return out
    for seq in range(info.state.first_seq, info.state.last_seq + 1):
        msg = await js.get_msg(names.events_stream, seq)
        assert msg.data is not None
        out.append((decode_event_msgpack(msg.data), dict(msg.headers or {}), msg.subject or ""))
    return out


@pytest.fixture
async def js(nc: Client, names: Names) -> AsyncIterator[JetStreamContext]:
    """JetStream on the test server; the test's streams are deleted afterwards."""
    ctx = nc.jetstream()
    yield ctx
    for stream in (names.events_stream, names.outcomes_stream):
        with contextlib.suppress(NotFoundError):
            await ctx.delete_stream(stream)


def target(nats_server: NatsServer, names: Names, data_dir: Path) -> list[str]:
    return ["--data-dir", str(data_dir), "--nats", nats_server.url, "--prefix", names.prefix]


def down(names: Names, data_dir: Path) -> list[str]:
    url = f"nats://127.0.0.1:{closed_port()}"
    return ["--data-dir", str(data_dir), "--nats", url, "--prefix", names.prefix]


async def responder(nc: Client, names: Names, answer: Callable[[HookEvent], Reply]) -> Any:
    """Play the worker: answer every event that carries a reply inbox.

    The streams are provisioned first, as `hookaudit nats up` or a worker would: with
    a core subscriber on the subject, a publish to a missing stream is not "no
    responders" (which makes emit provision) but a PubAck timeout.
    """
    await provision(nc.jetstream(), prefix=names.prefix)

    async def on_msg(msg: Any) -> None:
        reply_to = (msg.headers or {}).get(REPLY_HEADER)
        if reply_to:
            ev = decode_event_msgpack(msg.data)
            await nc.publish(reply_to, encode_msgpack(answer(ev)))

    sub = await nc.subscribe(names.events_subjects, cb=on_msg)
    await nc.flush()
    return sub


def rendered(event: str, outcome: Outcome) -> tuple[str, str, int]:
    """What `hookaudit eval --format claude` prints for this outcome (stdout, stderr, code)."""
    from engine.claude_output import express_outcome

    assert outcome.event.event == event
    out, err, code, _ = express_outcome(outcome)
    return (out + "\n" if out and not out.endswith("\n") else out), err, code


def spool_count(data_dir: Path) -> int:
    return Spool(data_dir).status().events


# -- observe mode ----------------------------------------------------------------------------


async def test_event_is_published_verbatim_once(
    nats_server: NatsServer, names: Names, js: JetStreamContext, tmp_path: Path
) -> None:
    # Odd spacing, key order, unicode, an unknown field and a trailing newline: all kept.
    raw = (
        '{ "session_id":"s-ü", "hook_event_name" : "PreToolUse",\n'
        ' "tool_name":"Bash","tool_input":{"command":"ls  -la"},'
        ' "future_field": [1, 2.50, null], "cwd": "/w" }\n'
    ).encode()

    p = await run("emit", *target(nats_server, names, tmp_path), stdin=raw)

    assert (p.code, p.stdout, p.stderr) == (0, "", "")
    [(ev, headers, subject)] = await stored(js, names)
    assert ev.payload.encode() == raw
    assert headers[MSG_ID] == ev.id
    assert REPLY_HEADER not in headers
    assert subject == f"{names.events_prefix}.PreToolUse"
    assert (ev.event, ev.session_id, ev.tool_name, ev.cwd, ev.source) == (
        "PreToolUse", "s-ü", "Bash", "/w", "claude-code"
    )  # fmt: skip
    assert spool_count(tmp_path) == 0


async def test_source_option_is_recorded(
    nats_server: NatsServer, names: Names, js: JetStreamContext, tmp_path: Path
) -> None:
    args = [*target(nats_server, names, tmp_path), "--source", "agent-x"]
    p = await run("emit", *args, stdin=event_json("Stop"))
    assert p.code == 0
    [(ev, _, _)] = await stored(js, names)
    assert ev.source == "agent-x"


async def test_same_event_id_twice_is_stored_once(
    nats_server: NatsServer, names: Names, js: JetStreamContext, tmp_path: Path
) -> None:
    ev = new_event(json.loads(event_json("Stop")), raw=event_json("Stop").decode())
    spool = Spool(tmp_path)
    spool.append(ev)
    spool.append(ev)

    p = await run("spool", "flush", *target(nats_server, names, tmp_path), "--format", "json")

    assert p.code == 0, p.stderr
    report = json.loads(p.stdout)
    assert (report["published"], report["duplicates"], report["remaining"]) == (1, 1, 0)
    [(got, headers, _)] = await stored(js, names)
    assert got.id == ev.id == headers[MSG_ID]


# -- waiting for a decision -----------------------------------------------------------------


def _deny(ev: HookEvent) -> Reply:
    o = Outcome(event=ev, settings_id="s", blocked=True, decision="deny", reason="no rm -rf")
    return Reply(event_id=ev.id, outcome=o)


def _allow_rewritten(ev: HookEvent) -> Reply:
    o = Outcome(
        event=ev,
        settings_id="s",
        decision="allow",
        reason="rewritten",
        updated_input={"command": "rm -ri ./build"},
        additional_context=["ran through the policy"],
    )
    return Reply(event_id=ev.id, outcome=o)


def _stop_block(ev: HookEvent) -> Reply:
    o = Outcome(event=ev, settings_id="s", blocked=True, decision="deny", reason="tests fail")
    return Reply(event_id=ev.id, outcome=o)


def _stop_exit2(ev: HookEvent) -> Reply:
    # A command hook's exit 2: Claude Code shows its stderr as written (eval: exit 2). The
    # runs say so; a Decision copied field by field from the Outcome lost it (JSON, exit 0).
    run = HookRun(
        HookIdentity(type="command", source="project", command="./gate.sh"),
        "h1",
        "deny",
        exit_code=2,
        stderr="tests fail\n",
        decision="deny",
    )
    o = Outcome(
        event=ev, settings_id="s", blocked=True, decision="deny", reason="tests fail", runs=[run]
    )
    return Reply(event_id=ev.id, outcome=o)


@pytest.mark.parametrize(
    ("event", "answer"),
    [
        ("PreToolUse", _deny),
        ("PreToolUse", _allow_rewritten),
        ("Stop", _stop_block),
        ("Stop", _stop_exit2),
    ],
    ids=["deny", "allow-updated-input", "stop-block", "stop-exit2"],
)
async def test_wait_prints_the_decision_as_eval_format_claude(
    nats_server: NatsServer,
    names: Names,
    nc: Client,
    js: JetStreamContext,
    tmp_path: Path,
    event: str,
    answer: Callable[[HookEvent], Reply],
) -> None:
    replies: list[Reply] = []

    def recording(ev: HookEvent) -> Reply:
        replies.append(answer(ev))
        return replies[-1]

    sub = await responder(nc, names, recording)
    args = [*target(nats_server, names, tmp_path), "--wait", "--timeout", "10"]
    p = await run("emit", *args, stdin=event_json(event))
    await sub.unsubscribe()

    [reply] = replies
    assert reply.outcome is not None
    out, err, code = rendered(event, reply.outcome)
    assert (p.code, p.stdout) == (code, out), p.stderr
    assert p.stderr.strip() == err.strip()
    if answer is _deny:
        assert json.loads(p.stdout)["hookSpecificOutput"]["permissionDecision"] == "deny"
    if answer is _allow_rewritten:
        hso = json.loads(p.stdout)["hookSpecificOutput"]
        assert hso["updatedInput"] == {"command": "rm -ri ./build"}
    if answer is _stop_block:
        assert json.loads(p.stdout)["decision"] == "block"
    if answer is _stop_exit2:
        assert (p.code, p.stdout, p.stderr) == (2, "", "tests fail\n")
    [(ev, headers, _)] = await stored(js, names)
    assert headers[REPLY_HEADER].startswith("_INBOX.")
    assert ev.id == reply.event_id


async def test_wait_timeout_fails_open(
    nats_server: NatsServer, names: Names, js: JetStreamContext, tmp_path: Path
) -> None:
    args = [*target(nats_server, names, tmp_path), "--wait", "--timeout", "0.3"]
    p = await run("emit", *args, stdin=event_json("PreToolUse"))

    assert (p.code, p.stdout) == (0, "")
    assert len(p.stderr.strip().splitlines()) == 1
    assert "no decision arrived within 0.3s" in p.stderr
    # published (the worker will still decide), then the notice of what the agent was told
    (ev, _, _), (note, headers, _) = await stored(js, names)
    assert note.id == ev.id and headers[MSG_ID] == f"{ev.id}:fallback"
    assert note.fallback is not None and note.fallback.notice
    assert (note.fallback.fail, note.fallback.blocked) == ("open", False)


@pytest.mark.parametrize(
    ("event", "code"),
    [("PreToolUse", 0), ("Stop", 2), ("UserPromptSubmit", 2), ("SessionStart", 0)],
)
async def test_wait_timeout_fails_closed(
    nats_server: NatsServer,
    names: Names,
    js: JetStreamContext,
    tmp_path: Path,
    event: str,
    code: int,
) -> None:
    args = [*target(nats_server, names, tmp_path), "--wait", "--timeout", "1", "--fail", "closed"]
    p = await run("emit", *args, stdin=event_json(event))

    assert p.code == code, p.stderr
    if event == "PreToolUse":
        hso = json.loads(p.stdout)["hookSpecificOutput"]
        assert hso["permissionDecision"] == "deny"
        assert "no decision arrived within 1s" in hso["permissionDecisionReason"]
    elif code == 2:
        assert p.stdout == ""
        assert "no decision arrived within 1s" in p.stderr
        assert "fails closed" in p.stderr
    else:  # SessionStart cannot be blocked: proceed, say why
        assert p.stdout == ""
        assert "cannot be blocked" in p.stderr
    (ev, _, _), (note, _, _) = await stored(js, names)  # the event, then the agent's answer
    assert note.id == ev.id and note.fallback is not None
    assert note.fallback.blocked == (event != "SessionStart")
    assert note.fallback.decision == {"PreToolUse": "deny", "SessionStart": None}.get(
        event, "block"
    )


async def test_wait_answers_within_its_timeout_when_nats_hangs(
    names: Names, tmp_path: Path
) -> None:
    """--timeout bounds the answer, not only the wait for the decision: Claude Code stops a
    hook at its own timeout and then lets the call run, so a slow connect or publish must
    not push the fail-closed answer past it. The server here is a real nats-server that
    hangs (SIGSTOP): the kernel still accepts connections, nothing answers."""
    from ingest.nats.embedded import find_nats_server

    port = closed_port()
    srv = subprocess.Popen([find_nats_server(), "-a", "127.0.0.1", "-p", str(port)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        for _ in range(100):
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.2):
                break
            await asyncio.sleep(0.05)
        srv.send_signal(signal.SIGSTOP)
        args = ["--data-dir", str(tmp_path), "--nats", f"nats://127.0.0.1:{port}",
                "--prefix", names.prefix, "--wait", "--timeout", "4", "--fail", "closed"]  # fmt: skip
        t0 = time.monotonic()
        p = await run("emit", *args, stdin=event_json("PreToolUse"))
        took = time.monotonic() - t0
    finally:
        srv.send_signal(signal.SIGCONT)
        srv.kill()
        srv.wait(timeout=10)
    assert p.code == 0, p.stderr
    hso = json.loads(p.stdout)["hookSpecificOutput"]
    # the answer names whichever step the deadline cut: the connect, or the wait after it
    why = hso["permissionDecisionReason"]
    assert hso["permissionDecision"] == "deny", hso
    assert "no answer within 4s" in why or "cannot connect to NATS" in why, hso
    assert spool_count(tmp_path) == 1  # kept for the next flush
    # Not a speed bound: one deadline covers connecting and waiting, so the answer comes
    # at 4 s plus start-up; connecting alone used to take twice the connect timeout
    # (2 x 4 s). The bound between them leaves start-up 4 s of slack.
    assert took < 2 * 4, took
    print(f"answer after {took:.2f} s with --timeout 4 against a hung server")


async def test_reply_error_acts_per_fail_mode(
    nats_server: NatsServer, names: Names, nc: Client, js: JetStreamContext, tmp_path: Path
) -> None:
    sub = await responder(nc, names, lambda ev: Reply(event_id=ev.id, error="worker crashed"))
    base = [*target(nats_server, names, tmp_path), "--wait"]

    closed = await run("emit", *base, "--fail", "closed", stdin=event_json("PreToolUse"))
    opened = await run("emit", *base, stdin=event_json("PreToolUse"))
    await sub.unsubscribe()

    hso = json.loads(closed.stdout)["hookSpecificOutput"]
    assert (closed.code, hso["permissionDecision"]) == (0, "deny")
    assert "worker crashed" in hso["permissionDecisionReason"]
    assert (opened.code, opened.stdout) == (0, "")
    assert "worker crashed" in opened.stderr


# -- NATS unreachable: the spool -----------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "event", "code", "silent"),
    [
        ([], "PreToolUse", 0, True),
        (["--fail", "closed"], "PreToolUse", 0, True),  # observe: spooled is stored
        (["--wait"], "PreToolUse", 0, False),
        (["--wait", "--fail", "closed"], "PreToolUse", 0, False),
        (["--wait", "--fail", "closed"], "Stop", 2, False),
    ],
    ids=["observe", "observe-closed", "wait-open", "wait-closed-pretool", "wait-closed-stop"],
)
async def test_unreachable_nats_spools_the_event(
    names: Names, tmp_path: Path, flags: list[str], event: str, code: int, silent: bool
) -> None:
    raw = event_json(event)

    p = await run("emit", *down(names, tmp_path), *flags, stdin=raw)

    assert p.code == code, p.stderr
    if silent:
        assert (p.stdout, p.stderr) == ("", "")
    elif "closed" in flags and event == "PreToolUse":
        hso = json.loads(p.stdout)["hookSpecificOutput"]
        assert hso["permissionDecision"] == "deny"
        assert "cannot connect to NATS" in hso["permissionDecisionReason"]
    else:
        assert p.stdout == ""
        assert "cannot connect to NATS" in p.stderr
        assert "spooled" in p.stderr
    lines = (tmp_path / "spool" / "events.jsonl").read_bytes().splitlines()
    assert [msgspec.json.decode(line, type=HookEvent).payload for line in lines] == [raw.decode()]
    assert (tmp_path / "spool" / "events.jsonl").stat().st_mode & 0o777 == 0o600


async def test_operator_mistake_is_reported_even_in_observe_mode(
    nats_server: NatsServer, names: Names, tmp_path: Path
) -> None:
    args = [*target(nats_server, names, tmp_path), "--creds", str(tmp_path / "missing.creds")]
    p = await run("emit", *args, stdin=event_json("Stop"))
    assert (p.code, p.stdout) == (0, "")
    assert "missing.creds: --creds: file not found; event spooled" in p.stderr
    assert spool_count(tmp_path) == 1


async def test_no_embedded_server_spools(names: Names, tmp_path: Path) -> None:
    p = await run("emit", "--data-dir", str(tmp_path), stdin=event_json("Stop"))
    assert (p.code, p.stdout, p.stderr) == (0, "", "")
    assert spool_count(tmp_path) == 1


async def test_spool_flush_after_the_server_is_back(
    nats_server: NatsServer, names: Names, js: JetStreamContext, tmp_path: Path
) -> None:
    raws = [event_json("PostToolUse", n=i) for i in range(5)]
    for raw in raws:
        assert (await run("emit", *down(names, tmp_path), stdin=raw)).code == 0
    status = await run("spool", "status", "--data-dir", str(tmp_path), "--format", "json")
    assert json.loads(status.stdout)["events"] == 5

    p = await run("spool", "flush", *target(nats_server, names, tmp_path))
    again = await run("spool", "flush", *target(nats_server, names, tmp_path))

    assert p.code == 0, p.stderr
    assert "published 5" in p.stdout
    assert again.code == 0 and "published 0" in again.stdout
    got = await stored(js, names)
    assert [ev.payload.encode() for ev, _, _ in got] == raws  # in order, once each
    assert all(h[MSG_ID] == ev.id for ev, h, _ in got)
    status = await run("spool", "status", "--data-dir", str(tmp_path))
    assert status.stdout.startswith("0 events spooled")
    assert not list((tmp_path / "spool").glob("batch-*"))


async def test_next_emit_flushes_the_spool_first(
    nats_server: NatsServer, names: Names, js: JetStreamContext, tmp_path: Path
) -> None:
    first = [event_json("Notification", n=i) for i in range(3)]
    for raw in first:
        await run("emit", *down(names, tmp_path), stdin=raw)
    last = event_json("Stop")

    p = await run("emit", *target(nats_server, names, tmp_path), stdin=last)

    assert (p.code, p.stdout, p.stderr) == (0, "", "")
    assert [ev.payload.encode() for ev, _, _ in await stored(js, names)] == [*first, last]
    assert spool_count(tmp_path) == 0


async def test_flush_fails_cleanly_while_nats_is_down(names: Names, tmp_path: Path) -> None:
    await run("emit", *down(names, tmp_path), stdin=event_json("Stop"))
    p = await run("spool", "flush", *down(names, tmp_path))
    assert p.code == 1
    assert "cannot connect to NATS" in p.stderr and "stay spooled" in p.stderr
    assert spool_count(tmp_path) == 1


async def test_concurrent_flushes_publish_nothing_twice_and_lose_nothing(
    nats_server: NatsServer, names: Names, js: JetStreamContext, tmp_path: Path
) -> None:
    spool = Spool(tmp_path)
    events = [new_event({"hook_event_name": "Stop", "session_id": f"s{i}"}) for i in range(400)]
    for ev in events:
        spool.append(ev)
    args = [*target(nats_server, names, tmp_path), "--format", "json"]

    a, b = await asyncio.gather(run("spool", "flush", *args), run("spool", "flush", *args))

    assert (a.code, b.code) == (0, 0), (a.stderr, b.stderr)
    reports = [json.loads(a.stdout), json.loads(b.stdout)]
    assert sum(r["published"] for r in reports) == 400
    assert sum(r["duplicates"] for r in reports) == 0  # nothing was even re-sent
    got = await stored(js, names)
    assert [ev.id for ev, _, _ in got] == [ev.id for ev in events]
    assert spool_count(tmp_path) == 0


async def test_torn_last_line_is_rejected_and_the_rest_flushed(
    nats_server: NatsServer, names: Names, js: JetStreamContext, tmp_path: Path
) -> None:
    spool = Spool(tmp_path)
    events = [new_event({"hook_event_name": "Stop", "session_id": f"s{i}"}) for i in range(3)]
    for ev in events:
        spool.append(ev)
    torn = encode_json(new_event({"hook_event_name": "Stop"}))[:40]
    with open(spool.events_path, "ab") as f:  # a crash mid-write: no newline
        f.write(torn)

    p = await run("spool", "flush", *target(nats_server, names, tmp_path), "--format", "json")

    assert p.code == 0, p.stderr
    report = json.loads(p.stdout)
    assert (report["published"], report["rejected"], report["remaining"]) == (3, 1, 0)
    assert [ev.id for ev, _, _ in await stored(js, names)] == [ev.id for ev in events]
    [reject] = [json.loads(line) for line in spool.rejects_path.read_text().splitlines()]
    assert reject["line"].encode() == torn
    assert "torn line" in reject["reason"]
    status = json.loads(
        (await run("spool", "status", "--data-dir", str(tmp_path), "--format", "json")).stdout
    )
    assert (status["events"], status["rejects"]) == (0, 1)


async def test_torn_line_in_the_middle_does_not_swallow_the_next_event(
    nats_server: NatsServer, names: Names, js: JetStreamContext, tmp_path: Path
) -> None:
    spool = Spool(tmp_path)
    before = new_event({"hook_event_name": "Stop", "session_id": "before"})
    spool.append(before)
    with open(spool.events_path, "ab") as f:
        f.write(b'{"id": "crashed-mid-wri')
    after = new_event({"hook_event_name": "Stop", "session_id": "after"})
    spool.append(after)  # terminates the fragment before writing its own line

    p = await run("spool", "flush", *target(nats_server, names, tmp_path), "--format", "json")

    assert json.loads(p.stdout)["rejected"] == 1
    assert [ev.session_id for ev, _, _ in await stored(js, names)] == ["before", "after"]


async def test_flush_resumes_from_its_checkpoint(
    nats_server: NatsServer, names: Names, js: JetStreamContext, tmp_path: Path
) -> None:
    # A flush that stopped half way (budget spent, crash) leaves a batch and an offset;
    # the next flush starts at the offset instead of re-sending the acked half.
    spool = Spool(tmp_path)
    events = [new_event({"hook_event_name": "Stop", "session_id": f"s{i}"}) for i in range(4)]
    for ev in events:
        spool.append(ev)
    batch = tmp_path / "spool" / "batch-00000000-0000-7000-8000-000000000000.jsonl"
    os.rename(spool.events_path, batch)
    acked = len(encode_json(events[0])) + len(encode_json(events[1])) + 2
    Path(f"{batch}.offset").write_text(str(acked))

    p = await run("spool", "flush", *target(nats_server, names, tmp_path), "--format", "json")

    assert json.loads(p.stdout)["published"] == 2
    assert [ev.session_id for ev, _, _ in await stored(js, names)] == ["s2", "s3"]
    assert sorted(os.listdir(tmp_path / "spool")) == ["flush.lock", "lock"]


# -- bad input --------------------------------------------------------------------------------


BAD_INPUTS = {
    "empty": b"",
    "not-json": b"hello {",
    "not-an-object": b'["hook_event_name", "Stop"]',
    "unknown-event": b'{"hook_event_name": "NoSuchEvent"}',
    "no-event-name": b'{"session_id": "s"}',
    "too-large": b'{"hook_event_name": "Stop", "pad": "' + b"x" * MAX_EVENT_BYTES + b'"}',
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
@pytest.mark.parametrize("fail", ["open", "closed"])
async def test_bad_stdin_is_kept_and_reported(
    nats_server: NatsServer,
    names: Names,
    js: JetStreamContext,
    tmp_path: Path,
    case: str,
    fail: str,
) -> None:
    raw = BAD_INPUTS[case]

    p = await run("emit", *target(nats_server, names, tmp_path), "--fail", fail, stdin=raw)

    assert p.code == (2 if fail == "closed" else 0)
    assert p.stdout == ""
    [line] = p.stderr.splitlines()
    assert line.startswith("hookaudit emit: <stdin>: ")
    [kept] = (tmp_path / "rejects").glob("*.bin")
    assert kept.read_bytes() == raw[:MAX_EVENT_BYTES]
    assert str(kept) in line
    assert kept.stat().st_mode & 0o777 == 0o600
    # Nothing vanishes: the log gets a stub (payload {}) with the input's size and digest.
    [(stub, _, _)] = await stored(js, names)
    assert stub.payload == "{}" and stub.rejected is not None
    assert (stub.rejected.size, stub.rejected.sha256) == (len(raw), hashlib.sha256(raw).hexdigest())
    assert stub.rejected.stage == "emit" and stub.rejected.reason in line


def test_validate_agrees_with_parse_payload() -> None:
    run_mod = pytest.importorskip("engine.run")
    for raw in BAD_INPUTS.values():
        with pytest.raises(InvalidEvent):
            validate(raw)
        with pytest.raises(InvalidEvent):
            run_mod.parse_payload(raw, "<stdin>")
    good = event_json("PreToolUse")
    assert validate(good)[0] == run_mod.parse_payload(good)


async def test_two_mib_event_is_stored_by_the_embedded_server(
    nats_server: NatsServer, names: Names, js: JetStreamContext, tmp_path: Path
) -> None:
    # The embedded server raises max_payload to 9 MiB: an event of a few MiB is stored.
    raw = event_json("Stop", pad="x" * (2 * 1024 * 1024))
    p = await run("emit", *target(nats_server, names, tmp_path), stdin=raw)
    assert p.code == 0, p.stderr
    [(event, _, _)] = await stored(js, names)
    assert event.payload.encode() == raw


async def test_event_larger_than_max_payload_is_kept_not_retried(
    names: Names, tmp_path: Path
) -> None:
    # A NATS server of the operator's with the default 1 MiB max_payload: a valid
    # 2 MiB event can never be delivered, so it goes to spool/rejects.jsonl, not
    # into the spool where it would block every later flush.
    from ingest.nats.embedded import find_nats_server

    port = closed_port()
    store = tmp_path / "small-store"
    conf = tmp_path / "small.conf"
    conf.write_text("max_payload: 1048576\n")
    server = subprocess.Popen(
        [
            find_nats_server(),
            "-c",
            str(conf),
            "-js",
            "-sd",
            str(store),
            "-a",
            "127.0.0.1",
            "-p",
            str(port),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for _ in range(200):
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.1):
                break
            await asyncio.sleep(0.05)
        raw = event_json("Stop", pad="x" * (2 * 1024 * 1024))
        url = f"nats://127.0.0.1:{port}"
        args = ["--data-dir", str(tmp_path), "--nats", url, "--prefix", names.prefix]
        p = await run("emit", *args, stdin=raw)
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert p.code == 0
    assert "max_payload" in p.stderr
    [reject] = [
        json.loads(x) for x in (tmp_path / "spool" / "rejects.jsonl").read_text().splitlines()
    ]
    assert msgspec.json.decode(reject["line"], type=HookEvent).payload.encode() == raw
    assert spool_count(tmp_path) == 0


# -- in-process (click) ---------------------------------------------------------------------


def test_help_shows_the_settings_json_wiring() -> None:
    r = CliRunner().invoke(emit_cmd, ["--help"])
    assert r.exit_code == 0
    # `|| exit 2`: a hookaudit that cannot start must block too (Claude Code blocks on 2 only)
    assert (
        '{"type": "command", "command": "hookaudit emit --wait --fail closed || exit 2"}'
        in r.output
    )
    for sub in ([], ["flush"], ["status"]):
        r = CliRunner().invoke(spool_cmd, [*sub, "--help"])
        assert r.exit_code == 0 and "Example:" in r.output


@pytest.mark.parametrize(("args", "code"), [(["--bogus"], 0), (["--fail", "closed", "--bogus"], 2)])
def test_usage_error_blocks_only_when_closed(args: list[str], code: int) -> None:
    r = CliRunner().invoke(emit_cmd, args, input=b"{}")
    assert r.exit_code == code
    assert "usage error" in r.output


def test_spool_status_counts(tmp_path: Path) -> None:
    spool = Spool(tmp_path)
    for i in range(3):
        spool.append(new_event({"hook_event_name": "Stop", "session_id": f"s{i}"}))
    r = CliRunner().invoke(spool_cmd, ["status", "--data-dir", str(tmp_path), "--format", "json"])
    assert r.exit_code == 0
    assert json.loads(r.output)["events"] == 3
    r = CliRunner().invoke(spool_cmd, ["status", "--data-dir", str(tmp_path)])
    assert r.output.startswith("3 events spooled in ")


def test_fail_result_never_blocks_when_open() -> None:
    from engine.events import CATALOG

    for name in CATALOG:
        r = fail_result(name, "open", "x", status="no-decision")
        assert (r.exit_code, r.stdout) == (0, "")


async def test_the_wait_counts_the_interpreter_s_start_up(
    nats_server: NatsServer, names: Names, tmp_path: Path
) -> None:
    """Claude Code's hook timeout runs from the spawn, and under load the interpreter's
    start-up alone took over a second before emit's clock began: p99 reached 10.98 s against
    `--timeout 10`. The clock now starts at the process's start (from the kernel): a start-up
    that took 4 s leaves 3 s of a 7 s budget, and no decision is waited for past that."""
    code = (
        "import time; time.sleep(4)\n"  # a slow start-up, before any of emit's code runs
        "import sys; from hookaudit.cli import main; sys.argv[0] = 'hookaudit'; main()\n"
    )
    args = [*target(nats_server, names, tmp_path), "--wait", "--timeout", "7", "--fail", "closed"]
    started = asyncio.get_running_loop().time()
    p = await asyncio.create_subprocess_exec(
        sys.executable, "-c", code, "emit", *args, stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=REPO, env=_env(),
    )  # fmt: skip
    out, err = await p.communicate(event_json("PreToolUse"))
    took = asyncio.get_running_loop().time() - started
    hso = json.loads(out)["hookSpecificOutput"]
    assert hso["permissionDecision"] == "deny", (out, err)
    # Not a speed bound: counted from emit's first line the answer cannot come before
    # 4 + 7 s; counted from the spawn, it comes at about 7 s. The bound between them
    # leaves the machine 2 s of slack.
    assert took < 9, took
    print(f"start-up 4 s, --timeout 7: answered {took:.2f} s after the spawn")


def test_process_age_counts_from_the_exec() -> None:
    code = "import time; time.sleep(0.7); from ingest.emit.fast import process_age; print(process_age())"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                       timeout=60, check=True)  # fmt: skip
    assert float(p.stdout) >= 0.7
