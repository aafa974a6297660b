"""Settings files: validation, errors naming file and JSON path, sources and merging."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.errors import SettingsError
from engine.settings import CommandHook, PythonHook, UnknownHook, load_file, parse_settings
from engine.sources import discover, find_project_root, load_sources, parse_scoped


def cmd(command: str, **kw: object) -> dict[str, object]:
    return {"type": "command", "command": command, **kw}


def write(path: Path, doc: object) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc))
    return str(path)


def test_parses_every_hook_type() -> None:
    s = parse_settings(
        {
            "hooks": {
                "PreToolUse": [
                    {
                        "matcher": "Bash",
                        "hooks": [
                            cmd("x", **{"if": "Bash(git *)", "async": True, "timeout": 5}),
                            {"type": "http", "url": "http://127.0.0.1:1/h", "headers": {"A": "b"}},
                            {
                                "type": "prompt",
                                "prompt": "is $ARGUMENTS ok?",
                                "continueOnBlock": True,
                            },
                            {"type": "agent", "prompt": "check"},
                            {"type": "mcp_tool", "server": "s", "tool": "t"},
                            {"type": "python", "callable": "pkg.mod:fn"},
                        ],
                    }
                ]
            }
        },
        "s.json",
    )
    hooks = s.hooks["PreToolUse"][0].hooks
    assert [h.type for h in hooks] == ["command", "http", "prompt", "agent", "mcp_tool", "python"]
    first = hooks[0]
    assert isinstance(first, CommandHook)
    assert first.if_ == "Bash(git *)" and first.async_ and first.timeout == 5


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ([], "s.json: expected a JSON object at the top level"),
        ({"hooks": []}, "s.json: hooks: expected an object"),
        ({"hooks": {"PreToolUse": {}}}, "s.json: hooks.PreToolUse: expected a list"),
        (
            {"hooks": {"PreToolUse": [{"hooks": [{"type": "command"}]}]}},
            "s.json: hooks.PreToolUse[0].hooks[0].command: Field required",
        ),
        (
            {"hooks": {"PreToolUse": [{"matcher": 3, "hooks": []}]}},
            "s.json: hooks.PreToolUse[0].matcher: expected a string",
        ),
        (
            {"hooks": {"Stop": [{"hooks": [cmd("x", timeout=-1)]}]}},
            "s.json: hooks.Stop[0].hooks[0].timeout: Input should be greater than 0",
        ),
        ({"hooks": {"NotAnEvent": []}}, "s.json: hooks.NotAnEvent: unknown hook event"),
        (
            {"hooks": {"Stop": [{"hooks": [{"type": "python", "callable": "no colon"}]}]}},
            "s.json: hooks.Stop[0].hooks[0].callable",
        ),
        ({"disableAllHooks": "yes"}, "s.json: disableAllHooks"),
        (
            {"hooks": {"PreToolUse": [{"matcher": "(", "hooks": []}]}},
            "s.json: hooks.PreToolUse[0].matcher: invalid regex '(' (missing ')')",
        ),
    ],
)
def test_errors_name_file_and_json_path(doc: object, message: str) -> None:
    with pytest.raises(SettingsError) as info:
        parse_settings(doc, "s.json")
    assert str(info.value).startswith(message)


def test_lenient_skips_malformed_entries_like_claude_code() -> None:
    warnings: list[str] = []
    s = parse_settings(
        {"hooks": {"Nope": [], "Stop": [{"hooks": [{"type": "command"}, cmd("ok")]}]}},
        "s.json",
        strict=False,
        warnings=warnings,
    )
    assert [h.command for h in s.hooks["Stop"][0].hooks if isinstance(h, CommandHook)] == ["ok"]
    assert any("hooks.Nope" in w for w in warnings)
    assert any("hooks.Stop[0].hooks[0].command" in w for w in warnings)


def test_unknown_hook_type_is_kept_for_enforcing_posture() -> None:
    warnings: list[str] = []
    s = parse_settings(
        {"hooks": {"Stop": [{"hooks": [{"type": "wasm"}]}]}}, "s.json", warnings=warnings
    )
    assert isinstance(s.hooks["Stop"][0].hooks[0], UnknownHook)
    assert warnings == ["s.json: hooks.Stop[0].hooks[0].type: unknown hook type 'wasm'"]


def test_malformed_json_names_line_and_column(tmp_path: Path) -> None:
    f = tmp_path / "settings.json"
    f.write_text('{\n  "hooks": {,}\n}')
    with pytest.raises(SettingsError) as info:
        load_file(f)
    assert str(info.value).startswith(f"{f}: line 2 column 13: invalid JSON")


def test_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="cannot read"):
        load_file(tmp_path / "missing.json")


def test_python_file_callable_is_anchored_to_the_settings_dir(tmp_path: Path) -> None:
    f = write(
        tmp_path / "p" / "s.json",
        {"hooks": {"Stop": [{"hooks": [{"type": "python", "callable": "hooks.py:check"}]}]}},
    )
    hook = load_file(f).hooks["Stop"][0].hooks[0]
    assert isinstance(hook, PythonHook)
    assert hook.callable == f"{tmp_path}/p/hooks.py:check"


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=20),
        lambda kids: (
            st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=12), kids, max_size=4)
        ),
        max_leaves=30,
    )
)
@settings(max_examples=300)
def test_parse_settings_only_raises_settings_error(doc: object) -> None:
    for strict in (True, False):
        with contextlib.suppress(SettingsError):
            parse_settings(doc, "fuzz.json", strict=strict)


def test_parse_scoped() -> None:
    assert parse_scoped("managed:/etc/x.json") == ("managed", "/etc/x.json")
    assert parse_scoped("C:/odd/path.json") == ("project", "C:/odd/path.json")


def test_hooks_concatenate_in_claude_code_order(tmp_path: Path) -> None:
    specs = [
        ("managed", write(tmp_path / "m.json", {"hooks": {"Stop": [{"hooks": [cmd("m")]}]}})),
        ("project", write(tmp_path / "p.json", {"hooks": {"Stop": [{"hooks": [cmd("p")]}]}})),
        ("user", write(tmp_path / "u.json", {"hooks": {"Stop": [{"hooks": [cmd("u")]}]}})),
        ("local", write(tmp_path / "l.json", {"hooks": {"Stop": [{"hooks": [cmd("l")]}]}})),
    ]
    eff = load_sources(specs)
    assert [(e.scope, getattr(e.hook, "command", None)) for e in eff.entries["Stop"]] == [
        ("user", "u"),
        ("project", "p"),
        ("local", "l"),
        ("managed", "m"),
    ]


def test_settings_id_changes_with_content_only(tmp_path: Path) -> None:
    a = write(tmp_path / "a.json", {"hooks": {"Stop": [{"hooks": [cmd("x")]}]}})
    b = write(tmp_path / "b" / "a.json", {"hooks": {"Stop": [{"hooks": [cmd("x")]}]}})
    c = write(tmp_path / "c.json", {"hooks": {"Stop": [{"hooks": [cmd("y")]}]}})
    ids = [load_sources([("project", p)]).settings_id for p in (a, b, c)]
    assert ids[0] == ids[1] != ids[2]


def test_plugin_root_and_data(tmp_path: Path) -> None:
    root = tmp_path / "plug"
    write(
        root / "hooks" / "hooks.json",
        {"description": "d", "hooks": {"Stop": [{"hooks": [cmd("${CLAUDE_PLUGIN_ROOT}/run.sh")]}]}},
    )
    eff = load_sources([("plugin", str(root))])
    (entry,) = eff.entries["Stop"]
    assert entry.scope == "plugin" and entry.plugin_root == str(root.resolve())
    assert entry.plugin_data and entry.plugin_data.endswith("/plugins/data/plug")


def test_policy_keys_merge(tmp_path: Path) -> None:
    eff = load_sources(
        [
            (
                "user",
                write(
                    tmp_path / "u.json",
                    {"allowedHttpHookUrls": ["http://a/*"], "httpHookAllowedEnvVars": ["A"]},
                ),
            ),
            ("project", write(tmp_path / "p.json", {"allowedHttpHookUrls": ["http://b/*"]})),
        ]
    )
    assert eff.allowed_http_urls == ("http://a/*", "http://b/*")
    assert eff.http_env_allowlist == ("A",)
    assert load_sources([]).allowed_http_urls is None


def test_disable_all_hooks_scalar_precedence(tmp_path: Path) -> None:
    user_true = write(tmp_path / "u.json", {"disableAllHooks": True})
    project_false = write(tmp_path / "p.json", {"disableAllHooks": False})
    assert load_sources([("user", user_true)]).disable_all
    assert not load_sources([("user", user_true), ("project", project_false)]).disable_all
    flag_true = write(tmp_path / "f.json", {"disableAllHooks": True})
    assert load_sources([("project", project_false), ("flag", flag_true)]).disable_all
    managed = write(tmp_path / "m.json", {"disableAllHooks": True})
    eff = load_sources([("managed", managed), ("project", project_false)])
    assert eff.managed_disable_all and eff.disable_all


def test_discovery_from_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    user = write(home / ".claude" / "settings.json", {})
    proj = tmp_path / "work" / "repo"
    p = write(proj / ".claude" / "settings.json", {})
    loc = write(proj / ".claude" / "settings.local.json", {})
    deep = proj / "src" / "pkg"
    deep.mkdir(parents=True)
    managed = write(tmp_path / "etc" / "managed-settings.json", {})
    monkeypatch.setenv("HOOKAUDIT_MANAGED_SETTINGS", managed)
    assert find_project_root(str(deep), str(home)) == str(proj)
    assert discover(str(deep), home=str(home)) == [
        ("managed", managed),
        ("user", user),
        ("project", p),
        ("local", loc),
    ]
    # home's own ~/.claude is user settings, never a project
    assert find_project_root(str(home / "x"), str(home)) is None


def test_shipped_settings_and_policies_validate() -> None:
    repo = Path(__file__).resolve().parents[2]
    files = sorted((repo / "infra").rglob("*.json"))
    assert len(files) >= 4
    for f in files:
        eff = load_sources([("project", str(f))])
        assert eff.entries, f
