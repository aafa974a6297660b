"""Codex CLI's PermissionRequest, against the real binary in its terminal UI.

Codex asks for approval, and raises PermissionRequest, only interactively (`codex exec`
never asks). So the pinned binary runs on a pseudo-terminal (`netns_tty.py`), in a network
namespace with loopback only, with approvals on request and a read-only sandbox; the
loopback model asks to run its command outside the sandbox (`require_escalated`), which
needs an approval. The policy (tests/support/agents.py) answers the PermissionRequest: an
allow runs the command with nobody asked, a deny does not run it and the model is told why.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.agents.runners import PROMPT, Model, _codex, _responses_results
from tests.support.agents import HERE, agent_env, binary, deployment, free_port, outcomes, wire
from tests.support.relay import Stack
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    yield from deployment(tmp_path)


def _drive(root: Path, data: Path, command: str) -> tuple[str, list[str]]:
    """Codex's terminal UI asked to run `command`, until its turn ends: (what it drew,
    the tool results it sent to the model)."""
    home, work = root / "home", root / "work"
    for d in (home, work):
        d.mkdir(exist_ok=True)
    wire("codex", data, home)
    model = Model(free_port())
    _, env = _codex(home, work, model)  # its config: the loopback model
    argv = [str(binary("codex")), "--dangerously-bypass-hook-trust", "--no-alt-screen",
            "-a", "on-request", "-s", "read-only", PROMPT]  # fmt: skip
    log, screen = root / "model.jsonl", root / "screen.bin"
    p = subprocess.run(
        ["unshare", "-n", sys.executable, str(HERE / "netns_tty.py"), str(model.port), str(log),
         command, str(screen), "Worked for", "120", "--", *argv],
        cwd=work, env=agent_env(home, **env, MOCK_ESCALATE="1"), capture_output=True,
        text=True, timeout=240,
    )  # fmt: skip
    drawn = re.sub(
        r"\x1b(\[[0-9;?<>=]*[a-zA-Z]|\][^\x07]*\x07)",
        "",
        screen.read_bytes().decode(errors="replace"),
    )
    assert p.returncode == 0, (p.stderr[-2000:], drawn[-3000:])
    requests = [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []
    return drawn, _responses_results(requests)


def _asked(data: Path) -> list[tuple[str | None, bool]]:
    rows = outcomes(data, "codex")
    return [(x["decision"], x["blocked"]) for x in rows if x["event"] == "PermissionRequest"]


def test_a_permission_the_policy_grants_runs_without_asking(tmp_path: Path, stack: Stack) -> None:
    marker = tmp_path / "ran"
    drawn, results = _drive(tmp_path, stack.data, f"touch {marker}")
    assert marker.exists(), (drawn[-3000:], results)
    wait_for(lambda: _asked(stack.data) == [("allow", False)], 30,
             f"the PermissionRequest recorded as allowed: {_asked(stack.data)}")  # fmt: skip


def test_a_permission_the_policy_refuses_does_not_run(tmp_path: Path, stack: Stack) -> None:
    """The command passes PreToolUse (the policy denies it only outside the sandbox), and
    is refused at PermissionRequest: exit 2 with the reason, which Codex gives the model."""
    marker = tmp_path / "ran"
    drawn, results = _drive(tmp_path, stack.data, f"touch {marker}; echo hookaudit-unsandboxed")
    assert not marker.exists(), (drawn[-3000:], results)
    assert any("policy: not outside the sandbox" in r for r in results), (drawn[-3000:], results)
    rows = outcomes(stack.data, "codex")
    pre = [(x["blocked"]) for x in rows if x["event"] == "PreToolUse"]
    assert pre == [False] and _asked(stack.data) == [("deny", True)], rows
