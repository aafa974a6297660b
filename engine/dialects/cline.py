"""Cline CLI (`cline` 3.0.65, the SDK-based CLI).

What the binary does (tests/agents runs it):
- A hook is an executable file named after the event (`PreToolUse`, `TaskStart`, ...); its
  input names the event internally (`hookName`: `tool_call`, `agent_start`, ...), carries
  the call as `tool_call {id, name, input}` and the task as `taskId`. It is normalised to
  Claude Code's event, tool names and input keys. Its batch tools (`run_commands`,
  `read_files`, `fetch_web_content`) hold several actions: the commands become one
  script (`command`, a line each, which the policy's `Bash` rules read command by
  command), the files and URLs are all listed (`file_paths`, `urls`), the first as
  `file_path` / `url`.
- It ignores exit codes and anything on stdout but its own JSON: the only block is
  ``{"cancel": true, "errorMessage": ...}``, and it ends the whole task, not only the
  call. A deny on Cline is therefore that: the call does not run and the task stops, with
  the reason shown to the user. Every failure (no decision, bad input, hookaudit itself
  failing) answers the same way, on exit 0: the hook file `hookaudit wire cline` writes
  prints a cancel of its own when hookaudit exits non-zero (it could not even start), so
  exactly one JSON document is ever printed.

Example:
    >>> from engine.aggregate import Decision
    >>> Cline().express("PreToolUse", Decision(blocked=True, decision="deny", reason="no")).stdout
    '{"cancel":true,"errorMessage":"no"}'
"""

from __future__ import annotations

import json
from typing import Any

from engine.dialects.base import Answer, Dialect, Normalised

__all__ = ["EVENTS", "Cline", "cancel"]

#: Cline's internal event name (`hookName`) -> Claude Code event.
EVENTS = {
    "tool_call": "PreToolUse",
    "tool_result": "PostToolUse",
    "prompt_submit": "UserPromptSubmit",
    "agent_start": "SessionStart",
    "agent_resume": "SessionStart",
    "agent_end": "Stop",
    "agent_abort": "SessionEnd",
    "agent_error": "StopFailure",
    "session_shutdown": "SessionEnd",
    "pre_compact": "PreCompact",
}
#: Cline's hook file names -> its internal names (the input may carry either).
FILES = {
    "PreToolUse": "tool_call",
    "PostToolUse": "tool_result",
    "UserPromptSubmit": "prompt_submit",
    "TaskStart": "agent_start",
    "TaskResume": "agent_resume",
    "TaskComplete": "agent_end",
    "TaskCancel": "agent_abort",
    "TaskError": "agent_error",
    "SessionShutdown": "session_shutdown",
    "PreCompact": "pre_compact",
}
_BLOCKING = frozenset({"PreToolUse", "UserPromptSubmit"})


def cancel(reason: str) -> str:
    """Cline's one blocking answer (it ends the task)."""
    return json.dumps({"cancel": True, "errorMessage": reason}, separators=(",", ":"))


def _strings(items: Any, key: str) -> list[str]:
    if not isinstance(items, list):
        return []
    out = []
    for x in items:
        if isinstance(x, str):
            out.append(x)
        elif isinstance(x, dict) and isinstance(x.get(key), str):
            out.append(x[key])
    return out


def _tool(name: str, args: Any) -> tuple[str, Any]:
    if not isinstance(args, dict):
        return name, args
    if name == "run_commands":
        commands = _strings(args.get("commands"), "command")
        return "Bash", {**args, "command": "\n".join(commands), "commands": commands}
    if name == "read_files":
        paths = _strings(args.get("files"), "path")
        return "Read", {**args, "file_path": paths[0] if paths else "", "file_paths": paths}
    if name == "fetch_web_content":
        urls = _strings(args.get("requests"), "url")
        return "WebFetch", {**args, "url": urls[0] if urls else "", "urls": urls}
    if name == "editor":
        out = dict(args)
        if "path" in out:
            out["file_path"] = out["path"]
        if "old_text" in out:
            out["old_string"], out["new_string"] = out["old_text"], out.get("new_text", "")
            return "Edit", out
        if "new_text" in out and "insert_line" not in out:
            out["content"] = out["new_text"]
            return "Write", out
        return "Edit", out
    return name, args


class Cline(Dialect):
    name = "cline"
    blocking_events = _BLOCKING

    def normalise(self, payload: dict[str, Any]) -> Normalised:
        own = payload.get("hookName")
        own = FILES.get(str(own), str(own)) if own is not None else ""
        event = EVENTS.get(own)
        if event is None:
            from engine.errors import InvalidEvent

            raise InvalidEvent("<stdin>", f"cline hook {own!r} is not one hookaudit knows")
        out: dict[str, Any] = dict(payload)
        out["hook_event_name"] = event
        session = payload.get("taskId")
        out["session_id"] = session if isinstance(session, str) else ""
        info = payload.get("workspaceInfo")
        if isinstance(info, dict) and isinstance(info.get("rootPath"), str):
            out.setdefault("cwd", info["rootPath"])
        if own == "agent_resume":
            out["source"] = "resume"
        call = payload.get("tool_call") if own == "tool_call" else payload.get("tool_result")
        agent_tool = None
        if isinstance(call, dict) and isinstance(call.get("name"), str):
            agent_tool = call["name"]
            out["tool_name"], out["tool_input"] = _tool(agent_tool, call.get("input"))
            if isinstance(call.get("id"), str):
                out["tool_use_id"] = call["id"]
            if own == "tool_result":
                out["tool_response"] = call.get("output")
        return Normalised(out, own, agent_tool)

    def express(self, event: str, decision: Any, call: Any = None) -> Answer:
        reason = decision.reason or "blocked by the hookaudit policy"
        if event == "PreToolUse":
            if decision.decision == "ask":
                reason = f"{reason} (the policy asks for a confirmation, which a Cline hook cannot ask: the task is stopped)"
            elif decision.updated_input is not None and decision.decision != "deny":
                reason = "the policy rewrites this call's input, which hookaudit does not do on Cline: the task is stopped"
            elif decision.decision != "deny" and not decision.blocked:
                return Answer()
            return Answer(cancel(reason))
        if decision.blocked and event in _BLOCKING:
            return Answer(cancel(reason))
        return Answer()

    def block(self, event: str, reason: str) -> Answer:
        from engine.failclosed import closed_reason

        event = EVENTS.get(FILES.get(event, event), event)
        if event in _BLOCKING or event not in EVENTS.values():
            return Answer(cancel(closed_reason(reason)), closed_reason(reason), 0)
        return Answer("", f"hookaudit: {reason}; {event} cannot be blocked, proceeding", 0)
