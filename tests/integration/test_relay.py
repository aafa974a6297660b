"""`hookaudit emit` through `hookaudit relay`: the same answer, byte for byte, and the spool.

Real processes: `nats up` (authenticated embedded server), a worker with python hooks, a
relay, and `python -m hookaudit emit` processes (the console script's own entry).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from ingest.log.reader import iter_outcomes
from tests.support.relay import Stack, pre_tool_use, prompt, write_settings

pytestmark = pytest.mark.timeout(240)

CASES = {
    "deny": pre_tool_use("rm -rf /"),
    "allow": pre_tool_use("ls -la"),
    "block prompt": prompt("here is my secret"),
    "prompt ok": prompt("hello"),
    "stop": b'{"hook_event_name": "Stop", "session_id": "relay"}',
    "bad input": b'{"hook_event_name": "PreToolUse", "a": 1, "a": 2}',
}


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    s = Stack(data=tmp_path / "data", settings=write_settings(tmp_path))
    s.nats_up()
    s.start_worker()
    try:
        yield s
    finally:
        s.stop()


def test_relay_answers_byte_for_byte_as_emit(stack: Stack) -> None:
    stack.wait_decided()
    direct: dict[str, tuple[int, bytes, bytes]] = {}
    for name, event in CASES.items():
        for mode in ("open", "closed"):
            p = stack.emit("--wait", "--fail", mode, stdin=event, HOOKAUDIT_RELAY="off")
            direct[f"{name}/{mode}"] = (p.returncode, p.stdout, p.stderr)
    relay = stack.start_relay()
    relayed: dict[str, tuple[int, bytes, bytes]] = {}
    for name, event in CASES.items():
        for mode in ("open", "closed"):
            p = stack.emit("--wait", "--fail", mode, stdin=event)
            relayed[f"{name}/{mode}"] = (p.returncode, p.stdout, p.stderr)
    # observe mode: published, silent
    p = stack.emit(stdin=pre_tool_use("rm -rf / observed"))
    assert (p.returncode, p.stdout, p.stderr) == (0, b"", b"")
    relay.terminate()
    _, err = relay.communicate(timeout=20)
    stack.relay = None
    log = err.decode()
    # the rejected input's answer names the file it was kept in: compare it without that
    for key in ("bad input/open", "bad input/closed"):
        for answers in (direct, relayed):
            code, out, err_b = answers[key]
            answers[key] = (code, out, err_b.split(b"; input kept in ")[0])
    assert relayed == direct, {
        k: (direct[k], relayed[k]) for k in direct if direct[k] != relayed[k]
    }
    assert (
        direct["deny/closed"][0] == 0 and b'"permissionDecision":"deny"' in direct["deny/closed"][1]
    )
    assert b"no secrets" in direct["block prompt/open"][1] + direct["block prompt/open"][2]
    assert direct["bad input/closed"][0] == 2
    assert log.count("relayed for pid") == len(relayed) + 1, log
    deadline = time.monotonic() + 30
    while True:
        observed = [o for o in iter_outcomes(stack.data) if "rm -rf / observed" in o.event.payload]
        if observed or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    [o] = observed
    assert (o.decided_by, o.decision) == ("observed", "deny")
    print(f"relay: {len(relayed)} answers identical to direct emit, observe-mode event recorded")


def test_relay_spools_while_nats_is_down_and_flushes_after(stack: Stack) -> None:
    stack.wait_decided()
    stack.start_relay()
    stack.nats_down()
    p = stack.emit("--wait", "--fail", "closed", stdin=pre_tool_use("ls while down"))
    assert p.returncode == 0 and b'"permissionDecision":"deny"' in p.stdout, p.stderr
    assert b"event spooled" in p.stderr
    p = stack.emit(stdin=pre_tool_use("rm -rf / while down"))
    assert (p.returncode, p.stdout) == (0, b""), p.stderr
    spooled = (stack.data / "spool" / "events.jsonl").read_bytes().count(b"\n")
    assert spooled == 2
    stack.nats_up()  # the relay reconnects and flushes; the worker records both
    deadline = time.monotonic() + 60
    while True:
        rows = {
            o.event.payload.split('"command": "')[1].split('"')[0]: o
            for o in iter_outcomes(stack.data)
            if "while down" in o.event.payload
        }
        if len(rows) == 2 or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert rows["ls while down"].decided_by == "fallback" and rows["ls while down"].blocked
    assert rows["rm -rf / while down"].decided_by == "observed"
    print("relay: NATS down -> 2 events spooled (closed deny answered), flushed and recorded")
