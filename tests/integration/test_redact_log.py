"""`hookaudit worker --redact-log`: the log stores secrets as the siem's HMAC tokens."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from nats.aio.client import Client

from engine.records import encode_msgpack, new_event
from ingest.log.reader import iter_outcomes
from ingest.log.verifier import verify
from ingest.nats import streams as ha_nats
from ingest.protocol import MSG_ID
from tests.support.waiting import until
from tests.support.workers import start_worker, stop

HOOKS = """
def deny(event):
    cmd = (event.get("tool_input") or {}).get("command", "")
    return {"hookSpecificOutput": {"hookEventName": "PreToolUse",
            "permissionDecision": "deny", "permissionDecisionReason": "saw " + cmd}}
"""
SECRET = "AKIAIOSFODNN7EXAMPLE"


async def test_worker_redacts_what_the_log_stores(
    nats_server: Any, nc: Client, names: ha_nats.Names, tmp_path: Path
) -> None:
    (tmp_path / "hooks.py").write_text(HOOKS)
    settings = tmp_path / "settings.json"
    hook = {"type": "python", "callable": "hooks.py:deny"}
    settings.write_text(json.dumps({"hooks": {"PreToolUse": [{"hooks": [hook]}]}}))
    js = nc.jetstream()
    await ha_nats.provision(js, prefix=names.prefix)
    ids = []
    for cmd in (f"aws --key {SECRET} s3 ls", f"echo {SECRET}", "TKT-123456 ls"):
        payload = {"hook_event_name": "PreToolUse", "session_id": "s", "tool_name": "Bash"}
        ev = new_event({**payload, "tool_input": {"command": cmd}}, host="h", user="u")
        await js.publish(
            ha_nats.event_subject(names, ev.event), encode_msgpack(ev), headers={MSG_ID: ev.id}
        )
        ids.append(ev.id)
    data = tmp_path / "data"
    worker = start_worker(
        data,
        "--redact-log",
        "--redact-log-pattern",
        "ticket=TKT-[0-9]{6}",
        nats=nats_server.url,
        prefix=names.prefix,
        settings=[settings],
        batch=32,
    )
    try:
        await until(lambda: len(list(iter_outcomes(data))) >= 3)
    finally:
        stop(worker)
    stored = {o.event.id: o for o in iter_outcomes(data)}
    assert set(stored) == set(ids)
    tokens = []
    for o in stored.values():
        text = o.event.payload + (o.reason or "") + json.dumps(o.specific)
        assert SECRET not in text and "TKT-123456" not in text, text
        assert o.decision == "deny" and o.reason and o.reason.startswith("saw ")
        tokens += re.findall(r"\[REDACTED:aws_access_key:[0-9a-f]{16}\]", o.event.payload)
    assert len(tokens) == 2 and len(set(tokens)) == 1  # the same secret, the same token
    assert "[REDACTED:ticket:" in stored[ids[2]].event.payload
    assert verify(data).ok  # the chain is over what is stored
