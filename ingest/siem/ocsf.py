"""OCSF 1.8 records of an outcome: one activity per tool call, plus a Detection Finding per denial.

Rules of this file:
- Pure: a `View` in, a list of plain dicts out (JSON-ready), valid against the strict OCSF
  1.8 JSON schema of their class with the ``security_control`` profile (tests check it).
- The class follows the tool: Bash -> Process Activity (1007), Write/Edit/Read -> File System
  Activity (1001), WebFetch -> HTTP Activity (4002), MCP tools and everything else -> API
  Activity (6003); a blocked call is also a Detection Finding (2004).
- ``type_uid = class_uid * 100 + activity_id``; ``time`` is epoch milliseconds;
  ``metadata.original_event_uid`` is the event id; ``metadata.uid`` names the record
  (``<outcome digest>.<class_uid>``), so a denial's activity and finding differ, and a re-sent
  outcome gives the same uids (a receiver can drop the duplicate).
- A tool call that a hook denied never ran, so it has no pid: its ``process.uid`` (and the
  finding's evidence) is the agent's ``tool_use_id`` (the event id when the agent sent none),
  and its ``action_id`` is 2 (Denied) with ``disposition_id`` 2 (Blocked).
- The agent's raw hook input (redacted, bounded) is kept under ``unmapped.payload``.

Example:
    >>> from engine.records import Outcome, new_event
    >>> from ingest.siem.view import build_view
    >>> ev = new_event({"hook_event_name": "PreToolUse", "tool_name": "Bash",
    ...                 "tool_input": {"command": "ls"}}, host="h", user="u")
    >>> [r["type_uid"] for r in to_ocsf(build_view(Outcome(event=ev, settings_id="s")))]
    [100701]
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from engine.records import ENGINE_VERSION
from ingest.siem.kinds import file_name, severity
from ingest.siem.view import View

__all__ = ["OCSF_VERSION", "to_ocsf"]

OCSF_VERSION = "1.8.0"
PROFILES = ["security_control"]

# kind -> (class_uid, class_name, category_uid, category_name)
_CLASSES: dict[str, tuple[int, str, int, str]] = {
    "process": (1007, "Process Activity", 1, "System Activity"),
    "file": (1001, "File System Activity", 1, "System Activity"),
    "web": (4002, "HTTP Activity", 4, "Network Activity"),
    "mcp": (6003, "API Activity", 6, "Application Activity"),
    "api": (6003, "API Activity", 6, "Application Activity"),
}
_FILE_ACTIVITY = {"create": (1, "Create"), "read": (2, "Read"), "update": (3, "Update")}
_WITH_DEVICE = {1001, 1007, 2004}
_SEVERITY = {1: "Informational", 2: "Low", 3: "Medium", 4: "High"}


def _severity_id(v: View) -> int:
    s = severity(v.decision, v.blocked, bool(v.errors))
    return 4 if s >= 7 else 3 if s >= 5 else 2 if s >= 3 else 1


def _security_control(v: View) -> dict[str, Any]:
    """action/disposition of the security_control profile."""
    if not v.enforced and (v.blocked or v.decision in ("deny", "ask", "defer")):
        # observed: the policy's verdict, which nobody waited for; the call went ahead
        action, disposition = (1, "Allowed"), (15, "Detected")
    elif v.blocked or v.decision == "deny":
        action, disposition = (2, "Denied"), (2, "Blocked")
    elif v.decision == "ask":
        action, disposition = (99, "Ask"), (23, "Challenge")
    elif v.decision == "defer":
        action, disposition = (99, "Defer"), (14, "Delayed")
    elif v.decision == "allow":
        action, disposition = (1, "Allowed"), (1, "Allowed")
    else:
        action, disposition = (1, "Allowed"), (16, "No Action")
    out: dict[str, Any] = {
        "action_id": action[0],
        "action": action[1],
        "disposition_id": disposition[0],
        "disposition": disposition[1],
        "policy": {"uid": v.settings_id, "name": "hookaudit settings", "is_applied": True},
    }
    if v.rules:
        out["firewall_rule"] = {"name": v.rules[0], "type": "hook"}
    return out


def _metadata(v: View, class_uid: int) -> dict[str, Any]:
    md: dict[str, Any] = {
        "product": {"name": "hookaudit", "vendor_name": "hookaudit", "version": ENGINE_VERSION},
        "version": OCSF_VERSION,
        "profiles": PROFILES,
        "uid": f"{v.record_id}.{class_uid}",
        "original_event_uid": v.event_id,
        "correlation_uid": v.session_id or v.event_id,
        "event_code": v.event,
        "log_name": "HOOK_OUTCOMES",
        "log_provider": v.source,
        "sequence": v.seq,
    }
    if v.truncated:
        md["is_truncated"] = True
        md["untruncated_size"] = v.untruncated_size
    return md


def _common(v: View, class_uid: int, activity: tuple[int, str]) -> dict[str, Any]:
    kind = next(c for c in _CLASSES.values() if c[0] == class_uid) if class_uid != 2004 else None
    names = kind or (2004, "Detection Finding", 2, "Findings")
    sev = _severity_id(v)
    rec: dict[str, Any] = {
        "class_uid": class_uid,
        "class_name": names[1],
        "category_uid": names[2],
        "category_name": names[3],
        "activity_id": activity[0],
        "activity_name": activity[1],
        "type_uid": class_uid * 100 + activity[0],
        "type_name": f"{names[1]}: {activity[1]}",
        "time": v.time_ms,
        "severity_id": sev,
        "severity": _SEVERITY[sev],
        "metadata": _metadata(v, class_uid),
    }
    if class_uid in _WITH_DEVICE:  # the others carry the host as src_endpoint
        rec["device"] = {"type_id": 0, "hostname": v.host or "unknown"}
    rec.update(_security_control(v))
    if v.reason:
        rec["message"] = v.reason
    return rec


def app_name(agent: str) -> str:
    """The agent as OCSF's actor app: its name with hyphens (claude-code, gemini-cli, ...).

    >>> app_name("gemini_cli")
    'gemini-cli'
    """
    return agent.replace("_", "-") or "claude-code"


def _actor(v: View) -> dict[str, Any]:
    actor: dict[str, Any] = {"app_name": app_name(v.agent)}
    if v.user:
        actor["user"] = {"name": v.user}
    if v.session_id:
        actor["session"] = {"uid": v.session_id}
    return actor


def _process(v: View) -> dict[str, Any]:
    proc: dict[str, Any] = {"uid": v.tool_use_id or v.event_id, "name": v.tool or v.event}
    if v.command is not None:
        proc["cmd_line"] = v.command
    if v.cwd:
        proc["working_directory"] = v.cwd
    return proc


def _file(v: View) -> dict[str, Any]:
    if v.file_path:
        return {"name": file_name(v.file_path), "path": v.file_path, "type_id": 1}
    return {"name": "unknown", "type_id": 0}


def _url(v: View) -> dict[str, Any]:
    url: dict[str, Any] = {"url_string": v.url or ""}
    try:
        parts = urlsplit(v.url or "")
        if parts.hostname:
            url["hostname"] = parts.hostname
        if parts.scheme:
            url["scheme"] = parts.scheme
        if parts.path:
            url["path"] = parts.path
        if parts.port is not None:
            url["port"] = parts.port
    except ValueError:  # a hostile URL (bad port, bad brackets) keeps its string only
        pass
    return url


def _api(v: View) -> dict[str, Any]:
    operation = v.mcp_tool or v.tool or v.event or "unknown"
    return {"operation": operation, "service": {"name": v.mcp_server or v.source or "claude-code"}}


def _unmapped(v: View) -> dict[str, Any]:
    out: dict[str, Any] = {
        "payload": v.payload,
        "decision": v.decision,
        "blocked": v.blocked,
        "decided_by": v.decided_by,
        "posture": v.posture,
        "settings_id": v.settings_id,
        "hook_event_name": v.event,
        "agent": v.agent,
        "source": v.source,
    }
    if v.tool:
        out["tool_name"] = v.tool
    if v.agent_tool and v.agent_tool != v.tool:
        out["agent_tool_name"] = v.agent_tool
    if v.errors:
        out["errors"] = v.errors
    if v.replay_id:
        out["replay_id"] = v.replay_id
    return out


def _activity(v: View) -> dict[str, Any]:
    class_uid = _CLASSES[v.kind][0]
    if v.kind == "process":
        rec = _common(v, class_uid, (1, "Launch"))
        rec["actor"] = _actor(v)
        rec["process"] = _process(v)
    elif v.kind == "file":
        rec = _common(v, class_uid, _FILE_ACTIVITY.get(v.file_action or "", (99, "Other")))
        rec["actor"] = _actor(v)
        rec["file"] = _file(v)
    elif v.kind == "web":
        rec = _common(v, class_uid, (3, "Get"))
        rec["http_request"] = {"http_method": "GET", "url": _url(v)}
        rec["src_endpoint"] = {"hostname": v.host or "unknown"}
        host = rec["http_request"]["url"].get("hostname")
        if host:
            rec["dst_endpoint"] = {"hostname": host}
    else:
        rec = _common(v, class_uid, (99, v.tool or v.event or "Other"))
        rec["actor"] = _actor(v)
        rec["api"] = _api(v)
        rec["src_endpoint"] = {"hostname": v.host or "unknown"}
    rec["unmapped"] = _unmapped(v)
    return rec


def _evidence(v: View) -> dict[str, Any]:
    ev: dict[str, Any] = {"actor": _actor(v)}
    if v.kind == "process":
        ev["process"] = _process(v)
    elif v.kind == "file":
        ev["file"] = _file(v)
    elif v.kind == "web":
        ev["url"] = _url(v)
    else:
        ev["api"] = _api(v)
    return ev


def _finding(v: View, activity: dict[str, Any]) -> dict[str, Any]:
    rec = _common(v, 2004, (1, "Create"))
    analytic: dict[str, Any] = {
        "type_id": 1,
        "type": "Rule",
        "name": v.rules[0] if v.rules else "hookaudit",
    }
    rec["finding_info"] = {
        "uid": f"{v.record_id}.finding",
        "title": f"hookaudit blocked {v.tool or v.event}"
        if v.enforced
        else f"hookaudit would have blocked {v.tool or v.event} (not enforced: it ran)",
        "desc": v.reason or "blocked by a hook",
        "analytic": analytic,
        "types": ["Policy Violation"],
        "related_events": [{"uid": activity["metadata"]["uid"], "type_uid": activity["type_uid"]}],
    }
    rec["evidences"] = [_evidence(v)]
    rec["is_alert"] = True
    rec["status_id"] = 1
    rec["status"] = "New"
    rec["unmapped"] = _unmapped(v)
    return rec


def to_ocsf(v: View) -> list[dict[str, Any]]:
    """The OCSF records of one outcome: its activity, then a finding when it was blocked."""
    activity = _activity(v)
    if not (v.blocked or v.decision == "deny"):
        return [activity]
    return [activity, _finding(v, activity)]


_LEVELS = {"informational": 1, "low": 2, "medium": 3, "high": 4, "critical": 5}


def sigma_finding(
    *,
    rule_title: str,
    rule_id: str,
    level: str,
    event_id: str,
    time_ms: int,
    user: str,
    host: str,
    session_id: str,
    tool: str | None,
    decision: str,
    what: str,
    agent: str = "claude_code",
) -> dict[str, Any]:
    """The OCSF Detection Finding (2004) of a Sigma rule's match on one logged event.

    ``metadata.uid`` is ``<rule id>.<event id>``: a match found again (a re-run of detect)
    names the same record, so a receiver can drop the duplicate.

    Example:
        >>> f = sigma_finding(rule_title="t", rule_id="r", level="high", event_id="e",
        ...     time_ms=1, user="u", host="h", session_id="s", tool="Bash", decision="allow",
        ...     what="ls")
        >>> f["type_uid"], f["severity_id"], f["metadata"]["uid"]
        (200401, 4, 'r.e')
    """
    sev = _LEVELS.get(level, 3)
    uid = f"{rule_id or rule_title}.{event_id}"
    actor: dict[str, Any] = {"app_name": app_name(agent)}
    if user:
        actor["user"] = {"name": user}
    if session_id:
        actor["session"] = {"uid": session_id}
    analytic: dict[str, Any] = {"type_id": 1, "type": "Rule", "name": rule_title}
    if rule_id:
        analytic["uid"] = rule_id
    return {
        "class_uid": 2004,
        "class_name": "Detection Finding",
        "category_uid": 2,
        "category_name": "Findings",
        "activity_id": 1,
        "activity_name": "Create",
        "type_uid": 200401,
        "type_name": "Detection Finding: Create",
        "time": time_ms,
        "severity_id": sev,
        "severity": {1: "Informational", 2: "Low", 3: "Medium", 4: "High", 5: "Critical"}[sev],
        "status_id": 1,
        "status": "New",
        "is_alert": sev >= 4,
        "message": f"{rule_title}: {what[:200]}" if what else rule_title,
        "metadata": {
            "product": {"name": "hookaudit", "vendor_name": "hookaudit", "version": ENGINE_VERSION},
            "version": OCSF_VERSION,
            "uid": uid,
            "original_event_uid": event_id,
            "correlation_uid": session_id or event_id,
            "log_name": "hookaudit detect",
        },
        "device": {"type_id": 0, "hostname": host or "unknown"},
        "finding_info": {
            "uid": uid,
            "title": rule_title,
            "analytic": analytic,
            "types": ["Sigma"],
            "related_events": [{"uid": event_id}],
        },
        "evidences": [{"actor": actor, "data": {"tool": tool, "decision": decision, "what": what}}],
        "unmapped": {"tool_name": tool or "", "decision": decision},
    }
