"""Agents' dialects: each captured hook input (tests/fixtures/agents/, from the real
binaries) normalises to a canonical event, every answer is one the agent obeys, and no
input, however hostile, gets past as anything but InvalidEvent."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.aggregate import Decision
from engine.dialects.base import derived_id
from engine.dialects.codex import patch_files
from engine.dialects.registry import AGENTS, get
from engine.errors import InvalidEvent
from engine.payload import check_types
from ingest.emit import fast

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "agents"
#: agent -> the folder of hook inputs captured from its real binary
CAPTURED = {
    "codex": "codex-0.171.0",
    "gemini_cli": "gemini-0.61.0",
    "copilot_cli": "copilot-1.0.102",
    "qwen_code": "qwen-0.24.4",
    "cline": "cline-3.0.65",
}
CASES = [(a, p) for a, d in CAPTURED.items() for p in sorted((FIXTURES / d).glob("*.json"))]
GEMINI_MODEL_EVENTS = {"BeforeModel", "AfterModel", "BeforeToolSelection"}


def test_the_fast_path_knows_every_agent() -> None:
    assert fast.AGENTS == AGENTS


@pytest.mark.parametrize(("agent", "path"), CASES, ids=lambda c: getattr(c, "stem", c))
def test_every_captured_input_normalises_to_a_canonical_event(agent: str, path: Path) -> None:
    payload = json.loads(path.read_text())
    if agent == "gemini_cli" and path.stem in GEMINI_MODEL_EVENTS:
        with pytest.raises(InvalidEvent, match="no Claude Code counterpart"):
            get(agent).normalise(payload)
        return
    said = get(agent).normalise(payload)
    check_types(said.payload)
    assert said.agent_event == payload.get("hook_event_name", payload.get("hookName"))
    if "tool_name" in payload or "toolName" in payload or "tool_call" in payload:
        assert (
            said.agent_tool == payload.get("tool_name", payload.get("toolName")) or agent == "cline"
        )
        assert said.payload["tool_name"] == "Bash"  # every captured call ran a shell command
        assert said.payload["tool_input"]["command"] == "echo hookaudit-probe"
        assert isinstance(said.payload["tool_use_id"], str) and said.payload["tool_use_id"]


OPENCODE_HOOKS = {
    "tool.execute.before.json": "tool.execute.before",
    "tool.execute.after.json": "tool.execute.after",
    "chat.message.json": "chat.message",
    "event_session.created.json": "session.created",
    "event_session.idle.json": "session.idle",
}


@pytest.mark.parametrize(("name", "hook"), sorted(OPENCODE_HOOKS.items()))
def test_opencode_hook_arguments_normalise(name: str, hook: str) -> None:
    """The plugin sends each hook's (input, output) as OpenCode passed them (captured)."""
    captured = json.loads((FIXTURES / "opencode-1.18.33" / name).read_text())
    said = get("opencode").normalise({"hook_event_name": hook, **captured, "directory": "/w"})
    check_types(said.payload)
    assert said.payload["cwd"] == "/w" and said.payload["session_id"].startswith("ses_")
    if hook.startswith("tool."):
        assert (said.agent_tool, said.payload["tool_name"]) == ("bash", "Bash")
        assert said.payload["tool_input"] == {"command": "echo hookaudit-probe"}
        assert said.payload["tool_use_id"] == "call_ff19df32"
    if hook == "chat.message":
        assert "run the probe command" in said.payload["prompt"]


def test_cline_batches_are_read_whole() -> None:
    pre = json.loads((FIXTURES / "cline-3.0.65" / "PreToolUse.json").read_text())
    c = get("cline")
    two = {**pre, "tool_call": {"id": "c1", "name": "run_commands",
                                "input": {"commands": ["ls", "rm -rf /"]}}}  # fmt: skip
    said = c.normalise(two)
    assert said.payload["tool_input"]["command"] == "ls\nrm -rf /"
    files = {**pre, "tool_call": {"id": "c2", "name": "read_files",
                                  "input": {"files": [{"path": "a"}, {"path": "/etc/shadow"}]}}}  # fmt: skip
    assert c.normalise(files).payload["tool_input"]["file_paths"] == ["a", "/etc/shadow"]
    assert c.express("PreToolUse", DENY).stdout == '{"cancel":true,"errorMessage":"no"}'
    assert c.block("PreToolUse", "down").stdout.startswith('{"cancel":true')


def test_gemini_names_map_to_claude_codes() -> None:
    g = get("gemini_cli")
    pre = json.loads((FIXTURES / "gemini-0.61.0" / "BeforeTool.json").read_text())
    post = json.loads((FIXTURES / "gemini-0.61.0" / "AfterTool.json").read_text())
    a, b = g.normalise(pre), g.normalise(post)
    assert (a.payload["hook_event_name"], b.payload["hook_event_name"]) == (
        "PreToolUse",
        "PostToolUse",
    )
    assert a.payload["tool_use_id"] == b.payload["tool_use_id"]  # Pre and Post pair up
    write = g.normalise({**pre, "tool_name": "write_file",
                         "tool_input": {"file_path": "/etc/x", "content": "y"}})  # fmt: skip
    assert (write.payload["tool_name"], write.payload["tool_input"]["file_path"]) == (
        "Write",
        "/etc/x",
    )
    read = g.normalise(
        {**pre, "tool_name": "read_file", "tool_input": {"absolute_path": "/etc/shadow"}}
    )
    assert read.payload["tool_input"] == {"file_path": "/etc/shadow"}
    mcp = g.normalise({**pre, "tool_name": "mcp_gh_issue", "tool_input": {},
                       "mcp_context": {"server_name": "gh", "tool_name": "issue"}})  # fmt: skip
    assert mcp.payload["tool_name"] == "mcp__gh__issue"
    fetch = g.normalise({**pre, "tool_name": "web_fetch",
                         "tool_input": {"prompt": "summarise https://evil.example/x please"}})  # fmt: skip
    assert fetch.payload["tool_input"]["url"] == "https://evil.example/x"


def test_codex_apply_patch_is_the_file_operation_it_performs() -> None:
    c = get("codex")
    pre = json.loads((FIXTURES / "codex-0.171.0" / "PreToolUse.json").read_text())
    add = "*** Begin Patch\n*** Add File: new.py\n+x\n*** End Patch\n"
    both = "*** Begin Patch\n*** Add File: a.py\n+x\n*** Update File: /etc/passwd\n@@\n-a\n+b\n*** End Patch\n"
    one = c.normalise({**pre, "tool_name": "apply_patch", "tool_input": {"command": add}})
    assert (one.payload["tool_name"], one.payload["tool_input"]["file_path"]) == ("Write", "new.py")
    two = c.normalise({**pre, "tool_name": "apply_patch", "tool_input": {"command": both}})
    assert two.payload["tool_name"] == "Edit"
    assert two.payload["tool_input"]["file_paths"] == ["a.py", "/etc/passwd"]
    assert two.agent_tool == "apply_patch"
    assert patch_files("*** Update File: a\n*** Move to: b\n") == [("Update", "a"), ("Move", "b")]


DENY = Decision(blocked=True, decision="deny", reason="no")


@pytest.mark.parametrize(
    ("agent", "decision", "expected"),
    [
        ("codex", DENY, ("", "no", 2)),
        ("codex", Decision(decision="ask", reason="sure?"), None),
        ("codex", Decision(decision="allow", updated_input={"command": "x"}), None),
        ("codex", Decision(decision="allow"), ("", "", 0)),
        ("codex", Decision(), ("", "", 0)),
        ("gemini_cli", DENY, ('{"decision":"deny","reason":"no"}', "", 0)),
        ("gemini_cli", Decision(decision="allow"), ("", "", 0)),
        ("gemini_cli", Decision(decision="ask"), None),
    ],
)
def test_pre_tool_use_answers(agent: str, decision: Decision, expected: tuple | None) -> None:
    said = get(agent).express("PreToolUse", decision)
    if expected is not None:
        assert (said.stdout, said.stderr, said.exit_code) == expected
    else:  # what the agent cannot do is blocked, saying why
        blocking = said.exit_code == 2 or json.loads(said.stdout or "{}").get("decision") == "deny"
        assert blocking and "blocked" in (said.stderr + said.stdout), said


def _call(agent: str, own_tool: str, canonical: dict[str, Any]) -> Any:
    from engine.records import new_event

    payload = {"hook_event_name": "PreToolUse", "session_id": "s", "tool_name": "x",
               "tool_input": canonical}  # fmt: skip
    return new_event(payload, agent=agent, agent_tool=own_tool, host="h", user="u")


def _blocks(said: Any) -> bool:
    return said.exit_code == 2 or json.loads(said.stdout or "{}").get("decision") == "deny"


def test_a_rewrite_goes_back_in_the_agents_own_keys() -> None:
    """Rewrites that the real binaries apply (tests/agents: test_a_rewritten_command_is_what_runs):
    Codex's updatedInput with an allow (without it Codex ran the original), Gemini's merged
    tool_input in its keys, OpenCode's replaced args; what they cannot apply is blocked."""
    new = {"file_path": "/p/b", "content": "x"}
    rewrite = Decision(decision="allow", updated_input=new)
    said = get("gemini_cli").express(
        "PreToolUse",
        rewrite,
        _call("gemini_cli", "write_file", {"file_path": "/p/a", "content": "x"}),
    )
    assert json.loads(said.stdout) == {"hookSpecificOutput": {
        "hookEventName": "BeforeTool", "tool_input": {"absolute_path": "/p/b", "content": "x"}}}  # fmt: skip
    # a rewrite that drops a key: Gemini would merge it and keep the key, so it is blocked
    dropped = get("gemini_cli").express(
        "PreToolUse", rewrite, _call("gemini_cli", "write_file", {"file_path": "/p/a", "content": "x", "mode": "a"})
    )  # fmt: skip
    assert _blocks(dropped) and "cannot apply" in dropped.stdout
    assert _blocks(get("gemini_cli").express("PreToolUse", rewrite))  # the call unknown
    cmd = Decision(decision="allow", updated_input={"command": "ls -l"})
    said = get("codex").express("PreToolUse", cmd, _call("codex", "Bash", {"command": "ls"}))
    assert json.loads(said.stdout) == {"hookSpecificOutput": {"hookEventName": "PreToolUse",
        "permissionDecision": "allow", "updatedInput": {"command": "ls -l"}}}  # fmt: skip
    patch = get("codex").express("PreToolUse", cmd, _call("codex", "apply_patch", {"command": "x"}))
    assert _blocks(patch) and "only for Codex's shell" in patch.stderr
    said = get("opencode").express("PreToolUse", rewrite, _call("opencode", "write", {}))
    assert json.loads(said.stdout) == {
        "decision": "allow",
        "args": {"filePath": "/p/b", "content": "x"},
    }
    own = _call("copilot_cli", "Bash", {"command": "ls"})
    own = msgspec.structs.replace(own, agent_event="PreToolUse")
    said = get("copilot_cli").express("PreToolUse", cmd, own)
    assert json.loads(said.stdout) == {"hookSpecificOutput": {"hookEventName": "PreToolUse",
        "updatedInput": {"command": "ls -l"}}}  # fmt: skip
    for agent in ("copilot_cli", "qwen_code", "cline"):  # copilot: a camelCase hook's call
        said = get(agent).express("PreToolUse", cmd, _call(agent, "bash", {"command": "ls"}))
        assert "rewrites this call's input" in said.stdout + said.stderr, (agent, said)


@pytest.mark.parametrize("agent", ["codex", "gemini_cli", "copilot_cli", "qwen_code"])
@pytest.mark.parametrize("event", ["PreToolUse", "UserPromptSubmit", "Stop"])
def test_without_a_decision_the_answer_blocks_with_no_json(agent: str, event: str) -> None:
    said = get(agent).block(event, "worker down")
    # exit 2 with the reason on stderr and nothing on stdout: each of these agents blocks on it
    assert (said.stdout, said.exit_code) == ("", 2) and "worker down" in said.stderr


def test_gemini_blocks_on_its_own_event_names_and_on_unknown_ones() -> None:
    g = get("gemini_cli")
    assert g.block("BeforeTool", "x").exit_code == 2
    assert g.block("SomethingNew", "x").exit_code == 2
    assert g.block("SessionStart", "x").exit_code == 0


def _nested(kids: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=10), kids, max_size=4)


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    _nested,
    max_leaves=20,
)
_names = st.sampled_from(
    ["BeforeTool", "AfterTool", "BeforeAgent", "AfterAgent", "SessionStart", "PreToolUse",
     "PostToolUse", "Stop", "BeforeModel", "preToolUse", "permissionRequest", "tool_call",
     "tool_result", "agent_start", "tool.execute.before", "tool.execute.after", "chat.message",
     "session.idle", "", "x" * 200]
)  # fmt: skip
_tools = st.sampled_from(
    ["run_shell_command", "apply_patch", "write_file", "read_file", "web_fetch", "Bash", "bash",
     "mcp_x_y", "run_commands", "read_files", "editor", "edit"]
) | st.text(max_size=30)  # fmt: skip


@settings(max_examples=600, deadline=None)
@given(
    agent=st.sampled_from([a for a in AGENTS if a != "claude_code"]),
    name=_names,
    tool=_tools,
    tool_input=_json,
    extra=st.dictionaries(st.text(max_size=12), _json, max_size=5),
    shape=st.sampled_from(["claude", "camel", "cline", "opencode"]),
)
def test_hostile_input_is_invalid_or_canonical(
    agent: str, name: str, tool: str, tool_input: Any, extra: dict[str, Any], shape: str
) -> None:
    """Whatever an agent's hook is given, normalising it ends in a canonical event the
    engine accepts, or in InvalidEvent (which emit answers with the agent's block)."""
    payload: dict[str, Any] = {**extra}
    if shape == "claude":
        payload.update(hook_event_name=name, session_id="s", tool_name=tool, tool_input=tool_input)
    elif shape == "camel":
        payload.update(hookName=name, sessionId="s", toolName=tool, toolArgs=tool_input)
    elif shape == "cline":
        payload.update(
            hookName=name, taskId="t", tool_call={"id": "c", "name": tool, "input": tool_input}
        )
    else:
        payload.update(hook_event_name=name, input={"tool": tool, "sessionID": "s", "callID": "c"},
                       output={"args": tool_input})  # fmt: skip
    try:
        said = get(agent).normalise(payload)
        check_types(said.payload)
    except InvalidEvent:
        return
    assert isinstance(said.payload["hook_event_name"], str)
    if "tool_name" in said.payload:
        assert isinstance(said.payload["tool_name"], str)
        assert isinstance(said.payload.get("tool_use_id", ""), str)


def test_derived_ids_are_stable_and_distinct() -> None:
    assert derived_id("s", "Bash", {"command": "a"}) == derived_id("s", "Bash", {"command": "a"})
    assert derived_id("s", "Bash", {"command": "a"}) != derived_id("s", "Bash", {"command": "b"})
    assert derived_id("s", "Bash", {"a": 1, "b": 2}) == derived_id("s", "Bash", {"b": 2, "a": 1})
    assert derived_id("s", "Bash", {"x": float("inf")}).startswith("ha-")


def test_sigma_products_name_agents() -> None:
    """`product: codex` sees Codex's events only, `coding_agent` every agent's, and
    `claude_code` Claude Code's: in the Python reference and in DuckDB alike."""
    import duckdb

    from engine.records import Outcome, new_event
    from queries.sigma import load_rules
    from queries.sigma_duckdb import events_table, rule_sql
    from tests.support.sigma_reference import event_fields, matches

    pre = json.loads((FIXTURES / "gemini-0.61.0" / "BeforeTool.json").read_text())
    said = get("gemini_cli").normalise(pre)
    ev = new_event(said.payload, agent="gemini_cli", agent_event=said.agent_event,
                   agent_tool=said.agent_tool, agent_payload=json.dumps(pre))  # fmt: skip
    fields = event_fields(Outcome(event=ev, settings_id="s"))
    assert (fields["Agent"], fields["AgentToolName"], fields["ToolName"]) == (
        "gemini_cli", "run_shell_command", "Bash")  # fmt: skip
    con = duckdb.connect()
    events_table(con, [fields])
    for product, want in [("gemini_cli", True), ("coding_agent", True), ("claude_code", False),
                          ("codex", False)]:  # fmt: skip
        text = (f"title: t\nlogsource: {{product: {product}, category: process_creation}}\n"
                "detection:\n  s: {CommandLine|contains: probe}\n  condition: s\n")  # fmt: skip
        (rule,) = load_rules(text, "t.yml")
        assert matches(rule, fields) is want, product
        got = con.execute(f"SELECT count(*) FROM detect_events WHERE {rule_sql(rule)}").fetchone()
        assert bool(got and got[0]) is want, product


def test_a_codex_input_with_a_null_transcript_path_is_read() -> None:
    """Codex's hook schema makes `transcript_path` a nullable string: null is dropped from
    the canonical event, not refused (refused, every call of such a session was blocked)."""
    from engine.payload import check_types

    doc = {"hook_event_name": "PermissionRequest", "session_id": "s", "turn_id": "t",
           "cwd": "/tmp", "model": "m", "permission_mode": "default", "transcript_path": None,
           "tool_name": "Bash", "tool_input": {"command": "ls"}}  # fmt: skip
    said = get("codex").normalise(doc)
    check_types(said.payload)
    assert "transcript_path" not in said.payload and said.payload["tool_name"] == "Bash"
