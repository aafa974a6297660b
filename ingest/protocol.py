"""The wire protocol between emitters (emit, serve, backfill) and workers.

Rules of this file:
- Data only: header names, the reply record, data-dir defaults. No NATS import, so
  `hookaudit emit` can import it cheaply.
- An event is published on ``<prefix>hooks.events.<Event>`` as msgpack(HookEvent) with
  ``Nats-Msg-Id`` = the event id (JetStream drops a re-send inside the duplicate window).
- An emitter that waits for the decision sets ``Hookaudit-Reply`` to an inbox subject
  (``_INBOX.…``; the worker answers no other subject, see `reply_subject_ok`).
  The worker publishes msgpack(Reply) there **after** the outcome is durably appended,
  with ``Hookaudit-Sig`` = base64 ed25519 signature of those bytes (`ingest.replysig`),
  or, when the event carried ``Hookaudit-Peer`` (a long-lived requester's X25519 key),
  ``Hookaudit-Mac`` = base64 keyed BLAKE2b-256 of them under the key the two share, and
  ``Hookaudit-Kx`` = the worker's exchange key signed by its reply key.
  An emitter that knows the worker's key accepts only a verifying reply naming its own
  event id, and ignores anything else arriving on its inbox.
- Outcomes are published on ``<prefix>hooks.outcomes.<Event>.<decision>`` with
  ``Nats-Msg-Id`` = the idempotency key ``<event id>:<settings_id>:<replay_id>``.

Example:
    >>> idempotency_key("e1", "s1", None)
    'e1:s1:'
"""

from __future__ import annotations

import msgspec

from engine.records import Outcome
from ingest.log.layout import default_data_dir  # re-exported: emit and the CLIs use it
from ingest.log.lines import idempotency_key

__all__ = [
    "KX_HEADER",
    "MAC_HEADER",
    "MSG_ID",
    "PEER_HEADER",
    "REPLY_HEADER",
    "SIG_HEADER",
    "Reply",
    "default_data_dir",
    "idempotency_key",
    "reply_subject_ok",
]

MSG_ID = "Nats-Msg-Id"
REPLY_HEADER = "Hookaudit-Reply"
SIG_HEADER = "Hookaudit-Sig"  # on a reply: base64 ed25519 signature of its bytes
MAC_HEADER = "Hookaudit-Mac"  # on a reply: base64 keyed BLAKE2b-256 tag under a peer key
KX_HEADER = "Hookaudit-Kx"  # with a tag: the worker's X25519 key + its ed25519 signature
PEER_HEADER = "Hookaudit-Peer"  # on an event: the requester's X25519 public key, base64

_INBOX = "_INBOX."
_MAX_SUBJECT = 256


class Reply(msgspec.Struct, frozen=True, kw_only=True):
    """What a worker sends a waiting emitter: the stored outcome, or why there is none."""

    event_id: str
    outcome: Outcome | None = None
    error: str | None = None


def reply_subject_ok(subject: str) -> bool:
    """True if a worker may publish a Reply to `subject`: an ``_INBOX.`` subject, no wildcard.

    The header comes from whoever published the event; without this check it could point
    the worker (which may publish outcomes and call the JetStream API) anywhere.

    Example:
        >>> reply_subject_ok("_INBOX.abc.1"), reply_subject_ok("$JS.API.STREAM.DELETE.X")
        (True, False)
    """
    return (
        subject.startswith(_INBOX)
        and len(subject) <= _MAX_SUBJECT
        and subject.isascii()
        and not any(c in subject for c in "*> \t\r\n")
        and ".." not in subject
        and not subject.endswith(".")
    )
