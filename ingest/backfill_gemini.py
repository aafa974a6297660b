"""Backfill of a Gemini CLI chat file (`~/.gemini/tmp/<project>/chats/session-*.jsonl`): its
tool calls (each model message's `toolCalls`, and whether each ran) and its other events,
each as the hook input the real binary sent for it (tests/fixtures/agents/transcripts:
checked field by field).

What the file keeps, and so what is rebuilt: SessionStart (its header; `source` is
`startup`, since a chat file is begun by a new session), BeforeAgent (each prompt typed),
BeforeTool, AfterTool (each call that ran, with what it returned) and AfterAgent (a turn's
last answer). The `cwd` comes from the session context Gemini writes as the chat's first
message (its first workspace directory). Each `timestamp` is the file entry's, not the
hook's own (a few milliseconds apart). A chat file does not mark the session's end, nor
when Gemini compressed it: no SessionEnd, no PreCompress.

The rules are `ingest.backfill_agents`' (untrusted lines counted and passed over, stable ids).

Example:
    >>> _workspace([{"content": [{"text": "- **Workspace Directories:**\\n  - /w\\n"}]}])
    '/w'
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from ingest.backfill import Scan
from ingest.backfill_agents import (
    AgentCall,
    AgentEvent,
    add_call,
    add_event,
    function_output,
    json_object,
    texts_of,
)
from ingest.backfill_events import parse_time as _when

__all__ = ["scan_chat"]

_WORKSPACE = re.compile(r"\*\*Workspace Directories:\*\*\n[ \t]*- ([^\n]{1,4096})")


def _workspace(messages: object) -> str | None:
    """The first workspace directory the session context names (the session's cwd)."""
    if not isinstance(messages, list):
        return None
    for m in messages[:4]:
        parts = m.get("content") if isinstance(m, dict) else None
        for part in parts if isinstance(parts, list) else []:
            text = part.get("text") if isinstance(part, dict) else None
            found = _WORKSPACE.search(text[:65536]) if isinstance(text, str) else None
            if found:
                return found.group(1).strip()
    return None


def _prompt(content: object) -> str | None:
    """A user entry's typed prompt: its text, or its text parts joined; None for a tool's
    response."""
    return content if isinstance(content, str) else texts_of(content)


def scan_chat(lines: Iterable[str], path: str, scan: Scan, calls: list[AgentCall]) -> None:
    """A chat file's tool calls (into `calls`) and other events (into `scan.events`)."""
    session, cwd = "", None
    seen: set[str] = set()
    prompt: tuple[str, int] | None = None  # the turn's prompt, and its line
    answer: tuple[dict[str, Any], int] | None = None  # the turn's last model message

    def said(name: str, n: int, stamp: object, key: str, **fields: Any) -> None:
        ts = _when(stamp)
        if ts is None or not session:
            scan.skipped += 1
            return
        head = {"session_id": session, "transcript_path": path, "cwd": cwd,
                "hook_event_name": name, "timestamp": stamp}  # fmt: skip
        hook = {k: v for k, v in {**head, **fields}.items() if v is not None}
        add_event(AgentEvent("gemini_cli", session, key, ts, hook, path, n), scan)

    def turn_ends() -> None:
        nonlocal prompt, answer
        if prompt is not None and answer is not None:
            m, n = answer
            said("AfterAgent", n, m.get("timestamp"), f"AfterAgent:{m.get('id')}",
                 prompt=prompt[0], prompt_response=m.get("content"), stop_hook_active=False)  # fmt: skip
        prompt = answer = None

    began: tuple[object, int] | None = None
    for n, line in enumerate(lines, 1):
        d = json_object(line)
        if d is None:
            scan.skipped += 1
            continue
        if "sessionId" in d and "projectHash" in d:
            session = str(d.get("sessionId") or "")
            began = (d.get("startTime"), n)
            continue
        found = d.get("$set")
        if isinstance(found, dict):  # the session context comes first, in a $set
            cwd = cwd or _workspace(found.get("messages"))
            if began is not None and cwd is not None:
                said("SessionStart", began[1], began[0], "SessionStart", source="startup")
                began = None
            continue
        kind = d.get("type")
        if kind == "user":
            text = _prompt(d.get("content"))
            if text is not None:  # a typed prompt begins a turn (a tool's response does not)
                turn_ends()
                said("BeforeAgent", n, d.get("timestamp"), f"BeforeAgent:{d.get('id')}",
                     prompt=text)  # fmt: skip
                prompt = (text, n)
            continue
        if kind != "gemini":
            continue
        tools = d.get("toolCalls")
        if isinstance(d.get("content"), str) and d["content"] and not tools:
            answer = (d, n)
        elif tools:
            answer = None
        for tc in tools if isinstance(tools, list) else []:
            _call(tc, d, n, path, session, cwd, seen, scan, calls, said)
    turn_ends()
    if began is not None:  # no session context found: the start without a cwd
        said("SessionStart", began[1], began[0], "SessionStart", source="startup")


def _call(
    tc: object,
    d: dict[str, Any],
    n: int,
    path: str,
    session: str,
    cwd: str | None,
    seen: set[str],
    scan: Scan,
    calls: list[AgentCall],
    said: Any,
) -> None:
    """One entry of a message's `toolCalls`: its BeforeTool, and its AfterTool if it ran."""
    if not isinstance(tc, dict) or not isinstance(tc.get("name"), str):
        scan.skipped += 1
        return
    if not isinstance(tc.get("args"), dict):
        scan.skipped += 1
        return
    call_id = str(tc.get("id") or "")
    ts = _when(tc.get("timestamp")) or _when(d.get("timestamp"))
    if not call_id or call_id in seen or ts is None:
        return  # a message is written again as its tool calls complete
    seen.add(call_id)
    hook = {"session_id": session, "transcript_path": path, "cwd": cwd,
            "hook_event_name": "BeforeTool", "timestamp": d.get("timestamp"),
            "tool_name": tc["name"], "tool_input": tc["args"]}  # fmt: skip
    c = AgentCall(
        "gemini_cli", session, call_id, ts, {k: v for k, v in hook.items() if v is not None},
        path, n,
    )  # fmt: skip
    result = tc.get("result")
    if result is not None:
        c.ran = "Tool execution blocked" not in json.dumps(result)
        scan.results += 1
    add_call(c, calls, scan, None)
    output = function_output(result)
    if tc.get("status") == "success" and output is not None:
        display = tc.get("resultDisplay")
        said("AfterTool", n, tc.get("timestamp") or d.get("timestamp"), f"AfterTool:{call_id}",
             tool_name=tc["name"], tool_input=tc["args"],
             tool_response={"llmContent": output,
                            "returnDisplay": display if isinstance(display, str) else ""})  # fmt: skip
