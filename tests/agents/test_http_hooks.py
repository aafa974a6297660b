"""An agent's http hooks answered by `hookaudit serve` (`?agent=`), against the real binary.

Qwen Code has http hooks that take Claude Code's answers. The agent, the model and a whole
deployment (NATS, a worker with the one policy, serve with `--fail closed`) run in one
network namespace with loopback only (`netns_stack.py`); the agent's PreToolUse goes to
`http://127.0.0.1:PORT/hooks?agent=qwen_code`. A denied command does not run and the model
is told the policy's reason; an allowed one runs; each call is recorded as Qwen Code's. A
hook whose URL names an agent serve does not answer is blocked (an error status would let
the call run).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.agents.runners import Model, _chat_results, _qwen
from tests.support.agents import HERE, POLICY, agent_env, free_port, outcomes

pytestmark = pytest.mark.slow


def _policy(root: Path) -> Path:
    (root / "policy").mkdir()
    (root / "policy" / "agentpolicy.py").write_text(POLICY)
    settings = root / "policy" / "settings.json"
    settings.write_text(json.dumps({"hooks": {"PreToolUse": [
        {"matcher": "*", "hooks": [{"type": "python", "callable": "agentpolicy.py:guard"}]}]}}))  # fmt: skip
    return settings


def _run(
    root: Path, command: str, agent: str = "qwen_code"
) -> tuple[subprocess.CompletedProcess[str], list[str], Path]:
    data, home, work = root / "data", root / "home", root / "work"
    for d in (home / ".qwen", work):
        d.mkdir(parents=True)
    serve_port, model = free_port(), Model(free_port())
    hook = {"type": "http", "url": f"http://127.0.0.1:{serve_port}/hooks?agent={agent}",
            "timeout": 30}  # fmt: skip
    (home / ".qwen" / "settings.json").write_text(json.dumps({
        "general": {"disableAutoUpdate": True},
        "hooks": {"PreToolUse": [{"matcher": ".*", "hooks": [hook]}]},
    }))  # fmt: skip
    argv, extra = _qwen(home, work, model)
    log = root / "model.jsonl"
    proc = subprocess.run(
        ["unshare", "-n", sys.executable, str(HERE / "netns_stack.py"), str(data),
         str(_policy(root)), str(serve_port), str(model.port), str(log), command, "--", *argv],
        cwd=work, env=agent_env(home, **extra), capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    requests = [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []
    return proc, _chat_results(requests), data


def test_qwen_codes_http_hook_denies_through_serve(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    proc, results, data = _run(tmp_path, f"touch {marker}; echo hookaudit-denied")
    said = (proc.stdout[-2000:], proc.stderr[-2000:], results)
    assert not marker.exists(), said
    assert any("policy: no hookaudit-denied" in x for x in results), said
    rows = [x for x in outcomes(data, "qwen_code") if x["event"] == "PreToolUse"]
    assert [(x["agent_tool"], x["tool_name"], x["blocked"]) for x in rows] == [
        ("run_shell_command", "Bash", True)
    ], rows


def test_qwen_codes_http_hook_allows_through_serve(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    proc, results, data = _run(tmp_path, f"touch {marker}")
    assert marker.exists(), (proc.stdout[-2000:], proc.stderr[-2000:], results)
    rows = [x for x in outcomes(data, "qwen_code") if x["event"] == "PreToolUse"]
    assert [(x["blocked"], x["decided_by"]) for x in rows] == [(False, "policy")], rows


def test_a_hook_naming_an_unknown_agent_is_blocked(tmp_path: Path) -> None:
    """A typo in the URL (`?agent=qwen`): serve cannot read the input as any agent's, and
    answers the blocking form; before, its 404 was a non-blocking error and the call ran."""
    marker = tmp_path / "ran"
    proc, results, data = _run(tmp_path, f"touch {marker}", agent="qwen")
    said = (proc.stdout[-2000:], proc.stderr[-2000:], results)
    assert not marker.exists(), said
    assert any("no http hooks for that agent" in x for x in results), said
    # recorded as refused input, blocked (beside netns_stack's probe, which serve decided)
    rows = [x for x in outcomes(data, "claude_code") if x["decided_by"] != "policy"]
    assert [(x["event"], x["decided_by"], x["blocked"]) for x in rows] == [
        ("PreToolUse", "rejected", True)
    ], rows
    assert outcomes(data, "qwen_code") == []
