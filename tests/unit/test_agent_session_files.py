"""Backfill of Codex CLI rollouts and Gemini CLI and Qwen Code chat files (captured from the
real binaries, one run allowed and one denied each): every tool call, whether it ran, and
the same canonical payload and tool_use_id as the live hook the binary sent for it."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.dialects.registry import get
from ingest.backfill import Scan
from ingest.backfill_agents import AgentCall, scan_agent_file

HERE = Path(__file__).resolve().parents[1] / "fixtures" / "agents" / "transcripts"
CASES = [(a, r) for a in ("codex", "gemini_cli", "qwen_code") for r in ("allowed", "denied")]


def _scan(path: Path) -> tuple[str | None, Scan, list[AgentCall]]:
    scan: Scan = Scan()
    calls: list[AgentCall] = []
    kind = scan_agent_file(path, scan, calls)
    return kind, scan, calls


@pytest.mark.parametrize(("agent", "run"), CASES)
def test_a_session_file_gives_the_live_hooks_call(agent: str, run: str) -> None:
    kind, scan, calls = _scan(HERE / f"{agent}-{run}.jsonl")
    assert kind == agent and scan.skipped == 0
    (call,) = calls
    assert call.ran is (run == "allowed")
    live = get(agent).normalise(json.loads((HERE / f"{agent}-{run}.hook.json").read_text()))
    back = call.event()
    payload = json.loads(back.payload)
    for key in ("hook_event_name", "session_id", "tool_name", "tool_input", "tool_use_id"):
        assert payload[key] == live.payload[key], key
    assert (back.agent, back.agent_tool, back.source) == (agent, live.agent_tool, "backfill")
    assert payload["hookaudit_backfill"]["ran"] is (run == "allowed")
    assert call.event().id == back.id  # a second run gives the same id


def test_a_claude_code_transcript_is_not_taken_for_another_agents(tmp_path: Path) -> None:
    claude = Path(__file__).resolve().parents[1] / "fixtures" / "claude_code"
    some = next(claude.rglob("*.jsonl"), None)
    f = tmp_path / "t.jsonl"
    f.write_text(
        '{"parentUuid":null,"sessionId":"s","type":"user","uuid":"u","version":"2.1.332",'
        '"message":{"role":"user","content":"hi"}}\n'
    )
    assert _scan(f)[0] is None
    if some is not None:
        assert _scan(some)[0] is None


@settings(max_examples=600, deadline=None)
@given(
    head=st.sampled_from([
        '{"timestamp":"2026-01-01T00:00:00Z","type":"session_meta","payload":{"id":"s"}}',
        '{"sessionId":"s","projectHash":"h","startTime":"2026-01-01T00:00:00Z"}',
        '{"uuid":"u","sessionId":"s","provenance":"real_user","type":"user"}',
    ]),
    lines=st.lists(
        st.one_of(
            st.text(max_size=80),
            st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                         lambda k: st.lists(k, max_size=3) | st.dictionaries(
                             st.sampled_from(["type", "payload", "toolCalls", "message", "parts",
                                              "functionCall", "args", "id", "name", "call_id",
                                              "arguments", "timestamp", "toolCallResult",
                                              "$set", "messages", "content", "text", "result",
                                              "functionResponse", "response", "output",
                                              "status", "resultDisplay", "provenance",
                                              "model", "sessionId", "callId", "uuid", "cwd"]),
                             k, max_size=4), max_leaves=12).map(json.dumps),
        ),
        max_size=12,
    ),
)  # fmt: skip
def test_hostile_session_files_are_counted_never_raised(head: str, lines: list[str]) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "s.jsonl"
        f.write_text("\n".join([head, *lines]) + "\n")
        _, scan, calls = _scan(f)
        assert scan.lines >= 1
        for c in calls:
            c.event()  # each call found makes an event the worker admits
        for e in scan.events:
            e.event()  # and so does each other event


def test_a_fifo_is_refused_and_a_long_line_passed_over(tmp_path: Path) -> None:
    fifo = tmp_path / "p.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(OSError):
        _scan(fifo)
    big = tmp_path / "big.jsonl"
    from ingest.backfill import MAX_LINE

    src = (HERE / "codex-allowed.jsonl").read_text().splitlines()
    big.write_text("\n".join([src[0], "x" * (MAX_LINE + 10), *src[1:]]) + "\n")
    kind, scan, calls = _scan(big)
    assert kind == "codex" and scan.skipped == 1 and len(calls) == 1


def test_a_codex_rollout_gives_every_event_the_binary_sent() -> None:
    """Every hook input the real Codex CLI sent in a wired run (captured beside its rollout),
    rebuilt from the rollout field by field and in key order: SessionStart, UserPromptSubmit,
    PreToolUse, PostToolUse (with the command's output), Stop. A rollout does not mark a
    session's end, so its SessionEnd is the one input not rebuilt."""
    from ingest.backfill_agents import scan_agent_lines

    live = [json.loads(x) for x in (HERE / "codex-allowed.events.jsonl").read_text().splitlines()]
    scan: Scan = Scan()
    calls: list[AgentCall] = []
    lines = (HERE / "codex-allowed.jsonl").read_text().splitlines()
    scan_agent_lines("codex", lines, live[0]["transcript_path"], scan, calls)
    assert scan.skipped == 0
    mine = [*scan.events, *calls]
    compared = []
    for sent in live:
        name = sent["hook_event_name"]
        if name == "SessionEnd":
            assert not any(e.hook["hook_event_name"] == name for e in mine)
            continue
        (got,) = [e for e in mine if e.hook["hook_event_name"] == name]
        assert got.hook == sent and list(got.hook) == list(sent), (name, got.hook, sent)
        ev = got.event()  # normalised as emit --agent codex normalises the live input
        assert json.loads(ev.payload) == {
            **get("codex").normalise(sent).payload,
            "hookaudit_backfill": json.loads(ev.payload)["hookaudit_backfill"],
        }
        assert (ev.agent, ev.source) == ("codex", "backfill") and got.event().id == ev.id
        compared.append(name)
    assert compared == ["SessionStart", "UserPromptSubmit", "PreToolUse", "PostToolUse", "Stop"]


#: What a Gemini CLI chat file cannot give: the hook's own time (each `timestamp` is the
#: file entry's), a session's end and its compressions (not written to the file).
_NOT_IN_GEMINIS_FILE = {"SessionEnd", "PreCompress"}


def test_a_gemini_chat_file_gives_every_event_the_binary_sent() -> None:
    """Every hook input the real Gemini CLI sent in a wired run (captured beside its chat
    file), rebuilt from the file field by field and in key order, but for the time of each:
    SessionStart, BeforeAgent, BeforeTool, AfterTool (with what the command returned) and
    AfterAgent. The file does not show its session's end nor a compression."""
    from ingest.backfill_agents import scan_agent_lines

    live = [
        json.loads(x) for x in (HERE / "gemini_cli-allowed.events.jsonl").read_text().splitlines()
    ]
    scan: Scan = Scan()
    calls: list[AgentCall] = []
    lines = (HERE / "gemini_cli-allowed.jsonl").read_text().splitlines()
    scan_agent_lines("gemini_cli", lines, live[0]["transcript_path"], scan, calls)
    assert scan.skipped == 0
    mine = [*scan.events, *calls]
    compared = []
    for sent in live:
        name = sent["hook_event_name"]
        if name in _NOT_IN_GEMINIS_FILE:
            assert not any(e.hook["hook_event_name"] == name for e in mine)
            continue
        (got,) = [e for e in mine if e.hook["hook_event_name"] == name]
        assert list(got.hook) == list(sent), (name, got.hook, sent)
        for key in sent:
            if key != "timestamp":
                assert got.hook[key] == sent[key], (name, key, got.hook[key], sent[key])
        gap = abs((got.ts - get_time(sent["timestamp"])).total_seconds())
        assert gap < 0.5, (name, got.hook["timestamp"], sent["timestamp"])
        ev = got.event()  # normalised as emit --agent gemini_cli normalises the live input
        expected = get("gemini_cli").normalise({**sent, "timestamp": got.hook["timestamp"]})
        assert json.loads(ev.payload) == {
            **expected.payload,
            "hookaudit_backfill": json.loads(ev.payload)["hookaudit_backfill"],
        }
        assert (ev.agent, ev.source) == ("gemini_cli", "backfill") and got.event().id == ev.id
        compared.append(name)
    assert compared == ["SessionStart", "BeforeAgent", "BeforeTool", "AfterTool", "AfterAgent"]


def get_time(text: str) -> Any:
    from ingest.backfill_events import parse_time

    return parse_time(text)


#: What a Qwen Code chat file does not keep, per event (besides the hook's own time: each
#: `timestamp` is the entry's): the permission mode, the `toolu_` id made for the hook (the
#: canonical id is the provider's `tool_call_id`), a call's duration, a Stop's context
#: figures and background work. It does not show a session's end.
_NOT_IN_QWENS_FILE = {
    "SessionStart": {"permission_mode"},
    "UserPromptSubmit": {"permission_mode"},
    "PreToolUse": {"permission_mode", "tool_use_id"},
    "PostToolUse": {"permission_mode", "tool_use_id", "duration_ms"},
    "Stop": {"permission_mode", "background_tasks", "crons", "context_usage",
             "context_limit", "input_tokens"},
}  # fmt: skip


def test_a_qwen_chat_file_gives_every_event_the_binary_sent() -> None:
    """Every hook input the real Qwen Code sent in a wired run (captured beside its chat
    file), rebuilt from the file field by field and in key order: SessionStart, both
    UserPromptSubmit (the prompt, and the empty one as the call's result goes back),
    PreToolUse, PostToolUse (with what the command returned) and Stop. Exactly the fields
    listed in _NOT_IN_QWENS_FILE are missing, and each time is the entry's."""
    from ingest.backfill_agents import scan_agent_lines

    live = [
        json.loads(x) for x in (HERE / "qwen_code-allowed.events.jsonl").read_text().splitlines()
    ]
    scan: Scan = Scan()
    calls: list[AgentCall] = []
    lines = (HERE / "qwen_code-allowed.jsonl").read_text().splitlines()
    scan_agent_lines("qwen_code", lines, live[0]["transcript_path"], scan, calls)
    assert scan.skipped == 0
    # a session starts at its first entry, which is also its first prompt's
    mine = sorted([*scan.events, *calls],
                  key=lambda e: (e.ts, e.hook["hook_event_name"] != "SessionStart"))  # fmt: skip
    assert [e.hook["hook_event_name"] for e in mine] == [s["hook_event_name"] for s in live]
    for got, sent in zip(mine, live, strict=True):
        name = sent["hook_event_name"]
        missing = _NOT_IN_QWENS_FILE[name]
        assert list(got.hook) == [k for k in sent if k not in missing], (name, got.hook, sent)
        for key in got.hook:
            if key != "timestamp":
                assert got.hook[key] == sent[key], (name, key, got.hook[key], sent[key])
        gap = abs((got.ts - get_time(sent["timestamp"])).total_seconds())
        assert gap < 0.5, (name, got.hook["timestamp"], sent["timestamp"])
        ev = got.event()
        kept = {k: v for k, v in sent.items() if k not in missing}
        expected = get("qwen_code").normalise({**kept, "timestamp": got.hook["timestamp"]})
        assert json.loads(ev.payload) == {
            **expected.payload,
            "hookaudit_backfill": json.loads(ev.payload)["hookaudit_backfill"],
        }
        assert (ev.agent, ev.source) == ("qwen_code", "backfill") and got.event().id == ev.id


_hostile = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=True),
    st.text(max_size=30),
    st.just("x" * 100_000),
    st.just([]),
    st.just({}),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=3),
    st.just(json.loads("[" * 200 + "]" * 200)),
)


def _paths(v: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [at]
    if isinstance(v, dict):
        for k, x in v.items():
            found += _paths(x, (*at, k))
    elif isinstance(v, list):
        for i, x in enumerate(v):
            found += _paths(x, (*at, i))
    return found


def _set(v: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    v[path[0]] = _set(v[path[0]], path[1:], new)
    return v


@settings(max_examples=400, deadline=None)
@given(
    name=st.sampled_from([f"{a}-{r}.jsonl" for a, r in CASES]),
    where=st.integers(0, 10**6),
    which=st.integers(0, 10**6),
    new=_hostile,
)
def test_a_real_session_file_with_one_value_made_hostile_is_never_raised(
    name: str, where: int, which: int, new: Any
) -> None:
    """A real session file, one value anywhere in one line replaced by a hostile one (a
    wrong type, a huge string, deep nesting): read without raising, and whatever it still
    gives is admitted as an event. Reaches the paths random lines seldom do."""
    from ingest.backfill_agents import kind_of, scan_agent_lines

    lines = (HERE / name).read_text().splitlines()
    n = where % len(lines)
    doc = json.loads(lines[n])
    paths = _paths(doc)
    lines[n] = json.dumps(_set(doc, paths[which % len(paths)], new))
    kind = kind_of(lines[:5]) or name.split("-")[0]
    scan: Scan = Scan()
    calls: list[AgentCall] = []
    scan_agent_lines(kind, lines, "/t/s.jsonl", scan, calls)
    for item in [*calls, *scan.events]:
        item.event()
