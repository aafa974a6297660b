"""LlmExecutor (prompt and agent hooks, spec §6.6) against real model endpoints on 127.0.0.1.

One ``ThreadingHTTPServer`` speaks both wire formats: ``/<scenario>/v1/messages`` is the
Anthropic Messages API, ``/<scenario>/chat/completions`` OpenAI chat completions. Each
scenario is a small script from the conversation the server received (turn number, tool
results so far) to the next answer, so the agent loop's data flow is checked end to end:
what a tool read must come back to the server in the next request.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import msgspec
import pytest

from engine.effects import Invocation, RawResult
from engine.executors.agent_tools import Sandbox
from engine.executors.llm import LlmExecutor
from engine.executors.llm_providers import AnthropicProvider, OpenAIProvider, provider_from_env
from engine.executors.prompt_args import split_arguments, substitute_arguments
from engine.records import HookIdentity, new_event
from engine.run import Engine
from engine.settings import AgentHook, PromptHook, parse_settings
from engine.sources import Source, merge
from engine.verdict import decode
from tests.support import httpd

Action = tuple[Any, ...]
Results = list[tuple[bool, str]]  # (is_error, content) of every tool result so far


@dataclasses.dataclass
class Call:
    flavor: str
    scenario: str
    headers: dict[str, str]
    body: dict[str, Any]


def conversation(flavor: str, body: dict[str, Any]) -> tuple[int, Results, str]:
    """(assistant turns so far, every tool result, the last user text) of a request."""
    turns, results, last_text = 0, [], ""
    for msg in body.get("messages", []):
        role, content = msg.get("role"), msg.get("content")
        if role == "assistant":
            turns += 1
        elif flavor == "anthropic" and role == "user" and isinstance(content, list):
            for block in content:
                if block.get("type") == "tool_result":
                    results.append((bool(block.get("is_error")), str(block.get("content"))))
        elif role == "tool":
            text = str(content)
            results.append((text.startswith("ERROR: "), text))
        elif role == "user" and isinstance(content, str):
            last_text = content
    return turns, results, last_text


def agent_reads(turn: int, results: Results, last: str) -> Action:
    steps: list[Action] = [
        ("tool", "read_file", {"path": "notes.txt"}),
        ("tool", "read_file", {"path": "/etc/passwd"}),
        ("tool", "read_file", {"path": "../outside.txt"}),
        ("tool", "read_file", {"path": "escape/secret.txt"}),
        ("tool", "grep", {"pattern": "launch", "glob": "*.txt"}),
    ]
    if turn < len(steps):
        return steps[turn]
    return ("verdict", {"ok": False, "reason": json.dumps(results)})


def agent_unknown(turn: int, results: Results, last: str) -> Action:
    if turn == 0:
        return ("tool", "Task", {"prompt": "spawn a subagent", "subagent_type": "general"})
    if turn == 1:
        return ("verdict", {"ok": "yes"})
    if turn == 2:
        return ("tool", "read_file", "{not json")  # unreadable arguments
    if turn == 3:
        return ("text", "I am done thinking.")
    return ("verdict", {"ok": True, "reason": json.dumps({"results": results, "last": last})})


SCRIPTS: dict[str, Callable[[int, Results, str], Action]] = {
    "ok": lambda *_: ("verdict", {"ok": True}),
    "deny": lambda *_: ("verdict", {"ok": False, "reason": "r"}),
    "yes": lambda *_: ("verdict", {"ok": "yes"}),
    "fenced": lambda *_: ("text", '```json\n{"ok": false, "reason": "fenced"}\n```'),
    "prose": lambda *_: ("text", "Looks fine to me."),
    "notjson": lambda *_: ("raw", 200, b"<html>gateway</html>"),
    "deep": lambda *_: ("raw", 200, b'{"content": ' + b"[" * 100_000),  # Python recursion
    "shapeless": lambda *_: ("raw", 200, b'{"foo": 1}'),
    "ratelimited": lambda *_: (
        "raw",
        429,
        b'{"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}',
    ),
    "slow": lambda *_: ("sleep", 2.0, ("verdict", {"ok": True})),
    "agent": agent_reads,
    "unknown": agent_unknown,
    "loop": lambda *_: ("tool", "list_dir", {}),
}


def render(flavor: str, body: dict[str, Any], action: Action) -> tuple[int, bytes]:
    kind = action[0]
    if kind == "raw":
        return action[1], action[2]
    if kind == "sleep":
        time.sleep(action[1])
        return render(flavor, body, action[2])
    offered = "tools" in body or "tool_choice" in body
    if flavor == "anthropic":
        usage = {"input_tokens": 11, "output_tokens": 7}
        if kind == "text":
            content: list[dict[str, Any]] = [{"type": "text", "text": action[1]}]
        else:
            name, data = ("verdict", action[1]) if kind == "verdict" else (action[1], action[2])
            content = [
                {
                    "type": "tool_use",
                    "id": f"toolu_{time.monotonic_ns()}",
                    "name": name,
                    "input": data,
                }
            ]
        stop = "end_turn" if kind == "text" else "tool_use"
        reply = {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": body.get("model"),
            "content": content,
            "stop_reason": stop,
            "usage": usage,
        }
        return 200, json.dumps(reply).encode()
    message: dict[str, Any] = {"role": "assistant", "content": None}
    if kind == "text":
        message["content"] = action[1]
    elif kind == "verdict" and not offered:  # a prompt hook: answer in the content
        message["content"] = json.dumps(action[1])
    else:
        name, data = ("verdict", action[1]) if kind == "verdict" else (action[1], action[2])
        args = data if isinstance(data, str) else json.dumps(data)
        message["tool_calls"] = [
            {
                "id": f"call_{time.monotonic_ns()}",
                "type": "function",
                "function": {"name": name, "arguments": args},
            }
        ]
    reply = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": body.get("model"),
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if message.get("tool_calls") else "stop",
            }
        ],
        "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
    }
    return 200, json.dumps(reply).encode()


class ModelServer:
    def __init__(self) -> None:
        self.calls: list[Call] = []
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body are two writes

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                body = json.loads(raw)
                parts = self.path.strip("/").split("/")
                scenario = parts[0]
                flavor = "anthropic" if self.path.endswith("/v1/messages") else "openai"
                with server.lock:
                    server.calls.append(
                        Call(
                            flavor, scenario, {k.lower(): v for k, v in self.headers.items()}, body
                        )
                    )
                status, out = render(flavor, body, SCRIPTS[scenario](*conversation(flavor, body)))
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(out)))
                    self.end_headers()
                    self.wfile.write(out)
                except (BrokenPipeError, ConnectionResetError):
                    self.close_connection = True  # the client gave up (a timeout test)

        self.httpd = httpd.serve(Handler)
        self.port = httpd.port(self.httpd)

    def base(self, scenario: str) -> str:
        return f"http://127.0.0.1:{self.port}/{scenario}"

    def close(self) -> None:
        httpd.stop(self.httpd)


@pytest.fixture(scope="module")
def models() -> Iterator[ModelServer]:
    srv = ModelServer()
    try:
        yield srv
    finally:
        srv.close()


@pytest.fixture
def server(models: ModelServer) -> ModelServer:
    with models.lock:
        models.calls.clear()
    return models


FLAVORS = ["anthropic", "openai"]


def executor(server: ModelServer, flavor: str, scenario: str, **kw: Any) -> LlmExecutor:
    if flavor == "anthropic":
        env = {"ANTHROPIC_BASE_URL": server.base(scenario), "ANTHROPIC_API_KEY": "sk-ant-test"}
    else:
        env = {
            "HOOKAUDIT_LLM_PROVIDER": "openai",
            "HOOKAUDIT_LLM_BASE_URL": server.base(scenario),
            "HOOKAUDIT_LLM_API_KEY": "sk-oai-test",
        }
    return LlmExecutor(environ={**env, "HOOKAUDIT_LLM_MODEL": "small-test-model"}, **kw)


@pytest.fixture
async def closing() -> AsyncIterator[list[LlmExecutor]]:
    made: list[LlmExecutor] = []
    try:
        yield made
    finally:
        for ex in made:
            await ex.aclose()


PAYLOAD: dict[str, Any] = {
    "hook_event_name": "PreToolUse",
    "session_id": "s1",
    "cwd": "/tmp",
    "tool_name": "Bash",
    "tool_input": {"command": "rm -rf build"},
}


def make_inv(
    prompt: str = "Is this command safe? $ARGUMENTS",
    *,
    kind: str = "prompt",
    model: str | None = None,
    timeout: float = 10.0,
    cwd: str = "/tmp",
    payload: dict[str, Any] | None = None,
) -> Invocation:
    doc = dict(payload or PAYLOAD)
    doc["cwd"] = cwd
    hook: PromptHook | AgentHook
    if kind == "prompt":
        hook = PromptHook(type="prompt", prompt=prompt, model=model)
    else:
        hook = AgentHook(type="agent", prompt=prompt, model=model)
    return Invocation(
        index=0,
        event=doc["hook_event_name"],
        hook=hook,
        identity=HookIdentity(type=kind, source="user", prompt=prompt, model=model),
        source="user",
        matcher="Bash",
        timeout=timeout,
        payload=doc,
        input_json=json.dumps(doc).encode(),
        cwd=cwd,
    )


async def run(
    server: ModelServer,
    closing: list[LlmExecutor],
    flavor: str,
    scenario: str,
    inv: Invocation,
    **kw: Any,
) -> RawResult:
    ex = executor(server, flavor, scenario, **kw)
    closing.append(ex)
    return await ex.run(inv)


# --------------------------------------------------------------------------- arguments


def test_arguments_substitution_follows_claude_code() -> None:
    args = '{"tool_name": "Bash", "tool_input": {"command": "ls -la"}}'
    assert substitute_arguments("Check $ARGUMENTS now", args) == f"Check {args} now"
    assert substitute_arguments("first=$0 second=$ARGUMENTS[1]", args) == (
        "first={tool_name: second=Bash,"
    )
    assert substitute_arguments("missing=[$9]", args) == "missing=[]"
    assert substitute_arguments("Costs \\$1.00", args) == (f"Costs \\$1.00\n\nARGUMENTS: {args}")
    assert substitute_arguments("no placeholder", args) == f"no placeholder\n\nARGUMENTS: {args}"
    # One pass: text from the event is never expanded again.
    evil = '{"x": "$ARGUMENTS $0"}'
    assert substitute_arguments("$ARGUMENTS", evil) == evil
    assert split_arguments('a "b c" | d && e; f') == ["a", "b c", "d", "e", "f"]
    assert split_arguments('unbalanced "quote') == ["unbalanced", '"quote']


def test_provider_configuration_from_environment() -> None:
    a = provider_from_env(
        {"ANTHROPIC_AUTH_TOKEN": "tok", "ANTHROPIC_BASE_URL": "http://127.0.0.1:1"}
    )
    assert isinstance(a, AnthropicProvider)
    assert a.headers()["authorization"] == "Bearer tok" and "x-api-key" not in a.headers()
    assert a.headers()["anthropic-version"] == "2023-06-01"
    o = provider_from_env(
        {"HOOKAUDIT_LLM_PROVIDER": "openai", "HOOKAUDIT_LLM_BASE_URL": "http://127.0.0.1:1/v1/"}
    )
    assert isinstance(o, OpenAIProvider) and o.url == "http://127.0.0.1:1/v1/chat/completions"
    assert "authorization" not in o.headers()  # a local server needs no key
    with pytest.raises(ValueError, match="HOOKAUDIT_LLM_PROVIDER"):
        provider_from_env({"HOOKAUDIT_LLM_PROVIDER": "gemini"})
    assert LlmExecutor(environ={}).model == "claude-haiku-4-5"


# --------------------------------------------------------------------------- prompt hooks


@pytest.mark.parametrize("flavor", FLAVORS)
async def test_prompt_hook_request_and_verdicts(
    server: ModelServer, closing: list[LlmExecutor], flavor: str
) -> None:
    inv = make_inv()
    res = await run(server, closing, flavor, "deny", inv)
    assert res.error_kind is None, res
    assert json.loads(res.stdout) == {"ok": False, "reason": "r"}
    v = decode(inv, res)
    assert (v.outcome, v.blocking, v.reason, v.continue_) == ("deny", True, "r", False)
    [call] = server.calls
    body = call.body
    assert body["model"] == "small-test-model"
    user = body["messages"][-1]["content"]
    assert user == "Is this command safe? " + json.dumps(PAYLOAD)
    if flavor == "anthropic":
        assert call.headers["x-api-key"] == "sk-ant-test"
        assert call.headers["anthropic-version"] == "2023-06-01"
        assert "ok" in body["system"]
        assert body["tool_choice"] == {"type": "tool", "name": "verdict"}
        assert body["tools"][0]["input_schema"]["properties"]["ok"] == {"type": "boolean"}
        assert "thinking" not in body
    else:
        assert call.headers["authorization"] == "Bearer sk-oai-test"
        assert body["messages"][0]["role"] == "system"
        assert body["response_format"]["type"] == "json_schema"
        assert "tools" not in body
    # The exchange is recorded for replay, without credentials.
    [entry] = res.llm or []
    assert entry["model"] == "small-test-model" and entry["status"] == 200
    assert entry["messages"] == body["messages"][-1:]
    assert entry["usage"] is not None and entry["response"]["model"] == "small-test-model"
    assert "sk-" not in json.dumps(res.llm)


@pytest.mark.parametrize("flavor", FLAVORS)
async def test_hook_model_wins_over_default(
    server: ModelServer, closing: list[LlmExecutor], flavor: str
) -> None:
    res = await run(server, closing, flavor, "ok", make_inv(model="big-model"))
    assert json.loads(res.stdout) == {"ok": True}
    assert server.calls[0].body["model"] == "big-model"


@pytest.mark.parametrize("flavor", FLAVORS)
async def test_ok_must_be_a_boolean(
    server: ModelServer, closing: list[LlmExecutor], flavor: str
) -> None:
    inv = make_inv()
    res = await run(server, closing, flavor, "yes", inv)
    assert res.error_kind is None and json.loads(res.stdout) == {"ok": "yes"}
    v = decode(inv, res)
    assert (v.outcome, v.error_kind, v.blocking) == ("error", "bad_verdict", False)


@pytest.mark.parametrize("flavor", FLAVORS)
async def test_text_answers_fenced_and_prose(
    server: ModelServer, closing: list[LlmExecutor], flavor: str
) -> None:
    inv = make_inv()
    fenced = await run(server, closing, flavor, "fenced", inv)
    assert json.loads(fenced.stdout) == {"ok": False, "reason": "fenced"}
    prose = await run(server, closing, flavor, "prose", inv)
    assert prose.stdout == "Looks fine to me."
    assert decode(inv, prose).error_kind == "bad_verdict"


@pytest.mark.parametrize("flavor", FLAVORS)
@pytest.mark.parametrize(
    ("scenario", "needle"),
    [
        ("notjson", "not JSON"),
        ("deep", "not JSON"),
        ("shapeless", "malformed"),
        ("ratelimited", "slow down"),
    ],
)
async def test_provider_errors_are_llm_transport(
    server: ModelServer, closing: list[LlmExecutor], flavor: str, scenario: str, needle: str
) -> None:
    inv = make_inv()
    res = await run(server, closing, flavor, scenario, inv)
    assert res.error_kind == "llm_transport" and needle in (res.error or ""), res
    assert res.llm and res.llm[0]["error"]
    v = decode(inv, res)
    assert (v.outcome, v.blocking) == ("error", False)


async def test_unreachable_provider_is_llm_transport(closing: list[LlmExecutor]) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ex = LlmExecutor(environ={"ANTHROPIC_BASE_URL": f"http://127.0.0.1:{port}"})
    closing.append(ex)
    res = await ex.run(make_inv())
    assert res.error_kind == "llm_transport" and "ConnectError" in (res.error or "")


@pytest.mark.parametrize("flavor", FLAVORS)
async def test_timeout(server: ModelServer, closing: list[LlmExecutor], flavor: str) -> None:
    # the model would answer after a long sleep: the timeout's answer comes instead
    res = await run(server, closing, flavor, "slow", make_inv(timeout=0.3))
    assert res.error_kind == "timeout" and "0.3 s" in (res.error or "")
    assert res.llm and res.llm[0]["status"] is None  # the question is recorded all the same


# --------------------------------------------------------------------------- agent hooks


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    root.mkdir()
    (root / "notes.txt").write_text("launch code 42\n")
    (tmp_path / "outside.txt").write_text("outside secret\n")
    escape = root / "escape"
    escape.symlink_to(tmp_path)  # a symlink that leads out of the project
    return root


@pytest.mark.parametrize("flavor", FLAVORS)
async def test_agent_reads_in_the_project_and_is_refused_outside(
    server: ModelServer, closing: list[LlmExecutor], flavor: str, project: Path
) -> None:
    inv = make_inv("Did the agent leak the launch code? $ARGUMENTS", kind="agent", cwd=str(project))
    res = await run(server, closing, flavor, "agent", inv)
    assert res.error_kind is None, res
    verdict = json.loads(res.stdout)
    assert verdict["ok"] is False
    results = json.loads(verdict["reason"])
    (e1, notes), (e2, passwd), (e3, dotdot), (e4, link), (e5, grep) = results
    assert not e1 and "launch code 42" in notes
    assert e2 and "refused" in passwd and "root:" not in passwd
    assert e3 and "'..'" in dotdot
    assert e4 and "refused" in link and "outside secret" not in link
    assert not e5 and "notes.txt:1: launch code 42" in grep
    assert len(server.calls) == 6
    first = server.calls[0].body
    names = {t.get("name") or t["function"]["name"] for t in first["tools"]}
    assert names == {"read_file", "grep", "glob", "list_dir", "verdict"}  # no agent spawning
    # The record rebuilds every request: concatenated messages == what the server saw.
    log = res.llm or []
    assert len(log) == 6 and "params" in log[0]
    seen: list[Any] = []
    for entry, call in zip(log, server.calls, strict=True):
        seen += entry["messages"]
        sent = call.body["messages"]
        assert seen == (sent[1:] if flavor == "openai" else sent)
    v = decode(inv, res)
    assert (v.outcome, v.blocking, v.continue_) == ("deny", True, True)  # agent: continueOnBlock


@pytest.mark.parametrize("flavor", FLAVORS)
async def test_agent_unknown_tool_bad_verdict_and_nudge(
    server: ModelServer, closing: list[LlmExecutor], flavor: str, project: Path
) -> None:
    inv = make_inv(kind="agent", cwd=str(project))
    res = await run(server, closing, flavor, "unknown", inv)
    assert res.error_kind is None, res
    verdict = json.loads(res.stdout)
    assert verdict["ok"] is True
    seen = json.loads(verdict["reason"])
    (e1, task), (e2, bad), (e3, unreadable) = seen["results"]
    assert e1 and "unknown tool 'Task'" in task
    assert e2 and "'ok' must be true or false" in bad
    assert e3 and "JSON object" in unreadable
    assert "verdict" in seen["last"]  # the reminder after a turn without tools
    assert len(server.calls) == 5


@pytest.mark.parametrize("flavor", FLAVORS)
async def test_agent_without_verdict_is_cancelled_at_the_turn_cap(
    server: ModelServer, closing: list[LlmExecutor], flavor: str, project: Path
) -> None:
    inv = make_inv(kind="agent", cwd=str(project))
    res = await run(server, closing, flavor, "loop", inv)
    assert res.error_kind == "cancelled" and "50 turns" in (res.error or "")
    assert len(server.calls) == 50 and len(res.llm or []) == 50
    v = decode(inv, res)
    assert (v.outcome, v.error_kind, v.blocking) == ("noop", "cancelled", False)


async def test_agent_turn_cap_is_configurable(
    server: ModelServer, closing: list[LlmExecutor], project: Path
) -> None:
    res = await run(
        server, closing, "anthropic", "loop", make_inv(kind="agent", cwd=str(project)), max_turns=3
    )
    assert res.error_kind == "cancelled" and len(server.calls) == 3


async def test_agent_timeout_covers_the_whole_loop(
    server: ModelServer, closing: list[LlmExecutor], project: Path
) -> None:
    res = await run(
        server, closing, "openai", "slow", make_inv(kind="agent", cwd=str(project), timeout=0.3)
    )
    assert res.error_kind == "timeout"


# --------------------------------------------------------------------------- the sandbox


def test_sandbox_confinement(tmp_path: Path) -> None:
    root = tmp_path / "p"
    (root / "src").mkdir(parents=True)
    (root / "src" / "a.py").write_text("import os\nSECRET = 1\n")
    (root / "b.txt").write_text("hello\n")
    (tmp_path / "out.txt").write_text("outside\n")
    (root / "link_out").symlink_to(tmp_path / "out.txt")
    (root / "dir_out").symlink_to(tmp_path)
    (root / "link_in").symlink_to(root / "b.txt")
    transcript = tmp_path / "t.jsonl"
    transcript.write_text('{"type": "user"}\n')
    os.mkfifo(root / "fifo")
    box = Sandbox(str(root), [str(transcript)])

    def ok(name: str, **args: Any) -> str:
        text, error = box.run(name, args)
        assert not error, text
        return text

    def refused(name: str, **args: Any) -> str:
        text, error = box.run(name, args)
        assert error, text
        return text

    assert "hello" in ok("read_file", path="b.txt")
    assert "hello" in ok("read_file", path=str(root / "b.txt"))
    assert "hello" in ok("read_file", path="link_in")  # a symlink that stays inside
    assert '"user"' in ok("read_file", path=str(transcript))
    assert "2\tSECRET = 1" in ok("read_file", path="src/a.py", offset=2, limit=1)
    assert "outside" in refused("read_file", path=str(tmp_path / "out.txt"))
    assert "outside the project" in refused("read_file", path="link_out")
    assert "outside the project" in refused("read_file", path="dir_out/out.txt")
    assert "'..'" in refused("read_file", path="src/../../out.txt")
    assert "'..'" in refused("list_dir", path="..")
    assert "regular file" in refused("read_file", path="fifo")
    assert "outside" in refused("read_file", path="/etc/passwd")
    assert "bad arguments" in refused("read_file", path="b.txt", mode="w")
    assert ok("glob", pattern="**/*.py") == "src/a.py"
    assert "'..'" in refused("glob", pattern="../*")
    assert refused("glob", pattern="/etc/*")
    grep = ok("grep", pattern="SECRET|hello")
    assert "src/a.py:2: SECRET = 1" in grep and "b.txt:1: hello" in grep
    assert "outside" not in ok("grep", pattern="outside")  # symlinks are not followed
    assert "regex" in refused("grep", pattern="(") or "failed" in refused("grep", pattern="(")
    listing = ok("list_dir").splitlines()
    assert {"src/", "b.txt", "link_out@", "dir_out@"} <= set(listing)
    # A root of "/" confines nothing: only the extra files stay readable.
    wide = Sandbox("/", [str(transcript)])
    assert wide.run("read_file", {"path": "/etc/passwd"})[1]
    assert not wide.run("read_file", {"path": str(transcript)})[1]


def test_sandbox_output_is_capped(tmp_path: Path) -> None:
    (tmp_path / "big.txt").write_text("y" * 100 + "\n" * 5000)
    box = Sandbox(str(tmp_path), output_cap=1000)
    text, error = box.run("read_file", {"path": "big.txt"})
    assert not error and len(text.encode()) < 1200 and "output truncated" in text


# --------------------------------------------------------------------------- through the engine


def settings(hook: dict[str, Any], tmp: Path) -> Any:
    doc = {"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [hook]}]}}
    return merge([Source("project", str(tmp / "s.json"), parse_settings(doc, "s.json"), str(tmp))])


@pytest.mark.parametrize("flavor", FLAVORS)
async def test_case_47_prompt_hook_ok_false_denies_and_ends_the_turn(
    server: ModelServer, closing: list[LlmExecutor], flavor: str, tmp_path: Path
) -> None:
    llm = executor(server, flavor, "deny")
    closing.append(llm)
    engine = Engine({"prompt": llm, "agent": llm})
    ev = new_event(PAYLOAD)
    out = await engine.evaluate(
        ev, settings({"type": "prompt", "prompt": "Safe? $ARGUMENTS"}, tmp_path)
    )
    assert out.blocked and out.decision == "deny" and out.reason == "r"
    assert out.continue_ is False
    assert out.runs[0].llm and out.runs[0].llm[0]["status"] == 200
    cob = await engine.evaluate(
        ev,
        settings({"type": "prompt", "prompt": "Safe?", "continueOnBlock": True}, tmp_path),
    )
    assert cob.blocked and cob.reason == "r" and cob.continue_ is True


async def test_engine_agent_hook_and_cancelled_agent(
    server: ModelServer, closing: list[LlmExecutor], project: Path, tmp_path: Path
) -> None:
    payload = {**PAYLOAD, "cwd": str(project)}
    agent = executor(server, "anthropic", "agent")
    loop = executor(server, "anthropic", "loop", max_turns=2)
    closing += [agent, loop]
    eff = settings({"type": "agent", "prompt": "Check $ARGUMENTS"}, tmp_path)
    out = await Engine({"agent": agent}).evaluate(new_event(payload), eff)
    assert out.blocked and out.continue_ is True
    compat = await Engine({"agent": loop}).evaluate(new_event(payload), eff)
    assert not compat.blocked  # cancelled, not a decision
    enforcing = await Engine({"agent": loop}, posture="enforcing").evaluate(new_event(payload), eff)
    assert enforcing.blocked  # agent-core: no verdict is never approval


async def test_executor_refuses_other_hook_types(closing: list[LlmExecutor]) -> None:
    from engine.settings import HttpHook

    ex = LlmExecutor(environ={})
    closing.append(ex)
    inv = msgspec.structs.replace(make_inv(), hook=HttpHook(type="http", url="http://127.0.0.1/"))
    assert (await ex.run(inv)).error_kind == "unknown_type"


async def test_concurrent_prompt_hooks_share_one_client(
    server: ModelServer, closing: list[LlmExecutor]
) -> None:
    ex = executor(server, "openai", "ok")
    closing.append(ex)
    results = await asyncio.gather(*(ex.run(make_inv()) for _ in range(10)))
    assert all(json.loads(r.stdout) == {"ok": True} for r in results)
    assert len(server.calls) == 10
