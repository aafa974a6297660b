"""What every SIEM format says about one outcome: the `View`, built once, redacted, bounded.

Rules of this file:
- Pure: an `Outcome` (and its stream sequence) in, a `View` out. No I/O, no clock.
- Everything that leaves goes through here, so redaction and bounding happen once: every
  string taken from the agent's payload is redacted by the `Redactor`, cut to `max_field`
  characters (UTF-8-safe: text is Python `str`, lone surrogates become "?") and the
  payload tree is bounded in depth and items. A record that was cut says so (`truncated`).
- The tool decides the kind of activity (`kind`): a shell command (`process`), a file
  operation (`file`), a fetch (`web`), an MCP tool (`mcp`), anything else (`api`).

Example:
    >>> from engine.records import Outcome, new_event
    >>> ev = new_event({"hook_event_name": "PreToolUse", "tool_name": "Bash",
    ...                 "tool_input": {"command": "ls"}}, host="h", user="u")
    >>> v = build_view(Outcome(event=ev, settings_id="s", decision="allow"), seq=7)
    >>> v.kind, v.command, v.seq
    ('process', 'ls', 7)
"""

from __future__ import annotations

import hashlib
import json
import posixpath
from typing import Any

import msgspec

from engine.records import Outcome
from ingest.siem.redact import Redactor

__all__ = ["Kind", "View", "build_view", "severity", "tool_kind"]

Kind = str  # "process" | "file" | "web" | "mcp" | "api"

_FILE_TOOLS = {
    "Write": "create",
    "Edit": "update",
    "MultiEdit": "update",
    "NotebookEdit": "update",
    "Read": "read",
}
_WEB_TOOLS = {"WebFetch"}
_SHELL_TOOLS = {"Bash", "BashOutput", "PowerShell"}

MAX_FIELD = 8192
MAX_DEPTH = 8
MAX_ITEMS = 256


class View(msgspec.Struct, frozen=True, kw_only=True):
    """One outcome as the formats see it; every string already redacted and bounded."""

    record_id: str  # (event id, settings_id, replay_id) digest: names this outcome
    event_id: str
    seq: int
    time_ms: int
    event: str
    tool: str | None
    tool_use_id: str | None
    kind: Kind
    file_action: str | None
    session_id: str
    host: str
    user: str
    cwd: str | None
    source: str
    decision: str  # allow | deny | ask | defer | none
    blocked: bool
    reason: str | None
    command: str | None
    file_path: str | None
    url: str | None
    mcp_server: str | None
    mcp_tool: str | None
    settings_id: str
    posture: str
    replay_id: str | None
    rules: list[str]  # hooks that decided: "type:command/url/callable"
    errors: list[str]
    payload: Any  # the agent's hook input, redacted and bounded
    truncated: bool
    untruncated_size: int


def tool_kind(tool: str | None) -> tuple[Kind, str | None]:
    """The kind of activity a tool stands for, and the file action for file tools.

    Example:
        >>> tool_kind("Edit"), tool_kind("mcp__github__create_issue"), tool_kind(None)
        (('file', 'update'), ('mcp', None), ('api', None))
    """
    if tool is None:
        return "api", None
    if tool in _SHELL_TOOLS:
        return "process", None
    if tool in _FILE_TOOLS:
        return "file", _FILE_TOOLS[tool]
    if tool in _WEB_TOOLS:
        return "web", None
    if tool.startswith("mcp__"):
        return "mcp", None
    return "api", None


def severity(decision: str, blocked: bool, has_errors: bool) -> int:
    """0-10 severity shared by every format (CEF uses it as is, others scale it).

    Example:
        >>> severity("deny", True, False), severity("allow", False, False)
        (7, 1)
    """
    if blocked or decision == "deny":
        return 7
    if decision == "ask":
        return 4
    if has_errors:
        return 5
    if decision == "defer":
        return 3
    return 1


class _Bound:
    """Bounds and redacts strings; remembers whether anything was cut."""

    def __init__(self, redactor: Redactor, max_field: int) -> None:
        self.redactor: Redactor | None = redactor
        self.max_field = max_field
        self.cut = False

    def skip_redaction_unless(self, strings: list[str]) -> None:
        """One scan over all of an outcome's strings, joined by line breaks: when no pattern
        matches there, none matches any one of them (each is a substring bounded by a
        non-word character, as at the start and end of a string), so each string need not be
        scanned again."""
        if self.redactor is not None and not self.redactor.may_match("\n".join(strings)):
            self.redactor = None

    def text(self, value: str) -> str:
        if not value.isascii():
            value = value.encode("utf-8", "replace").decode("utf-8")
        if self.redactor is not None:
            value = self.redactor.text(value)
        if len(value) > self.max_field:
            self.cut = True
            return value[: self.max_field] + "…[truncated]"
        return value

    def opt(self, value: object) -> str | None:
        return self.text(value) if isinstance(value, str) else None

    def tree(self, value: Any, depth: int = 0) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, dict):
            if depth >= MAX_DEPTH:
                self.cut = True
                return "…[depth]"
            out: dict[str, Any] = {}
            for i, (k, v) in enumerate(value.items()):
                if i >= MAX_ITEMS:
                    self.cut = True
                    out["…"] = f"{len(value) - MAX_ITEMS} more keys"
                    break
                out[self.text(str(k))] = self.tree(v, depth + 1)
            return out
        if isinstance(value, list):
            if depth >= MAX_DEPTH:
                self.cut = True
                return "…[depth]"
            items = [self.tree(v, depth + 1) for v in value[:MAX_ITEMS]]
            if len(value) > MAX_ITEMS:
                self.cut = True
                items.append(f"…{len(value) - MAX_ITEMS} more items")
            return items
        if isinstance(value, bool | int | float) or value is None:
            return value
        return self.text(str(value))


_payload_dec = msgspec.json.Decoder()


def _rule(run: Any) -> str:
    h = run.hook
    what = h.command or h.url or h.callable or h.prompt or h.tool or ""
    return f"{h.type}:{what}"


def build_view(
    outcome: Outcome,
    *,
    seq: int = 0,
    redactor: Redactor | None = None,
    max_field: int = MAX_FIELD,
) -> View:
    """The `View` of `outcome` (stream sequence `seq`), redacted by `redactor`.

    Example:
        >>> from engine.records import new_event
        >>> ev = new_event({"hook_event_name": "Stop"}, host="h", user="u")
        >>> build_view(Outcome(event=ev, settings_id="s")).kind
        'api'
    """
    ev = outcome.event
    b = _Bound(redactor or Redactor.default(), max_field)
    raw: Any
    try:
        raw = _payload_dec.decode(ev.payload)
    except (msgspec.DecodeError, UnicodeError):
        try:  # JSON that msgspec refuses, e.g. a lone surrogate escape ("\udcff")
            raw = json.loads(ev.payload)
        except (ValueError, RecursionError):
            raw = {"payload_text": ev.payload}
    strings: list[str] = []
    _strings(raw, strings, 0)
    strings += [ev.event, ev.session_id, ev.host, ev.user, ev.source, outcome.reason or ""]
    strings += [ev.tool_name or "", ev.tool_use_id or "", ev.cwd or "", *outcome.errors]
    strings += [_rule(r) for r in outcome.runs]
    b.skip_redaction_unless(strings)
    payload = b.tree(raw)
    tool_input = payload.get("tool_input") if isinstance(payload, dict) else None
    ti: dict[str, Any] = tool_input if isinstance(tool_input, dict) else {}
    kind, file_action = tool_kind(ev.tool_name)
    mcp_server = mcp_tool = None
    if kind == "mcp" and ev.tool_name:
        _, _, rest = ev.tool_name.partition("mcp__")
        mcp_server, _, mcp_tool = rest.partition("__")
    identity = f"{ev.id}\x00{outcome.settings_id}\x00{outcome.replay_id or ''}"
    decisive = [r for r in outcome.runs if r.outcome == "deny"] or [
        r for r in outcome.runs if r.decision
    ]
    return View(
        record_id=hashlib.sha256(identity.encode()).hexdigest()[:32],
        event_id=ev.id,
        seq=seq,
        time_ms=int(ev.ts.timestamp() * 1000),
        event=b.text(ev.event),
        tool=b.opt(ev.tool_name),
        tool_use_id=b.opt(ev.tool_use_id),
        kind=kind,
        file_action=file_action,
        session_id=b.text(ev.session_id),
        host=b.text(ev.host),
        user=b.text(ev.user),
        cwd=b.opt(ev.cwd),
        source=b.text(ev.source),
        decision=outcome.decision or "none",
        blocked=outcome.blocked,
        reason=b.opt(outcome.reason),
        command=ti.get("command") if isinstance(ti.get("command"), str) else None,
        file_path=_str(ti.get("file_path") or ti.get("notebook_path") or ti.get("path")),
        url=_str(ti.get("url")),
        mcp_server=mcp_server,
        mcp_tool=mcp_tool or None,
        settings_id=outcome.settings_id,
        posture=outcome.posture,
        replay_id=outcome.replay_id,
        rules=[b.text(_rule(r)) for r in decisive[:16]],
        errors=[b.text(e) for e in outcome.errors[:16]],
        payload=payload,
        truncated=b.cut,
        untruncated_size=len(ev.payload),
    )


def _strings(value: Any, out: list[str], depth: int) -> None:
    """Every string (keys too) in a decoded JSON value, to `MAX_DEPTH` levels."""
    if isinstance(value, str):
        out.append(value)
    elif depth > MAX_DEPTH:
        return
    elif isinstance(value, dict):
        for k, v in value.items():
            out.append(str(k))
            _strings(v, out, depth + 1)
    elif isinstance(value, list):
        for v in value:
            _strings(v, out, depth + 1)


def _str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def file_name(path: str) -> str:
    """The last component of `path` (the path itself when it has none).

    Example:
        >>> file_name("/a/b.txt"), file_name("/")
        ('b.txt', '/')
    """
    return posixpath.basename(path.rstrip("/")) or path
