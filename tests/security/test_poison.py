"""No poison message: hostile events reach a real worker through a real nats-server.

Events nested far too deep (the 2 KB event that used to kill the worker with a
RecursionError), garbage on the wire, duplicate keys, mistyped fields and columns that
disagree with the payload are each recorded as a rejected record (size, sha256, reason),
terminated (never redelivered), answered with an error to a waiting emitter; the worker
stays alive and decides every later event.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import signal
import time
from pathlib import Path
from typing import Any

import msgspec
from nats.aio.client import Client

from engine.records import encode_msgpack, new_event
from ingest.log.reader import iter_outcomes
from ingest.nats import streams as ha_nats
from ingest.protocol import MSG_ID, REPLY_HEADER, Reply
from queries.db import open_db
from tests.support.waiting import until
from tests.support.workers import start_worker

HOOKS = """
def guard(event):
    if "rm -rf /" in str((event.get("tool_input") or {}).get("command", "")):
        return {"hookSpecificOutput": {"hookEventName": "PreToolUse",
                "permissionDecision": "deny", "permissionDecisionReason": "no"}}
    return None
"""

DEPTHS = [65, 100, 985, 988, 10_000, 100_000]
BASE = {"hook_event_name": "PostToolUse", "tool_name": "mcp__evil__fetch", "session_id": "s"}


def settings(tmp: Path) -> Path:
    (tmp / "hooks.py").write_text(HOOKS)
    doc = {
        "hooks": {
            event: [{"matcher": "*", "hooks": [{"type": "python", "callable": "hooks.py:guard"}]}]
            for event in ("PreToolUse", "PostToolUse")
        }
    }
    path = tmp / "settings.json"
    path.write_text(json.dumps(doc))
    return path


def deep_payload(depth: int) -> str:
    return (
        '{"hook_event_name":"PostToolUse","tool_name":"mcp__evil__fetch","session_id":"s",'
        '"tool_input":{"q":"x"},"tool_response":' + "[" * depth + "]" * depth + "}"
    )


async def test_hostile_events_neither_kill_nor_stall_the_worker(
    nats_server: Any, tmp_path: Path
) -> None:
    names = ha_nats.names(f"p{time.time_ns() % 10**9}")
    nc = Client()
    await nc.connect(nats_server.url)
    js = nc.jetstream()
    await ha_nats.provision(js, prefix=names.prefix, ack_wait=2.0)
    data = tmp_path / "data"
    worker = start_worker(
        data, nats=nats_server.url, prefix=names.prefix, settings=[settings(tmp_path)], batch=8
    )
    hostile: dict[str, bytes] = {}  # event id (Nats-Msg-Id) -> the exact bytes sent
    try:
        subject = ha_nats.event_subject(names, "PostToolUse")
        for depth in DEPTHS:
            ev = new_event(BASE, raw=deep_payload(depth), source="test")
            hostile[ev.id] = encode_msgpack(ev)
        dup = '{"hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{"command":"rm -rf /","command":"ls"}}'
        typed = '{"hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":"rm -rf /"}'
        for raw in (dup, typed):
            ev = new_event({"hook_event_name": "PreToolUse", "tool_name": "Bash"}, raw=raw)
            hostile[ev.id] = encode_msgpack(ev)
        # columns that lie about the payload: the views would show Read, the engine Bash
        liar = new_event(
            {"hook_event_name": "PreToolUse", "tool_name": "Read"},
            raw='{"hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{"command":"rm -rf /"}}',
        )
        hostile[liar.id] = encode_msgpack(liar)
        garbage = {
            f"g{i}": blob for i, blob in enumerate([b"\x00\xffgarbage", b"\x93\x01\x02\x03", b""])
        }
        hostile.update(garbage)
        # one hostile event has an emitter waiting for its decision
        waiting_id = next(iter(hostile))
        inbox = nc.new_inbox()
        sub = await nc.subscribe(inbox, max_msgs=1)
        for msg_id, blob in hostile.items():
            headers = {MSG_ID: msg_id}
            if msg_id == waiting_id:
                headers[REPLY_HEADER] = inbox
            await js.publish(subject, blob, headers=headers)
        good = []
        for i in range(10):
            cmd = "rm -rf /" if i % 2 else f"ls {i}"
            ev = new_event(
                {
                    "hook_event_name": "PreToolUse",
                    "tool_name": "Bash",
                    "session_id": "s",
                    "tool_input": {"command": cmd},
                },
                source="test",
            )
            await js.publish(
                ha_nats.event_subject(names, "PreToolUse"),
                encode_msgpack(ev),
                headers={MSG_ID: ev.id},
            )
            good.append(ev.id)

        reply = msgspec.msgpack.decode((await sub.next_msg(timeout=30)).data, type=Reply)
        assert reply.event_id == waiting_id and reply.outcome is None
        assert reply.error is not None and "nested deeper than the limit of 64" in reply.error

        def decided() -> set[str]:
            # published without a reply subject: nobody waits, so `observed`
            return {o.event.id for o in iter_outcomes(data) if o.decided_by == "observed"}

        await until(lambda: set(good) <= decided())
        assert worker.poll() is None, worker.stderr.read().decode() if worker.stderr else ""
        policy = {o.event.id: o for o in iter_outcomes(data) if o.decided_by == "observed"}
        denied = sum(1 for i in good if policy[i].decision == "deny")
        assert denied == 5
        # nothing left to redeliver: every hostile message was terminated, not left pending
        await asyncio.sleep(3.0)  # longer than ack_wait: a poison message would be back
        info = await js.consumer_info(names.events_stream, names.worker_consumer)
        assert (info.num_ack_pending, info.num_pending, info.num_redelivered) == (0, 0, 0)
        assert worker.poll() is None
    finally:
        worker.send_signal(signal.SIGTERM)
        _, err = worker.communicate(timeout=30)
        await nc.close()
    assert worker.returncode == 0, err.decode()

    con = open_db(data)
    rows = con.execute(
        "SELECT id, stage, reason, size, sha256 FROM rejects ORDER BY seq"
    ).fetchall()
    by_digest = {hashlib.sha256(blob).hexdigest(): blob for blob in hostile.values()}
    assert len(rows) == len(hostile)
    for _id, stage, reason, size, digest in rows:
        assert stage == "worker" and reason
        assert len(by_digest[digest]) == size
    reasons = [r[2] for r in rows]
    assert sum("nested deeper than the limit of 64 levels" in r for r in reasons) == len(DEPTHS)
    assert any("duplicate key 'command'" in r for r in reasons)
    assert any("tool_input: expected a JSON object, got string" in r for r in reasons)
    assert any("columns disagree" in r for r in reasons)
    assert sum(r.startswith("undecodable event") for r in reasons) == len(garbage)
    n_kept = len(list((data / "rejects").glob("*.bin")))
    assert n_kept == len(hostile)
    decided_by = dict(
        con.execute("SELECT decided_by, count(*) FROM outcomes GROUP BY 1").fetchall()
    )
    assert decided_by == {"observed": 10, "rejected": len(hostile)}
    print(
        f"poison: {len(DEPTHS)} depths + {len(hostile) - len(DEPTHS)} other hostile messages, "
        f"worker alive, 10/10 later events decided ({denied} denied), "
        f"{len(rows)} rejects recorded with size and sha256, 0 redelivered, "
        f"waiting emitter told: {reply.error[:60]}..."
    )
