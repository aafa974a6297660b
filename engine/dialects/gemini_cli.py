"""Google Gemini CLI (`@google/gemini-cli` 0.61.0).

What the binary does (tests/conformance/agents runs it):
- Its events and tools have names of their own (`BeforeTool` with `run_shell_command`);
  they are normalised to Claude Code's (`PreToolUse` with `Bash`), their input keys too
  (`absolute_path` is `file_path`), so one policy written as Claude Code settings governs it.
  The model events (`BeforeModel`, `AfterModel`, `BeforeToolSelection`) have no Claude
  Code counterpart: they are refused here, and `hookaudit wire gemini_cli` does not hook them.
- It gives no tool-call id: one is derived (`base.derived_id`) so Pre and Post pair up.
- It reads JSON on stdout first, whatever the exit code, and ignores Claude Code's
  format: a block is ``{"decision":"deny","reason":…}`` on exit 0. Without JSON, exit 0
  and 1 let the call run and any other code blocks: the answer without a decision is
  exit 2 with the reason on stderr and nothing on stdout.

Example:
    >>> GeminiCli().normalise({"hook_event_name": "BeforeTool", "session_id": "s",
    ...     "tool_name": "read_file", "tool_input": {"absolute_path": "/etc/passwd"}}).payload["tool_input"]
    {'file_path': '/etc/passwd'}
"""

from __future__ import annotations

import json
import re
from typing import Any

from engine.dialects.base import (
    Answer,
    Dialect,
    Normalised,
    canonical_input,
    derived_id,
    rename,
    unrename,
)
from engine.errors import InvalidEvent

__all__ = ["EVENTS", "TOOLS", "GeminiCli", "canonical_tool"]

#: Gemini CLI event -> Claude Code event.
EVENTS = {
    "BeforeTool": "PreToolUse",
    "AfterTool": "PostToolUse",
    "BeforeAgent": "UserPromptSubmit",
    "AfterAgent": "Stop",
    "SessionStart": "SessionStart",
    "SessionEnd": "SessionEnd",
    "PreCompress": "PreCompact",
    "Notification": "Notification",
}
#: Gemini CLI tool -> (Claude Code tool, input keys renamed).
TOOLS: dict[str, tuple[str, dict[str, str]]] = {
    "run_shell_command": ("Bash", {}),
    "write_file": ("Write", {"absolute_path": "file_path"}),
    "replace": ("Edit", {"absolute_path": "file_path"}),
    "read_file": ("Read", {"absolute_path": "file_path"}),
    "read_many_files": ("Read", {}),
    "glob": ("Glob", {}),
    "search_file_content": ("Grep", {}),
    "grep_search": ("Grep", {}),
    "list_directory": ("LS", {}),
    "web_fetch": ("WebFetch", {}),
    "google_web_search": ("WebSearch", {}),
    "save_memory": ("SaveMemory", {}),
    "write_todos": ("TodoWrite", {}),
}
_BLOCKING = frozenset({"PreToolUse", "UserPromptSubmit", "Stop", "PostToolUse"})
_URL = re.compile(r"https?://[^\s\"'<>]+")


def canonical_tool(name: str, tool_input: Any, payload: dict[str, Any]) -> tuple[str, Any]:
    mcp = payload.get("mcp_context")
    if isinstance(mcp, dict) and isinstance(mcp.get("server_name"), str):
        tool = mcp.get("tool_name") if isinstance(mcp.get("tool_name"), str) else name
        return f"mcp__{mcp['server_name']}__{tool}", tool_input
    if name not in TOOLS:
        return name, tool_input
    canonical, keys = TOOLS[name]
    if not isinstance(tool_input, dict):
        return canonical, tool_input
    out = rename(tool_input, keys)
    if canonical == "WebFetch" and "url" not in out and isinstance(out.get("prompt"), str):
        m = _URL.search(out["prompt"])
        if m:
            out["url"] = m.group(0)
    return canonical, out


def _own_input(updated: Any, call: Any) -> dict[str, Any] | None:
    """The rewritten input in Gemini CLI's keys, for its tool; None when Gemini cannot apply
    it: it merges the hook's `tool_input` into the call's, so a rewrite that drops a key
    would run with that key kept."""
    tool = getattr(call, "agent_tool", None)
    before = canonical_input(call)
    if not isinstance(updated, dict) or tool not in TOOLS or before is None:
        return None
    if not set(before) <= set(updated):
        return None
    return unrename(updated, TOOLS[tool][1])


class GeminiCli(Dialect):
    name = "gemini_cli"
    blocking_events = _BLOCKING

    def normalise(self, payload: dict[str, Any]) -> Normalised:
        own = str(payload.get("hook_event_name", ""))
        event = EVENTS.get(own)
        if event is None:
            raise InvalidEvent(
                "<stdin>",
                f"gemini_cli event {own!r} has no Claude Code counterpart "
                f"(hooked events: {', '.join(EVENTS)})",
            )
        out = dict(payload)
        out["hook_event_name"] = event
        tool = payload.get("tool_name")
        if isinstance(tool, str):
            out["tool_name"], out["tool_input"] = canonical_tool(
                tool, payload.get("tool_input"), payload
            )
            if "tool_use_id" not in payload:
                session = payload.get("session_id")
                out["tool_use_id"] = derived_id(
                    session if isinstance(session, str) else "",
                    out["tool_name"],
                    out.get("tool_input"),
                )
        if (
            event == "UserPromptSubmit"
            and "prompt" not in out
            and isinstance(payload.get("message"), str)
        ):
            out["prompt"] = payload["message"]
        return Normalised(out, own, tool if isinstance(tool, str) else None)

    def express(self, event: str, decision: Any, call: Any = None) -> Answer:
        if event not in _BLOCKING:
            return Answer()
        reason = decision.reason or "blocked by the hookaudit policy"
        if event == "PreToolUse":
            if decision.decision == "ask":
                reason = f"{reason} (the policy asks for a confirmation, which a Gemini CLI hook cannot ask: blocked)"
            elif decision.decision != "deny" and not decision.blocked:
                if decision.updated_input is None:
                    return Answer()
                own = _own_input(decision.updated_input, call)
                if own is not None:
                    out = {"hookSpecificOutput": {"hookEventName": "BeforeTool", "tool_input": own}}
                    return Answer(json.dumps(out, separators=(",", ":")))
                reason = (
                    "the policy rewrites this call's input in a way Gemini CLI cannot apply "
                    "(it merges a rewrite into the input, so no key can be removed): blocked"
                )
        elif not decision.blocked:
            return Answer()
        body = json.dumps({"decision": "deny", "reason": reason}, separators=(",", ":"))
        return Answer(body, "", 0)

    def block(self, event: str, reason: str) -> Answer:
        """Exit 2 and the reason on stderr (no JSON: Gemini CLI would read it first). `event`
        may be canonical or Gemini's own; one hookaudit does not know is blocked too."""
        from engine.failclosed import closed_reason

        event = EVENTS.get(event, event)
        if event in _BLOCKING or event not in EVENTS.values():
            return Answer("", closed_reason(reason), 2)
        return Answer("", f"hookaudit: {reason}; {event} cannot be blocked, proceeding", 0)
