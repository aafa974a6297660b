"""OpenCode (`opencode-ai` 1.18.33): in-process JavaScript plugins, no shell hooks.

`hookaudit wire opencode` writes a small plugin (`ingest/wire/opencode.py`) that hands each
hook to `hookaudit emit --agent opencode` as one JSON envelope,
``{"hook_event_name": <the plugin hook>, "input": ..., "output": ..., "directory": ...}``
(the hook's two arguments as OpenCode passes them), and throws on a deny: OpenCode then
does not run the call, and the model gets the message. What the binary does (tests/agents
runs it):
- `tool.execute.before` is PreToolUse (`input.tool`, `input.callID`, `output.args`);
  `tool.execute.after` is PostToolUse (it fires for calls that succeeded only);
  `chat.message` is UserPromptSubmit; the `session.created` and `session.idle` events are
  SessionStart and Stop. Tools and their argument names are mapped to Claude Code's
  (`bash` is `Bash`, `filePath` is `file_path`).
- Any exception a plugin throws blocks the call, and OpenCode has no timeout for plugins:
  the plugin keeps its own, and fails closed on it, on a non-zero exit and on an answer it
  cannot read.
- This dialect's answer is read by that plugin only: ``{"decision":"deny","reason":…}``
  blocks, nothing allows.

Example:
    >>> OpenCode().normalise({"hook_event_name": "tool.execute.before",
    ...     "input": {"tool": "bash", "sessionID": "ses_1", "callID": "call_1"},
    ...     "output": {"args": {"command": "ls"}}}).payload["tool_name"]
    'Bash'
"""

from __future__ import annotations

import json
from typing import Any

from engine.dialects.base import Answer, Dialect, Normalised, rename, unrename
from engine.errors import InvalidEvent

__all__ = ["EVENTS", "TOOLS", "OpenCode"]

#: plugin hook (or bus event) -> Claude Code event.
EVENTS = {
    "tool.execute.before": "PreToolUse",
    "tool.execute.after": "PostToolUse",
    "chat.message": "UserPromptSubmit",
    "session.created": "SessionStart",
    "session.idle": "Stop",
}
TOOLS = {
    "bash": "Bash",
    "read": "Read",
    "write": "Write",
    "edit": "Edit",
    "multiedit": "Edit",
    "patch": "Edit",
    "glob": "Glob",
    "grep": "Grep",
    "list": "LS",
    "webfetch": "WebFetch",
    "websearch": "WebSearch",
    "todowrite": "TodoWrite",
    "task": "Task",
}
_KEYS = {"filePath": "file_path", "oldString": "old_string", "newString": "new_string",
         "replaceAll": "replace_all"}  # fmt: skip
_BLOCKING = frozenset({"PreToolUse", "UserPromptSubmit"})


def _deny(reason: str) -> str:
    return json.dumps({"decision": "deny", "reason": reason}, separators=(",", ":"))


class OpenCode(Dialect):
    name = "opencode"
    blocking_events = _BLOCKING

    def normalise(self, payload: dict[str, Any]) -> Normalised:
        own = str(payload.get("hook_event_name", ""))
        event = EVENTS.get(own)
        if event is None:
            raise InvalidEvent("<stdin>", f"opencode hook {own!r} is not one hookaudit knows")
        given = payload.get("input")
        out_arg = payload.get("output")
        inp = given if isinstance(given, dict) else {}
        outp = out_arg if isinstance(out_arg, dict) else {}
        found = inp.get("properties")
        props: dict[str, Any] = found if isinstance(found, dict) else {}
        session = inp.get("sessionID") or props.get("sessionID") or ""
        out: dict[str, Any] = {
            "hook_event_name": event,
            "session_id": session if isinstance(session, str) else "",
        }
        if isinstance(payload.get("directory"), str):
            out["cwd"] = payload["directory"]
        tool = inp.get("tool")
        agent_tool = tool if isinstance(tool, str) else None
        if agent_tool is not None:
            args = outp.get("args") if event == "PreToolUse" else inp.get("args")
            out["tool_name"] = TOOLS.get(agent_tool, agent_tool)
            out["tool_input"] = rename(args, _KEYS) if isinstance(args, dict) else {}
            if isinstance(inp.get("callID"), str):
                out["tool_use_id"] = inp["callID"]
            if event == "PostToolUse":
                out["tool_response"] = outp
        if event == "UserPromptSubmit":
            given_parts = outp.get("parts")
            parts: list[Any] = given_parts if isinstance(given_parts, list) else []
            out["prompt"] = "\n".join(
                p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)
            )
        if event == "SessionStart":
            out["source"] = "startup"
        return Normalised(out, own, agent_tool)

    def express(self, event: str, decision: Any, call: Any = None) -> Answer:
        reason = decision.reason or "blocked by the hookaudit policy"
        if event == "PreToolUse":
            if decision.decision == "ask":
                reason = f"{reason} (the policy asks for a confirmation, which hookaudit does not ask on OpenCode: blocked)"
            elif decision.updated_input is not None and decision.decision != "deny":
                if isinstance(decision.updated_input, dict):
                    args = unrename(decision.updated_input, _KEYS)
                    return Answer(
                        json.dumps({"decision": "allow", "args": args}, separators=(",", ":"))
                    )
                reason = "the policy rewrites this call's input to something not an object: blocked"
            elif decision.decision != "deny" and not decision.blocked:
                return Answer()
            return Answer(_deny(reason))
        if decision.blocked and event in _BLOCKING:
            return Answer(_deny(reason))
        return Answer()

    def block(self, event: str, reason: str) -> Answer:
        from engine.failclosed import closed_reason

        event = EVENTS.get(event, event)
        if event in _BLOCKING or event not in EVENTS.values():
            return Answer(_deny(closed_reason(reason)), closed_reason(reason), 2)
        return Answer("", f"hookaudit: {reason}; {event} cannot be blocked, proceeding", 0)
