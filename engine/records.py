"""The records hookaudit stores and sends: HookEvent, HookRun, Outcome.

Rules of this file:
- Leaf module: stdlib and msgspec only. Every other package imports from here.
- Records are frozen, keyword-only msgspec Structs. Schemas evolve additively: a new
  field gets a default, a type never changes, and a reader accepts older records.
- The agent's hook input is kept **verbatim** as the JSON text it sent (`payload`);
  the denormalised columns next to it exist for queries and never replace it.
- Encoders and decoders are built once, at module level.

Example:
    >>> ev = new_event({"hook_event_name": "Stop", "session_id": "s1", "cwd": "/p"})
    >>> ev.event, ev.session_id
    ('Stop', 's1')
"""

from __future__ import annotations

import getpass
import hashlib
import os
import secrets
import socket
import time
from datetime import UTC, datetime
from typing import Any, Literal, get_args

import msgspec

__all__ = [
    "ENGINE_VERSION",
    "POSTURES",
    "PROFILES",
    "DecidedBy",
    "Fallback",
    "HookEvent",
    "HookIdentity",
    "HookRun",
    "Outcome",
    "Posture",
    "Profile",
    "Rejection",
    "RunOutcome",
    "canonical_bytes",
    "chain_hash",
    "decode_event_json",
    "decode_event_msgpack",
    "decode_outcome_json",
    "decode_outcome_msgpack",
    "encode_json",
    "encode_msgpack",
    "new_event",
    "payload_dict",
    "uuid7",
]

ENGINE_VERSION = "0.1.0"

RunOutcome = Literal["allow", "deny", "error", "noop"]
# How hook answers are read (Claude Code's current rules, or the legacy ones), and whether a
# failure denies (enforcing) or lets the action proceed (compat): defined here, once.
Profile = Literal["current", "legacy"]
Posture = Literal["compat", "enforcing"]
PROFILES: tuple[Profile, ...] = get_args(Profile)  # the CLIs' choices
POSTURES: tuple[Posture, ...] = get_args(Posture)
#: Who decided what the agent was told: the engine (`policy`), the emitter or gateway on
#: its own (`fallback`: timeout, NATS down, fail open/closed), or nobody because the input
#: was refused (`rejected`); `observed`: the engine decided but nobody waited for it
#: (observe mode, backfill), so the agent went on whatever the record's decision says.
DecidedBy = Literal["policy", "fallback", "rejected", "observed"]


def uuid7(ts_ms: int | None = None) -> str:
    """A time-ordered UUIDv7 string (RFC 9562).

    >>> len(uuid7())
    36
    """
    ms = int(time.time() * 1000) if ts_ms is None else ts_ms
    rand = int.from_bytes(secrets.token_bytes(10), "big")
    value = (ms & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76
    value |= ((rand >> 62) & 0xFFF) << 64
    value |= 0b10 << 62
    value |= rand & ((1 << 62) - 1)
    h = f"{value:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


class Fallback(msgspec.Struct, frozen=True, kw_only=True):
    """What an emitter (`emit`, `serve`) answered the agent by itself, and why.

    Carried by a spooled event, or by a follow-up notice after a timeout, so the log
    records what the agent experienced, not only what the policy would have said.
    `notice` is set on the follow-up: a copy of an event already published, which the
    worker records without evaluating it again.
    """

    by: str
    why: str
    fail: str
    blocked: bool
    decision: str | None = None
    reason: str | None = None
    notice: bool = False


class Rejection(msgspec.Struct, frozen=True, kw_only=True):
    """Input that was refused before any policy ran: how big it was, its digest, why.

    `stage` is who refused it (``emit``, ``serve``, ``worker``); `kept` how many of its
    bytes are kept under ``<data-dir>/rejects/``; `head` its start as text (invalid UTF-8
    replaced), so the record's payload stays ``{}`` and every view can still parse it.
    """

    stage: str
    reason: str
    size: int
    sha256: str
    kept: int = 0
    head: str = ""


class HookEvent(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """One hook event as an agent raised it.

    `payload` is the agent's hook input JSON, byte for byte as received (decoded to
    text). Unknown fields are therefore never dropped.

    Untracked by the garbage collector (``gc=False``): one is made per event, and it
    can never be part of a reference cycle (it holds values and decoded JSON only).
    """

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
    transcript_path: str | None = None
    permission_mode: str | None = None
    agent_id: str | None = None
    agent_type: str | None = None
    fallback: Fallback | None = None
    rejected: Rejection | None = None
    #: The agent that raised it (`engine.dialects.registry.AGENTS`), and, for an agent other
    #: than Claude Code, its own event and tool names and its verbatim hook input: `payload`
    #: is then the canonical (Claude Code shaped) input the engine and the hooks see.
    agent: str = "claude_code"
    agent_event: str | None = None
    agent_tool: str | None = None
    agent_payload: str | None = None
    #: The project directory the agent gave its hooks (``$CLAUDE_PROJECT_DIR`` in the hook's
    #: environment): the session's project, which the input's `cwd` is not after a `cd` or
    #: in a subdirectory. The engine gives it to command hooks as Claude Code does.
    project_dir: str | None = None


class HookIdentity(msgspec.Struct, frozen=True, kw_only=True):
    """What makes two hooks 'the same hook' for dedup, reuse and attribution."""

    type: str
    source: str
    matcher: str | None = None
    command: str | None = None
    args: list[str] | None = None
    shell: str | None = None
    url: str | None = None
    prompt: str | None = None
    model: str | None = None
    callable: str | None = None
    server: str | None = None
    tool: str | None = None
    if_: str | None = msgspec.field(default=None, name="if")
    timeout: float | None = None
    plugin_root: str | None = None
    is_async: bool = False

    def key(self) -> str:
        """A stable short digest of the identity (used as `hook_id`)."""
        return hashlib.sha256(msgspec.json.encode(self)).hexdigest()[:16]


class HookRun(msgspec.Struct, frozen=True, gc=False):
    """One hook's execution and how the engine read it.

    The raw observations (exit code, stdout, stderr, HTTP status, model answer) are
    kept so that replay can decode them again under another engine version.

    Not keyword-only, unlike the other records: `engine.hook_verdict.to_hook_run` builds one
    per hook per event positionally, five times faster than with 17 keywords.

    Untracked by the garbage collector (``gc=False``): one is made per event, and it
    can never be part of a reference cycle (it holds values and decoded JSON only).
    """

    hook: HookIdentity
    hook_id: str
    outcome: RunOutcome
    exit_code: int | None = None
    duration_ms: float = 0.0
    stdout: str = ""
    stderr: str = ""
    stdout_bytes: int = 0
    stderr_bytes: int = 0
    truncated: bool = False
    http_status: int | None = None
    error_kind: str | None = None
    message: str | None = None
    output: dict[str, Any] | None = None
    decision: str | None = None
    pending: bool = False
    llm: list[dict[str, Any]] | None = None


class Outcome(msgspec.Struct, frozen=True):
    """The engine's aggregated answer to one HookEvent, as appended to the log.

    Not keyword-only, unlike the other records: `engine.outcome.to_outcome` builds one per
    event positionally (0.3 µs against 2.2 µs with its 18 keywords); everywhere else it is
    built with keywords. The field order is the record's encoding: never reorder.

    `decided_by` says whose answer the agent got: ``policy`` (this record's decision is
    the engine's), ``fallback`` (emit or serve answered alone: `event.fallback` holds what
    and why, and `blocked`/`decision`/`reason` are that answer; the policy's own verdict
    is in `runs`), ``rejected`` (the input was refused: `event.rejected` holds why) or
    ``observed`` (the engine's decision, which no one waited for: the agent was not stopped).
    """

    event: HookEvent
    settings_id: str
    engine_version: str = ENGINE_VERSION
    posture: str = "compat"
    profile: str = "current"
    blocked: bool = False
    decision: str | None = None
    reason: str | None = None
    updated_input: dict[str, Any] | None = None
    additional_context: list[str] = msgspec.field(default_factory=list)
    system_messages: list[str] = msgspec.field(default_factory=list)
    continue_: bool = msgspec.field(default=True, name="continue")
    stop_reason: str | None = None
    specific: dict[str, Any] = msgspec.field(default_factory=dict)
    runs: list[HookRun] = msgspec.field(default_factory=list)
    errors: list[str] = msgspec.field(default_factory=list)
    #: The deliberate rules that decided it where Claude Code races or is laxer (ids of
    #: `engine.aggregate.RULES`, e.g. ``first-deny-in-config-order``); empty for most events.
    #: Before `replay_id`: the log's fast readers expect every nested value before it.
    rules: list[str] = msgspec.field(default_factory=list)
    replay_id: str | None = None
    decided_by: DecidedBy = "policy"
    worker: str = ""
    seq: int = 0
    appended: datetime | None = None
    prev_hash: str = ""
    hash: str = ""


_json_enc = msgspec.json.Encoder()
_mp_enc = msgspec.msgpack.Encoder()
_event_json = msgspec.json.Decoder(HookEvent)
_event_mp = msgspec.msgpack.Decoder(HookEvent)
_outcome_json = msgspec.json.Decoder(Outcome)
_outcome_mp = msgspec.msgpack.Decoder(Outcome)
_payload_dec = msgspec.json.Decoder(dict[str, Any])


def encode_json(obj: Any) -> bytes:
    """JSON bytes of a record (or any msgspec-encodable value)."""
    return _json_enc.encode(obj)


def encode_msgpack(obj: Any) -> bytes:
    """msgpack bytes of a record: the wire format on NATS."""
    return _mp_enc.encode(obj)


def decode_event_json(data: bytes | str) -> HookEvent:
    return _event_json.decode(data)


def decode_event_msgpack(data: bytes) -> HookEvent:
    return _event_mp.decode(data)


def decode_outcome_json(data: bytes | str) -> Outcome:
    return _outcome_json.decode(data)


def decode_outcome_msgpack(data: bytes) -> Outcome:
    return _outcome_mp.decode(data)


def payload_dict(event: HookEvent) -> dict[str, Any]:
    """The event's payload parsed to a dict (the payload was validated at creation)."""
    return _payload_dec.decode(event.payload)


def _str_or_none(value: object) -> str | None:
    return value if isinstance(value, str) else None


def new_event(
    payload: dict[str, Any],
    *,
    raw: str | None = None,
    source: str = "claude-code",
    host: str | None = None,
    user: str | None = None,
    event_id: str | None = None,
    ts: datetime | None = None,
    rejected: Rejection | None = None,
    agent: str = "claude_code",
    agent_event: str | None = None,
    agent_tool: str | None = None,
    agent_payload: str | None = None,
    project_dir: str | None = None,
) -> HookEvent:
    """Wrap an agent's hook input as a HookEvent with a fresh UUIDv7 id.

    `raw` is the exact JSON text received; when omitted the payload is encoded.
    The caller has already checked that `hook_event_name` is a string.
    """
    when = ts or datetime.now(UTC)
    return HookEvent(
        id=event_id or uuid7(int(when.timestamp() * 1000)),
        ts=when,
        event=str(payload.get("hook_event_name", "")),
        payload=raw if raw is not None else _json_enc.encode(payload).decode(),
        source=source,
        host=host if host is not None else socket.gethostname(),
        user=user if user is not None else _whoami(),
        session_id=_str_or_none(payload.get("session_id")) or "",
        tool_name=_str_or_none(payload.get("tool_name")),
        tool_use_id=_str_or_none(payload.get("tool_use_id")),
        cwd=_str_or_none(payload.get("cwd")),
        transcript_path=_str_or_none(payload.get("transcript_path")),
        permission_mode=_str_or_none(payload.get("permission_mode")),
        agent_id=_str_or_none(payload.get("agent_id")),
        agent_type=_str_or_none(payload.get("agent_type")),
        rejected=rejected,
        agent=agent,
        agent_event=agent_event,
        agent_tool=agent_tool,
        agent_payload=agent_payload,
        project_dir=project_dir,
    )


def _whoami() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return str(os.getuid())


def canonical_bytes(outcome: Outcome) -> bytes:
    """The bytes the chain hash covers: the record with `hash` emptied.

    msgspec encodes struct fields in declaration order and dict keys in insertion
    order, so the same record always gives the same bytes.
    """
    return _json_enc.encode(msgspec.structs.replace(outcome, hash=""))


def chain_hash(outcome: Outcome) -> str:
    """SHA-256 (hex) over canonical bytes; `prev_hash` is inside them, forming the chain."""
    return hashlib.sha256(canonical_bytes(outcome)).hexdigest()
