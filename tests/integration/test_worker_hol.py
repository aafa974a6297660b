"""No head-of-line blocking in the worker (issue 16): a slow hook delays only its own event.

Real processes: the session nats-server, one `hookaudit worker`, and `hookaudit emit
--wait` processes standing for agents. The settings run one command hook on every
PreToolUse; it sleeps SLOW seconds when the command says "slow-please" and returns at
once otherwise. The slow event is sent first; the fast ones follow while its hook sleeps,
and all of their replies must arrive before the slow one's. The log then holds every
event exactly once on a chain that verifies.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from nats.aio.client import Client

from engine.records import payload_dict
from ingest.log.reader import iter_outcomes
from ingest.log.verifier import verify
from ingest.nats.streams import Names, provision

if TYPE_CHECKING:
    from tests.conftest import NatsServer

REPO = Path(__file__).resolve().parents[2]
SLOW = 8.0
FAST = 6


def pretool(command: str) -> bytes:
    return json.dumps(
        {
            "hook_event_name": "PreToolUse",
            "session_id": "hol",
            "cwd": "/tmp",
            "tool_name": "Bash",
            "tool_input": {"command": command},
        }
    ).encode()


async def emit_wait(args: list[str], body: bytes, t0: float) -> tuple[float, int, str]:
    """Run one `emit --wait`; (seconds from t0 until it exited, exit code, stdout)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOOKAUDIT_")}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "hookaudit",
        "emit",
        *args,
        "--wait",
        "--timeout",
        "20",
        "--fail",
        "closed",
        cwd=REPO,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = await proc.communicate(body)
    assert proc.returncode is not None
    return time.monotonic() - t0, proc.returncode, out.decode() + err.decode()


async def test_a_slow_hook_delays_only_its_own_event(
    nats_server: NatsServer, nc: Client, names: Names, tmp_path: Path
) -> None:
    await provision(nc.jetstream(), prefix=names.prefix)
    hook = {
        "type": "command",
        # The event JSON arrives on stdin; only the slow one sleeps.
        "command": f"if grep -q slow-please; then sleep {SLOW:g}; fi; exit 0",
        "timeout": 30,
    }
    settings = tmp_path / "settings.json"
    settings.write_text(json.dumps({"hooks": {"PreToolUse": [{"hooks": [hook]}]}}))
    data = tmp_path / "data"
    common = ["--data-dir", str(data), "--nats", nats_server.url, "--prefix", names.prefix]
    worker = subprocess.Popen(
        [sys.executable, "-m", "hookaudit", "worker", *common, "--settings",
         f"project:{settings}", "--batch", "64"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        # Warm up: the worker is consuming once a fast event is answered.
        _, code, text = await emit_wait(common, pretool("echo warm"), time.monotonic())
        assert code == 0, text
        t0 = time.monotonic()
        slow = asyncio.create_task(emit_wait(common, pretool("slow-please"), t0))
        await asyncio.sleep(0.5)  # the slow event is in the worker, its hook sleeping
        fast = await asyncio.gather(
            *(emit_wait(common, pretool(f"ls {i}"), t0) for i in range(FAST))
        )
        slow_done, slow_code, slow_text = await slow
    finally:
        worker.send_signal(signal.SIGTERM)
        _, err = worker.communicate(timeout=30)
    assert worker.returncode == 0, err.decode()
    assert slow_code == 0, slow_text
    for _, code, text in fast:
        assert code == 0, text
    fast_done = [d for d, _, _ in fast]
    assert max(fast_done) < slow_done, (fast_done, slow_done)
    assert slow_done >= SLOW  # the slow reply did wait for its hook
    commands = [
        payload_dict(o.event)["tool_input"]["command"]
        for o in iter_outcomes(data)
        if o.replay_id is None
    ]
    assert sorted(commands) == sorted(
        ["echo warm", "slow-please", *(f"ls {i}" for i in range(FAST))]
    )
    assert commands[-1] == "slow-please"  # chained when decided, after the fast ones
    report = verify(data)
    assert report.ok, report.to_dict()
    print(
        f"head-of-line: {FAST} fast emit --wait answered after "
        f"{min(fast_done):.2f}-{max(fast_done):.2f} s while a {SLOW:g} s hook ran; "
        f"the slow one after {slow_done:.2f} s; {len(commands)} outcomes logged once, "
        "chain verified"
    )
