"""The events a Claude Code transcript shows besides its tool calls.

The session's start and end (SessionStart; SessionEnd from the last `cost-state` entry,
written when it ends and at each compaction, without the `reason`, which no entry keeps),
each compaction (PreCompact, SessionStart `compact`, PostCompact), each prompt
(UserPromptSubmit; not a slash command Claude Code runs itself) and each tool's result (PostToolUse, or PostToolUseFailure for a call
that failed), rebuilt as the hook input Claude Code sent for it (checked field by field
against the real binary's inputs in tests/fixtures/claude_code; a transcript does not keep
a PostToolUse's `duration_ms`, so it is left out) and marked as backfilled
(`hookaudit_backfill`: the transcript and its line).

Rules of this file are `ingest.backfill`'s (untrusted input, stable ids, pure but for the
caller's reading); `ingest.backfill.scan_lines` calls it for each entry.

Example:
    >>> e = prompt_event({"type": "user", "sessionId": "s", "promptId": "p",
    ...     "timestamp": "2026-01-02T03:04:05Z", "cwd": "/p", "permissionMode": "default",
    ...     "message": {"role": "user", "content": "go"}}, "t.jsonl", 1, "default")
    >>> e.payload["hook_event_name"], e.payload["prompt"]
    ('UserPromptSubmit', 'go')
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from engine.records import HookEvent, new_event

__all__ = [
    "Rebuilt",
    "Turn",
    "assistant_text",
    "command_args",
    "compaction",
    "parse_time",
    "post_event",
    "prompt_event",
    "session_end",
    "session_start",
    "stop_event",
    "str_or_none",
    "subagent_start",
    "subagent_stop",
]


@dataclass
class Rebuilt:
    """One event rebuilt from a transcript (not a tool call: those are `backfill.Call`)."""

    session_id: str
    key: str  # with the session, what makes its id: the event and its prompt or tool call
    ts: datetime
    payload: dict[str, Any]

    @property
    def event_name(self) -> str:
        return str(self.payload["hook_event_name"])

    def event(self, *, host: str | None = None, user: str | None = None) -> HookEvent:
        from ingest.backfill import backfill_id

        return new_event(
            self.payload,
            source="backfill",
            host=host,
            user=user,
            ts=self.ts,
            event_id=backfill_id(self.session_id, self.key, self.ts),
        )


def str_or_none(v: object) -> str | None:
    return v if isinstance(v, str) else None


def parse_time(v: object) -> datetime | None:
    """A transcript's time (ISO 8601; one without a zone is UTC), or None; the one reading
    of every backfill's timestamps."""
    if not isinstance(v, str) or len(v) > 64:
        return None
    try:
        ts = datetime.fromisoformat(v.replace("Z", "+00:00"))
    except ValueError:
        return None
    return ts if ts.tzinfo is not None else ts.replace(tzinfo=UTC)


def prompt_event(
    entry: dict[str, Any], transcript: str, n: int, mode: str | None
) -> Rebuilt | None:
    """The UserPromptSubmit of a user entry that is a prompt (its text, a prompt id), or None."""
    msg = entry.get("message")
    text = msg.get("content") if isinstance(msg, dict) else None
    session, prompt_id, ts = (
        str_or_none(entry.get("sessionId")),
        str_or_none(entry.get("promptId")),
        parse_time(entry.get("timestamp")),
    )
    if (
        not isinstance(text, str)
        or not (session and prompt_id and ts)
        or entry.get("isMeta") is True
        or entry.get("isCompactSummary") is True  # the summary a compaction left
        or text.startswith(_LOCAL)  # a slash command Claude Code ran itself, or its output
    ):
        return None
    payload: dict[str, Any] = {
        "session_id": session,
        "transcript_path": transcript,
        "cwd": str_or_none(entry.get("cwd")),
        "prompt_id": prompt_id,
        "permission_mode": str_or_none(entry.get("permissionMode")) or mode,
        "hook_event_name": "UserPromptSubmit",
        "prompt": text,
        "hookaudit_backfill": {"transcript": transcript, "line": n},
    }
    return Rebuilt(
        session,
        f"UserPromptSubmit:{prompt_id}",
        ts,
        {k: v for k, v in payload.items() if v is not None},
    )


#: What a local slash command (`/compact`, `/exit`) and its output look like in a transcript:
#: Claude Code runs them itself, with no UserPromptSubmit.
_LOCAL = ("<command-name>", "<local-command-stdout>", "<local-command-stderr>")
_COMMAND_ARGS = re.compile(r"<command-args>(.*?)</command-args>", re.DOTALL)
#: Where a compaction's summary sits in the user entry that carries it.
_SUMMARY = re.compile(
    r"</system-reminder>\n(.*)\n\nIf you need specific details from before compaction", re.DOTALL
)


def command_args(entry: dict[str, Any]) -> str | None:
    """The arguments of the local slash command a user entry records (None: not one)."""
    msg = entry.get("message")
    text = msg.get("content") if isinstance(msg, dict) else None
    if not isinstance(text, str) or not text.startswith("<command-name>"):
        return None
    m = _COMMAND_ARGS.search(text)
    return m.group(1) if m else ""


def compaction(
    boundary: dict[str, Any],
    summary: dict[str, Any],
    transcript: str,
    n: int,
    *,
    args: str | None,
    model: str | None,
) -> list[Rebuilt]:
    """PreCompact, SessionStart (`compact`) and PostCompact of one compaction: its
    `compact_boundary` entry (`n`, the trigger) and the summary entry after it (the prompt
    id, the summary). `args`: what `/compact` was given (a manual compaction); `model`: the
    session's model, which an interactive session's SessionStart names."""
    meta = boundary.get("compactMetadata")
    trigger = meta.get("trigger") if isinstance(meta, dict) else None
    session = str_or_none(boundary.get("sessionId"))
    ts = parse_time(boundary.get("timestamp"))
    msg = summary.get("message")
    text = msg.get("content") if isinstance(msg, dict) else None
    found = _SUMMARY.search(text) if isinstance(text, str) else None
    if not (session and ts and isinstance(trigger, str)):
        return []
    head = {
        "session_id": session,
        "transcript_path": transcript,
        "cwd": str_or_none(boundary.get("cwd")),
        "prompt_id": str_or_none(summary.get("promptId")),
    }
    note = {"hookaudit_backfill": {"transcript": transcript, "line": n}}
    pre = {**head, "hook_event_name": "PreCompact", "trigger": trigger,
           "custom_instructions": args or None, **note}  # fmt: skip
    start = {**head, "hook_event_name": "SessionStart", "source": "compact",
             **({"model": model} if model else {}), **note}  # fmt: skip
    out = [
        Rebuilt(session, f"PreCompact:{n}", ts, pre),
        Rebuilt(session, f"SessionStart:compact:{n}", ts, start),
    ]
    if found is not None:
        post = {**head, "hook_event_name": "PostCompact", "trigger": trigger,
                "compact_summary": found.group(1), **note}  # fmt: skip
        out.append(Rebuilt(session, f"PostCompact:{n}", ts, post))
    return out


def post_event(entry: dict[str, Any], block: dict[str, Any], call: Any, n: int) -> Rebuilt | None:
    """The PostToolUse (or PostToolUseFailure) of a tool result of `call` (a `backfill.Call`
    that ran), or None."""
    ts = parse_time(entry.get("timestamp"))
    if ts is None:
        return None
    failed = block.get("is_error") is True
    payload: dict[str, Any] = {
        k: v
        for k, v in call.payload().items()
        if k not in ("hookaudit_backfill", "hook_event_name")
    }
    payload["hook_event_name"] = "PostToolUseFailure" if failed else "PostToolUse"
    if failed:
        content = block.get("content")
        payload["error"] = content if isinstance(content, str) else str(content)
        payload["is_interrupt"] = False
    else:
        payload["tool_response"] = entry.get("toolUseResult")
    payload["hookaudit_backfill"] = {"transcript": call.transcript, "line": n}
    # the keys in the order Claude Code sends them: the call's, then the result's
    order = ["session_id", "transcript_path", "cwd", "prompt_id", "permission_mode", "effort",
             "agent_id", "agent_type", "hook_event_name", "tool_name", "tool_input",
             "tool_response", "tool_use_id", "error", "is_interrupt", "hookaudit_backfill"]  # fmt: skip
    payload = {k: payload[k] for k in order if k in payload}
    return Rebuilt(call.session_id, f"{payload['hook_event_name']}:{call.tool_use_id}", ts, payload)


def session_start(entry: dict[str, Any], transcript: str, n: int) -> Rebuilt | None:
    """The SessionStart of a session's first entry that says where it ran (its cwd), or None."""
    session, cwd, ts = (
        str_or_none(entry.get("sessionId")),
        str_or_none(entry.get("cwd")),
        parse_time(entry.get("timestamp")),
    )
    if not (session and cwd and ts):
        return None
    payload: dict[str, Any] = {
        "session_id": session,
        "transcript_path": transcript,
        "cwd": cwd,
        "hook_event_name": "SessionStart",
        "source": "startup",
        "hookaudit_backfill": {"transcript": transcript, "line": n},
    }
    return Rebuilt(session, "SessionStart", ts, payload)


def session_end(
    entry: dict[str, Any],
    transcript: str,
    n: int,
    *,
    cwd: str | None,
    prompt_id: str | None,
    last: datetime | None,
) -> Rebuilt | None:
    """The SessionEnd of the last `cost-state` entry of a session (Claude Code writes one
    when a session ends, and at each compaction), at its start time plus its duration (else
    the session's last time seen). The transcript does not say why the session ended:
    `reason` is left out."""
    session = str_or_none(entry.get("sessionId"))
    start, took = entry.get("startTime"), entry.get("totalDuration")
    ts = last
    if type(start) is int and type(took) in (int, float) and 0 <= start < 1 << 50:
        ts = datetime.fromtimestamp((start + took) / 1000, UTC)  # type: ignore[operator]
    if not (session and ts):
        return None
    payload: dict[str, Any] = {
        "session_id": session,
        "transcript_path": transcript,
        "cwd": cwd,
        "prompt_id": prompt_id,
        "hook_event_name": "SessionEnd",
        "hookaudit_backfill": {"transcript": transcript, "line": n},
    }
    payload = {k: v for k, v in payload.items() if v is not None}
    return Rebuilt(session, f"SessionEnd:{n}", ts, payload)


@dataclass
class Turn:
    """The end of a turn so far: the assistant's last text, and where the turn stands."""

    entry: dict[str, Any]
    text: str
    line: int
    prompt_id: str | None
    mode: str | None
    continued: bool = False  # a Stop hook blocked before: Claude Code says stop_hook_active


def assistant_text(entry: dict[str, Any]) -> str | None:
    """The text an assistant entry says (its text blocks joined), or None when it says none."""
    msg = entry.get("message")
    content = msg.get("content") if isinstance(msg, dict) else None
    if not isinstance(content, list):
        return None
    texts = [
        b["text"]
        for b in content
        if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
    ]
    return "\n".join(texts) if texts else None


def stop_event(turn: Turn, transcript: str) -> Rebuilt | None:
    """The Stop of a turn that ended with `turn`'s text."""
    e = turn.entry
    session, ts = str_or_none(e.get("sessionId")), parse_time(e.get("timestamp"))
    if not (session and ts):
        return None
    effort = str_or_none(e.get("effort"))
    payload: dict[str, Any] = {
        "session_id": session,
        "transcript_path": transcript,
        "cwd": str_or_none(e.get("cwd")),
        "prompt_id": turn.prompt_id,
        "permission_mode": turn.mode,
        "effort": {"level": effort} if effort is not None else None,
        "hook_event_name": "Stop",
        "stop_hook_active": turn.continued,
        "last_assistant_message": turn.text,
        "background_tasks": [],
        "session_crons": [],
        "hookaudit_backfill": {"transcript": transcript, "line": turn.line},
    }
    payload = {k: v for k, v in payload.items() if v is not None}
    return Rebuilt(session, f"Stop:{turn.prompt_id}:{turn.line}", ts, payload)


def subagent_start(entry: dict[str, Any], sub: Any, n: int) -> Rebuilt | None:
    """The SubagentStart of a subagent's first entry (`sub`: its `backfill.Subagent`)."""
    session, agent, ts = (
        str_or_none(entry.get("sessionId")),
        str_or_none(entry.get("agentId")),
        parse_time(entry.get("timestamp")),
    )
    if not (session and agent and ts):
        return None
    payload: dict[str, Any] = {
        "session_id": session,
        "transcript_path": sub.transcript_path,
        "cwd": str_or_none(entry.get("cwd")),
        "prompt_id": str_or_none(entry.get("promptId")),
        "agent_id": agent,
        "agent_type": sub.agent_type,
        "hook_event_name": "SubagentStart",
        "hookaudit_backfill": {"transcript": sub.transcript_path, "line": n},
    }
    payload = {k: v for k, v in payload.items() if v is not None}
    return Rebuilt(session, f"SubagentStart:{agent}", ts, payload)


def subagent_stop(turn: Turn, sub: Any, agent_file: str) -> Rebuilt | None:
    """The SubagentStop of a subagent whose last assistant text is `turn`'s."""
    e = turn.entry
    session, agent, ts = (
        str_or_none(e.get("sessionId")),
        str_or_none(e.get("agentId")),
        parse_time(e.get("timestamp")),
    )
    if not (session and agent and ts):
        return None
    effort = str_or_none(e.get("effort"))
    mode = sub.modes.get(turn.prompt_id) if turn.prompt_id is not None else None
    payload: dict[str, Any] = {
        "session_id": session,
        "transcript_path": sub.transcript_path,
        "cwd": str_or_none(e.get("cwd")),
        "prompt_id": turn.prompt_id,
        "permission_mode": mode,
        "agent_id": agent,
        "agent_type": sub.agent_type,
        "effort": {"level": effort} if effort is not None else None,
        "hook_event_name": "SubagentStop",
        "stop_hook_active": turn.continued,
        "agent_transcript_path": agent_file,
        "last_assistant_message": turn.text,
        "background_tasks": [],
        "session_crons": [],
        "hookaudit_backfill": {"transcript": agent_file, "line": turn.line},
    }
    payload = {k: v for k, v in payload.items() if v is not None}
    return Rebuilt(session, f"SubagentStop:{agent}", ts, payload)
