"""Qwen Code (`@qwen-code/qwen-code` 0.24.4), a Gemini CLI fork with Claude Code's hook
protocol.

What the binary does (tests/agents runs it):
- Its hook input is Claude Code's (event names, `tool_use_id`), with the Gemini CLI tool
  names (`run_shell_command`), normalised here as for Gemini CLI. Its tool events carry the
  provider's call id too (`tool_call_id`): that is the canonical `tool_use_id`, the one its
  chat files keep, so a backfilled call pairs with the live one.
- It obeys Claude Code's answers: `hookSpecificOutput.permissionDecision` on exit 0, or
  exit 2 with the reason on stderr (stdout ignored). Other exit codes let the call run.
- `ask` is a deny headless, and an `updatedInput` with allow was not applied: both are
  blocked here, saying why, rather than pretended.

Example:
    >>> QwenCode().normalise({"hook_event_name": "PreToolUse", "session_id": "s",
    ...     "tool_use_id": "toolu_1", "tool_name": "run_shell_command",
    ...     "tool_input": {"command": "ls"}}).payload["tool_name"]
    'Bash'
"""

from __future__ import annotations

import json
from typing import Any

from engine.dialects.base import Answer, Dialect, Normalised, derived_id
from engine.dialects.gemini_cli import canonical_tool

__all__ = ["QwenCode"]

_BLOCKING = frozenset(
    {"PreToolUse", "PermissionRequest", "UserPromptSubmit", "Stop", "SubagentStop"}
)


class QwenCode(Dialect):
    name = "qwen_code"
    blocking_events = _BLOCKING

    def normalise(self, payload: dict[str, Any]) -> Normalised:
        own = str(payload.get("hook_event_name", ""))
        out = dict(payload)
        tool = payload.get("tool_name")
        if isinstance(tool, str):
            out["tool_name"], out["tool_input"] = canonical_tool(
                tool, payload.get("tool_input"), payload
            )
            if isinstance(payload.get("tool_call_id"), str):
                # the provider's call id: the one Qwen Code's chat files keep (backfill pairs on it)
                out["tool_use_id"] = payload["tool_call_id"]
            elif not isinstance(out.get("tool_use_id"), str):
                session = payload.get("session_id")
                out["tool_use_id"] = derived_id(
                    session if isinstance(session, str) else "",
                    out["tool_name"],
                    out.get("tool_input"),
                )
        return Normalised(out, own, tool if isinstance(tool, str) else None)

    def express(self, event: str, decision: Any, call: Any = None) -> Answer:
        reason = decision.reason or "blocked by the hookaudit policy"
        if event == "PreToolUse":
            if decision.decision == "ask":
                reason = f"{reason} (the policy asks for a confirmation, which a headless Qwen Code cannot ask: blocked)"
            elif decision.updated_input is not None and decision.decision != "deny":
                reason = (
                    "the policy rewrites this call's input, which Qwen Code does not apply: blocked"
                )
            elif decision.decision != "deny" and not decision.blocked:
                return Answer()
            hso = {"hookEventName": "PreToolUse", "permissionDecision": "deny",
                   "permissionDecisionReason": reason}  # fmt: skip
            return Answer(json.dumps({"hookSpecificOutput": hso}, separators=(",", ":")))
        if decision.blocked and event in _BLOCKING:
            return Answer("", reason, 2)
        return Answer()

    def block(self, event: str, reason: str) -> Answer:
        from engine.failclosed import closed_reason

        if event in _BLOCKING:
            return Answer("", closed_reason(reason), 2)
        return Answer("", f"hookaudit: {reason}; {event} cannot be blocked, proceeding", 0)
