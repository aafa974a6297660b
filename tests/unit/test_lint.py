"""engine.lint: each kind of finding, its JSON path, and that no JSON value makes it raise."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.lint import lint, lint_path, lint_text
from engine.lint_python import Probe

REPO = Path(__file__).resolve().parents[2]


def _probe(files: dict[str, str] | None = None, modules: dict[str, str] | None = None) -> Probe:
    files = files or {}
    mods = modules or {}
    return Probe(read_text=files.get, module_source=mods.get)


def pre(*hooks: dict[str, Any], matcher: str = "Bash") -> dict[str, Any]:
    return {"hooks": {"PreToolUse": [{"matcher": matcher, "hooks": list(hooks)}]}}


def found(data: object, probe: Probe | None = None) -> list[tuple[str, str]]:
    return [(f.path, f.kind) for f in lint(data, "/p/s.json", probe=probe or _probe())]


CMD = {"type": "command", "command": "true"}


def test_clean_settings_have_no_findings() -> None:
    assert found(pre(CMD, {**CMD, "if": "Bash(git push *)"})) == []
    for name in ("security.json", "strict.json"):
        assert lint_path(REPO / "infra" / "policies" / name) == []


def test_top_level_typo_of_hooks() -> None:
    assert found({"hook": {"PreToolUse": []}}) == [("hook", "unknown-key")]
    assert found({"Hooks": {}}) == [("Hooks", "unknown-key")]
    assert found({"permissions": {}, "model": "x"}) == []  # Claude Code's own keys


def test_unbalanced_and_garbage_if_rules() -> None:
    assert found(pre({**CMD, "if": "Bash(curl *"})) == [
        ("hooks.PreToolUse[0].hooks[0].if", "bad-if")
    ]
    assert found(pre({**CMD, "if": "garbage !!"})) == [
        ("hooks.PreToolUse[0].hooks[0].if", "bad-if")
    ]
    assert found(pre({**CMD, "if": r"Bash(echo \(hi\))"})) == []
    assert found(pre({**CMD, "if": "mcp__github__create_issue"})) == []


def test_if_on_an_event_that_is_not_a_tool_event() -> None:
    data = {"hooks": {"Stop": [{"hooks": [{**CMD, "if": "Bash(x)"}]}]}}
    assert found(data) == [("hooks.Stop[0].hooks[0].if", "if-never-runs")]


def test_unknown_hook_type_and_field_typos() -> None:
    lines = [f.line() for f in lint(pre({"type": "comand", "command": "x"}), "s.json")]
    assert lines == [
        "s.json: hooks.PreToolUse[0].hooks[0].type: unknown hook type 'comand' "
        "(did you mean 'command'?): the hook never runs [unknown-type]"
    ]
    assert ("hooks.PreToolUse[0].hooks[0].timout", "unknown-key") in found(
        pre({**CMD, "timout": 5})
    )
    typo = found(pre({"type": "command", "comand": "x"}))
    assert ("hooks.PreToolUse[0].hooks[0].comand", "unknown-key") in typo
    assert ("hooks.PreToolUse[0].hooks[0].command", "invalid") in typo  # and it is skipped


def test_unknown_event_and_group_keys() -> None:
    assert found({"hooks": {"PreTooluse": [{"hooks": [CMD]}]}}) == [
        ("hooks.PreTooluse", "unknown-event")
    ]
    data = {"hooks": {"PreToolUse": [{"matchers": "Bash", "if": "Bash(x)", "hooks": [CMD]}]}}
    assert found(data) == [
        ("hooks.PreToolUse[0].matchers", "unknown-key"),
        ("hooks.PreToolUse[0].if", "unknown-key"),
    ]


def test_empty_group_and_invalid_regex() -> None:
    assert found(pre()) == [("hooks.PreToolUse[0].hooks", "empty")]
    assert found(pre(CMD, matcher="(")) == [("hooks.PreToolUse[0].matcher", "invalid")]


def test_python_hook_file_module_and_function() -> None:
    src = "def guard(event):\n    return None\n"
    probe = _probe({"/p/hooks.py": src, "/lib/mod.py": src}, {"pkg.mod": "/lib/mod.py"})
    ok = pre({"type": "python", "callable": "hooks.py:guard"})
    assert found(ok, probe) == []
    assert found(pre({"type": "python", "callable": "pkg.mod:guard"}), probe) == []
    missing = [
        pre({"type": "python", "callable": "nothere.py:guard"}),
        pre({"type": "python", "callable": "hooks.py:nosuch"}),
        pre({"type": "python", "callable": "no.such.module:guard"}),
        pre({"type": "python", "callable": "pkg.mod:nosuch"}),
    ]
    for data in missing:
        assert found(data, probe) == [("hooks.PreToolUse[0].hooks[0].callable", "python-missing")]
    broken = _probe({"/p/hooks.py": "def (:"})
    assert found(pre({"type": "python", "callable": "hooks.py:guard"}), broken) == [
        ("hooks.PreToolUse[0].hooks[0].callable", "python-missing")
    ]


def test_json_and_shape_errors() -> None:
    assert [(f.path, f.kind) for f in lint_text('{"hooks": ', "s.json")] == [
        ("line 1 column 11", "json")
    ]
    assert found([1, 2]) == [("", "invalid")]
    assert found({"hooks": []}) == [("hooks", "invalid")]
    assert [f.kind for f in lint_path("/nonexistent/settings.json")] == ["unreadable"]


_KEYS = st.sampled_from(
    ["hooks", "hook", "PreToolUse", "Stop", "matcher", "type", "command", "if", "callable",
     "python", "comand", "timeout", "env", "disableAllHooks", "x"]
)  # fmt: skip
_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12)
    | st.sampled_from(["python", "command", "x.py:f", "Bash(", "Bash(x)", "(", "m:f"]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_KEYS | st.text(max_size=6), inner, max_size=4),
    max_leaves=30,
)  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(_JSON)
def test_lint_never_raises_on_any_json(data: object) -> None:
    for f in lint(data, "s.json", probe=_probe({"/x.py": "def f(): pass"}, {"m": "/x.py"})):
        assert "\n" not in f.line()


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40))
def test_lint_text_never_raises(text: str) -> None:
    lint_text(text, "s.json", probe=_probe())


def emit_hook(command: str, **extra: Any) -> dict[str, Any]:
    return {"type": "command", "command": command, **extra}


def test_fail_closed_emit_that_claude_code_would_let_fail_open() -> None:
    cmd = "hookaudit emit --wait --timeout 10 --fail closed"
    path = "hooks.PreToolUse[0].hooks[0]"
    # hookaudit missing from Claude Code's PATH exits 127: a non-blocking error
    assert found(pre(emit_hook(cmd, timeout=15))) == [(f"{path}.command", "fails-open-on-start")]
    assert found(pre(emit_hook(cmd + " || exit 2", timeout=15))) == []
    block = cmd + " || { echo 'hookaudit did not answer' >&2; exit 2; }"
    assert found(pre(emit_hook(block, timeout=15))) == []
    fast = "/v/bin/python3 -I -S /v/ingest/emit/fast.py --wait --fail=closed"
    assert found(pre(emit_hook(fast))) == [(f"{path}.command", "fails-open-on-start")]
    # Claude Code stops the hook before emit's own wait ends: the call runs
    assert found(pre(emit_hook(cmd + " || exit 2", timeout=10))) == [
        (f"{path}.timeout", "timeout-fails-open")
    ]
    assert found(pre(emit_hook("hookaudit emit --wait --fail closed || exit 2", timeout=5))) == [
        (f"{path}.timeout", "timeout-fails-open")  # emit's default wait, 10 s
    ]
    # MessageDisplay's default is 10 s: without a timeout of its own the hook is cut short
    doc = {"hooks": {"MessageDisplay": [{"hooks": [emit_hook(cmd + " || exit 2")]}]}}
    assert found(doc) == [("hooks.MessageDisplay[0].hooks[0]", "timeout-fails-open")]
    # Not meant to fail closed: nothing to say
    assert found(pre(emit_hook("hookaudit emit --wait", timeout=5))) == []
    assert found(pre(emit_hook("hookaudit emit"))) == []
    assert found(pre(emit_hook("echo --fail closed"))) == []


def test_emit_wait_default_is_emits() -> None:
    from engine.lint import EMIT_WAIT_DEFAULT
    from hookaudit.emit_cmd import emit

    (opt,) = [p for p in emit.params if p.name == "timeout"]
    assert opt.default == EMIT_WAIT_DEFAULT


@given(st.text(max_size=80), st.one_of(st.none(), st.integers(-5, 100), st.floats(), st.text()))
@settings(max_examples=300)
def test_fail_closed_rule_never_raises(tail: str, timeout: object) -> None:
    hook = {"type": "command", "command": f"hookaudit emit --wait --fail closed {tail}"}
    if timeout is not None:
        hook["timeout"] = timeout
    lint(pre(hook), "s.json")
