"""What the worker lets in: one message to a checked event, or to the record of its rejection.

Rules of this file:
- No NATS import: a message is its bytes, subject and headers. Pure but for `keep`,
  which puts a refused message under ``<data-dir>/rejects/``.
- The payload is read by the engine's one parser (`engine.payload.parse_payload`:
  bounded, one reading, typed), and the event's denormalised columns must be the ones
  its payload gives, so a publisher that bypassed `emit` cannot make a view read
  another event than the engine evaluated.
- Refused input becomes an Outcome with ``decided_by = 'rejected'`` and payload ``{}``
  (the views parse every payload); `event.rejected` holds its size, sha256, start, why.
- A record whose agent was answered by a fallback says that answer (`experienced`).

Example:
    >>> admit(b"\\x00", "hooks.events.Stop", {}, data_dir, "s1").decided_by  # doctest: +SKIP
    'rejected'
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import msgspec

from engine.errors import HookauditError, InvalidEvent
from engine.events import is_known
from engine.failclosed import one_line
from engine.payload import parse_payload
from engine.records import (
    Fallback,
    HookEvent,
    Outcome,
    decode_event_msgpack,
    uuid7,
)
from ingest.protocol import MSG_ID
from ingest.rejects import keep, rejection

__all__ = [
    "FROM_PAYLOAD",
    "Admitted",
    "admit",
    "columns_agree",
    "experienced",
    "observed",
    "record_only",
    "rejected",
]

_log = logging.getLogger("hookaudit.worker")

#: A checked event and its payload (None for a record-only event), or a rejected record.
Admitted = tuple[HookEvent, dict[str, Any] | None] | Outcome


def admit(
    data: bytes, subject: str, headers: Mapping[str, str], data_dir: Path, settings_id: str
) -> Admitted:
    """The message's event and its checked payload, or the record of its rejection.

    A record-only event (refused upstream, or a fallback notice) comes with payload None.
    """
    try:
        ev = decode_event_msgpack(data)
    except Exception as exc:  # msgspec errors, and anything else a hostile message does
        why = f"undecodable event: {one_line(exc)}"
        return rejected(data, subject, headers, None, why, data_dir, settings_id)
    if ev.rejected is not None or (ev.fallback is not None and ev.fallback.notice):
        return ev, None
    try:
        payload = parse_payload(ev.payload, f"event {ev.id}")
    except InvalidEvent as exc:
        return rejected(data, subject, headers, ev, exc.why, data_dir, settings_id)
    except Exception as exc:
        why = f"cannot check the payload: {one_line(exc)}"
        return rejected(data, subject, headers, ev, why, data_dir, settings_id)
    if not columns_agree(ev, payload):
        why = "event columns disagree with its payload"
        return rejected(data, subject, headers, ev, why, data_dir, settings_id)
    return ev, payload


#: The HookEvent fields `new_event` takes from the payload (the rest it is given).
FROM_PAYLOAD = (
    "event", "session_id", "tool_name", "tool_use_id", "cwd", "transcript_path",
    "permission_mode", "agent_id", "agent_type",
)  # fmt: skip


def columns_agree(ev: HookEvent, payload: dict[str, Any]) -> bool:
    """Whether `ev` is what `new_event` makes of its own payload (id, time, source, host,
    user and fallback as given): the columns the views read are the payload's.

    One comparison per column instead of building the expected event (a third of the
    admission's cost); `tests/unit/test_admit.py` holds it to the `new_event` reading.

    Example:
        >>> from engine.records import new_event
        >>> e = new_event({"hook_event_name": "Stop", "cwd": "/p"})
        >>> columns_agree(e, {"hook_event_name": "Stop", "cwd": "/q"})
        False
    """
    g = payload.get
    if not ev.id or ev.rejected is not None:  # new_event gives an empty id a fresh one
        return False
    sid, tool, use, cwd = g("session_id"), g("tool_name"), g("tool_use_id"), g("cwd")
    tp, pm, aid, at = g("transcript_path"), g("permission_mode"), g("agent_id"), g("agent_type")
    # Inline, not a helper per column: this runs for every event.
    return (
        ev.event == str(g("hook_event_name", ""))
        and ev.session_id == (sid if isinstance(sid, str) else "")
        and ev.tool_name == (tool if isinstance(tool, str) else None)
        and ev.tool_use_id == (use if isinstance(use, str) else None)
        and ev.cwd == (cwd if isinstance(cwd, str) else None)
        and ev.transcript_path == (tp if isinstance(tp, str) else None)
        and ev.permission_mode == (pm if isinstance(pm, str) else None)
        and ev.agent_id == (aid if isinstance(aid, str) else None)
        and ev.agent_type == (at if isinstance(at, str) else None)
        and (
            ev.agent_payload is None and ev.agent_event is None and ev.agent_tool is None
            if ev.agent == "claude_code"
            else _agent_agrees(ev, payload)
        )
    )


def _agent_agrees(ev: HookEvent, payload: dict[str, Any]) -> bool:
    """Whether another agent's event is what its dialect makes of the agent's verbatim
    input: the payload the engine sees, and the agent's own event and tool names."""
    from engine.dialects.base import UnknownAgent
    from engine.dialects.registry import get
    from engine.payload import parse_payload

    if ev.agent_payload is None:
        return False
    try:
        said = get(ev.agent).normalise(
            parse_payload(ev.agent_payload, "agent_payload", any_event=True)
        )
    except (HookauditError, UnknownAgent, ValueError, RecursionError):
        return False
    return (
        said.payload == payload
        and said.agent_event == ev.agent_event
        and said.agent_tool == ev.agent_tool
    )


def record_only(ev: HookEvent, by: Literal["rejected", "fallback"], settings_id: str) -> Outcome:
    """The record of an event refused upstream, or of a fallback notice: no hook runs."""
    if by == "rejected":  # blocked/decision: what emit or serve answered (`fallback`)
        assert ev.rejected is not None
        fb = ev.fallback
        return Outcome(
            event=ev,
            settings_id=settings_id,
            decided_by="rejected",
            blocked=fb is not None and fb.blocked,
            decision=fb.decision if fb is not None else None,
            reason=ev.rejected.reason,
            errors=[f"rejected by {ev.rejected.stage}: {ev.rejected.reason}"],
        )
    assert ev.fallback is not None
    # Its own dedup key: the policy record of the same event has the real settings id.
    return experienced(
        Outcome(event=ev, settings_id=f"fallback:{settings_id}", decided_by="fallback")
    )


def rejected(
    data: bytes,
    subject: str,
    headers: Mapping[str, str],
    ev: HookEvent | None,
    why: str,
    data_dir: Path,
    settings_id: str,
) -> Outcome:
    """Keep a refused message on disk and build its ``rejected`` record (payload ``{}``)."""
    event_id = ev.id if ev is not None else _clean_id(headers.get(MSG_ID))
    try:
        keep(data_dir, data, why, stage="worker", event_id=event_id)
    except OSError as exc:
        _log.error("cannot keep a rejected message: %s", exc)
    _log.error("rejected message on %s: %s", subject[:200], why)
    name = ev.event if ev is not None and is_known(ev.event) else _subject_event(subject)
    stub = HookEvent(
        id=event_id,
        ts=ev.ts if ev is not None else datetime.now(UTC),
        event=name,
        payload="{}",
        source=ev.source if ev is not None else "unknown",
        host=ev.host if ev is not None else "",
        user=ev.user if ev is not None else "",
        session_id=ev.session_id if ev is not None else "",
        rejected=rejection(data, why, stage="worker"),
    )
    return Outcome(
        event=stub,
        settings_id=settings_id,
        decided_by="rejected",
        reason=why,
        errors=[f"rejected by worker: {why}"],
    )


def experienced(o: Outcome) -> Outcome:
    """A record whose agent was answered by a fallback says that answer, not the policy's.

    The policy's own verdict (a spooled event is still evaluated) stays in `runs`, and in
    `errors` in words.
    """
    fb = o.event.fallback
    if fb is None or o.decided_by == "rejected":
        return o
    if o.decided_by == "policy":
        policy = f"policy decision not seen by the agent: {o.decision or 'none'}"
        if o.reason:
            policy += f" ({o.reason})"
        o = msgspec.structs.replace(o, errors=[*o.errors, policy])
    return _answer(o, fb)


def observed(o: Outcome) -> Outcome:
    """The record of a policy decision that nobody waited for (the event came without a
    reply subject: observe mode, a spooled observe-mode event, backfill): the agent was
    never stopped by it, so it is ``observed``; blocked/decision/reason stay the policy's
    verdict (what enforcing would have done).

    Example:
        >>> from engine.records import new_event
        >>> observed(Outcome(event=new_event({"hook_event_name": "Stop"}), settings_id="s")).decided_by
        'observed'
    """
    if o.decided_by != "policy" or o.event.fallback is not None:
        return o
    return msgspec.structs.replace(o, decided_by="observed")


def _answer(o: Outcome, fb: Fallback) -> Outcome:
    return msgspec.structs.replace(
        o, decided_by="fallback", blocked=fb.blocked, decision=fb.decision, reason=fb.reason
    )


def _clean_id(value: object) -> str:
    """A message id fit for a record (a hostile header capped and cleaned), or a new one."""
    if isinstance(value, str):
        text = "".join(c for c in value[:64] if c.isalnum() or c in "-:_.")
        if text:
            return text
    return uuid7()


def _subject_event(subject: str) -> str:
    name = subject.rpartition(".")[2]
    return name if is_known(name) else "unknown"
