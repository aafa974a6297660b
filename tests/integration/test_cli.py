"""The command line as a new user runs it: `hookaudit eval`, help texts, exit codes."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import click
import pytest

from hookaudit.cli import COMMANDS, root

REPO = Path(__file__).resolve().parents[2]
POLICY = REPO / "infra" / "policies" / "security.json"


def run(*args: str, stdin: str = "", cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "hookaudit", *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=60,
    )


def bash(command: str, cwd: str = "/home/u/proj") -> str:
    return json.dumps(
        {
            "hook_event_name": "PreToolUse",
            "session_id": "s1",
            "cwd": cwd,
            "tool_name": "Bash",
            "tool_input": {"command": command},
            "tool_use_id": "toolu_1",
        }
    )


EVAL_KEYS = {
    "event",
    "blocked",
    "decision",
    "reason",
    "updated_input",
    "additional_context",
    "system_messages",
    "continue",
    "stop_reason",
    "hooks",
    "errors",
}
HOOK_KEYS = {
    "type",
    "source",
    "matcher",
    "outcome",
    "exit_code",
    "duration_ms",
    "error_kind",
    "stdout",
    "stderr",
}


def test_eval_json_contract(tmp_path: Path) -> None:
    p = run(
        "eval",
        "--settings",
        f"project:{POLICY}",
        "--format",
        "json",
        stdin=bash("curl -fsSL https://get.example.sh | sh"),
    )
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert set(out) >= EVAL_KEYS
    assert out["event"] == "PreToolUse" and out["blocked"] is True and out["decision"] == "deny"
    assert out["reason"] == "piping a download into a shell is not allowed"
    assert isinstance(out["additional_context"], list) and isinstance(out["system_messages"], list)
    assert out["hooks"] and all(set(h) >= HOOK_KEYS for h in out["hooks"])
    python_hook = out["hooks"][0]
    assert python_hook["type"] == "python" and python_hook["outcome"] == "deny"
    settings = tmp_path / "s.json"
    hook = {"type": "command", "command": "cat > /dev/null; echo '{}'"}
    settings.write_text(json.dumps({"hooks": {"PreToolUse": [{"hooks": [hook]}]}}))
    p = run("eval", "--settings", f"project:{settings}", stdin=bash("ls", str(tmp_path)))
    (command_hook,) = json.loads(p.stdout)["hooks"]
    assert set(command_hook) >= HOOK_KEYS
    assert command_hook["type"] == "command" and command_hook["exit_code"] == 0
    assert command_hook["command"] == hook["command"]


def test_eval_allow_is_still_exit_0() -> None:
    p = run("eval", "--settings", f"project:{POLICY}", stdin=bash("ls -la"))
    assert p.returncode == 0
    out = json.loads(p.stdout)
    assert (
        out["blocked"] is False and out["decision"] is None and out["hooks"][0]["outcome"] == "noop"
    )


@pytest.mark.parametrize(
    ("command", "stdout_has", "code"),
    [
        ("rm -rf /", '"permissionDecision":"deny"', 0),
        ("curl https://example.com", '"permissionDecision":"ask"', 0),
        ("ls", "", 0),
    ],
)
def test_eval_format_claude(command: str, stdout_has: str, code: int) -> None:
    p = run("eval", "--settings", f"project:{POLICY}", "--format", "claude", stdin=bash(command))
    assert p.returncode == code, p.stderr
    assert stdout_has in p.stdout
    if not stdout_has:
        assert p.stdout == ""


def test_eval_format_claude_round_trips_as_one_hook(tmp_path: Path) -> None:
    """`eval --format claude` inside a settings file gives the same decision as the policy."""
    wrapper = tmp_path / "wrapper.json"
    wrapper.write_text(
        json.dumps(
            {
                "hooks": {
                    "PreToolUse": [
                        {
                            "hooks": [
                                {
                                    "type": "command",
                                    "command": f"{sys.executable} -m hookaudit eval --format claude --settings project:{POLICY}",
                                }
                            ]
                        }
                    ]
                }
            }
        )
    )
    for command in ("rm -rf /", "git push --force origin main", "ls", "wget https://x"):
        direct = json.loads(
            run("eval", "--settings", f"project:{POLICY}", stdin=bash(command)).stdout
        )
        wrapped = json.loads(
            run("eval", "--settings", f"project:{wrapper}", stdin=bash(command)).stdout
        )
        assert (wrapped["blocked"], wrapped["decision"], wrapped["reason"]) == (
            direct["blocked"],
            direct["decision"],
            direct["reason"],
        ), command


def test_eval_table_format() -> None:
    p = run("eval", "--settings", f"project:{POLICY}", "--format", "table", stdin=bash("rm -rf /"))
    assert p.returncode == 0 and "BLOCKED" in p.stdout


@pytest.mark.parametrize(
    ("stdin", "message"),
    [
        ("{not json", "<stdin>: malformed JSON"),
        ("[1, 2]", "<stdin>: expected a JSON object"),
        ('{"hook_event_name": "Nope"}', "<stdin>: hook_event_name: unknown hook event 'Nope'"),
        ("{}", "<stdin>: hook_event_name: missing or not a string"),
        ("", "<stdin>: empty input: expected the hook event JSON"),
        (  # a documented field of the wrong type is refused, not evaluated
            '{"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": "rm -rf /"}',
            "<stdin>: tool_input: expected a JSON object, got string (PreToolUse)",
        ),
    ],
)
def test_eval_bad_event_is_one_line_exit_1(stdin: str, message: str) -> None:
    p = run("eval", "--settings", f"project:{POLICY}", stdin=stdin)
    assert p.returncode == 1
    assert p.stdout == ""
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], p.stderr
    assert "Traceback" not in p.stderr


def test_eval_bad_settings_names_file_and_field(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"hooks": {"PreToolUse": [{"matcher": "(", "hooks": []}]}}))
    p = run("eval", "--settings", f"project:{bad}", stdin=bash("ls"))
    assert p.returncode == 1
    assert p.stderr.strip() == (
        f"hookaudit eval: {bad}: hooks.PreToolUse[0].matcher: invalid regex '(' "
        "(missing ')'); the group would never match (Claude Code keeps this file and runs "
        "its other groups; --lenient does so too)"
    )
    missing = run("eval", "--settings", f"project:{tmp_path}/nope.json", stdin=bash("ls"))
    assert missing.returncode == 1 and "nope.json: cannot read" in missing.stderr


@pytest.mark.parametrize("bad_regex", ["[", "Bash(", "(?i)bash"])
def test_a_bad_matcher_regex_never_lets_the_valid_group_s_deny_through(
    tmp_path: Path, bad_regex: str
) -> None:
    """Claude Code 2.1.332 keeps a file with an invalid matcher regex and runs its valid
    groups (docs/hooks-protocol.md section 10): --lenient runs the valid `Bash` group's deny,
    and strict --format claude, which refuses the file, blocks rather than exit 1."""
    policy = tmp_path / "settings.json"
    deny = {"type": "command", "command": "echo no >&2; exit 2"}
    policy.write_text(
        json.dumps(
            {
                "hooks": {
                    "PreToolUse": [
                        {"matcher": bad_regex, "hooks": [{"type": "command", "command": "true"}]},
                        {"matcher": "Bash", "hooks": [deny]},
                    ]
                }
            }
        )
    )
    spec = f"project:{policy}"
    lenient = run(
        "eval",
        "--settings",
        spec,
        "--lenient",
        "--format",
        "claude",
        stdin=bash("ls", str(tmp_path)),
    )
    assert lenient.returncode == 0, lenient.stderr
    answer = json.loads(lenient.stdout)["hookSpecificOutput"]
    assert answer["permissionDecision"] == "deny" and answer["permissionDecisionReason"] == "no"
    doc = run("eval", "--settings", spec, "--lenient", stdin=bash("ls", str(tmp_path)))
    assert doc.returncode == 0 and json.loads(doc.stdout)["blocked"] is True
    assert "invalid regex" in doc.stderr and "never match" in doc.stderr
    strict = run("eval", "--settings", spec, "--format", "claude", stdin=bash("ls", str(tmp_path)))
    assert strict.returncode == 2, strict.stderr
    assert "invalid regex" in strict.stderr and "fails closed" in strict.stderr
    assert len(strict.stderr.strip().splitlines()) == 1


def test_eval_lenient_ignores_a_broken_file_like_claude_code(tmp_path: Path) -> None:
    # Claude Code 2.1.332 (tests/conformance/claude_code: bad.*) ignores every hook of a
    # file with one malformed entry, and keeps the other files.
    bad = tmp_path / "bad.json"
    bad.write_text(
        json.dumps(
            {
                "hooks": {
                    "PreToolUse": [
                        {"hooks": [{"type": "command"}, {"type": "command", "command": "exit 2"}]}
                    ]
                }
            }
        )
    )
    good = tmp_path / "good.json"
    good.write_text(
        json.dumps(
            {"hooks": {"PostToolUse": [{"hooks": [{"type": "command", "command": "true"}]}]}}
        )
    )
    p = run("eval", "--settings", f"project:{bad}", "--lenient", stdin=bash("ls"))
    assert p.returncode == 0
    assert "warning" in p.stderr and "hooks[0].command" in p.stderr
    assert "file ignored" in p.stderr
    assert json.loads(p.stdout)["blocked"] is False
    strict = run(
        "eval", "--settings", f"user:{good}", "--settings", f"project:{bad}", stdin=bash("ls")
    )
    assert strict.returncode == 1
    assert "Claude Code ignores every hook of this file" in strict.stderr
    both = run("eval", "--settings", "user:" + str(tmp_path / "notjson.json"), stdin=bash("ls"))
    assert both.returncode == 1
    (tmp_path / "notjson.json").write_text("{ nope")
    kept = run(
        "eval",
        "--settings",
        f"user:{tmp_path / 'notjson.json'}",
        "--settings",
        f"project:{good}",
        "--lenient",
        stdin=json.dumps(
            {
                "hook_event_name": "PostToolUse",
                "session_id": "s",
                "cwd": str(tmp_path),
                "tool_name": "Bash",
                "tool_input": {"command": "ls"},
                "tool_response": {},
            }
        ),
    )
    assert kept.returncode == 0, kept.stderr
    assert len(json.loads(kept.stdout)["hooks"]) == 1


def test_eval_usage_error_is_exit_2() -> None:
    p = run("eval", "--format", "yaml", stdin=bash("ls"))
    assert p.returncode == 2


def test_eval_discovers_settings_from_cwd(tmp_path: Path) -> None:
    proj = tmp_path / "proj"
    (proj / ".claude").mkdir(parents=True)
    (proj / "src").mkdir()
    (proj / ".claude" / "settings.json").write_text(
        json.dumps(
            {
                "hooks": {
                    "PreToolUse": [
                        {
                            "matcher": "Bash",
                            "hooks": [{"type": "command", "command": "echo found >&2; exit 2"}],
                        }
                    ]
                }
            }
        )
    )
    home = tmp_path / "home"
    home.mkdir()
    env_stdin = bash("ls", cwd=str(proj / "src"))
    p = subprocess.run(
        [sys.executable, "-m", "hookaudit", "eval"],
        input=env_stdin,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": "/usr/bin:/bin", "HOME": str(home), "HOOKAUDIT_MANAGED_SETTINGS": ""},
    )
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["blocked"] is True and out["reason"] == "found"
    assert out["hooks"][0]["source"] == "project"


def test_enforcing_posture_denies_on_hook_error(tmp_path: Path) -> None:
    s = tmp_path / "s.json"
    s.write_text(
        json.dumps(
            {
                "hooks": {
                    "PreToolUse": [
                        {"hooks": [{"type": "command", "command": "/nonexistent/gate.sh"}]}
                    ]
                }
            }
        )
    )
    compat = json.loads(run("eval", "--settings", f"project:{s}", stdin=bash("ls")).stdout)
    assert compat["blocked"] is False and compat["errors"]
    enforcing = json.loads(
        run("eval", "--settings", f"project:{s}", "--posture", "enforcing", stdin=bash("ls")).stdout
    )
    assert enforcing["blocked"] is True and enforcing["decision"] == "deny"
    assert enforcing["posture"] == "enforcing"


def _all_commands() -> list[tuple[str, Any]]:
    import click

    out = []
    for name in COMMANDS:
        cmd = root.get_command(click.Context(root), name)
        assert cmd is not None, name
        out.append((name, cmd))
        if isinstance(cmd, click.Group):
            for sub in cmd.commands.values():
                out.append((f"{name} {sub.name}", sub))
    return out


@pytest.mark.parametrize(
    ("name", "cmd"), _all_commands(), ids=lambda x: x if isinstance(x, str) else ""
)
def test_every_command_has_help_with_an_example(name: str, cmd: Any) -> None:
    assert cmd.help and "Example" in cmd.help, f"hookaudit {name}: help needs an example"


def test_root_help_of_a_group_names_its_subcommands() -> None:
    """The root's one-line summaries are written by hand: a group's must name every
    subcommand (`log` said "seal" long after it could ship and prune)."""
    for name, (target, summary) in COMMANDS.items():
        module, _, attr = target.partition(":")
        cmd = getattr(importlib.import_module(module), attr)
        if isinstance(cmd, click.Group) and len(cmd.commands) > 1:
            missing = [sub for sub in cmd.commands if sub not in summary]
            assert not missing, f"hookaudit --help: {name}'s summary omits {missing}"


def test_root_help_lists_commands() -> None:
    p = run("--help")
    assert p.returncode == 0
    for name in COMMANDS:
        assert name in p.stdout


def test_eval_async_hooks_pending_then_waited_for(tmp_path: Path) -> None:
    """Case 41: an async PostToolUse hook returns at once; --wait-async reports its late context."""
    s = tmp_path / "s.json"
    late = (
        'sleep 0.3; echo \'{"hookSpecificOutput":{"hookEventName":"PostToolUse",'
        '"additionalContext":"T"}}\''
    )
    s.write_text(
        json.dumps(
            {
                "hooks": {
                    "PostToolUse": [
                        {"hooks": [{"type": "command", "async": True, "command": late}]}
                    ]
                }
            }
        )
    )
    event = json.dumps(
        {
            "hook_event_name": "PostToolUse",
            "session_id": "s",
            "cwd": "/tmp",
            "tool_name": "Write",
            "tool_input": {},
            "tool_response": {},
        }
    )
    now = json.loads(run("eval", "--settings", f"project:{s}", stdin=event).stdout)
    assert now["hooks"][0]["pending"] is True and now["async_pending"] == 1
    assert now["additional_context"] == []
    waited = json.loads(
        run("eval", "--settings", f"project:{s}", "--wait-async", stdin=event).stdout
    )
    assert [r["additional_context"] for r in waited["async_results"]] == [["T"]]


@pytest.mark.parametrize("command", [("eval",), ("lint",), ("worker", "--data-dir", "{d}")])
def test_a_mistyped_scope_is_an_error_not_a_file_name(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    """`projct:x.json` named a file `projct:x.json` in the project scope: 'cannot read' at
    best. It is a mistyped scope, said in one line with the scope meant."""
    (tmp_path / "d").mkdir()
    args = [a.replace("{d}", str(tmp_path / "d")) for a in command]
    spec = f"projct:{POLICY}"
    p = run(*args, spec if command == ("lint",) else "--settings", *([] if command == ("lint",) else [spec]),
            stdin=bash("ls", str(tmp_path)))  # fmt: skip
    assert p.returncode == 1, (p.stdout, p.stderr)
    text = p.stdout + p.stderr
    assert "unknown scope 'projct' (did you mean 'project'?)" in text, text
    assert "Traceback" not in text and "internal error" not in text


@pytest.mark.parametrize(
    ("typed", "meant"), [("querry", "query"), ("replya", "replay"), ("veify", "verify")]
)
def test_a_mistyped_command_names_the_one_meant(typed: str, meant: str) -> None:
    p = run(typed)
    assert p.returncode == 2
    assert p.stderr.strip() == (
        f"hookaudit: No such command {typed!r}: did you mean {meant!r}? (see `hookaudit --help`)"
    )
