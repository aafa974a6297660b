"""ingest.backfill: transcripts of the real Claude Code into the PreToolUse inputs it sent.

The fixtures (tests/fixtures/claude_code/<version>/) hold, for one run each, the hook inputs
the real binary sent and the session's transcript: every backfilled PreToolUse must equal
the input Claude Code sent for that call, field by field. Transcripts are hostile input:
no line, however broken, may raise.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ingest import backfill
from ingest.backfill import backfill_id, scan_lines, scan_path, transcripts

FIXTURES = sorted(
    (Path(__file__).resolve().parents[1] / "fixtures" / "claude_code").glob("*/*.json")
)


def _fixture(name: str) -> dict:
    (path,) = [p for p in FIXTURES if p.name == name]
    return json.loads(path.read_text())


def _lines(doc: dict) -> list[str]:
    return [json.dumps(e) for e in doc["transcript"]]


def test_a_backfilled_pretooluse_is_the_input_claude_code_sent() -> None:
    compared = 0
    for path in FIXTURES:
        doc = json.loads(path.read_text())
        for sent in doc["hook_inputs"]:
            if sent.get("hook_event_name") != "PreToolUse" or "agent_id" in sent:
                continue  # a subagent's call is in its own transcript: the test below
            calls = scan_lines(_lines(doc), sent["transcript_path"]).calls
            (call,) = [c for c in calls if c.tool_use_id == sent["tool_use_id"]]
            payload = call.payload()
            extra = payload.pop("hookaudit_backfill")
            assert payload == sent, (path.name, payload, sent)
            assert extra["transcript"] == sent["transcript_path"] and extra["line"] >= 1
            compared += 1
    assert compared >= 5


def test_a_subagents_call_is_the_input_claude_code_sent(tmp_path: Path) -> None:
    """A subagent's transcript (`<session>/subagents/agent-<id>.jsonl`, as the real binary
    wrote it) gives the input Claude Code sent for its calls: the session's transcript as
    `transcript_path`, `agent_type` from the meta file, the session prompt's permission mode. A subagent that a subagent started (`spawnDepth` 2,
    sub.nested_pre) lies flat beside its parent, and is read the same way."""
    compared, depths = 0, set()
    for path in FIXTURES:
        doc = json.loads(path.read_text())
        for sub in doc.get("subagents", []):
            sent_main = doc["hook_inputs"][0]["transcript_path"]
            session = Path(sent_main).stem
            proj = tmp_path / path.stem / "proj"
            (proj / session / "subagents").mkdir(parents=True, exist_ok=True)
            main = proj / f"{session}.jsonl"
            main.write_text("".join(json.dumps(e) + "\n" for e in doc["transcript"]))
            agent = proj / session / "subagents" / sub["file"]
            agent.write_text("".join(json.dumps(e) + "\n" for e in sub["transcript"]))
            agent.with_suffix(".meta.json").write_text(json.dumps(sub["meta"]))
            calls = {c.tool_use_id: c for c in scan_path(agent).calls}
            for sent in doc["hook_inputs"]:
                if sent.get("hook_event_name") != "PreToolUse" or (
                    f"agent-{sent.get('agent_id')}.jsonl" != sub["file"]
                ):
                    continue
                payload = calls[sent["tool_use_id"]].payload()
                extra = payload.pop("hookaudit_backfill")
                assert payload == {**sent, "transcript_path": str(main)}, (path.name, payload)
                assert extra["transcript"] == str(agent)
                compared += 1
                depths.add(sub["meta"]["spawnDepth"])
            # without the meta file and the session's transcript: the call, less those fields
            agent.with_suffix(".meta.json").unlink()
            main.unlink()
            for c in scan_path(agent).calls:
                assert c.agent_id and c.agent_type is None and c.permission_mode is None
    assert compared >= 2 and depths == {1, 2}


def test_hostile_subagent_meta_and_session_files_are_passed_over(tmp_path: Path) -> None:
    d = tmp_path / "s1" / "subagents"
    d.mkdir(parents=True)
    line = {"type": "assistant", "sessionId": "s1", "isSidechain": True, "agentId": "a1",
            "promptId": "p", "timestamp": "2026-01-02T03:04:05Z", "message": {"content": [
                {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {}}]}}  # fmt: skip
    user = {"type": "user", "sessionId": "s1", "isSidechain": True, "promptId": "p"}
    (d / "agent-a1.jsonl").write_text(json.dumps(user) + "\n" + json.dumps(line) + "\n")
    for meta, parent in [
        (b"[" * 100_000, b"[" * 100_000),
        (b'{"agentType": 5}', b'{"type": "user", "promptId": 1, "permissionMode": []}\n'),
        (b'{"agentType": "' + b"x" * 300 + b'"}', b"\xff\xfe" + b"{" * 5000),
        (b"\x00" * (2 << 20), b'{"type":"user","promptId":"p","permissionMode":"plan"}\n'),
    ]:
        (d / "agent-a1.meta.json").write_bytes(meta)
        (tmp_path / "s1.jsonl").write_bytes(parent)
        backfill._modes_cached.cache_clear()
        (call,) = scan_path(d / "agent-a1.jsonl").calls
        assert call.agent_type is None and call.transcript_path == str(tmp_path / "s1.jsonl")
    assert call.permission_mode == "plan"  # the last parent was readable


def test_every_tool_call_of_a_transcript_and_whether_it_ran() -> None:
    seen = 0
    for path in FIXTURES:
        doc = json.loads(path.read_text())
        calls = {c.tool_use_id: c for c in scan_lines(_lines(doc), "t.jsonl").calls}
        for sent in doc["hook_inputs"]:  # each call a PostToolUse saw ran, with that input
            if sent.get("hook_event_name") == "PostToolUse":
                c = calls[sent["tool_use_id"]]
                assert c.tool_input == sent["tool_input"] and c.ran is True, path.name
                seen += 1
    assert seen >= 1
    # A hook refused the call (exit 2, an http hook's deny, a prompt hook's deny): not run.
    for name in ("pre.exit2.blocks.json", "http.deny.json", "type.prompt_deny.json"):
        assert [c.ran for c in scan_lines(_lines(_fixture(name)), "t").calls] == [False], name
    # Ran, and failed: still ran (PostToolUseFailure).
    assert [c.ran for c in scan_lines(_lines(_fixture("fail.context.json")), "t").calls] == [True]


def test_ids_are_stable_time_ordered_uuid7() -> None:
    t1, t2 = datetime(2026, 1, 2, tzinfo=UTC), datetime(2026, 1, 3, tzinfo=UTC)
    a, b = backfill_id("s", "toolu_1", t1), backfill_id("s", "toolu_1", t1)
    assert a == b and uuid.UUID(a).version == 7
    assert backfill_id("s", "toolu_2", t1) != a and backfill_id("s2", "toolu_1", t1) != a
    assert backfill_id("s", "toolu_0", t2) > a  # time-ordered as every event id
    doc = _fixture("pre.exit2.blocks.json")
    (c,) = scan_lines(_lines(doc), "t").calls
    ev, again = c.event(host="h", user="u"), c.event(host="h", user="u")
    assert ev.id == again.id and ev.source == "backfill" and ev.event == "PreToolUse"
    assert ev.ts == c.ts and ev.tool_use_id == c.tool_use_id


def _assistant(uid: str, name: object = "Bash", inp: object = None, **kw: object) -> str:
    entry = {
        "type": "assistant",
        "sessionId": "s",
        "timestamp": "2026-01-02T03:04:05.123Z",
        "cwd": "/p",
        "message": {"content": [{"type": "tool_use", "id": uid, "name": name,
                                 "input": {"command": "ls"} if inp is None else inp}]},
        **kw,
    }  # fmt: skip
    return json.dumps(entry)


def test_bad_entries_are_counted_and_passed_over() -> None:
    lines = [
        "not json",
        "[1, 2]",
        '{"type": "assistant"}',
        '{"type": "assistant", "message": {"content": "text"}}',
        _assistant("toolu_a", inp="a string"),  # input not an object
        _assistant("toolu_b", name=7),
        json.dumps(
            {
                "type": "assistant",
                "sessionId": "s",
                "timestamp": "yesterday",
                "message": {
                    "content": [{"type": "tool_use", "id": "x", "name": "Bash", "input": {}}]
                },
            }
        ),
        '{"type": "user", "message": {"content": [{"type": "tool_result"}]}}',
        "\r\n",
        _assistant("toolu_ok") + "\r\n",
        _assistant("toolu_ok"),  # the same block again (a resumed session)
        "{" * 100_000,
    ]
    scan = scan_lines(lines, "t")
    assert [c.tool_use_id for c in scan.calls] == ["toolu_ok"]
    assert scan.skipped == 6 and scan.lines == len(lines)


def test_overlong_and_non_utf8_lines_in_a_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(backfill, "MAX_LINE", 4096)
    f = tmp_path / "p" / "s.jsonl"
    f.parent.mkdir()
    huge = _assistant("toolu_huge", inp={"command": "x" * 10_000})
    f.write_bytes(
        b"\xff\xfe\x00garbage\n" + huge.encode() + b"\n" + _assistant("toolu_ok").encode()
    )
    scan = scan_path(next(transcripts([tmp_path])))
    assert [c.tool_use_id for c in scan.calls] == ["toolu_ok"]
    assert scan.skipped == 2 and scan.lines == 3
    with pytest.raises(OSError):
        scan_path(tmp_path / "missing.jsonl")


def test_result_marks_a_call_refused_or_ran() -> None:
    def result(uid: str, **kw: object) -> str:
        content = kw.pop("content", "ok")
        return json.dumps({"type": "user", "sessionId": "s", "message": {"content": [
            {"type": "tool_result", "tool_use_id": uid, "content": content}]}, **kw})  # fmt: skip

    lines = [
        _assistant("t1"), result("t1", permissionDecision={"decision": "reject"}),
        _assistant("t2"), result("t2", toolDenialKind="permission-rule"),
        _assistant("t3"), result("t3", content="<tool_use_error>InputValidationError</tool_use_error>"),
        _assistant("t4"), result("t4", content="Exit code 1"),
        _assistant("t5"),
        result("nobody"),
    ]  # fmt: skip
    ran = {c.tool_use_id: c.ran for c in scan_lines(lines, "t").calls}
    assert ran == {"t1": False, "t2": False, "t3": False, "t4": True, "t5": None}


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4)
    ),
    max_leaves=20,
)
_ENTRY = st.fixed_dictionaries(
    {"type": st.sampled_from(["assistant", "user", "system", 3]),
     "sessionId": st.one_of(st.just("s"), _JSON),
     "timestamp": st.one_of(st.just("2026-01-02T03:04:05Z"), _JSON),
     "message": st.one_of(_JSON, st.fixed_dictionaries({"content": st.lists(st.one_of(
         _JSON, st.fixed_dictionaries({"type": st.sampled_from(["tool_use", "tool_result"]),
                                        "id": _JSON, "tool_use_id": _JSON, "name": _JSON,
                                        "input": _JSON, "content": _JSON})), max_size=3)}))},
)  # fmt: skip


@given(
    st.lists(
        st.one_of(_ENTRY.map(json.dumps), st.text(max_size=60), st.binary(max_size=60)), max_size=12
    )
)
@settings(max_examples=300)
def test_no_line_makes_the_scan_raise(lines: list[str | bytes]) -> None:
    scan = scan_lines(lines, "t")
    for c in scan.calls:
        c.event(host="h", user="u")  # and every call makes an event


#: The events rebuilt from a transcript besides its tool calls.
REBUILT = {"SessionStart", "UserPromptSubmit", "PostToolUse", "PostToolUseFailure", "Stop",
           "SessionEnd", "PreCompact", "PostCompact"}  # fmt: skip
#: What a transcript does not keep of a hook input (left out of the rebuilt event).
#: what no transcript entry keeps: a tool's duration, why a session ended
NOT_IN_TRANSCRIPTS = {"PostToolUse": {"duration_ms"}, "PostToolUseFailure": {"duration_ms"},
                      "SessionEnd": {"reason"}}  # fmt: skip


def test_prompts_and_results_are_the_inputs_claude_code_sent() -> None:
    """Every SessionStart, UserPromptSubmit, PostToolUse, PostToolUseFailure, Stop and
    SessionEnd the real binary sent is rebuilt from its transcript, field by field (the
    transcript keeps no duration and no reason for the end); a Stop hook's block makes the
    next Stop say `stop_hook_active`."""
    compared: set[str] = set()
    for path in FIXTURES:
        doc = json.loads(path.read_text())
        for sent in doc["hook_inputs"]:
            name = sent.get("hook_event_name")
            if name not in REBUILT:
                continue
            if "agent_id" in sent:
                continue  # a subagent's calls are in its own transcript
            events = scan_lines(_lines(doc), sent["transcript_path"]).events
            mine = [e for e in events if e.event_name == name]
            if name in ("PostToolUse", "PostToolUseFailure"):
                mine = [e for e in mine if e.payload["tool_use_id"] == sent["tool_use_id"]]
            elif name == "UserPromptSubmit":
                mine = [e for e in mine if e.payload["prompt_id"] == sent["prompt_id"]]
            elif name == "SessionStart":  # the session's, or a compaction's
                mine = [e for e in mine if e.payload["source"] == sent["source"]]
            elif name == "Stop":  # each turn's end, in order
                nth = [h for h in doc["hook_inputs"] if h.get("hook_event_name") == "Stop"]
                mine = mine[nth.index(sent) :][:1]
            assert mine, (path.name, name)
            payload = dict(mine[0].payload)
            extra = payload.pop("hookaudit_backfill")
            unknown = NOT_IN_TRANSCRIPTS.get(name, set())
            if name == "SessionEnd" and "cli" in {e.get("entrypoint") for e in doc["transcript"]}:
                unknown = unknown | {"prompt_id"}  # an interactive end: /exit is not kept
            want = {k: v for k, v in sent.items() if k not in unknown}
            assert payload == want, (path.name, payload, want)
            assert list(payload) == list(want), (path.name, "key order")
            assert extra["transcript"] == sent["transcript_path"]
            ev = mine[0].event()
            assert ev.event == name and ev.source == "backfill"
            assert ev.id == mine[0].event().id  # stable: a second backfill adds nothing
            compared.add(name)
    assert compared == REBUILT, compared


def test_a_subagents_start_and_stop_are_the_inputs_claude_code_sent(tmp_path: Path) -> None:
    """SubagentStart and SubagentStop from a subagent's own transcript, as the real binary
    sent them: the session's transcript as `transcript_path`, the agent's file as
    `agent_transcript_path`, its type from the meta file, the last message it said."""
    doc = _fixture("sub.start_stop.json")
    (sub,) = doc["subagents"]
    sent_main = doc["hook_inputs"][0]["transcript_path"]
    session = Path(sent_main).stem
    proj = tmp_path / "proj"
    (proj / session / "subagents").mkdir(parents=True)
    main = proj / f"{session}.jsonl"
    main.write_text("".join(json.dumps(e) + "\n" for e in doc["transcript"]))
    agent = proj / session / "subagents" / sub["file"]
    agent.write_text("".join(json.dumps(e) + "\n" for e in sub["transcript"]))
    agent.with_suffix(".meta.json").write_text(json.dumps(sub["meta"]))
    events = {e.event_name: e for e in scan_path(agent).events}
    compared = 0
    for sent in doc["hook_inputs"]:
        name = sent["hook_event_name"]
        payload = dict(events[name].payload)
        payload.pop("hookaudit_backfill")
        want = {**sent, "transcript_path": str(main)}
        if name == "SubagentStop":
            want["agent_transcript_path"] = str(agent)
        assert payload == want, (name, payload, want)
        assert list(payload) == list(want), (name, "key order")
        compared += 1
    assert compared == 2


def test_a_compacted_interactive_session_gives_exactly_the_events_the_binary_sent() -> None:
    """The terminal UI run of tests/integration/test_claude_code_compact.py (a prompt,
    `/compact`, `/exit`, every event hooked): the session's file rebuilds one event per input
    the binary sent, and nothing it did not: no prompt for the `/compact` command, its output
    or the summary it left; one SessionEnd, though a cost-state entry is also written at each
    compaction; SessionStart twice (startup, then compact), with the session's model."""
    doc = _fixture("tui.compact.json")
    sent = [h for h in doc["hook_inputs"] if "agent_id" not in h]  # subagents: their own files
    events = scan_lines(_lines(doc), sent[0]["transcript_path"]).events
    assert sorted(e.event_name for e in events) == sorted(h["hook_event_name"] for h in sent)
