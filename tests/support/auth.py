"""Helpers of the security tests: hookaudit as subprocesses, a worker that can be waited for."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tests.support import workers

REPO = Path(__file__).resolve().parents[2]
POLICY = REPO / "infra" / "policies" / "security.json"
DENY_REASON = "piping a download into a shell is not allowed"


def env() -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith("HOOKAUDIT_")}
    e["PYTHONPATH"] = str(REPO)
    return e


def pre_tool_use(command: str) -> bytes:
    return json.dumps(
        {
            "hook_event_name": "PreToolUse",
            "session_id": "attack",
            "cwd": "/tmp",
            "tool_name": "Bash",
            "tool_input": {"command": command},
        }
    ).encode()


@dataclass
class Proc:
    code: int
    stdout: str
    stderr: str


async def hookaudit(
    *args: str, stdin: bytes = b"", timeout: float = 60.0, extra_env: dict[str, str] | None = None
) -> Proc:
    p = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "hookaudit",
        *args,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=REPO,
        env=env() | (extra_env or {}),
    )
    out, err = await asyncio.wait_for(p.communicate(stdin), timeout)
    assert p.returncode is not None
    return Proc(p.returncode, out.decode(), err.decode())


def decision(p: Proc) -> str:
    """'deny: <reason>' for a PreToolUse deny on stdout, 'allow' for silence with exit 0."""
    if p.code == 0 and not p.stdout.strip():
        return "allow"
    hso = json.loads(p.stdout)["hookSpecificOutput"]
    return f"{hso['permissionDecision']}: {hso.get('permissionDecisionReason', '')}"


def start_worker(data_dir: Path, *extra: str) -> subprocess.Popen[bytes]:
    """A worker on the data dir's embedded server with this suite's policy."""
    return workers.start_worker(
        data_dir, *extra, settings=[POLICY], batch=16, env=env(), stdout=subprocess.DEVNULL
    )


def stop(proc: subprocess.Popen[bytes]) -> str:
    """SIGTERM the process, wait, and return its stderr (whatever its exit code)."""
    return workers.stop(proc, check=False, timeout=20)
