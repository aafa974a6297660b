"""What the forwarder holds of each message it pulled, and how a refused one is parked.

Rules of this file:
- Data and pure functions only: no NATS, no sink, no I/O (`ingest.siem.forward` does that).
- An `Item` is one JetStream message in hand: the records made from it, the indices of
  those not yet accepted by the sink, and why it could not be decoded, if so.
- The stream sequence names a message in `siem status` and in ``parked.jsonl``; it is read
  from the reply subject (``$JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ts>.
  <pending>``) without the datetime and objects nats-py's ``msg.metadata`` builds.

Example:
    >>> class M:
    ...     _reply = b"$JS.ACK.S.C.1.42.7.0.0"
    >>> stream_seq(M())
    42
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from ingest.siem.formats import Formatted
from ingest.siem.state import Parked

__all__ = ["Item", "parked_message", "parked_record", "stream_seq"]


def stream_seq(msg: Any) -> int:
    """The stream sequence of a pulled message (see the rules above)."""
    raw = getattr(msg, "_reply", None)  # a Delivered: the subject's bytes, not decoded
    tokens: list[bytes] | list[str]
    if isinstance(raw, bytes):
        tokens = raw.split(b".")
    else:
        tokens = msg.reply.split(".") if msg.reply else []
    if len(tokens) == 9 and tokens[5].isdigit():
        return int(tokens[5])
    return int(msg.metadata.sequence.stream)


@dataclass
class Item:
    msg: Any
    records: list[Formatted]
    pending: set[int] = field(default_factory=set)  # indices into records not yet done
    bad: str | None = None  # why the message could not be decoded (it is parked)


def parked_record(r: Formatted, why: str) -> Parked:
    """A record the sink refused for good, as ``parked.jsonl`` keeps it (text capped)."""
    return Parked(
        time=time.time(),
        seq=r.seq,
        event_id=r.event_id,
        uid=r.uid,
        reason=why,
        record=r.text[:4096],
    )


def parked_message(m: Any, why: str) -> Parked:
    """A message that could not be decoded, as ``parked.jsonl`` keeps it (bytes capped)."""
    return Parked(
        time=time.time(),
        seq=stream_seq(m),
        event_id="",
        uid="",
        reason=why,
        record=repr(m.data[:200]),
    )
