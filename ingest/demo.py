"""`hookaudit demo`: the whole pipeline on one machine, in one command.

Starts the embedded NATS server and a worker with the example security policy,
plays a set of realistic agent sessions through it the way Claude Code would (each
PreToolUse waits for its decision; a denied tool call never runs, so it gets no
PostToolUse), verifies the log, prints a report, and stops everything it started.

Example:
    $ hookaudit demo --sessions 30
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from engine.dialects.registry import get as get_dialect
from engine.records import encode_msgpack, new_event
from ingest.log.reader import iter_outcomes
from ingest.log.verifier import verify
from ingest.nats.embedded import embedded_status, start_embedded, stop_embedded
from ingest.nats.options import NatsArgs, connect_options
from ingest.nats.streams import event_subject, names, provision
from ingest.protocol import MSG_ID, REPLY_HEADER, Reply
from ingest.replysig import Signer, ensure_reply_key
from ingest.samples import DEMO_AGENTS, as_agent, sessions
from ingest.worker.loop import Worker

__all__ = ["DemoResult", "default_policy", "live_reason", "run_demo"]

_reply_dec = msgspec.msgpack.Decoder(Reply)


def default_policy() -> Path:
    """The example policy shipped in ``infra/policies/security.json``."""
    import infra

    here = Path(infra.__file__).resolve().parent / "policies" / "security.json"
    return here


def live_reason(data_dir: Path) -> str | None:
    """Why `data_dir` is in use and the demo must not run there, or None when it may.

    The demo plays synthetic sessions into the data dir's log: in a dir that holds a real
    log, or beside a running server, it would mix them into real history.

    Example:
        >>> live_reason(Path(tempfile.mkdtemp()))  # an empty dir: free
    """
    status = embedded_status(data_dir)
    if status is not None:
        return f"a NATS server (pid {status.get('pid')}) is running for it"
    from ingest.log.layout import segments

    found = segments(data_dir) if (data_dir / "log").is_dir() else []
    if found or ((data_dir / "log").is_dir() and any((data_dir / "log").iterdir())):
        return f"it holds a log ({len(found)} segment(s))"
    return None


@dataclass
class DemoResult:
    data_dir: Path
    published: int = 0
    sessions: int = 0
    seconds: float = 0.0
    decisions: Counter[str] = field(default_factory=Counter)
    events: Counter[str] = field(default_factory=Counter)
    agents: Counter[str] = field(default_factory=Counter)
    denied: Counter[str] = field(default_factory=Counter)
    asked: Counter[str] = field(default_factory=Counter)
    verified: bool = False
    verify_message: str = ""
    records: int = 0


def _as_event(agent: str, raw: dict[str, Any], host: str, user: str) -> Any:
    """The HookEvent `hookaudit emit --agent AGENT` makes of this event as `agent` sends it."""
    if agent == "claude_code":
        return new_event(raw, source="demo", host=host, user=user)
    own = as_agent(agent, raw)
    said = get_dialect(agent).normalise(own)
    return new_event(
        said.payload, source="demo", host=host, user=user, agent=agent,
        agent_event=said.agent_event, agent_tool=said.agent_tool, agent_payload=json.dumps(own),
    )  # fmt: skip


async def _play_session(nc: Any, js: Any, evs: list[dict[str, Any]], n: Any) -> int:
    """Publish one session's events in order; wait for each PreToolUse decision."""
    published = 0
    skip_tool_use: set[str] = set()
    for raw in evs:
        user, host, agent = raw.pop("_user"), raw.pop("_host"), raw.pop("_agent", "claude_code")
        if raw.get("tool_use_id") in skip_tool_use and raw["hook_event_name"] != "PreToolUse":
            continue  # the tool was denied: the agent never runs it, so no PostToolUse
        event = _as_event(agent, raw, host, user)
        data = encode_msgpack(event)
        headers = {MSG_ID: event.id}
        if raw["hook_event_name"] == "PreToolUse":
            inbox = nc.new_inbox()
            sub = await nc.subscribe(inbox, max_msgs=1)
            headers[REPLY_HEADER] = inbox
            await js.publish(event_subject(n, event.event), data, headers=headers)
            msg = await sub.next_msg(timeout=30)
            reply = _reply_dec.decode(msg.data)
            if reply.outcome is not None and reply.outcome.decision == "deny":
                skip_tool_use.add(str(raw.get("tool_use_id")))
        else:
            await js.publish(event_subject(n, event.event), data, headers=headers)
        published += 1
    return published


async def run_demo(
    data_dir: Path | None = None,
    *,
    n_sessions: int = 30,
    seed: int = 7,
    policy: Path | None = None,
    parallel: int = 8,
    progress: Callable[[int], None] | None = None,
) -> DemoResult:
    """Run the demo end to end and return what happened (the caller prints it)."""
    d = data_dir or Path(tempfile.mkdtemp(prefix="hookaudit-demo-"))
    result = DemoResult(data_dir=d)
    started = time.perf_counter()
    before = embedded_status(d)
    server = start_embedded(d)
    ours = before is None or before.get("pid") != server.pid  # never stop a server we found
    try:
        co = connect_options(NatsArgs(nats_url=server.url), d, "worker")
        admin = await co.connect()
        try:
            await provision(admin.jetstream())
        finally:
            await admin.close()
        # The sessions play as an agent would: with the emitter role's key.
        nc = await connect_options(NatsArgs(nats_url=server.url), d, "emitter").connect()
        try:
            js = nc.jetstream()
            n = names()
            worker = Worker(
                data_dir=d,
                settings=[("project", str(policy or default_policy()))],
                connect=co,
                names=n,
                name="demo-1",
                workdir=str(d),
                signer=Signer.from_file(ensure_reply_key(d)),
            )
            worker_task = asyncio.create_task(worker.run())
            by_session: dict[str, list[dict[str, Any]]] = {}
            for ev in sessions(n_sessions, seed=seed, agents=DEMO_AGENTS):
                by_session.setdefault(ev["session_id"], []).append(ev)
            queue = list(by_session.values())
            result.sessions = len(queue)

            async def lane() -> None:
                while queue:
                    evs = queue.pop(0)
                    played = await _play_session(nc, js, evs, n)
                    result.published += played
                    if progress is not None:
                        progress(result.published)

            await asyncio.gather(*(lane() for _ in range(parallel)))
            deadline = time.monotonic() + 60
            while worker.stats.events < result.published and time.monotonic() < deadline:
                if worker_task.done():
                    worker_task.result()
                await asyncio.sleep(0.05)
            worker.stop()
            await worker_task
        finally:
            with contextlib.suppress(Exception):
                await nc.close()
    finally:
        if ours:
            stop_embedded(d)
    for o in iter_outcomes(d):
        result.records += 1
        result.events[o.event.event] += 1
        result.decisions[o.decision or "none"] += 1
        result.agents[o.event.agent] += 1
        if o.event.event == "PreToolUse" and o.decision in ("deny", "ask"):
            what = _describe_call(o.event.payload)
            (result.denied if o.decision == "deny" else result.asked)[what] += 1
        elif o.blocked and o.event.event == "UserPromptSubmit":
            result.denied["prompt: " + (o.reason or "")] += 1
    report = verify(d)
    result.verified = report.ok
    result.verify_message = (
        f"{report.records} records, chain intact" if report.ok else str(report.first_error)
    )
    result.seconds = time.perf_counter() - started
    return result


_payload = msgspec.json.Decoder(dict[str, Any])


def _describe_call(payload: str) -> str:
    p = _payload.decode(payload)
    ti = p.get("tool_input") or {}
    tool = p.get("tool_name", "?")
    if tool == "Bash":
        return f"Bash: {ti.get('command', '')}"
    return f"{tool}: {ti.get('file_path') or ti.get('url') or ''}"
