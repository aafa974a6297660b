"""Backfill of other agents' session files: the tool calls they show (and a Codex rollout's
other events), as those agents' hooks.

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
from ingest.backfill_events import parse_time as _when

__all__ = ["AgentCall", "AgentEvent", "kind_of", "scan_agent_file", "scan_agent_lines"]


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


def _add_event(e: AgentEvent, scan: Scan) -> None:
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


def _obj(line: str | bytes) -> dict[str, Any] | None:
    try:
        v = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return v if isinstance(v, dict) else None


def kind_of(first_lines: Iterable[str]) -> str | None:
    """Which agent wrote a session file, from its first readable lines; None: not one of
    these (a Claude Code transcript is `ingest.backfill`'s)."""
    for line in first_lines:
        d = _obj(line)
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
        _codex(lines, path, scan, calls)
    elif kind == "gemini_cli":
        _gemini(lines, path, scan, calls)
    elif kind == "qwen_code":
        _qwen(lines, path, scan, calls)


def _codex_mode(ctx: dict[str, Any]) -> str | None:
    """The `permission_mode` Codex gives its hooks for a turn's settings, where observed:
    `never` asking with full access is `bypassPermissions` (other settings: not said)."""
    sandbox = ctx.get("sandbox_policy")
    full = isinstance(sandbox, dict) and sandbox.get("type") == "danger-full-access"
    return "bypassPermissions" if ctx.get("approval_policy") == "never" and full else None


def _codex(lines: Iterable[str], path: str, scan: Scan, calls: list[AgentCall]) -> None:
    """A rollout's tool calls, and its other events as Codex's hooks sent them: SessionStart
    (at its `session_meta`, once a turn says the model), UserPromptSubmit (each user
    message), PostToolUse (each shell command that ran, with its output) and Stop (each
    `task_complete`). A rollout does not mark the session's end: no SessionEnd."""
    session, cwd, turn, model, mode = "", None, None, None, None
    began: tuple[datetime, int] | None = None
    by_id: dict[str, AgentCall] = {}

    def said(name: str, n: int, ts: datetime | None, key: str, **fields: Any) -> None:
        if ts is None or not session:
            scan.skipped += 1
            return
        head = {"session_id": session, "turn_id": turn, "transcript_path": path, "cwd": cwd,
                "hook_event_name": name, "model": model, "permission_mode": mode}  # fmt: skip
        if name == "SessionStart":
            head.pop("turn_id")
        hook = {k: v for k, v in {**head, **fields}.items() if v is not None}
        _add_event(AgentEvent("codex", session, key, ts, hook, path, n), scan)

    for n, line in enumerate(lines, 1):
        d = _obj(line)
        p = d.get("payload") if d is not None else None
        if d is None or not isinstance(p, dict):
            scan.skipped += 1
            continue
        kind = d.get("type")
        ts = _when(d.get("timestamp"))
        if kind == "session_meta":
            session = str(p.get("id") or p.get("session_id") or "")
            cwd = p.get("cwd") if isinstance(p.get("cwd"), str) else cwd
            began = (ts, n) if ts is not None else None
        elif kind == "turn_context":
            turn = p.get("turn_id") if isinstance(p.get("turn_id"), str) else turn
            cwd = p.get("cwd") if isinstance(p.get("cwd"), str) else cwd
            model = p.get("model") if isinstance(p.get("model"), str) else model
            mode = _codex_mode(p)
            if began is not None:
                turn, was = None, turn  # SessionStart carries no turn
                said("SessionStart", began[1], began[0], "SessionStart", source="startup")
                turn, began = was, None
        elif kind == "event_msg" and p.get("type") == "item_completed":
            item = p.get("item")
            item = item if isinstance(item, dict) else {}
            if item.get("type") == "UserMessage" and isinstance(item.get("content"), list):
                text = "".join(
                    c["text"] for c in item["content"]
                    if isinstance(c, dict) and c.get("type") == "text" and isinstance(c.get("text"), str)
                )  # fmt: skip
                said("UserPromptSubmit", n, ts, f"UserPromptSubmit:{item.get('id')}", prompt=text)
            elif item.get("type") == "CommandExecution" and item.get("status") == "completed":
                call = by_id.get(str(item.get("id")))
                output = item.get("aggregated_output")
                if call is not None and isinstance(output, str):
                    said("PostToolUse", n, ts, f"PostToolUse:{call.call_id}",
                         tool_name=call.hook.get("tool_name"),
                         tool_input=call.hook.get("tool_input"),
                         tool_response=output, tool_use_id=call.call_id)  # fmt: skip
        elif kind == "event_msg" and p.get("type") == "task_complete":
            last = p.get("last_agent_message")
            said("Stop", n, ts, f"Stop:{p.get('turn_id')}", stop_hook_active=False,
                 last_assistant_message=last if isinstance(last, str) else None)  # fmt: skip
        elif kind == "response_item" and p.get("type") == "function_call":
            call_id, name = p.get("call_id"), p.get("name")
            args = _obj(p["arguments"]) if isinstance(p.get("arguments"), str) else None
            if (
                ts is None
                or not isinstance(call_id, str)
                or not isinstance(name, str)
                or args is None
            ):
                scan.skipped += 1
                continue
            if name in ("exec_command", "shell", "shell_command", "local_shell"):
                cmd = args.get("cmd", args.get("command"))
                if isinstance(cmd, list):
                    cmd = " ".join(str(c) for c in cmd)
                tool, tool_input = "Bash", {"command": cmd}
            elif name == "apply_patch":
                tool, tool_input = (
                    "apply_patch",
                    {"command": args.get("input", args.get("patch", ""))},
                )
            else:
                tool, tool_input = name, args
            hook = {"session_id": session, "turn_id": turn, "transcript_path": path, "cwd": cwd,
                    "hook_event_name": "PreToolUse", "model": model, "permission_mode": mode,
                    "tool_name": tool, "tool_input": tool_input, "tool_use_id": call_id}  # fmt: skip
            c = AgentCall(
                "codex",
                session,
                call_id,
                ts,
                {k: v for k, v in hook.items() if v is not None},
                path,
                n,
            )
            _add(c, calls, scan, by_id)
        elif kind == "response_item" and p.get("type") in (
            "function_call_output",
            "custom_tool_call_output",
        ):
            done = by_id.get(str(p.get("call_id")))
            if done is not None:
                out = p.get("output")
                done.ran = not (
                    isinstance(out, str) and out.startswith("Command blocked by PreToolUse hook")
                )
                scan.results += 1


def _gemini(lines: Iterable[str], path: str, scan: Scan, calls: list[AgentCall]) -> None:
    session = ""
    seen: set[str] = set()
    for n, line in enumerate(lines, 1):
        d = _obj(line)
        if d is None:
            scan.skipped += 1
            continue
        if "sessionId" in d and "projectHash" in d:
            session = str(d.get("sessionId") or "")
            continue
        if d.get("type") != "gemini" or not isinstance(d.get("toolCalls"), list):
            continue
        for tc in d["toolCalls"]:
            if (
                not isinstance(tc, dict)
                or not isinstance(tc.get("name"), str)
                or not isinstance(tc.get("args"), dict)
            ):
                scan.skipped += 1
                continue
            call_id = str(tc.get("id") or "")
            ts = _when(tc.get("timestamp")) or _when(d.get("timestamp"))
            if not call_id or call_id in seen or ts is None:
                continue  # a message is written again as its tool calls complete
            seen.add(call_id)
            hook = {"session_id": session, "transcript_path": path, "hook_event_name": "BeforeTool",
                    "timestamp": d.get("timestamp"), "tool_name": tc["name"], "tool_input": tc["args"]}  # fmt: skip
            c = AgentCall("gemini_cli", session, call_id, ts, hook, path, n)
            text = json.dumps(tc.get("result"))
            if tc.get("result") is not None:
                c.ran = "Tool execution blocked" not in text
                scan.results += 1
            _add(c, calls, scan, None)


def _qwen(lines: Iterable[str], path: str, scan: Scan, calls: list[AgentCall]) -> None:
    by_id: dict[str, AgentCall] = {}
    for n, line in enumerate(lines, 1):
        d = _obj(line)
        if d is None:
            scan.skipped += 1
            continue
        session = str(d.get("sessionId") or "")
        found = d.get("message")
        msg: dict[str, Any] = found if isinstance(found, dict) else {}
        found_parts = msg.get("parts")
        parts: list[Any] = found_parts if isinstance(found_parts, list) else []
        if d.get("type") == "assistant":
            for part in parts:
                fc = part.get("functionCall") if isinstance(part, dict) else None
                if not isinstance(fc, dict):
                    continue
                ts, call_id = _when(d.get("timestamp")), fc.get("id")
                if (
                    ts is None
                    or not isinstance(call_id, str)
                    or not isinstance(fc.get("name"), str)
                ):
                    scan.skipped += 1
                    continue
                hook = {"session_id": session, "transcript_path": path, "cwd": d.get("cwd"),
                        "hook_event_name": "PreToolUse", "timestamp": d.get("timestamp"),
                        "tool_name": fc["name"], "tool_input": fc.get("args") if isinstance(fc.get("args"), dict) else {},
                        "tool_call_id": call_id}  # fmt: skip
                c = AgentCall(
                    "qwen_code",
                    session,
                    call_id,
                    ts,
                    {k: v for k, v in hook.items() if v is not None},
                    path,
                    n,
                )
                _add(c, calls, scan, by_id)
        elif d.get("type") == "tool_result":
            got = d.get("toolCallResult")
            res: dict[str, Any] = got if isinstance(got, dict) else {}
            done = by_id.get(str(res.get("callId")))
            if done is not None:
                done.ran = (
                    res.get("executionStatus") != "not_started"
                    and res.get("errorType") != "execution_denied"
                )
                scan.results += 1


def _add(
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
