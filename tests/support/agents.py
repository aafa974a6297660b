"""The real agents under test: where their pinned binaries are, the loopback model they
talk to, and a hookaudit deployment (embedded NATS, a worker with one policy) they are
wired to with `hookaudit wire`."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.relay import REPO, Stack, env, hookaudit

HERE = Path(__file__).resolve().parents[1] / "agents"
BINARIES = {
    "codex": "codex",
    "gemini_cli": "gemini",
    "copilot_cli": "copilot",
    "qwen_code": "qwen",
    "opencode": "opencode",
    "cline": "cline",
}

#: The policy every agent is held to: one Claude Code settings file.
POLICY = """
def guard(event):
    cmd = str((event.get("tool_input") or {}).get("command", ""))
    if event.get("hook_event_name") == "PermissionRequest":  # asked before running: the
        no = "hookaudit-denied" in cmd or "hookaudit-unsandboxed" in cmd  # policy answers it
        decision = {"behavior": "deny" if no else "allow"}
        if no:
            decision["message"] = "policy: not outside the sandbox"
        return {"hookSpecificOutput": {"hookEventName": "PermissionRequest", "decision": decision}}
    if "hookaudit-denied" in cmd:
        return {"hookSpecificOutput": {"hookEventName": "PreToolUse",
                "permissionDecision": "deny", "permissionDecisionReason": "policy: no hookaudit-denied"}}
    if "hookaudit-rewrite-me" in cmd:
        ti = dict(event["tool_input"])
        ti["command"] = cmd.replace("hookaudit-rewrite-me", "hookaudit-rewritten")
        return {"hookSpecificOutput": {"hookEventName": "PreToolUse", "updatedInput": ti}}
    return None
"""


def binary(agent: str) -> Path:
    """The pinned binary (tests/agents/install.sh, run by install.sh)."""
    path = HERE / ".npm" / agent / "node_modules" / ".bin" / BINARIES[agent]
    assert path.exists(), f"{path} missing: run tests/agents/install.sh"
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Model:
    """The loopback model: its port and the requests it got."""

    port: int
    log: Path
    proc: subprocess.Popen[bytes]

    def requests(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines() if line]

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


def start_model(root: Path, command: str) -> Model:
    port = free_port()
    log = root / "model.jsonl"
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "mockmodel.py"), str(port)],
        env={**os.environ, "MOCK_LOG": str(log), "MOCK_CMD": command},
        stdout=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
    return Model(port, log, proc)


def deployment(root: Path) -> Iterator[Stack]:
    """NATS and a worker holding the policy, on a fresh data dir; stopped after."""
    (root / "policy").mkdir()
    (root / "policy" / "agentpolicy.py").write_text(POLICY)
    settings = root / "policy" / "settings.json"
    guard = [{"matcher": "*", "hooks": [{"type": "python", "callable": "agentpolicy.py:guard"}]}]
    settings.write_text(json.dumps({"hooks": {"PreToolUse": guard, "PermissionRequest": guard}}))
    stack = Stack(data=root / "data", settings=settings)
    stack.nats_up()
    stack.start_worker()
    try:
        stack.wait_decided()
        stack.start_relay()  # the agents' hooks reach hookaudit through its unix socket
        yield stack
    finally:
        stack.stop()


def wire(agent: str, data: Path, home: Path) -> None:
    p = hookaudit("wire", agent, "--data-dir", str(data), "--home", str(home))
    assert p.returncode == 0, p.stderr.decode()


def outcomes(data: Path, agent: str) -> list[dict[str, Any]]:
    return sql(data,
        f"SELECT event, agent, agent_tool, tool_name, tool_use_id, blocked, decision, reason, "
        f"decided_by FROM outcomes WHERE agent = '{agent}' ORDER BY ts",
    )  # fmt: skip


def sql(data: Path, query: str) -> list[dict[str, Any]]:
    """The rows `hookaudit sql` gives for `query` over data dir `data`."""
    p = hookaudit("sql", "--data-dir", str(data), "--format", "json", query)
    assert p.returncode == 0, p.stderr.decode()
    rows: list[dict[str, Any]] = json.loads(p.stdout)
    return rows


def agent_env(home: Path, **extra: str) -> dict[str, str]:
    e = env(HOME=str(home), **extra)
    e.pop("PYTHONPATH", None)  # the hook runs the installed hookaudit, as a user's would
    return e


__all__ = ["REPO", "agent_env", "binary", "deployment", "outcomes", "sql", "start_model", "wire"]
