"""The formats a sink can send: OCSF, CEF, ECS, JSON, each a pure function of a `View`.

Rules of this file:
- Pure: a `View` in, `Formatted` records out. A record carries its text line (one JSON
  object or one CEF line, never a line break), its JSON document when it has one (HEC and
  Elastic send that), its unique id (Elastic's ``_id``) and what a transport's own header
  needs (time, severity, event name, host).

Example:
    >>> from engine.records import Outcome, new_event
    >>> from ingest.siem.view import build_view
    >>> ev = new_event({"hook_event_name": "Stop"}, host="h", user="u")
    >>> [r.text[:6] for r in format_view("cef", build_view(Outcome(event=ev, settings_id="s")))]
    ['CEF:0|']
"""

from __future__ import annotations

from typing import Any

import msgspec

from ingest.siem.cef import to_cef
from ingest.siem.ecs import to_ecs
from ingest.siem.kinds import severity
from ingest.siem.ocsf import to_ocsf
from ingest.siem.view import View

__all__ = ["FORMATS", "Formatted", "format_view"]

FORMATS = ("ocsf", "cef", "ecs", "json")

_enc = msgspec.json.Encoder()


class Formatted(msgspec.Struct, frozen=True, kw_only=True):
    """One record ready for a transport."""

    uid: str  # unique per record: Elastic _id, the duplicate check of receivers
    event_id: str
    seq: int
    time_ms: int
    severity: int  # 0-10
    event: str
    host: str
    text: str  # one line, no CR/LF
    doc: dict[str, Any] | None = None
    sourcetype: str = "hookaudit"


def _json(v: View) -> dict[str, Any]:
    doc: dict[str, Any] = msgspec.to_builtins(v)
    return doc


def format_view(fmt: str, v: View) -> list[Formatted]:
    """The records of `v` in format `fmt` (one of `FORMATS`; an OCSF denial gives two)."""
    sev = severity(v.decision, v.blocked, bool(v.errors))

    def make(uid: str, text: str, doc: dict[str, Any] | None) -> Formatted:
        return Formatted(
            uid=uid,
            event_id=v.event_id,
            seq=v.seq,
            time_ms=v.time_ms,
            severity=sev,
            event=v.event,
            host=v.host,
            text=text,
            doc=doc,
            sourcetype=f"hookaudit:{fmt}",
        )

    if fmt == "ocsf":
        return [make(r["metadata"]["uid"], _enc.encode(r).decode(), r) for r in to_ocsf(v)]
    if fmt == "cef":
        return [make(v.record_id, to_cef(v), None)]
    if fmt == "ecs":
        doc = to_ecs(v)
        return [make(v.record_id, _enc.encode(doc).decode(), doc)]
    if fmt == "json":
        doc = _json(v)
        return [make(v.record_id, _enc.encode(doc).decode(), doc)]
    raise ValueError(f"--format {fmt!r}: expected one of {', '.join(FORMATS)}")
