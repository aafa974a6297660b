"""The worker's hot path on nats-py's connection, one batch at a time instead of one message.

nats-py handles every delivered message alike: it parses its headers into a dict, builds
a `Msg`, queues it and switches to the subscription's task to run its callback; every
publish validates, formats and queues one command. At the worker's rate that is most of
its NATS cost (README, "Where a worker's CPU goes"). This module keeps nats-py's
connection, its parser, reconnects and flusher, and bypasses the per-message parts:

- `route` hands the messages of one subscription straight to a plain function with the
  raw subject, reply, payload and header bytes (no header parse, no `Msg`, no queue, no
  task switch); every other subscription goes through nats-py as before.
- `pub_frame` formats one PUB/HPUB the way nats-py does (header names checked, values
  trimmed and CR/LF made spaces, subjects without whitespace), and `write` queues many
  frames as one command, with the checks of nats-py's `publish` (closed, draining,
  buffer full while reconnecting, max payload).

Rules of this file:
- What goes on the wire is what nats-py would send for the same publishes.
- A routed subscription keeps its nats-py `Subscription` (its sid survives reconnects,
  unsubscribe works); `unroute` gives its messages back to nats-py.

Example:
    route(nc, sub._id, lambda subject, reply, data, headers: ...)  # doctest: +SKIP
    await write(nc, [pub_frame("a.b", "", b"x", None)], payload=1)  # doctest: +SKIP
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

from nats import errors

__all__ = ["Handler", "ack_frames", "pub_frame", "route", "unroute", "write"]

#: handler(subject, reply, payload, raw header block or None), called on the reading task.
Handler = Callable[[bytes, bytes, bytes, bytes | None], None]

_KEY = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # nats-py's header-name rule
_NEWLINES = str.maketrans({"\r": " ", "\n": " "})
_BAD_SUBJECT = re.compile(r"[ \t\r\n]")
_ROUTES = "_hookaudit_routes"


def route(nc: Any, sid: int, handler: Handler) -> None:
    """Deliver subscription `sid`'s messages to `handler` directly (see the module doc)."""
    table: dict[int, Handler] | None = getattr(nc, _ROUTES, None)
    if table is None:
        table = {}
        slow = nc._process_msg  # nats-py's own, for every other subscription
        stats = nc.stats

        async def _process_msg(
            sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes | None
        ) -> None:
            handler = table.get(sid)
            if handler is None:
                await slow(sid, subject, reply, data, headers)
                return
            stats["in_msgs"] += 1
            stats["in_bytes"] += len(data)
            handler(subject, reply, data, headers)

        nc._process_msg = _process_msg  # the parser looks it up on the instance
        setattr(nc, _ROUTES, table)
    table[sid] = handler


def unroute(nc: Any, sid: int) -> None:
    table: dict[int, Handler] | None = getattr(nc, _ROUTES, None)
    if table is not None:
        table.pop(sid, None)


def _subject(s: str) -> bytes:
    if not s or _BAD_SUBJECT.search(s):
        raise errors.BadSubjectError
    return s.encode()


def pub_frame(subject: str, reply: str, data: bytes, headers: dict[str, str] | None) -> bytes:
    """One PUB (or HPUB with `headers`) command, as nats-py's `publish` would write it.

    Example:
        >>> pub_frame("a.b", "_INBOX.x", b"hi", {"Nats-Msg-Id": "k1"})
        b'HPUB a.b _INBOX.x 29 31\\r\\nNATS/1.0\\r\\nNats-Msg-Id: k1\\r\\n\\r\\nhi\\r\\n'
    """
    subj = _subject(subject)
    rep = _subject(reply) if reply else b""
    if headers is None:
        return b"PUB %s %s %d\r\n%s\r\n" % (subj, rep, len(data), data)
    hdr = [b"NATS/1.0\r\n"]
    for k, v in headers.items():
        key = k.strip()
        if not key:
            continue
        if not _KEY.fullmatch(key):
            raise errors.BadHeaderError(key)
        hdr.append(b"%s: %s\r\n" % (key.encode(), v.strip().translate(_NEWLINES).encode()))
    hdr.append(b"\r\n")
    block = b"".join(hdr)
    n = len(block)
    return b"HPUB %s %s %d %d\r\n%s%s\r\n" % (subj, rep, n, n + len(data), block, data)


def ack_frames(replies: Iterable[str], body: bytes = b"") -> bytes:
    """JetStream acks (empty body), or ``+TERM`` / ``+WPI`` / ``-NAK``, for many messages.

    Example:
        >>> ack_frames(["$JS.ACK.a.1", "$JS.ACK.a.2"])
        b'PUB $JS.ACK.a.1  0\\r\\n\\r\\nPUB $JS.ACK.a.2  0\\r\\n\\r\\n'
    """
    tail = b"  %d\r\n%s\r\n" % (len(body), body)  # no reply: two spaces, as nats-py
    out = []
    for r in replies:
        out.append(b"PUB ")
        out.append(_subject(r))
        out.append(tail)
    return b"".join(out)


async def write(nc: Any, frames: list[bytes], *, payload: int, count: int | None = None) -> None:
    """Queue `frames` on the connection as one command and kick its flusher.

    `payload` is the largest message body among them (checked against the server's
    max_payload, as `publish` does); `count` the number of messages (stats).
    """
    if nc.is_closed:
        raise errors.ConnectionClosedError
    if nc.is_draining_pubs:
        raise errors.ConnectionDrainingError
    if payload > nc._max_payload:
        raise errors.MaxPayloadError
    cmd = b"".join(frames)
    if not nc.is_connected:
        limit = nc._max_pending_size
        if limit <= 0 or len(cmd) + nc._pending_data_size > limit:
            raise errors.OutboundBufferLimitError
    nc.stats["out_msgs"] += len(frames) if count is None else count
    nc.stats["out_bytes"] += len(cmd)
    await nc._send_command(cmd)
    if nc._flush_queue is not None and nc._flush_queue.empty():
        await nc._flush_pending()
