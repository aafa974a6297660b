"""ECS (Elastic Common Schema) documents of an outcome.

Rules of this file:
- Pure: a `View` in, one JSON-ready dict out.
- ECS fields where they fit: ``@timestamp``, ``event.*`` (kind, category, type, action,
  outcome, id, sequence, severity, reason), ``process.command_line``, ``file.path``,
  ``url.full``, ``rule.name``, ``user.name``, ``host.name``, and the ``gen_ai.tool.*`` fields
  of the tool call; hookaudit's own fields (decision, settings, the raw payload) under
  ``hookaudit``.

Example:
    >>> from engine.records import Outcome, new_event
    >>> from ingest.siem.view import build_view
    >>> ev = new_event({"hook_event_name": "PreToolUse", "tool_name": "Bash",
    ...                 "tool_input": {"command": "ls"}}, host="h", user="u")
    >>> to_ecs(build_view(Outcome(event=ev, settings_id="s")))["process"]["command_line"]
    'ls'
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from ingest.siem.kinds import file_name, iso_ms, severity
from ingest.siem.view import View

__all__ = ["to_ecs"]

_CATEGORY = {
    "process": (["process"], ["start"]),
    "file": (["file"], ["access"]),
    "web": (["web", "network"], ["access"]),
    "mcp": (["api"], ["access"]),
    "api": (["api"], ["info"]),
}
_FILE_TYPE = {"create": "creation", "update": "change", "read": "access"}


def to_ecs(v: View) -> dict[str, Any]:
    """The ECS document of one outcome."""
    category, types = _CATEGORY[v.kind]
    if v.kind == "file" and v.file_action:
        types = [_FILE_TYPE[v.file_action]]
    denied = v.blocked or v.decision == "deny"
    stopped = denied and v.enforced  # observed: a detection, and the call went ahead
    doc: dict[str, Any] = {
        "@timestamp": iso_ms(v.time_ms),
        "ecs": {"version": "8.17.0"},
        "event": {
            "kind": "alert" if denied else "event",
            "category": category,
            "type": [*types, "denied" if stopped else "allowed"],
            "action": v.event,
            "outcome": "failure" if stopped else "success",
            "id": v.event_id,
            "sequence": v.seq,
            "severity": severity(v.decision, v.blocked, bool(v.errors)),
            "dataset": "hookaudit.outcomes",
            "module": "hookaudit",
            "provider": v.agent,
        },
        "user": {"name": v.user},
        "host": {"name": v.host, "hostname": v.host},
        "hookaudit": {
            "decision": v.decision,
            "blocked": v.blocked,
            "decided_by": v.decided_by,
            "posture": v.posture,
            "settings_id": v.settings_id,
            "session_id": v.session_id,
            "record_id": v.record_id,
            "payload": v.payload,
            "agent": v.agent,
            "source": v.source,
        },
    }
    if v.reason:
        doc["event"]["reason"] = v.reason
        doc["message"] = v.reason
    if v.agent_tool and v.agent_tool != v.tool:
        doc["hookaudit"]["agent_tool"] = v.agent_tool
    if v.errors:
        doc["hookaudit"]["errors"] = v.errors
    if v.replay_id:
        doc["hookaudit"]["replay_id"] = v.replay_id
    if v.rules:
        doc["rule"] = {"name": v.rules[0]}
    if v.command is not None:
        doc["process"] = {"command_line": v.command}
        if v.cwd:
            doc["process"]["working_directory"] = v.cwd
    if v.file_path:
        doc["file"] = {"path": v.file_path, "name": file_name(v.file_path)}
    if v.url:
        doc["url"] = {"full": v.url}
        try:
            host = urlsplit(v.url).hostname
        except ValueError:
            host = None
        if host:
            doc["url"]["domain"] = host
    if v.tool:
        tool: dict[str, Any] = {"name": v.tool}
        if v.tool_use_id:
            tool["call"] = {"id": v.tool_use_id}
        doc["gen_ai"] = {"operation": {"name": "execute_tool"}, "tool": tool}
    return doc
