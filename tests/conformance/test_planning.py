"""Spec §8 cases about which hooks run: matchers, `if`, dedup, lockdown (engine.plan)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from engine.plan import default_timeout, plan
from engine.settings import CommandHook, parse_settings
from engine.sources import Effective, Source, merge


def src(scope: str, hooks: dict[str, Any], root: str | None = None, **policy: Any) -> Source:
    doc = {"hooks": hooks, **policy}
    return Source(
        scope, f"{scope}.json", parse_settings(doc, f"{scope}.json", strict=False), "/proj", root
    )


def group(matcher: str | None, *commands: str, **extra: Any) -> dict[str, Any]:
    g: dict[str, Any] = {"hooks": [{"type": "command", "command": c, **extra} for c in commands]}
    if matcher is not None:
        g["matcher"] = matcher
    return g


def ran(eff: Effective, event_name: str, profile: str = "current", **payload: Any) -> list[str]:
    p = {"hook_event_name": event_name, "session_id": "s", "cwd": "/proj", **payload}
    result = plan(event_name, p, json.dumps(p).encode(), eff, profile=profile)  # type: ignore[arg-type]
    return [inv.hook.command for inv in result.invocations]


def pre(matcher: str | None, *commands: str, **extra: Any) -> Effective:
    return merge([src("project", {"PreToolUse": [group(matcher, *commands, **extra)]})])


def test_case_01_exact_matcher_does_not_match_longer_name() -> None:
    """matcher "Bash", tool_name BashOutput → not run."""
    assert ran(pre("Bash", "a"), "PreToolUse", tool_name="BashOutput") == []
    assert ran(pre("Bash", "a"), "PreToolUse", tool_name="Bash") == ["a"]


def test_case_02_regex_matcher_is_unanchored() -> None:
    """matcher "Edit.*" runs for NotebookEdit."""
    assert ran(pre("Edit.*", "a"), "PreToolUse", tool_name="NotebookEdit") == ["a"]


def test_case_03_mcp_server_prefix_needs_regex() -> None:
    """ "mcp__memory" does not run for mcp__memory__create_entities; "mcp__memory__.*" does."""
    name = "mcp__memory__create_entities"
    assert ran(pre("mcp__memory", "a"), "PreToolUse", tool_name=name) == []
    assert ran(pre("mcp__memory__.*", "a"), "PreToolUse", tool_name=name) == ["a"]


def test_case_04_hyphenated_matcher_is_exact_in_current() -> None:
    """SubagentStart "code-reviewer" vs senior-code-reviewer: current no, legacy yes."""
    eff = merge([src("project", {"SubagentStart": [group("code-reviewer", "a")]})])
    assert ran(eff, "SubagentStart", agent_type="senior-code-reviewer") == []
    assert ran(eff, "SubagentStart", "legacy", agent_type="senior-code-reviewer") == ["a"]


def test_case_05_comma_list_matcher() -> None:
    """ "Edit, Write" runs for Write in current."""
    assert ran(pre("Edit, Write", "a"), "PreToolUse", tool_name="Write") == ["a"]


def test_case_06_invalid_regex_never_matches() -> None:
    """matcher "[" (invalid regex) → not run."""
    assert ran(pre("[", "a"), "PreToolUse", tool_name="Bash") == []


def test_case_07_matcher_ignored_on_events_without_target() -> None:
    """Stop with matcher "foo" → runs (matcher ignored)."""
    eff = merge([src("project", {"Stop": [group("foo", "a")]})])
    assert ran(eff, "Stop") == ["a"]


@pytest.mark.parametrize(
    ("command", "expected"),
    [("npm test && git push", ["a"]), ("FOO=bar git push", ["a"]), ("npm test", [])],
)
def test_case_31_if_bash_wildcard_checks_every_subcommand(
    command: str, expected: list[str]
) -> None:
    """if "Bash(git *)": compound and VAR= commands run; `npm test` is not spawned."""
    eff = pre("Bash", "a", **{"if": "Bash(git *)"})
    assert ran(eff, "PreToolUse", tool_name="Bash", tool_input={"command": command}) == expected


@pytest.mark.parametrize(("command", "expected"), [("git push origin", ["a"]), ("git pushx", [])])
def test_case_32_if_legacy_prefix_syntax(command: str, expected: list[str]) -> None:
    """if "Bash(git push:*)": `git push origin` runs, `git pushx` does not."""
    eff = pre("Bash", "a", **{"if": "Bash(git push:*)"})
    assert ran(eff, "PreToolUse", tool_name="Bash", tool_input={"command": command}) == expected


def test_case_33_if_on_a_non_tool_event_never_runs() -> None:
    """A Stop hook with if "Bash(*)" never runs."""
    eff = merge([src("project", {"Stop": [group(None, "a", **{"if": "Bash(*)"})]})])
    assert ran(eff, "Stop") == []
    skipped = plan("Stop", {"hook_event_name": "Stop"}, b"{}", eff).skipped
    assert [s.why for s in skipped] == ["'if' is not allowed on Stop"]


def test_case_34_same_command_in_user_and_project_runs_once() -> None:
    eff = merge(
        [
            src("user", {"PreToolUse": [group("Bash", "same")]}),
            src("project", {"PreToolUse": [group("Bash", "same")]}),
        ]
    )
    p = {"hook_event_name": "PreToolUse", "tool_name": "Bash"}
    invs = plan("PreToolUse", p, b"{}", eff).invocations
    assert [i.hook.command for i in invs] == ["same"]
    assert invs[0].source == "project"  # last merged scope wins


def test_case_35_settings_and_plugin_copies_both_run() -> None:
    eff = merge(
        [
            src("project", {"PreToolUse": [group("Bash", "same")]}),
            src("plugin", {"PreToolUse": [group("Bash", "same")]}, root="/plug"),
        ]
    )
    assert ran(eff, "PreToolUse", tool_name="Bash") == ["same", "same"]


def test_dedup_key_includes_if_and_ignores_timeout() -> None:
    eff = merge(
        [
            src(
                "project",
                {
                    "PreToolUse": [
                        {
                            "matcher": "Bash",
                            "hooks": [
                                {"type": "command", "command": "x", "timeout": 5},
                                {"type": "command", "command": "x", "timeout": 9},
                                {"type": "command", "command": "x", "if": "Bash(git *)"},
                            ],
                        }
                    ]
                },
            )
        ]
    )
    p = {"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {"command": "git st"}}
    invs = plan("PreToolUse", p, b"{}", eff).invocations
    assert [(i.hook.timeout, i.hook.if_) for i in invs] == [(9, None), (None, "Bash(git *)")]


def test_case_48_untrusted_workspace_runs_nothing() -> None:
    eff = merge([src("project", {"SessionEnd": [group(None, "a")]})])
    p = {"hook_event_name": "SessionEnd", "reason": "other"}
    assert plan("SessionEnd", p, b"{}", eff, trusted=False).invocations == ()
    assert len(plan("SessionEnd", p, b"{}", eff, trusted=True).invocations) == 1


def test_case_49_disable_all_hooks_precedence() -> None:
    """user true + project false → all run; only user true → only managed runs."""
    managed = src("managed", {"Stop": [group(None, "m")]})
    user_true = src("user", {"Stop": [group(None, "u")]}, disableAllHooks=True)
    project_false = src("project", {"Stop": [group(None, "p")]}, disableAllHooks=False)
    assert ran(merge([managed, user_true, project_false]), "Stop") == ["u", "p", "m"]
    assert ran(merge([managed, user_true]), "Stop") == ["m"]
    managed_off = src("managed", {"Stop": [group(None, "m")]}, disableAllHooks=True)
    assert ran(merge([managed_off, project_false]), "Stop") == []


def test_case_50_allow_managed_hooks_only() -> None:
    managed = src("managed", {"Stop": [group(None, "m")]}, allowManagedHooksOnly=True)
    others = [
        src("user", {"Stop": [group(None, "u")]}),
        src("project", {"Stop": [group(None, "p")]}),
        src("local", {"Stop": [group(None, "l")]}),
        src("plugin", {"Stop": [group(None, "x")]}, root="/plug"),
    ]
    assert ran(merge([managed, *others]), "Stop") == ["m"]
    # only honoured in managed scope
    project_only = src("project", {"Stop": [group(None, "p")]}, allowManagedHooksOnly=True)
    assert ran(merge([project_only]), "Stop") == ["p"]


def test_case_53_file_changed_matches_basename() -> None:
    eff = merge([src("project", {"FileChanged": [group(".envrc|.env", "a")]})])
    assert ran(eff, "FileChanged", file_path="/proj/.env", event="change") == ["a"]
    assert ran(eff, "FileChanged", file_path="/proj/other", event="change") == []
    from engine.match import file_watch_paths

    assert file_watch_paths(".envrc|.env", "/proj") == ["/proj/.envrc", "/proj/.env"]


def test_prompt_hooks_do_not_run_on_session_start() -> None:
    eff = merge(
        [
            src(
                "project",
                {
                    "SessionStart": [
                        {
                            "hooks": [
                                {"type": "prompt", "prompt": "x"},
                                {"type": "http", "url": "http://127.0.0.1/"},
                                {"type": "command", "command": "c"},
                            ]
                        }
                    ]
                },
            )
        ]
    )
    p = {"hook_event_name": "SessionStart", "source": "startup"}
    result = plan("SessionStart", p, b"{}", eff)
    assert [i.hook.type for i in result.invocations] == ["command"]


def test_default_timeouts_by_profile() -> None:
    c = CommandHook(type="command", command="x")
    assert default_timeout("PreToolUse", c) == 600
    assert default_timeout("UserPromptSubmit", c) == 30
    assert default_timeout("UserPromptSubmit", c, "legacy") == 600
    assert default_timeout("MessageDisplay", c) == 10


def test_case_29_session_end_budget() -> None:
    """SessionEnd budget 1.5 s; a settings timeout:5 raises it to 5; a plugin's does not."""
    p = {"hook_event_name": "SessionEnd", "reason": "other"}
    plain = merge([src("project", {"SessionEnd": [group(None, "a")]})])
    assert [i.timeout for i in plan("SessionEnd", p, b"{}", plain).invocations] == [1.5]
    raised = merge(
        [src("project", {"SessionEnd": [group(None, "a"), group(None, "b", timeout=5)]})]
    )
    assert [i.timeout for i in plan("SessionEnd", p, b"{}", raised).invocations] == [5, 5]
    plugin = merge(
        [
            src("project", {"SessionEnd": [group(None, "a")]}),
            src("plugin", {"SessionEnd": [group(None, "b", timeout=5)]}, root="/p"),
        ]
    )
    assert [i.timeout for i in plan("SessionEnd", p, b"{}", plugin).invocations] == [1.5, 1.5]
    env = plan("SessionEnd", p, b"{}", raised, sessionend_budget_ms=250).invocations
    assert [i.timeout for i in env] == [0.25, 0.25]


def test_env_for_command_hooks() -> None:
    eff = merge(
        [
            src("project", {"SessionStart": [group(None, "a")]}),
            src("plugin", {"SessionStart": [group(None, "b")]}, root="/plug"),
        ]
    )
    p = {"hook_event_name": "SessionStart", "session_id": "../../etc", "cwd": "/proj"}
    invs = plan("SessionStart", p, b"{}", eff, home="/home/u").invocations
    assert invs[0].env["CLAUDE_PROJECT_DIR"] == "/proj"
    env_file = invs[0].env["CLAUDE_ENV_FILE"]
    assert env_file.startswith("/home/u/.claude/session-env/") and ".." not in env_file
    assert invs[1].env["CLAUDE_PLUGIN_ROOT"] == "/plug"
    assert "CLAUDE_PLUGIN_ROOT" not in invs[0].env
