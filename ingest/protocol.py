"""The wire protocol between emitters (emit, serve, backfill) and workers.

Rules of this file:
- Data only: header names, the reply record, data-dir defaults. No NATS import, so
  `hookaudit emit` can import it cheaply.
- An event is published on ``<prefix>hooks.events.<Event>`` as msgpack(HookEvent) with
  ``Nats-Msg-Id`` = the event id (JetStream drops a re-send inside the duplicate window).
- An emitter that waits for the decision sets ``Hookaudit-Reply`` to an inbox subject.
  The worker publishes msgpack(Reply) there **after** the outcome is durably appended.
- Outcomes are published on ``<prefix>hooks.outcomes.<Event>.<decision>`` with
  ``Nats-Msg-Id`` = the idempotency key ``<event id>:<settings_id>:<replay_id>``.

Example:
    >>> idempotency_key("e1", "s1", None)
    'e1:s1:'
"""

from __future__ import annotations

import os
from pathlib import Path

import msgspec

from engine.records import Outcome
from ingest.log.lines import idempotency_key

__all__ = [
    "MSG_ID",
    "REPLY_HEADER",
    "Reply",
    "default_data_dir",
    "idempotency_key",
]

MSG_ID = "Nats-Msg-Id"
REPLY_HEADER = "Hookaudit-Reply"


class Reply(msgspec.Struct, frozen=True, kw_only=True):
    """What a worker sends a waiting emitter: the stored outcome, or why there is none."""

    event_id: str
    outcome: Outcome | None = None
    error: str | None = None


def default_data_dir() -> Path:
    """``$HOOKAUDIT_DATA_DIR``, else ``$XDG_DATA_HOME/hookaudit`` (``~/.local/share/hookaudit``)."""
    env = os.environ.get("HOOKAUDIT_DATA_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_DATA_HOME")
    return (Path(xdg) if xdg else Path.home() / ".local" / "share") / "hookaudit"
