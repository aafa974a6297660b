"""McpExecutor against a real stdio MCP server (a Python script in the test's tmp dir).

The server speaks JSON-RPC 2.0 over newline-delimited JSON and logs every message it
receives to a file, so the handshake and the substituted arguments are checked where
they arrive. Its tools: ``echo`` (answers its arguments as JSON text), ``fail``
(``isError: true``), ``sleep`` (blocks past the timeout), ``crash`` (exits mid-call),
``pid`` (its process id, to see restarts) and ``big`` (one oversized line).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from engine.effects import Invocation
from engine.errors import SettingsError
from engine.executors.mcp import McpExecutor, load_mcp_config, substitute
from engine.records import HookIdentity, new_event
from engine.run import Engine
from engine.settings import McpToolHook, parse_settings
from engine.sources import Source, merge

SERVER = textwrap.dedent(
    """
    import json, os, sys, time

    log = open(os.environ["MCP_LOG"], "a")

    def send(msg):
        sys.stdout.write(json.dumps(msg) + "\\n")
        sys.stdout.flush()

    def text(mid, value, is_error=False):
        send({"jsonrpc": "2.0", "id": mid,
              "result": {"content": [{"type": "text", "text": value}], "isError": is_error}})

    for line in sys.stdin:
        msg = json.loads(line)
        log.write(json.dumps(msg) + "\\n")
        log.flush()
        method, mid = msg.get("method"), msg.get("id")
        if method == "initialize":
            send({"jsonrpc": "2.0", "id": mid, "result": {
                "protocolVersion": msg["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "policy", "version": "1"}}})
        elif method == "tools/call":
            name, args = msg["params"]["name"], msg["params"].get("arguments", {})
            if name == "echo":
                text(mid, json.dumps(args))
            elif name == "fail":
                text(mid, "policy backend down", is_error=True)
            elif name == "sleep":
                time.sleep(float(args.get("seconds", 30)))
                text(mid, "{}")
            elif name == "crash":
                sys.stderr.write("boom\\n")
                sys.stderr.flush()
                os._exit(3)
            elif name == "pid":
                text(mid, str(os.getpid()))
            elif name == "big":
                text(mid, "x" * 200000)
            else:
                send({"jsonrpc": "2.0", "id": mid,
                      "error": {"code": -32602, "message": "Unknown tool: " + name}})
        elif mid is not None:
            send({"jsonrpc": "2.0", "id": mid, "error": {"code": -32601, "message": "nope"}})
    """
)

DENY_INPUT = {
    "hookSpecificOutput": {
        "hookEventName": "PreToolUse",
        "permissionDecision": "deny",
        "permissionDecisionReason": "no edits to ${tool_input.file_path}",
    }
}
EVENT: dict[str, Any] = {
    "hook_event_name": "PreToolUse",
    "session_id": "s1",
    "cwd": "/tmp",
    "tool_name": "Write",
    "tool_input": {"file_path": "/etc/passwd", "content": "x"},
}


@pytest.fixture
def mcp_json(tmp_path: Path) -> Path:
    script = tmp_path / "server.py"
    script.write_text(SERVER)
    doc = {
        "mcpServers": {
            "policy": {
                "command": sys.executable,
                "args": [str(script)],
                "env": {"MCP_LOG": str(tmp_path / "log.jsonl")},
            },
            "remote": {"type": "http", "url": "http://127.0.0.1:9/mcp"},
        }
    }
    path = tmp_path / ".mcp.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.fixture
async def executor(mcp_json: Path) -> AsyncIterator[McpExecutor]:
    ex = McpExecutor(load_mcp_config([mcp_json]), grace=1.0)
    yield ex
    await ex.aclose()


def received(tmp_path: Path) -> list[dict[str, Any]]:
    path = tmp_path / "log.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


def invocation(
    tool: str, input: dict[str, Any] | None = None, *, server: str = "policy", timeout: float = 10.0
) -> Invocation:
    hook = McpToolHook(type="mcp_tool", server=server, tool=tool, input=input)
    return Invocation(
        index=0,
        event="PreToolUse",
        hook=hook,
        identity=HookIdentity(type="mcp_tool", source="project", server=server, tool=tool),
        source="project",
        matcher="Write",
        timeout=timeout,
        payload=EVENT,
        input_json=json.dumps(EVENT).encode(),
        cwd="/tmp",
    )


def settings_for(
    tmp: Path, tool: str, input: dict[str, Any] | None = None, server: str = "policy"
) -> Any:
    hook: dict[str, Any] = {"type": "mcp_tool", "server": server, "tool": tool}
    if input is not None:
        hook["input"] = input
    doc = {"hooks": {"PreToolUse": [{"matcher": "Write", "hooks": [hook]}]}}
    return merge(
        [Source("project", str(tmp / "settings.json"), parse_settings(doc, "s.json"), str(tmp))]
    )


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it is reaped by the executor shortly after.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


# --------------------------------------------------------------------------- through the engine


async def test_engine_denies_through_an_mcp_tool_hook(
    executor: McpExecutor, tmp_path: Path
) -> None:
    engine = Engine({"mcp_tool": executor})
    out = await engine.evaluate(new_event(EVENT), settings_for(tmp_path, "echo", DENY_INPUT))
    assert out.blocked and out.decision == "deny"
    assert out.reason == "no edits to /etc/passwd"
    msgs = received(tmp_path)
    assert [m.get("method") for m in msgs] == [
        "initialize",
        "notifications/initialized",
        "tools/call",
    ]
    init = msgs[0]["params"]
    assert init["protocolVersion"] == "2025-06-18" and init["capabilities"] == {}
    assert init["clientInfo"]["name"] == "hookaudit"
    assert "id" not in msgs[1]
    call = msgs[2]["params"]
    assert call["name"] == "echo"
    assert call["arguments"]["hookSpecificOutput"]["permissionDecisionReason"] == (
        "no edits to /etc/passwd"
    )


async def test_is_error_is_a_non_blocking_error_denied_when_enforcing(
    executor: McpExecutor, tmp_path: Path
) -> None:
    eff = settings_for(tmp_path, "fail")
    compat = await Engine({"mcp_tool": executor}).evaluate(new_event(EVENT), eff)
    assert not compat.blocked
    assert compat.runs[0].outcome == "error" and compat.runs[0].error_kind == "mcp_tool_error"
    enforcing = await Engine({"mcp_tool": executor}, posture="enforcing").evaluate(
        new_event(EVENT), eff
    )
    assert enforcing.blocked


async def test_unknown_server_is_an_error(executor: McpExecutor, tmp_path: Path) -> None:
    eff = settings_for(tmp_path, "echo", server="nowhere")
    out = await Engine({"mcp_tool": executor}).evaluate(new_event(EVENT), eff)
    assert not out.blocked and out.runs[0].error_kind == "mcp_not_connected"
    raw = await executor.run(invocation("echo", server="plugin:p:nowhere"))
    assert raw.error_kind == "mcp_not_connected" and "plugin:p:nowhere" in (raw.error or "")


# --------------------------------------------------------------------------- executor


async def test_substitution_reaches_the_server(executor: McpExecutor, tmp_path: Path) -> None:
    inp = {
        "path": "${tool_input.file_path}",
        "nested": [{"p": "file=${tool_input.file_path};missing=${tool_input.nope}"}, 7],
        "whole": "${tool_input}",
        "n": 3,
    }
    raw = await executor.run(invocation("echo", inp))
    assert raw.error_kind is None and raw.exit_code == 0
    args = json.loads(raw.stdout)
    assert args["path"] == "/etc/passwd"
    assert args["nested"] == [{"p": "file=/etc/passwd;missing="}, 7]
    assert json.loads(args["whole"]) == EVENT["tool_input"]
    assert args["n"] == 3


def test_substitute_only_touches_strings() -> None:
    payload = {"a": {"b": [{"c": "deep"}]}, "t": True}
    assert substitute({"x": "${a.b.0.c}", "y": "${t}", "z": 1, "k${a}": None}, payload) == {
        "x": "deep",
        "y": "true",
        "z": 1,
        "k${a}": None,
    }


async def test_one_server_is_shared_by_parallel_calls(executor: McpExecutor) -> None:
    a, b = await asyncio.gather(executor.run(invocation("pid")), executor.run(invocation("pid")))
    assert a.stdout == b.stdout == str(executor.pids()["policy"])


async def test_timeout_is_an_error_and_the_server_restarts(
    executor: McpExecutor, tmp_path: Path
) -> None:
    first = await executor.run(invocation("pid"))
    old = int(first.stdout)
    raw = await executor.run(invocation("sleep", {"seconds": "30"}, timeout=0.5))
    assert raw.error_kind == "timeout" and "0.5 s" in (raw.error or "")
    assert not alive(old)
    again = await executor.run(invocation("pid"))
    assert again.error_kind is None and int(again.stdout) != old
    methods = [m.get("method") for m in received(tmp_path)]
    assert methods.count("initialize") == 2


async def test_crash_is_an_error_then_the_server_restarts(executor: McpExecutor) -> None:
    old = int((await executor.run(invocation("pid"))).stdout)
    raw = await executor.run(invocation("crash"))
    assert raw.error_kind == "mcp_connection_closed"
    assert "exit code 3" in (raw.error or "") and "boom" in (raw.error or "")
    again = await executor.run(invocation("pid"))
    assert again.error_kind is None and int(again.stdout) != old


async def test_unknown_tool_is_an_rpc_error(executor: McpExecutor) -> None:
    raw = await executor.run(invocation("nope"))
    assert raw.error_kind == "mcp_rpc_error" and "Unknown tool: nope" in (raw.error or "")


async def test_http_server_is_unsupported(executor: McpExecutor) -> None:
    raw = await executor.run(invocation("echo", server="remote"))
    assert raw.error_kind == "mcp_transport_unsupported"


async def test_oversized_message_is_a_protocol_error(mcp_json: Path) -> None:
    ex = McpExecutor(load_mcp_config([mcp_json]), max_message=64 * 1024, grace=1.0)
    try:
        raw = await ex.run(invocation("big"))
        assert raw.error_kind == "mcp_protocol"
        again = await ex.run(invocation("echo", {"ok": "yes"}))
        assert json.loads(again.stdout) == {"ok": "yes"}
    finally:
        await ex.aclose()


async def test_spawn_failure_is_not_connected(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    path.write_text(json.dumps({"mcpServers": {"policy": {"command": str(tmp_path / "absent")}}}))
    ex = McpExecutor(load_mcp_config([path]))
    raw = await ex.run(invocation("echo"))
    assert raw.error_kind == "mcp_not_connected" and "cannot start" in (raw.error or "")
    await ex.aclose()


async def test_aclose_terminates_the_server(mcp_json: Path) -> None:
    ex = McpExecutor(load_mcp_config([mcp_json]), grace=1.0)
    pid = int((await ex.run(invocation("pid"))).stdout)
    assert alive(pid)
    await ex.aclose()
    assert not alive(pid)


# --------------------------------------------------------------------------- configuration


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("{not json", "invalid JSON"),
        ("[]", "expected an object"),
        ("{}", "mcpServers: missing"),
        ('{"mcpServers": {"p": {"args": []}}}', "mcpServers.p.command"),
        ('{"mcpServers": {"p": {"command": "x", "args": [1]}}}', "mcpServers.p.args"),
        ('{"mcpServers": {"p": {"command": "x", "env": {"A": 1}}}}', "mcpServers.p.env.A"),
        ('{"mcpServers": {"p": {"type": "http"}}}', "mcpServers.p.url"),
        ('{"mcpServers": {"p": {"type": "ws", "url": "x"}}}', "mcpServers.p.type"),
    ],
)
def test_malformed_mcp_json_names_the_file(tmp_path: Path, text: str, where: str) -> None:
    path = tmp_path / ".mcp.json"
    path.write_text(text)
    with pytest.raises(SettingsError) as info:
        load_mcp_config([path])
    assert str(path) in str(info.value) and where in str(info.value)


def test_later_files_override_and_missing_file_is_an_error(tmp_path: Path) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps({"mcpServers": {"p": {"command": "one"}, "q": {"command": "q"}}}))
    b.write_text(json.dumps({"mcpServers": {"p": {"type": "http", "url": "https://x/mcp"}}}))
    servers = load_mcp_config([a, b])
    assert servers["p"].type == "http" and servers["q"].command == "q"
    with pytest.raises(SettingsError, match=r"absent\.json"):
        load_mcp_config([tmp_path / "absent.json"])


async def test_env_vars_in_config_are_expanded(tmp_path: Path, mcp_json: Path) -> None:
    doc = json.loads(mcp_json.read_text())
    doc["mcpServers"]["policy"]["env"]["MCP_LOG"] = "${LOGDIR}/log.jsonl"
    doc["mcpServers"]["policy"]["args"].append("${UNSET_FLAG:-}")
    mcp_json.write_text(json.dumps(doc))
    ex = McpExecutor(load_mcp_config([mcp_json]), environ={**os.environ, "LOGDIR": str(tmp_path)})
    try:
        assert (await ex.run(invocation("pid"))).error_kind is None
        assert received(tmp_path)
    finally:
        await ex.aclose()
    bare = McpExecutor(load_mcp_config([mcp_json]), environ={"PATH": os.environ["PATH"]})
    raw = await bare.run(invocation("pid"))
    assert raw.error_kind == "mcp_not_connected" and "LOGDIR" in (raw.error or "")


def test_eval_discovers_the_projects_mcp_json(mcp_json: Path, tmp_path: Path) -> None:
    """`hookaudit eval` with a project whose .mcp.json names the server an mcp_tool hook uses."""
    import subprocess

    proj = tmp_path
    (proj / ".claude").mkdir()
    hook = {"type": "mcp_tool", "server": "policy", "tool": "echo", "input": DENY_INPUT}
    (proj / ".claude" / "settings.json").write_text(
        json.dumps({"hooks": {"PreToolUse": [{"matcher": "Write", "hooks": [hook]}]}})
    )
    event = {**EVENT, "cwd": str(proj)}
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "hookaudit",
            "eval",
            "--settings",
            f"project:{proj / '.claude' / 'settings.json'}",
        ],
        input=json.dumps(event),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["decision"] == "deny" and out["reason"] == "no edits to /etc/passwd"
