"""One driver: the same events through every entry point give the same decisions.

The entry points are the worker (events published on a real nats-server), `hookaudit eval`
(a subprocess per event), `hookaudit serve` (HTTP in, the worker answers through NATS)
and `hookaudit replay` (the log those wrote, re-evaluated with the same settings, hooks
run again rather than reused). They all evaluate through `engine.run.Engine`; a decision
that differs between two of them is a driver that drifted.

The `once` test is the drift this suite was written for: a skill's ``once`` hook recorded
by a worker, replayed with the same settings, used to report changes (``--exec deny``: not
evaluated) because replay did not keep the session's ``once`` state.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
from nats.aio.client import Client

from engine.records import Outcome, encode_msgpack, new_event, uuid7
from ingest.log.reader import iter_outcomes
from ingest.nats import streams as ha_nats
from ingest.protocol import MSG_ID
from replay.answers import Policy
from replay.jobs import replay
from replay.request import Request
from tests.support.workers import clean_env as env
from tests.support.workers import start_worker, stop

HOOKS_PY = """
def guard(event):
    cmd = str((event.get("tool_input") or {}).get("command", ""))
    if cmd.startswith("rm -rf"):
        return {"hookSpecificOutput": {"hookEventName": "PreToolUse",
                "permissionDecision": "deny", "permissionDecisionReason": "no rm -rf"}}
    if cmd.startswith("cat "):
        return {"hookSpecificOutput": {"hookEventName": "PreToolUse",
                "permissionDecision": "ask", "permissionDecisionReason": "a human reads"}}
    return None
"""

# A command hook that blocks `curl` with exit 2, and adds context to every prompt.
COMMAND = (
    "read -r line; case \"$line\" in *curl*) echo 'no network' >&2; exit 2;; esac; "
    "case \"$line\" in *UserPromptSubmit*) echo 'policy v2';; esac; exit 0"
)

PAYLOADS: list[dict[str, Any]] = [
    {"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {"command": "ls"}},
    {"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {"command": "rm -rf /"}},
    {"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {"command": "cat a"}},
    {"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {"command": "curl x"}},
    {"hook_event_name": "UserPromptSubmit", "prompt": "deploy"},
    {"hook_event_name": "Stop", "stop_hook_active": False},
]


def write_settings(root: Path) -> Path:
    (root / "hooks.py").write_text(HOOKS_PY)
    doc = {
        "hooks": {
            "PreToolUse": [
                {
                    "matcher": "Bash",
                    "hooks": [
                        {"type": "python", "callable": "hooks.py:guard"},
                        {"type": "command", "command": COMMAND},
                    ],
                }
            ],
            "UserPromptSubmit": [{"hooks": [{"type": "command", "command": COMMAND}]}],
        }
    }
    path = root / "settings.json"
    path.write_text(json.dumps(doc))
    return path


def full(payload: dict[str, Any], session: str, root: Path) -> dict[str, Any]:
    return {**payload, "session_id": session, "cwd": str(root), "transcript_path": "/t"}


def logged(data: Path) -> dict[str, Outcome]:
    return {o.event.id: o for o in iter_outcomes(data) if o.replay_id is None}


async def wait_logged(data: Path, ids: list[str], timeout: float = 60.0) -> dict[str, Outcome]:
    deadline = time.monotonic() + timeout
    while True:
        got = logged(data) if (data / "log").exists() else {}
        if all(i in got for i in ids):
            return got
        assert time.monotonic() < deadline, f"{len(got)} of {len(ids)} outcomes logged"
        await asyncio.sleep(0.05)


async def publish(nc: Client, names: ha_nats.Names, payload: dict[str, Any]) -> str:
    ev = new_event(payload, source="test", host="h1", user="u1")
    await nc.jetstream().publish(
        ha_nats.event_subject(names, ev.event), encode_msgpack(ev), headers={MSG_ID: ev.id}
    )
    return ev.id


def decision(o: Outcome) -> tuple[Any, ...]:
    """What every entry point must agree on."""
    runs = tuple((r.hook.type, r.outcome, r.exit_code) for r in o.runs)
    return (
        o.event.event, o.blocked, o.decision, o.reason, tuple(o.additional_context),
        o.continue_, o.posture, o.profile, runs,
    )  # fmt: skip


def eval_decision(doc: dict[str, Any]) -> tuple[Any, ...]:
    runs = tuple((h["type"], h["outcome"], h["exit_code"]) for h in doc["hooks"])
    return (
        doc["event"], doc["blocked"], doc["decision"], doc["reason"],
        tuple(doc["additional_context"]), doc["continue"], doc["posture"], doc["profile"], runs,
    )  # fmt: skip


def replay_report(data: Path, settings: tuple[tuple[str, str], ...], **policy: Any) -> Any:
    req = Request(
        str(data), settings, uuid7(), policy=Policy(store="none", **policy), project_dir=None
    )
    return replay(req, max_rows=100).report


async def test_every_entry_point_gives_the_same_decisions(
    nats_server: Any, nc: Client, names: ha_nats.Names, tmp_path: Path
) -> None:
    settings = write_settings(tmp_path)
    data = tmp_path / "data"
    await ha_nats.provision(nc.jetstream(), prefix=names.prefix)
    worker = start_worker(
        data, nats=nats_server.url, prefix=names.prefix, settings=[settings], batch=8
    )
    serve = subprocess.Popen(
        [sys.executable, "-m", "hookaudit", "serve", "--nats", nats_server.url,
         "--prefix", names.prefix, "--listen", "127.0.0.1:0", "--timeout", "30"],
        env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        # 1. the worker, events published on NATS
        by_nats = [await publish(nc, names, full(p, "nats", tmp_path)) for p in PAYLOADS]
        # 2. serve: HTTP in, the worker answers
        assert serve.stdout is not None
        line = (await asyncio.to_thread(serve.stdout.readline)).decode()
        assert line.startswith("hookaudit serve: listening on "), line
        url = line.split()[-1]
        bodies: list[dict[str, Any]] = []
        served: list[str] = []
        async with httpx.AsyncClient(timeout=30) as client:
            for p in PAYLOADS:
                r = await client.post(url, json=full(p, "http", tmp_path))
                assert r.status_code == 200, r.text
                served.append(r.headers["x-hookaudit-event-id"])
                bodies.append(r.json() if r.content else {})
        outcomes = await wait_logged(data, by_nats + served)
    finally:
        serve.send_signal(signal.SIGTERM)
        serve.communicate(timeout=30)
        stop(worker)
    from_worker = [decision(outcomes[i]) for i in by_nats]
    from_serve = [decision(outcomes[i]) for i in served]
    assert from_serve == from_worker
    # the http bodies say what the logged outcomes say
    pre = [b.get("hookSpecificOutput", {}) for b in bodies[:4]]
    assert [h.get("permissionDecision") for h in pre] == [None, "deny", "ask", "deny"]
    assert [o[3] for o in from_worker[:4]] == [None, "no rm -rf", "a human reads", "no network"]
    assert "policy v2" in json.dumps(bodies[4])

    # 3. eval, one subprocess per event
    from_eval = []
    for p in PAYLOADS:
        done = subprocess.run(
            [sys.executable, "-m", "hookaudit", "eval", "--settings", f"project:{settings}",
             "--format", "json"],
            input=json.dumps(full(p, "eval", tmp_path)).encode(), env=env(),
            capture_output=True, timeout=60, cwd=tmp_path,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr.decode()
        from_eval.append(eval_decision(json.loads(done.stdout)))
    assert from_eval == from_worker

    # 4. replay of that log, same settings: every hook run again, nothing changes
    spec = (("project", str(settings)),)
    for policy in ({"reuse": "none", "exec": "allow"}, {}):
        report = await asyncio.to_thread(replay_report, data, spec, **policy)
        assert report["selected"] == 2 * len(PAYLOADS), report
        assert (report["not_evaluated"], report["changed"]) == (0, 0), report["changes"]


async def test_skill_once_hook_recorded_by_a_worker_replays_unchanged(
    nats_server: Any, nc: Client, names: ha_nats.Names, tmp_path: Path
) -> None:
    counter = tmp_path / "count"
    skill = tmp_path / "skill.json"
    once = {"type": "command", "command": f"echo x >> {counter}", "once": True}
    skill.write_text(json.dumps({"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [once]}]}}))
    data = tmp_path / "data"
    await ha_nats.provision(nc.jetstream(), prefix=names.prefix)
    worker = start_worker(
        data, nats=nats_server.url, prefix=names.prefix, settings=[f"skill:{skill}"], batch=8
    )
    ids: list[str] = []
    try:
        for session in ("a", "a", "a", "b", "b"):  # one at a time: the once state is settled
            ids.append(await publish(nc, names, full(PAYLOADS[0], session, tmp_path)))
            await wait_logged(data, ids)
    finally:
        stop(worker)
    assert counter.read_text().count("x") == 2  # once per session
    recorded = logged(data)
    assert [len(recorded[i].runs) for i in ids] == [1, 0, 0, 1, 0]
    spec = (("skill", str(skill)),)
    for policy in ({"exec": "deny"}, {}):
        report = await asyncio.to_thread(replay_report, data, spec, **policy)
        assert (report["selected"], report["not_evaluated"]) == (5, 0), report
        assert report["changed"] == 0, report["changes"]
        assert report["hooks"] == {"reused": 2, "executed": 0, "not_evaluated": 0}
    assert counter.read_text().count("x") == 2  # replay reused the answers: nothing ran
