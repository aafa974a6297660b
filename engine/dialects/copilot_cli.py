"""GitHub Copilot CLI (`@github/copilot` 1.0.102), in its PascalCase (Claude Code
compatible) hook dialect.

What the binary does (tests/agents runs it):
- A hook registered under a PascalCase event (`PreToolUse`) gets Claude Code's input
  shape with Claude Code's tool names (`Bash`), but no tool-call id: one is derived
  (`base.derived_id`) so Pre and Post pair up. A PascalCase `PermissionRequest` hook was
  seen getting the camelCase input (`toolName`, `toolInput`, `sessionId`); both shapes
  are read.
- It honours Claude Code's `hookSpecificOutput.permissionDecision` for a PascalCase
  hook; exit 2 denies a tool call (its stderr is not shown); any other failure of a
  PreToolUse command hook denies too. A timeout lets the call run: `hookaudit wire`
  keeps emit's deadline below the hook's.
- A rewritten input is `updatedInput` in a PascalCase hook's answer, and the binary runs
  the rewritten call (no `permissionDecision` is needed for it). What it cannot do
  headless is blocked: `ask` (denied by Copilot itself in `-p`).

Example:
    >>> from engine.aggregate import Decision
    >>> CopilotCli().express("PreToolUse", Decision(blocked=True, decision="deny", reason="no")).stdout
    '{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"no"}}'
"""

from __future__ import annotations

import json
from typing import Any

from engine.dialects.base import Answer, Dialect, Normalised, derived_id, rename

__all__ = ["CAMEL", "CopilotCli"]

#: camelCase event -> Claude Code event (the dialect Copilot also sends).
CAMEL = {
    "preToolUse": "PreToolUse",
    "postToolUse": "PostToolUse",
    "permissionRequest": "PermissionRequest",
    "userPromptSubmitted": "UserPromptSubmit",
    "agentStop": "Stop",
    "subagentStop": "SubagentStop",
    "sessionStart": "SessionStart",
    "sessionEnd": "SessionEnd",
    "preCompact": "PreCompact",
    "notification": "Notification",
}
#: camelCase tool -> Claude Code tool (the PascalCase dialect gives Claude's names itself).
_TOOLS = {
    "bash": "Bash",
    "view": "Read",
    "create": "Write",
    "edit": "Edit",
    "str_replace_editor": "Edit",
    "grep": "Grep",
    "rg": "Grep",
    "glob": "Glob",
    "web_fetch": "WebFetch",
    "web_search": "WebSearch",
}
_BLOCKING = frozenset({"PreToolUse", "PermissionRequest", "UserPromptSubmit", "Stop"})


class CopilotCli(Dialect):
    name = "copilot_cli"
    blocking_events = _BLOCKING

    def normalise(self, payload: dict[str, Any]) -> Normalised:
        own = payload.get("hook_event_name") or payload.get("hookName") or ""
        own = str(own)
        out = rename(payload, {"sessionId": "session_id", "toolName": "tool_name",
                               "toolInput": "tool_input", "toolArgs": "tool_input",
                               "transcriptPath": "transcript_path"})  # fmt: skip
        out["hook_event_name"] = CAMEL.get(own, own)
        if isinstance(out.get("tool_input"), str):  # camelCase toolArgs is JSON text
            try:
                out["tool_input"] = json.loads(out["tool_input"])
            except (ValueError, RecursionError):
                out["tool_input"] = {"raw": out["tool_input"]}
        tool = out.get("tool_name")
        agent_tool = tool if isinstance(tool, str) else None
        if isinstance(tool, str):
            out["tool_name"] = _TOOLS.get(tool, tool)
            if "tool_use_id" not in out:
                session = out.get("session_id")
                out["tool_use_id"] = derived_id(
                    session if isinstance(session, str) else "",
                    out["tool_name"],
                    out.get("tool_input"),
                )
        return Normalised(out, own, agent_tool)

    def express(self, event: str, decision: Any, call: Any = None) -> Answer:
        reason = decision.reason or "blocked by the hookaudit policy"
        if event == "PreToolUse":
            if decision.decision == "ask":
                reason = f"{reason} (the policy asks for a confirmation, which hookaudit does not ask on Copilot CLI: blocked)"
            elif decision.updated_input is not None and decision.decision != "deny":
                if getattr(call, "agent_event", None) == "PreToolUse" and isinstance(
                    decision.updated_input, dict
                ):
                    hso = {"hookEventName": "PreToolUse", "updatedInput": decision.updated_input}
                    return Answer(json.dumps({"hookSpecificOutput": hso}, separators=(",", ":")))
                reason = "the policy rewrites this call's input, which hookaudit does only for Copilot CLI's PascalCase hooks: blocked"
            elif decision.decision != "deny" and not decision.blocked:
                return Answer()
            hso = {"hookEventName": "PreToolUse", "permissionDecision": "deny",
                   "permissionDecisionReason": reason}  # fmt: skip
            return Answer(json.dumps({"hookSpecificOutput": hso}, separators=(",", ":")))
        if event == "PermissionRequest" and decision.blocked:
            return Answer(
                json.dumps({"behavior": "deny", "message": reason}, separators=(",", ":"))
            )
        if decision.blocked and event in ("Stop", "SubagentStop", "UserPromptSubmit"):
            return Answer(
                json.dumps({"decision": "block", "reason": reason}, separators=(",", ":"))
            )
        return Answer()

    def block(self, event: str, reason: str) -> Answer:
        from engine.failclosed import closed_reason

        event = CAMEL.get(event, event)
        if event in _BLOCKING or event not in CAMEL.values():
            return Answer("", closed_reason(reason), 2)
        return Answer("", f"hookaudit: {reason}; {event} cannot be blocked, proceeding", 0)
