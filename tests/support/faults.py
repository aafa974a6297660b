"""Helpers of the worker fault tests: real worker processes, events published as emit does,
and the count every fault test prints (sent / logged / duplicated / lost)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.records import HookEvent, encode_msgpack, new_event
from ingest.log.reader import iter_outcomes
from ingest.nats import streams as ha_nats
from ingest.protocol import MSG_ID

REPO = Path(__file__).resolve().parents[2]
POLICY = REPO / "infra" / "policies" / "security.json"


def env() -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith("HOOKAUDIT_")}
    e["PYTHONPATH"] = str(REPO)
    return e


def pre_tool_use(i: int, command: str | None = None, pad: int = 0) -> dict[str, Any]:
    return {
        "hook_event_name": "PreToolUse",
        "session_id": f"s{i // 50}",
        "cwd": "/tmp/p",
        "tool_name": "Bash",
        "tool_input": {
            "command": command or f"ls -la dir{i}",
            **({"pad": "x" * pad} if pad else {}),
        },
        "tool_use_id": f"toolu_{i:08d}",
    }


def event(i: int, **kw: Any) -> HookEvent:
    return new_event(pre_tool_use(i, **kw), source="test", host="h1", user="u1")


async def publish(js: Any, names: ha_nats.Names, events: Iterable[HookEvent]) -> int:
    """Publish like `hookaudit emit` does (Nats-Msg-Id = event id), every PubAck awaited."""
    subject = ha_nats.event_subject(names, "PreToolUse")
    futs = [js.publish(subject, encode_msgpack(ev), headers={MSG_ID: ev.id}) for ev in events]
    await asyncio.gather(*futs)
    return len(futs)


class WorkerProc:
    """One `hookaudit worker` subprocess with its stderr in a file; start, kill, stop."""

    def __init__(self, data: Path, url: str, names: ha_nats.Names, name: str, *extra: str):
        self.argv = [
            sys.executable, "-m", "hookaudit", "worker", "--data-dir", str(data),
            "--nats", url, "--prefix", names.prefix, "--name", name,
            "--settings", f"project:{POLICY}", *extra,
        ]  # fmt: skip
        self.err_path = data.parent / f"{name}.stderr"
        self.proc: subprocess.Popen[bytes] | None = None
        self.kills = 0

    def start(self) -> None:
        with self.err_path.open("ab") as err:
            self.proc = subprocess.Popen(
                self.argv, cwd=REPO, env=env(), stdout=subprocess.DEVNULL, stderr=err
            )

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def sigkill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)
        self.kills += 1

    def stop(self) -> int:
        """SIGTERM (finish what is in hand) and wait; the exit code."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return int(self.proc.returncode or 0)

    def stderr(self) -> str:
        return self.err_path.read_text(errors="replace") if self.err_path.exists() else ""


def copies(data: Path) -> Counter[str]:
    """How many times each event id is in the log (all chains)."""
    return Counter(o.event.id for o in iter_outcomes(data) if o.replay_id is None)


async def wait_logged(data: Path, want: set[str], timeout: float) -> Counter[str]:
    """Poll the log until every id of `want` is in it, or `timeout` passes."""
    deadline = time.monotonic() + timeout
    seen: Counter[str] = Counter()
    while time.monotonic() < deadline:
        seen = copies(data)
        if want <= seen.keys():
            break
        await asyncio.sleep(0.25)
    return seen


@dataclass
class Tally:
    sent: int
    logged: int
    duplicated: int
    lost: int

    def line(self, what: str, extra: str = "") -> str:
        return (
            f"\n{what}: sent {self.sent} / logged {self.logged} / duplicated {self.duplicated} "
            f"/ lost {self.lost}" + (f"; {extra}" if extra else "")
        )


def tally(want: set[str], seen: Counter[str]) -> Tally:
    logged = len(want & seen.keys())
    return Tally(
        sent=len(want),
        logged=logged,
        duplicated=sum(c - 1 for c in seen.values() if c > 1),
        lost=len(want) - logged,
    )


def consumer_state(info: Any) -> dict[str, int]:
    return {
        "pending": int(info.num_pending),
        "ack_pending": int(info.num_ack_pending),
        "redelivered": int(info.num_redelivered),
    }


def dump(obj: object) -> str:
    return json.dumps(obj, default=str)


@dataclass
class Emitted:
    seconds: float
    code: int
    stdout: str
    stderr: str


async def emit(args: list[str], body: bytes, *, wait: bool, timeout: float = 60.0) -> Emitted:
    """Run one `hookaudit emit` process (with `--wait`: it waits for the worker's decision)."""
    extra = ["--wait", "--timeout", f"{timeout:g}", "--fail", "closed"] if wait else []
    t0 = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "hookaudit", "emit", *args, *extra,
        cwd=REPO, env=env(),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(proc.communicate(body), timeout + 60)
    assert proc.returncode is not None
    return Emitted(time.monotonic() - t0, proc.returncode, out.decode(), err.decode())


def decision(e: Emitted) -> str:
    """'deny: <reason>' for a PreToolUse deny on stdout, 'allow' for silence with exit 0."""
    if e.code == 0 and not e.stdout.strip():
        return "allow"
    try:
        hso = json.loads(e.stdout)["hookSpecificOutput"]
    except (ValueError, KeyError):
        return f"exit {e.code}: {e.stdout.strip()[:200]} {e.stderr.strip()[:300]}"
    return f"{hso['permissionDecision']}: {hso.get('permissionDecisionReason', '')}"


def quantile(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))] if s else 0.0
