"""Every agent, the real binary, wired with `hookaudit wire` and held to one policy written
as Claude Code settings (a python hook denying commands that contain `hookaudit-denied`):
a denied command does not run and the model is told the policy's reason; an allowed one
runs; each call is recorded as that agent's, with canonical names, its own tool name, and
Pre and Post paired on one tool_use_id (derived where the agent gives none)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.agents.runners import run
from tests.support.agents import deployment, outcomes, sql
from tests.support.relay import Stack
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow

#: agent -> (its own shell tool name, the events a plain run records)
EXPECTED = {
    "codex": ("Bash", {"SessionStart", "UserPromptSubmit", "PreToolUse", "PostToolUse", "Stop"}),
    "gemini_cli": (
        "run_shell_command",
        {"SessionStart", "UserPromptSubmit", "PreToolUse", "PostToolUse", "Stop"},
    ),
    "copilot_cli": ("Bash", {"SessionStart", "PreToolUse", "PostToolUse"}),
    "qwen_code": (
        "run_shell_command",
        {"SessionStart", "PreToolUse", "PostToolUse", "UserPromptSubmit"},
    ),
    "opencode": ("bash", {"SessionStart", "UserPromptSubmit", "PreToolUse", "PostToolUse", "Stop"}),
    "cline": ("run_commands", {"SessionStart", "PreToolUse", "PostToolUse", "Stop"}),
}
#: agents that raise SessionEnd when a headless run exits (wired, recorded; Qwen Code did
#: not raise it in a headless run, live or captured, nor Cline its SessionShutdown within
#: a minute of its run; OpenCode has no such event)
ENDS = {"codex", "gemini_cli", "copilot_cli"}
#: Cline's only block ends the task: the model is never told, the run ends "aborted".
ENDS_THE_TASK = {"cline"}
AGENTS = list(EXPECTED)


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    yield from deployment(tmp_path)


@pytest.mark.parametrize("agent", AGENTS)
def test_a_denied_command_does_not_run(agent: str, tmp_path: Path, stack: Stack) -> None:
    marker = tmp_path / "ran"
    r = run(agent, tmp_path, stack.data, f"touch {marker}; echo hookaudit-denied")
    assert not marker.exists(), r.proc.stderr[-3000:]
    if agent in ENDS_THE_TASK:
        assert r.results == [] and '"finishReason":"aborted"' in r.proc.stdout, r.proc.stdout
    else:
        assert r.results and any("policy: no hookaudit-denied" in x for x in r.results), (
            r.results,
            r.proc.stderr[-3000:],
        )
    rows = [x for x in outcomes(stack.data, agent) if x["event"] == "PreToolUse"]
    own_tool = EXPECTED[agent][0]
    assert [(x["agent_tool"], x["tool_name"], x["blocked"]) for x in rows] == [
        (own_tool, "Bash", True)
    ], rows


@pytest.mark.parametrize("agent", AGENTS)
def test_an_allowed_command_runs_and_is_recorded(agent: str, tmp_path: Path, stack: Stack) -> None:
    marker = tmp_path / "ran"
    r = run(agent, tmp_path, stack.data, f"touch {marker}")
    assert marker.exists(), r.proc.stderr[-3000:]
    rows = outcomes(stack.data, agent)
    if agent in ENDS:  # the end comes as the agent exits, recorded without waiting
        wait_for(lambda: any(x["event"] == "SessionEnd" for x in outcomes(stack.data, agent)),
                 60, f"{agent}'s SessionEnd")  # fmt: skip
        rows = outcomes(stack.data, agent)
    events = {x["event"] for x in rows}
    assert EXPECTED[agent][1] <= events, events
    pre = next(x for x in rows if x["event"] == "PreToolUse")
    post = next(x for x in rows if x["event"] == "PostToolUse")
    assert pre["tool_use_id"] and pre["tool_use_id"] == post["tool_use_id"]
    assert not pre["blocked"] and pre["decided_by"] == "policy"


#: agents that run a call with the input a policy rewrote; the others block such a call
REWRITES = {"codex", "gemini_cli", "opencode", "copilot_cli"}


@pytest.mark.parametrize("agent", AGENTS)
def test_a_rewritten_command_is_what_runs(agent: str, tmp_path: Path, stack: Stack) -> None:
    asked, rewritten = tmp_path / "hookaudit-rewrite-me", tmp_path / "hookaudit-rewritten"
    r = run(agent, tmp_path, stack.data, f"touch {asked}")
    said = (r.proc.stdout[-2000:], r.proc.stderr[-2000:], r.results)
    assert not asked.exists(), said  # the command as asked never runs
    if agent in REWRITES:
        assert rewritten.exists(), said  # the rewritten one does
    else:
        assert not rewritten.exists(), said  # blocked, saying why
        if agent not in ENDS_THE_TASK:
            assert any("rewrites this call's input" in x for x in r.results), said
    pre = [x for x in outcomes(stack.data, agent) if x["event"] == "PreToolUse"]
    assert len(pre) == 1 and pre[0]["decided_by"] == "policy", pre
    if agent in REWRITES:  # its Post (of the rewritten input) pairs with the Pre
        wait_for(lambda: tool_calls(stack.data, agent) == [(True, "success")], 30,
                 f"{agent}'s rewritten call paired: {tool_calls(stack.data, agent)}")  # fmt: skip


@pytest.mark.parametrize("agent", AGENTS)
def test_with_the_worker_stopped_the_call_does_not_run(
    agent: str, tmp_path: Path, stack: Stack
) -> None:
    """No decision arrives within emit's deadline: the agent gets its blocking answer."""
    assert stack.worker is not None
    stack.worker.terminate()
    stack.worker.communicate(timeout=30)
    marker = tmp_path / "ran"
    r = run(agent, tmp_path, stack.data, f"touch {marker}")
    assert not marker.exists(), (r.proc.stdout[-2000:], r.proc.stderr[-2000:])


def tool_calls(data: Path, agent: str) -> list[tuple[bool, str]]:
    """(ran, status) of each `tool_calls` row of `agent`'s."""
    rows = sql(data, "SELECT t.ran, t.status FROM tool_calls t JOIN outcomes o ON o.id = "
                     f"t.pre_id WHERE o.agent = '{agent}' ORDER BY t.started")  # fmt: skip
    return [(x["ran"], x["status"]) for x in rows]


def blocks(agent: str, p: subprocess.CompletedProcess[bytes]) -> bool:
    """Whether `p`'s answer is `agent`'s blocking answer."""
    out = p.stdout.decode().strip()
    if agent == "cline":
        return json.loads(out).get("cancel") is True
    if agent == "opencode":
        return json.loads(out).get("decision") == "deny"
    return p.returncode == 2 and p.stderr.strip() != b""


@pytest.mark.parametrize("agent", AGENTS)
def test_a_malformed_hook_input_blocks_and_is_recorded_as_rejected(
    agent: str, stack: Stack
) -> None:
    for bad in (b"{not json", b"[]", json.dumps({"hookName": 3, "tool_name": []}).encode()):
        p = stack.emit("--agent", agent, "--wait", "--timeout", "10", "--fail", "closed", stdin=bad)
        assert blocks(agent, p), (agent, bad, p)
    rows = [x for x in outcomes(stack.data, agent) if x["decided_by"] == "rejected"]
    assert len(rows) == 3, rows


@pytest.mark.parametrize("agent", AGENTS)
def test_with_hookaudit_gone_the_call_does_not_run(
    agent: str, tmp_path: Path, stack: Stack
) -> None:
    """The wired hook cannot start hookaudit at all (not found): the agent still blocks."""
    marker = tmp_path / "ran"
    r = run(agent, tmp_path, stack.data, f"touch {marker}", break_hookaudit=True)
    assert not marker.exists(), (r.proc.stdout[-2000:], r.proc.stderr[-2000:])
