"""engine.plan's memo: a plan from a warm `Effective` equals one from a fresh `Effective`.

The planner keeps per-(event, query) work on the Effective and, when no hook has an `if`
rule or a skill ``once``, the hooks to run as well; this checks both paths give the same
plan as planning from scratch, over payloads that exercise `if`, dedup, ``once`` and
the env file.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from engine.plan import plan
from engine.settings import parse_settings
from engine.sources import Effective, Source, merge


def cmd(command: str, **extra: Any) -> dict[str, Any]:
    return {"type": "command", "command": command, **extra}


SETTINGS: dict[str, dict[str, Any]] = {
    "user": {
        "PreToolUse": [
            {"matcher": "Bash", "hooks": [cmd("same"), cmd("git", **{"if": "Bash(git *)"})]},
            {"matcher": "Read|Edit", "hooks": [cmd("files")]},
        ],
        "SessionStart": [{"hooks": [cmd("env-a"), cmd("env-b", shell="powershell")]}],
    },
    "project": {
        "PreToolUse": [
            {"matcher": "Bash", "hooks": [cmd("same")]},
            {"matcher": "Edit", "hooks": [cmd("files"), cmd("env", **{"if": "Edit(*.env)"})]},
        ],
        "UserPromptSubmit": [{"hooks": [cmd("prompt")]}],
    },
    "skill": {"PreToolUse": [{"matcher": "Read", "hooks": [cmd("once", once=True)]}]},
}


def fresh() -> Effective:
    return merge(
        [
            Source(scope, f"{scope}.json", parse_settings({"hooks": h}, f"{scope}.json"), "/p")
            for scope, h in SETTINGS.items()
        ]
    )


def event(name: str, **payload: Any) -> dict[str, Any]:
    return {"hook_event_name": name, "session_id": "s1", "cwd": "/p", **payload}


PAYLOADS = [
    event("PreToolUse", tool_name="Bash", tool_input={"command": "git status"}),
    event("PreToolUse", tool_name="Bash", tool_input={"command": "ls"}),
    event("PreToolUse", tool_name="Edit", tool_input={"file_path": "/p/.env"}),
    event("PreToolUse", tool_name="Edit", tool_input={"file_path": "/p/a.py"}),
    event("PreToolUse", tool_name="Read", tool_input={"file_path": "/p/a.py"}),
    event("PreToolUse", tool_name="Read", session_id="s2", tool_input={"file_path": "/p/a"}),
    event("PreToolUse", tool_name="Glob", tool_input={"pattern": "*"}),
    event("SessionStart", source="startup"),
    event("SessionStart", source="resume", cwd="/elsewhere"),
    event("UserPromptSubmit", prompt="hi"),
    event("Stop"),
]


@pytest.mark.parametrize("once_done", [(), {("s1", "*")}])
def test_warm_plans_equal_fresh_plans(once_done: set[tuple[str, str]]) -> None:
    warm = fresh()
    if once_done:  # the real hook_id of the skill `once` hook, for session s1
        read = plan("PreToolUse", PAYLOADS[4], b"{}", warm)
        once_done = {("s1", i.hook_id) for i in read.invocations if i.source == "skill"}
        assert once_done
    for _ in range(2):  # the second round is answered from the memo
        for p in PAYLOADS:
            name, raw = p["hook_event_name"], json.dumps(p).encode()
            expected = plan(name, p, raw, fresh(), home="/h", once_done=once_done)
            got = plan(name, p, raw, warm, home="/h", once_done=once_done)
            assert got == expected
            assert [s.why for s in got.skipped] == [s.why for s in expected.skipped]


def test_what_the_memo_decides() -> None:
    eff = fresh()
    for _ in range(2):
        bash = plan("PreToolUse", PAYLOADS[0], b"{}", eff).invocations
        assert [(i.hook.command, i.source, i.index) for i in bash] == [
            ("git", "user", 0),
            ("same", "project", 1),  # deduplicated: the last copy, at its own position
        ]
        ls = plan("PreToolUse", PAYLOADS[1], b"{}", eff)
        assert [i.hook.command for i in ls.invocations] == ["same"]
        assert [s.why for s in ls.skipped].count("if") == 1
        start = plan("SessionStart", PAYLOADS[7], b"{}", eff, home="/h").invocations
        assert [("CLAUDE_ENV_FILE" in i.env) for i in start] == [True, False]
        assert start[0].env["CLAUDE_ENV_FILE"] == "/h/.claude/session-env/s1/sessionstart-hook-0.sh"
        read = plan("PreToolUse", PAYLOADS[4], b"{}", eff).invocations
        assert [i.hook.command for i in read] == ["files", "once"]
        done = {("s1", read[1].hook_id)}
        again = plan("PreToolUse", PAYLOADS[4], b"{}", eff, once_done=done)
        assert [i.hook.command for i in again.invocations] == ["files"]
        assert [s.why for s in again.skipped if s.why != "matcher"] == ["once"]
        other = plan("PreToolUse", PAYLOADS[5], b"{}", eff, once_done=done).invocations
        assert [i.hook.command for i in other] == ["files", "once"]  # another session
        glob = plan("PreToolUse", PAYLOADS[6], b"{}", eff)
        assert glob.invocations == () and {s.why for s in glob.skipped} == {"matcher"}
