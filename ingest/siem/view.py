"""What every SIEM format says about one outcome: the `View`, built once, redacted, bounded.

Rules of this file:
- Pure: an `Outcome` (and its stream sequence) in, a `View` out. No I/O, no clock.
- Everything that leaves goes through here, so redaction and bounding happen once: every
  string taken from the agent's payload is redacted by the `Redactor`, cut to `max_field`
  characters (UTF-8-safe: text is Python `str`, lone surrogates become "?") and the
  payload tree is bounded in depth and items. A record that was cut says so (`truncated`).
- The tool decides the kind of activity (`kind`, from `ingest.siem.kinds.tool_kind`).

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
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import msgspec

from engine.records import HookRun, Outcome
from ingest.redact import Redactor
from ingest.siem.kinds import Kind, tool_kind

__all__ = ["View", "build_view", "view_of_msgpack"]

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
    # who decided what the agent got (engine.records.DecidedBy): "observed" means nobody
    # waited, so a deny here was a detection and the call went ahead (`enforced` is False)
    decided_by: str
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
    agent: str = "claude_code"  # the agent that raised it (`HookEvent.agent`)
    agent_tool: str | None = None  # its own tool name (`tool` is the canonical one)

    @property
    def enforced(self) -> bool:
        """Whether the agent got this decision (else the call went ahead, whatever it says)."""
        return self.decided_by != "observed"


class _Hook(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    type: str = ""
    command: str | None = None
    url: str | None = None
    callable: str | None = None
    prompt: str | None = None
    tool: str | None = None


class _Run(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    hook: _Hook
    outcome: str = ""
    decision: str | None = None


class _Event(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    id: str
    ts: datetime
    event: str
    payload: str
    source: str = "claude-code"
    host: str = ""
    user: str = ""
    session_id: str = ""
    tool_name: str | None = None
    tool_use_id: str | None = None
    cwd: str | None = None
    agent: str = "claude_code"
    agent_tool: str | None = None


class _Outcome(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """The fields of an `Outcome` the formats use: msgspec skips the rest (hook stdout,
    outputs, chain hashes) without building them, which halves the decoding cost."""

    event: _Event
    settings_id: str
    posture: str = "compat"
    blocked: bool = False
    decision: str | None = None
    reason: str | None = None
    decided_by: str = "policy"
    runs: list[_Run] = msgspec.field(default_factory=list)
    errors: list[str] = msgspec.field(default_factory=list)
    replay_id: str | None = None


_light = msgspec.msgpack.Decoder(_Outcome)


def view_of_msgpack(
    data: bytes, *, seq: int = 0, redactor: Redactor | None = None, max_field: int = MAX_FIELD
) -> View:
    """The `View` of an Outcome as it travels on NATS (msgpack), decoded once into the
    fields the formats use. Raises msgspec.DecodeError/ValidationError on a bad record.

    Example:
        >>> from engine.records import encode_msgpack, new_event
        >>> ev = new_event({"hook_event_name": "Stop"}, host="h", user="u")
        >>> view_of_msgpack(encode_msgpack(Outcome(event=ev, settings_id="s")), seq=3).seq
        3
    """
    return _build(_light.decode(data), seq, redactor, max_field)


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
        if self.redactor is None and len(value) <= self.max_field and value.isascii():
            return value
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


def _rule(run: HookRun | _Run) -> str:
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
    return _build(outcome, seq, redactor, max_field)


def _small(text: str, max_field: int) -> bool:
    """Whether a payload needs no bounding walk: short, shallow and with few items (a JSON
    text of at most MAX_DEPTH brackets nests at most that deep; one of fewer than MAX_ITEMS
    commas has fewer items in any one container)."""
    return (
        len(text) <= max_field
        and text.count("{") + text.count("[") <= MAX_DEPTH
        and text.count(",") < MAX_ITEMS
    )


def _build(o: Outcome | _Outcome, seq: int, redactor: Redactor | None, max_field: int) -> View:
    ev = o.event
    red = redactor or Redactor.default()
    b = _Bound(red, max_field)
    raw: Any
    exact = True  # decoded by msgspec: valid UTF-8, no lone surrogate anywhere
    try:
        raw = _payload_dec.decode(ev.payload)
    except (msgspec.DecodeError, UnicodeError, RecursionError):
        exact = False
        try:  # JSON that msgspec refuses, e.g. a lone surrogate escape ("\udcff")
            raw = json.loads(ev.payload)
        except (ValueError, RecursionError):
            raw = {"payload_text": ev.payload}
    rules_all = [_rule(r) for r in o.runs]
    extras = [ev.event, ev.session_id, ev.host, ev.user, ev.source, o.reason or ""]
    extras += [ev.tool_name or "", ev.tool_use_id or "", ev.cwd or "", *o.errors, *rules_all]
    joined = "\n".join(extras)
    # One look for the patterns' literals over the payload's JSON text and the other
    # fields; a JSON text without \u escapes holds every literal of its decoded strings.
    if exact and "\\u" not in ev.payload and red.clear(ev.payload + "\n" + joined):
        b.redactor = None
    else:
        strings: list[str] = []
        _strings(raw, strings, 0)
        b.skip_redaction_unless(strings + extras)
    # Nothing to redact or cut: the decoded tree as it is, no walk over it.
    simple = exact and b.redactor is None and _small(ev.payload, max_field)
    payload = raw if simple else b.tree(raw)
    tool_input = payload.get("tool_input") if isinstance(payload, dict) else None
    ti: dict[str, Any] = tool_input if isinstance(tool_input, dict) else {}
    kind, file_action = tool_kind(ev.tool_name)
    mcp_server = mcp_tool = None
    if kind == "mcp" and ev.tool_name:
        _, _, rest = ev.tool_name.partition("mcp__")
        mcp_server, _, mcp_tool = rest.partition("__")
    identity = f"{ev.id}\x00{o.settings_id}\x00{o.replay_id or ''}"
    runs: Sequence[HookRun | _Run] = o.runs
    decisive = [k for k, r in enumerate(runs) if r.outcome == "deny"]
    decisive = decisive or [k for k, r in enumerate(runs) if r.decision]
    command = ti.get("command")
    # The usual outcome: nothing to redact, every field short ASCII (their joined text is
    # short and ASCII): `b.text` would give each field back as it is, so it is not called.
    if b.redactor is None and len(joined) <= max_field and joined.isascii():
        event, tool, tool_use_id, cwd = ev.event, ev.tool_name, ev.tool_use_id, ev.cwd
        session_id, host, user, source = ev.session_id, ev.host, ev.user, ev.source
        reason, errors = o.reason, o.errors[:16]
        rules = [rules_all[k] for k in decisive[:16]]
    else:
        event, tool, tool_use_id = b.text(ev.event), b.opt(ev.tool_name), b.opt(ev.tool_use_id)
        cwd, session_id, host = b.opt(ev.cwd), b.text(ev.session_id), b.text(ev.host)
        user, source, reason = b.text(ev.user), b.text(ev.source), b.opt(o.reason)
        errors = [b.text(e) for e in o.errors[:16]]
        rules = [b.text(rules_all[k]) for k in decisive[:16]]
    return View(
        record_id=hashlib.sha256(identity.encode()).hexdigest()[:32],
        event_id=ev.id,
        seq=seq,
        time_ms=int(ev.ts.timestamp() * 1000),
        event=event,
        tool=tool,
        tool_use_id=tool_use_id,
        kind=kind,
        file_action=file_action,
        session_id=session_id,
        host=host,
        user=user,
        cwd=cwd,
        source=source,
        decision=o.decision or "none",
        blocked=o.blocked,
        decided_by=o.decided_by,
        reason=reason,
        command=command if isinstance(command, str) else None,
        file_path=_str(ti.get("file_path") or ti.get("notebook_path") or ti.get("path")),
        url=_str(ti.get("url")),
        mcp_server=mcp_server,
        mcp_tool=mcp_tool or None,
        settings_id=o.settings_id,
        posture=o.posture,
        replay_id=o.replay_id,
        rules=rules,
        errors=errors,
        payload=payload,
        truncated=b.cut,
        untruncated_size=len(ev.payload),
        agent=ev.agent,
        agent_tool=(ev.agent_tool if ev.agent_tool is not None else ev.tool_name)
        if b.redactor is None
        else b.opt(ev.agent_tool if ev.agent_tool is not None else ev.tool_name),
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
