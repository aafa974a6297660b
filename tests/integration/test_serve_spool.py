"""`hookaudit serve` spools what it answers by itself while NATS is down, and flushes it after.

Real processes: `nats up` (authenticated), a worker with python hooks, `hookaudit serve
--fail closed`, HTTP on loopback. With NATS down a PreToolUse is denied by the fallback;
that event (carrying the answer) is spooled, sent when NATS is back, and recorded as
`fallback` with the answer the agent got, beside the worker's policy records.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from ingest.log.reader import iter_outcomes
from tests.support.relay import REPO, Stack, env, pre_tool_use, write_settings

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    s = Stack(data=tmp_path / "data", settings=write_settings(tmp_path))
    s.nats_up()
    s.start_worker()
    try:
        s.wait_decided()
        yield s
    finally:
        s.stop()


def _post(url: str, body: bytes) -> bytes:
    req = urllib.request.Request(url, data=body, headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        assert resp.status == 200
        return bytes(resp.read())


def test_serve_spools_its_fallbacks_while_nats_is_down(stack: Stack) -> None:
    serve = subprocess.Popen(
        [sys.executable, "-m", "hookaudit", "serve", "--data-dir", str(stack.data),
         "--listen", "127.0.0.1:0", "--fail", "closed", "--timeout", "5"],
        cwd=REPO, env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        assert serve.stdout is not None
        line = serve.stdout.readline().decode()
        assert line.startswith("hookaudit serve: listening on"), line
        url = line.split()[-1]
        assert _post(url, pre_tool_use("ls up")) == b""  # the policy allows
        stack.nats_down()
        answer = json.loads(_post(url, pre_tool_use("ls down")))
        assert answer["hookSpecificOutput"]["permissionDecision"] == "deny"  # fails closed
        spool = stack.data / "spool" / "events.jsonl"
        deadline = time.monotonic() + 20
        while not (spool.exists() and spool.read_bytes().count(b"\n") == 1):
            assert time.monotonic() < deadline, "serve did not spool its answer"
            time.sleep(0.1)
        [spooled] = [json.loads(x) for x in spool.read_bytes().splitlines()]
        assert spooled["fallback"]["by"] == "serve" and spooled["fallback"]["blocked"] is True
        assert spooled["fallback"]["notice"] is False  # never published: the event itself
        stack.nats_up()  # serve reconnects and flushes; the worker records it
        deadline = time.monotonic() + 60
        while True:
            rows = [o for o in iter_outcomes(stack.data) if "ls down" in o.event.payload]
            if rows or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        [o] = rows
        assert (o.decided_by, o.blocked, o.decision) == ("fallback", True, "deny")
        assert any("policy decision not seen by the agent" in e for e in o.errors)
    finally:
        serve.terminate()
        serve.communicate(timeout=30)
    print("serve: NATS down -> fail-closed deny spooled with its answer, flushed, recorded")
