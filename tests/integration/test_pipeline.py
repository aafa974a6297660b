"""End to end: real nats-server, real worker processes, the real log.

N events in → N outcomes exactly once, a verified chain; a worker SIGKILLed
mid-batch and restarted loses nothing and duplicates nothing.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from nats.aio.client import Client

from engine.records import encode_msgpack, new_event
from ingest.log.reader import iter_outcomes
from ingest.log.verifier import verify
from ingest.nats import streams as ha_nats
from ingest.protocol import MSG_ID
from ingest.samples import sessions
from tests.support.waiting import until
from tests.support.workers import start_worker, stop

SLOW_HOOKS = """
import time

def slow(event):
    time.sleep(0.004)
    if "rm -rf /" in str((event.get("tool_input") or {}).get("command", "")):
        return {"hookSpecificOutput": {"hookEventName": "PreToolUse",
                "permissionDecision": "deny", "permissionDecisionReason": "no"}}
    return None
"""


def write_settings(tmp: Path) -> Path:
    (tmp / "hooks.py").write_text(SLOW_HOOKS)
    doc = {
        "hooks": {
            "PreToolUse": [
                {"matcher": "Bash", "hooks": [{"type": "python", "callable": "hooks.py:slow"}]}
            ]
        }
    }
    path = tmp / "settings.json"
    path.write_text(json.dumps(doc))
    return path


async def publish(nc: Client, names: ha_nats.Names, n_sessions: int) -> list[str]:
    js = nc.jetstream()
    # a short ack wait so the killed worker's batch is redelivered within the test
    await ha_nats.provision(js, prefix=names.prefix, ack_wait=2.0)
    ids = []
    for raw in sessions(n_sessions, seed=3):
        user, host = raw.pop("_user"), raw.pop("_host")
        ev = new_event(raw, source="test", host=host, user=user)
        await js.publish(
            ha_nats.event_subject(names, ev.event), encode_msgpack(ev), headers={MSG_ID: ev.id}
        )
        ids.append(ev.id)
    return ids


def logged_ids(data: Path) -> list[str]:
    return [o.event.id for o in iter_outcomes(data) if o.replay_id is None]


async def test_n_events_give_n_outcomes_exactly_once(
    nats_server: Any, nc: Client, names: ha_nats.Names, tmp_path: Path
) -> None:
    settings = write_settings(tmp_path)
    where = dict(nats=nats_server.url, prefix=names.prefix, settings=[settings], batch=32)
    data = tmp_path / "data"
    ids = await publish(nc, names, 6)
    worker = start_worker(data, **where)
    try:
        await until(lambda: len(logged_ids(data)) >= len(ids))
    finally:
        summary = json.loads(stop(worker).strip().splitlines()[-1])
    got = logged_ids(data)
    assert sorted(got) == sorted(ids)
    assert summary["events"] == len(ids) and summary["duplicates"] == 0
    report = verify(data)
    assert report.ok, report.first_error
    assert report.records == len(ids)
    # every outcome was also published on the outcomes stream
    info = await nc.jetstream().stream_info(names.outcomes_stream)
    assert info.state.messages == len(ids)


async def test_two_workers_share_the_consumer(
    nats_server: Any, nc: Client, names: ha_nats.Names, tmp_path: Path
) -> None:
    settings = write_settings(tmp_path)
    where = dict(nats=nats_server.url, prefix=names.prefix, settings=[settings], batch=32)
    data = tmp_path / "data"
    ids = await publish(nc, names, 8)
    workers = [start_worker(data, **where) for _ in range(2)]
    try:
        await until(lambda: len(logged_ids(data)) >= len(ids))
    finally:
        for w in workers:
            stop(w)
    assert sorted(logged_ids(data)) == sorted(ids)
    report = verify(data)
    assert report.ok and len(report.workers) == 2, report.to_dict()


@pytest.mark.slow
async def test_worker_sigkill_mid_batch_loses_and_duplicates_nothing(
    nats_server: Any, nc: Client, names: ha_nats.Names, tmp_path: Path
) -> None:
    settings = write_settings(tmp_path)
    where = dict(nats=nats_server.url, prefix=names.prefix, settings=[settings], batch=32)
    data = tmp_path / "data"
    ids = await publish(nc, names, 12)
    worker = start_worker(data, "--name", "w1", **where)
    await until(lambda: len(logged_ids(data)) >= 40)
    os.kill(worker.pid, signal.SIGKILL)
    worker.communicate(timeout=10)
    half = len(logged_ids(data))
    assert 0 < half < len(ids)
    restarted = start_worker(data, "--name", "w1", **where)
    try:
        await until(lambda: len(set(logged_ids(data))) >= len(ids))
        await asyncio.sleep(0.5)  # let any redelivery of the killed batch arrive
    finally:
        stop(restarted)
    got = logged_ids(data)
    assert sorted(got) == sorted(ids), "each event exactly once"
    report = verify(data)
    assert report.ok, report.first_error


def test_verify_cli_names_the_edited_record(tmp_path: Path) -> None:
    from engine.records import Outcome
    from ingest.log.writer import LogWriter

    data = tmp_path / "data"
    with LogWriter.open(data, "w1") as w:
        w.append_batch(
            [
                Outcome(
                    event=new_event({"hook_event_name": "Stop", "session_id": f"s{i}"}),
                    settings_id="x",
                )
                for i in range(3)
            ]
        )
    ok = subprocess.run(
        [sys.executable, "-m", "hookaudit", "verify", "--data-dir", str(data)],
        capture_output=True,
        text=True,
    )
    assert ok.returncode == 0 and ok.stdout.startswith("ok: 3 records")
    seg = next((data / "log" / "active" / "w1").glob("*.jsonl"))
    lines = seg.read_bytes().splitlines(keepends=True)
    lines[1] = lines[1].replace(b'"settings_id":"x"', b'"settings_id":"y"')
    seg.write_bytes(b"".join(lines))
    bad = subprocess.run(
        [sys.executable, "-m", "hookaudit", "verify", "--data-dir", str(data)],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 1
    assert "00000001.jsonl:2" in bad.stderr and "record seq 2" in bad.stderr


async def test_sighup_reloads_settings(
    nats_server: Any, nc: Client, names: ha_nats.Names, tmp_path: Path
) -> None:
    settings = write_settings(tmp_path)
    where = dict(nats=nats_server.url, prefix=names.prefix, settings=[settings], batch=32)
    data = tmp_path / "data"
    first = await publish(nc, names, 1)
    worker = start_worker(data, **where)
    try:
        await until(lambda: len(logged_ids(data)) >= len(first))
        before = {o.settings_id for o in iter_outcomes(data)}
        doc = json.loads(settings.read_text())
        doc["hooks"]["Stop"] = [{"hooks": [{"type": "python", "callable": "hooks.py:slow"}]}]
        settings.write_text(json.dumps(doc))
        worker.send_signal(signal.SIGHUP)
        await asyncio.sleep(1.0)
        js = nc.jetstream()
        ev = new_event({"hook_event_name": "Stop", "session_id": "after"}, source="test")
        await js.publish(
            ha_nats.event_subject(names, "Stop"), encode_msgpack(ev), headers={MSG_ID: ev.id}
        )
        await until(lambda: ev.id in logged_ids(data))
    finally:
        stop(worker)
    after = {o.settings_id for o in iter_outcomes(data) if o.event.id == ev.id}
    assert len(before) == 1 and len(after) == 1 and after != before


async def test_idle_worker_seals_an_aged_segment(
    nats_server: Any, nc: Client, names: ha_nats.Names, tmp_path: Path
) -> None:
    settings = write_settings(tmp_path)
    where = dict(nats=nats_server.url, prefix=names.prefix, settings=[settings], batch=32)
    data = tmp_path / "data"
    ids = await publish(nc, names, 1)
    worker = start_worker(data, "--max-segment-age", "1", **where)
    try:
        await until(lambda: len(logged_ids(data)) >= len(ids))
        await until(lambda: any((data / "log" / "sealed").rglob("*.parquet")), timeout=20)
    finally:
        stop(worker)
    assert sorted(logged_ids(data)) == sorted(ids)
    report = verify(data)
    assert report.ok, report.first_error
