"""``$CLAUDE_PROJECT_DIR`` on the worker path: what Claude Code gave the hook, not the cwd.

Claude Code gives its hooks the session's project directory in ``$CLAUDE_PROJECT_DIR``; a
hook input's `cwd` is wherever the session is now (a subdirectory, after a `cd`). A policy
whose command hook is ``"$CLAUDE_PROJECT_DIR"/.claude/hooks/deny.sh`` must find that script
when the worker runs it, or the deny it gives is lost (the hook exits 127, a non-blocking
error, and the call runs). emit, and the relay's fast path, record the variable on the event;
the worker's engine gives it to the hook. Real processes: `nats up`, a worker, a relay, emit.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from ingest.log.reader import iter_outcomes
from tests.support.relay import Stack
from tests.support.waiting import wait_for

pytestmark = pytest.mark.timeout(240)


def call(cwd: Path, use_id: str) -> bytes:
    return json.dumps({
        "hook_event_name": "PreToolUse", "session_id": "pd", "cwd": str(cwd),
        "transcript_path": "/t", "permission_mode": "default", "tool_name": "Bash",
        "tool_input": {"command": "ls"}, "tool_use_id": use_id,
    }).encode()  # fmt: skip


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A project whose hook script denies; a subdirectory with settings of its own."""
    proj = tmp_path / "proj"
    hooks = proj / ".claude" / "hooks"
    hooks.mkdir(parents=True)
    script = hooks / "deny.sh"
    script.write_text("#!/bin/sh\necho 'denied by the project hook' >&2\nexit 2\n")
    script.chmod(0o755)
    (proj / "sub" / ".claude").mkdir(parents=True)
    (proj / "sub" / ".claude" / "settings.json").write_text("{}")
    return proj


@pytest.fixture
def stack(tmp_path: Path, project: Path) -> Iterator[Stack]:
    policy = tmp_path / "policy.json"
    hook = {"type": "command", "command": '"$CLAUDE_PROJECT_DIR"/.claude/hooks/deny.sh'}
    policy.write_text(json.dumps({"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [hook]}]}}))
    s = Stack(data=tmp_path / "data", settings=policy)
    s.nats_up()
    s.start_worker()
    try:
        # until the worker answers (its first decision may wait for JetStream): the hook's
        # error (no script at the cwd) is the worker's answer
        wait_for(lambda: b"not found" in s.emit("--wait", "--timeout", "5",
                 stdin=call(tmp_path, "ping")).stderr, 60, "the worker's first answer")  # fmt: skip
        yield s
    finally:
        s.stop()


def _decide(stack: Stack, project: Path, use_id: str, **env: str) -> tuple[int, str]:
    p = stack.emit("--wait", "--timeout", "20", "--fail", "closed",
                   stdin=call(project / "sub", use_id), **env)  # fmt: skip
    out = p.stdout.decode()
    if p.returncode == 0 and out.strip():
        hso = json.loads(out)["hookSpecificOutput"]
        return 0, f"{hso['permissionDecision']}: {hso.get('permissionDecisionReason', '')}"
    return p.returncode, p.stderr.decode()


@pytest.mark.parametrize("via", ["emit", "relay"])
def test_the_hook_runs_in_the_project_claude_code_named(
    stack: Stack, project: Path, via: str
) -> None:
    if via == "relay":
        stack.start_relay()
    # from a subdirectory with its own settings, Claude Code names the session's project
    code, said = _decide(stack, project, f"{via}-1", CLAUDE_PROJECT_DIR=str(project))
    assert said == "deny: denied by the project hook", (code, said)
    # without it the worker can only go by the cwd: the script is not there (exit 127)
    code, said = _decide(stack, project, f"{via}-2")
    assert code == 0 and "denied" not in said, (code, said)
    # a value no path can be (a newline) is not trusted: the cwd again
    code, said = _decide(stack, project, f"{via}-3", CLAUDE_PROJECT_DIR=f"{project}\n/x")
    assert code == 0 and "denied" not in said, (code, said)
    stopped = stack.stop()
    stack.relay = stack.worker = None
    logged = {o.event.tool_use_id: o for o in iter_outcomes(stack.data)}
    first = logged[f"{via}-1"]
    assert first.event.project_dir == str(project) and first.blocked, stopped
    runs = first.runs
    assert runs and runs[0].exit_code == 2, runs
    second = logged[f"{via}-2"]
    assert second.event.project_dir is None and not second.blocked
    assert second.runs[0].exit_code == 127, second.runs
