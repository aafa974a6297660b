"""Backfill of other agents' session files: the tool calls and other events they show, as
those agents' hooks sent them (each agent's file is read by its own module:
`ingest.backfill_codex`, `ingest.backfill_gemini`, `ingest.backfill_qwen`).

Codex CLI keeps each session as a rollout (`~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl`:
`function_call` and `function_call_output` items), Gemini CLI as a chat file
(`~/.gemini/tmp/<project>/chats/session-*.jsonl`: each model message's `toolCalls` with
their results), Qwen Code as a chat file (`~/.qwen/projects/<project>/chats/*.jsonl`:
`functionCall` parts and `tool_result` records). Each tool call becomes the PreToolUse
input that agent's hook would have sent (field by field as its binary sends it:
tests/fixtures/agents/transcripts), which its dialect then normalises exactly as
`hookaudit emit --agent` does, so a backfilled call and the live one have the same
canonical payload and `tool_use_id` and `hookaudit query unchecked` pairs them.

Rules of this file (those of `ingest.backfill`, whose `Scan`, ids and bounds it shares):
- A session file is untrusted input: a line over `MAX_LINE`, a line that is not a JSON
  object, an entry of the wrong shape is counted in `Scan.skipped` and passed over; nothing
  raises but `OSError` from reading the file.
- The event id is derived from (session id, the agent's call id) as for Claude Code: a file
  backfilled twice gives the same ids.
- `hookaudit_backfill` (the file, its line, and `ran`: true, false when the agent reports
  the call blocked, null with no result) travels in the agent's input, verbatim.

Example:
    >>> kind_of(['{"timestamp":"t","type":"session_meta","payload":{"id":"s"}}'])
    'codex'
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from engine.records import HookEvent, new_event
from engine.userfiles import open_regular
from ingest.backfill import MAX_CALLS, MAX_LINE, Scan, backfill_id

__all__ = [
    "AgentCall",
    "AgentEvent",
    "add_call",
    "add_event",
    "function_output",
    "json_object",
    "kind_of",
    "scan_agent_file",
    "scan_agent_lines",
    "texts_of",
]


@dataclass
class AgentCall:
    """One tool call of an agent's session file, as that agent's PreToolUse hook input."""

    agent: str
    session_id: str
    call_id: str
    ts: datetime
    hook: dict[str, Any]  # the agent's own PreToolUse input
    transcript: str
    line: int
    ran: bool | None = None
    tool_name: str = ""  # canonical, once normalised
    tool_use_id: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    def own(self) -> dict[str, Any]:
        """The agent's input with hookaudit's backfill note."""
        note = {"transcript": self.transcript, "line": self.line, "ran": self.ran}
        return {**self.hook, "hookaudit_backfill": note}

    def event(self, *, host: str | None = None, user: str | None = None) -> HookEvent:
        """The HookEvent `emit --agent` would make of this input (source "backfill")."""
        from engine.dialects.registry import get

        own = self.own()
        said = get(self.agent).normalise(own)
        return new_event(
            said.payload,
            source="backfill",
            host=host,
            user=user,
            ts=self.ts,
            event_id=backfill_id(self.session_id, self.call_id, self.ts),
            agent=self.agent,
            agent_event=said.agent_event,
            agent_tool=said.agent_tool,
            agent_payload=json.dumps(own, separators=(",", ":")),
        )


@dataclass
class AgentEvent:
    """One event of an agent's session file that is not a tool call, as that agent's hook
    input (kept in `Scan.events` beside Claude Code's rebuilt events)."""

    agent: str
    session_id: str
    key: str  # with the session, what makes its id
    ts: datetime
    hook: dict[str, Any]  # the agent's own input
    transcript: str
    line: int
    event_name: str = ""  # canonical, once normalised

    def own(self) -> dict[str, Any]:
        return {
            **self.hook,
            "hookaudit_backfill": {"transcript": self.transcript, "line": self.line},
        }

    def event(self, *, host: str | None = None, user: str | None = None) -> HookEvent:
        """The HookEvent `emit --agent` would make of this input (source "backfill")."""
        from engine.dialects.registry import get

        own = self.own()
        said = get(self.agent).normalise(own)
        return new_event(
            said.payload,
            source="backfill",
            host=host,
            user=user,
            ts=self.ts,
            event_id=backfill_id(self.session_id, self.key, self.ts),
            agent=self.agent,
            agent_event=said.agent_event,
            agent_tool=said.agent_tool,
            agent_payload=json.dumps(own, separators=(",", ":")),
        )


def add_event(e: AgentEvent, scan: Scan) -> None:
    """Keep `e` in `scan.events` when its dialect reads it (else it is passed over)."""
    if len(scan.events) >= MAX_CALLS:
        scan.skipped += 1
        return
    from engine.dialects.registry import get
    from engine.errors import InvalidEvent
    from engine.payload import check_types

    try:
        said = get(e.agent).normalise(e.own())
        check_types(said.payload)
    except InvalidEvent:
        scan.skipped += 1
        return
    e.event_name = str(said.payload["hook_event_name"])
    scan.events.append(e)


def json_object(line: str | bytes) -> dict[str, Any] | None:
    try:
        v = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return v if isinstance(v, dict) else None


def texts_of(parts: object) -> str | None:
    """The text of a message made only of text parts (Gemini CLI's `content`, Qwen Code's
    `parts`), joined; None for anything else (a tool's response, a function call)."""
    if not isinstance(parts, list) or not parts:
        return None
    texts = [p.get("text") for p in parts if isinstance(p, dict)]
    if len(texts) != len(parts) or not all(isinstance(t, str) for t in texts):
        return None
    return "".join(t for t in texts if isinstance(t, str))


def function_output(parts: object) -> str | None:
    """What a call returned to the model: the `output` of a lone functionResponse part, as
    Gemini CLI (a tool call's `result`) and Qwen Code (a `tool_result`'s parts) keep it."""
    if not isinstance(parts, list) or len(parts) != 1 or not isinstance(parts[0], dict):
        return None
    fr = parts[0].get("functionResponse")
    response = fr.get("response") if isinstance(fr, dict) else None
    out = response.get("output") if isinstance(response, dict) else None
    return out if isinstance(out, str) else None


def kind_of(first_lines: Iterable[str]) -> str | None:
    """Which agent wrote a session file, from its first readable lines; None: not one of
    these (a Claude Code transcript is `ingest.backfill`'s)."""
    for line in first_lines:
        d = json_object(line)
        if d is None:
            continue
        if d.get("type") == "session_meta" and isinstance(d.get("payload"), dict):
            return "codex"
        if "sessionId" in d and "projectHash" in d:
            return "gemini_cli"
        if "uuid" in d and "sessionId" in d and "provenance" in d:
            return "qwen_code"  # Claude Code's transcript lines look alike but have no provenance
        return None
    return None


def _lines(path: Path, scan: Scan) -> Iterator[str]:
    """The file's lines, one at a time (a session file is not read whole); a line over
    `MAX_LINE` is counted and passed over, and so is the rest of it."""
    with open_regular(path, 1 << 40) as f:
        while True:
            raw = f.readline(MAX_LINE + 1)
            if not raw:
                return
            scan.lines += 1
            if len(raw) > MAX_LINE:
                scan.skipped += 1
                while raw and not raw.endswith(b"\n"):  # the rest of the long line
                    raw = f.readline(MAX_LINE + 1)
                continue
            yield raw.decode("utf-8", "replace")


def _head(path: Path) -> list[str]:
    out: list[str] = []
    with open_regular(path, 1 << 40) as f:
        for _ in range(5):
            raw = f.readline(MAX_LINE + 1)
            if not raw:
                break
            out.append(raw.decode("utf-8", "replace"))
    return out


def scan_agent_file(path: Path, scan: Scan, calls: list[AgentCall]) -> str | None:
    """Add the tool calls of one agent session file to `calls`; the agent, or None when the
    file is none of theirs (nothing added, nothing counted). OSError when it cannot be read."""
    kind = kind_of(_head(path))
    if kind is None:
        return None
    scan_agent_lines(kind, _lines(path, scan), str(path), scan, calls)
    return kind


def scan_agent_lines(
    kind: str, lines: Iterable[str], path: str, scan: Scan, calls: list[AgentCall]
) -> None:
    """The calls (into `calls`) and other events (into `scan.events`) of the lines of one
    `kind` of session file, read as if it were at `path`."""
    if kind == "codex":
        from ingest.backfill_codex import scan_rollout

        scan_rollout(lines, path, scan, calls)
    elif kind == "gemini_cli":
        from ingest.backfill_gemini import scan_chat

        scan_chat(lines, path, scan, calls)
    elif kind == "qwen_code":
        from ingest.backfill_qwen import scan_chat as scan_qwen

        scan_qwen(lines, path, scan, calls)


def add_call(
    c: AgentCall, calls: list[AgentCall], scan: Scan, by_id: dict[str, AgentCall] | None
) -> None:
    if len(calls) >= MAX_CALLS:
        scan.skipped += 1
        return
    from engine.dialects.registry import get
    from engine.errors import InvalidEvent
    from engine.payload import check_types

    try:
        said = get(c.agent).normalise(c.own())
        check_types(said.payload)
    except InvalidEvent:
        scan.skipped += 1
        return
    c.tool_name = str(said.payload.get("tool_name") or "")
    c.tool_use_id = str(said.payload.get("tool_use_id") or "")
    calls.append(c)
    if by_id is not None:
        by_id[c.call_id] = c
