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
- It is the one module that touches nats-py's private attributes (the parser, the
  connection's command queue, a subscription's sid, the server pool), and it does so only
  on a nats-py minor version it was tested with (`TESTED`, the range pyproject.toml pins):
  any other raises `UntestedNats` naming the version, never a wrong frame or a lost message.
- What goes on the wire is what nats-py would send for the same publishes.
- A routed subscription keeps its nats-py `Subscription` (its sid survives reconnects,
  unsubscribe works); `unroute` gives its messages back to nats-py.

Example:
    route(nc, sid(sub), lambda subject, reply, data, headers: ...)  # doctest: +SKIP
    await write(nc, [pub_frame("a.b", "", b"x", None)], payload=1)  # doctest: +SKIP
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

from nats import errors
from nats.aio.client import __version__ as NATS_VERSION

__all__ = [
    "TESTED",
    "Handler",
    "UntestedNats",
    "ack_frames",
    "msg_id_frame",
    "parse_header_lines",
    "pub_frame",
    "route",
    "server_ack_frames",
    "server_pool",
    "sid",
    "unroute",
    "write",
]

#: handler(subject, reply, payload, raw header block or None), called on the reading task.
Handler = Callable[[bytes, bytes, bytes, bytes | None], None]

_KEY = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # nats-py's header-name rule
_NEWLINES = str.maketrans({"\r": " ", "\n": " "})
_BAD_SUBJECT = re.compile(r"[ \t\r\n]")
_ROUTES = "_hookaudit_routes"


#: nats-py (major, minor) versions whose private parts this module was tested with.
TESTED = ((2, 16),)


class UntestedNats(RuntimeError):
    """nats-py is a version whose private parts hookaudit was not tested with."""


def check_version(version: str = NATS_VERSION) -> None:
    """Raise UntestedNats unless nats-py `version` is one of `TESTED`.

    >>> check_version("2.16.0")
    >>> check_version("2.9.0")
    Traceback (most recent call last):
    ...
    ingest.nats.wire.UntestedNats: nats-py 2.9.0 is not a version hookaudit was tested with (2.16.x): install the range pyproject.toml pins
    """
    parts = version.split(".")
    try:
        key = (int(parts[0]), int(parts[1]))
    except (IndexError, ValueError):
        key = (-1, -1)
    if key not in TESTED:
        tested = ", ".join(f"{a}.{b}.x" for a, b in TESTED)
        raise UntestedNats(
            f"nats-py {version} is not a version hookaudit was tested with ({tested}): "
            "install the range pyproject.toml pins"
        )


def sid(sub: Any) -> int:
    """The subscription id nats-py gave `sub` (it survives reconnects)."""
    check_version()
    value: int = sub._id
    return value


def server_pool(nc: Any) -> list[Any]:
    """nats-py's pool of servers to reconnect to (it has no public way to add one)."""
    check_version()
    pool: list[Any] = nc._server_pool
    return pool


def parse_header_lines(block: bytes) -> dict[str, str]:
    """Header lines (after the ``NATS/1.0`` line) parsed exactly as nats-py parses them."""
    check_version()
    from nats.aio.client import Client

    parsed: dict[str, str] = Client._parse_header_lines(block)
    return parsed


def route(nc: Any, sid: int, handler: Handler) -> None:
    """Deliver subscription `sid`'s messages to `handler` directly (see the module doc)."""
    check_version()
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
        nc._ps.parse = _fast_parse(nc, nc._ps, table)
        setattr(nc, _ROUTES, table)
    table[sid] = handler


_AWAITING_CONTROL_LINE = 1  # nats-py's parser states (nats.protocol.parser)
_AWAITING_MSG_PAYLOAD = 2
_MAX_CONTROL_LINE = 4096
_M, _H = ord("M"), ord("H")


def _fast_parse(nc: Any, ps: Any, table: dict[int, Handler]) -> Callable[..., Any]:
    """nats-py's `Parser.parse` for a stream of MSG/HMSG, on the parser's own state.

    Anything else (PING, PONG, INFO, +OK, -ERR, a line it cannot read) is left to
    nats-py's parse, which goes on from the same state: it raises its ProtocolError on a
    malformed line. A routed message goes to its handler without a coroutine.
    """
    slow = ps.parse
    stats = nc.stats

    async def parse(data: bytes = b"") -> None:
        ps.buf.extend(data)
        while True:
            buf = ps.buf  # read again after every await: a reconnect resets the parser
            if not buf:
                return
            if ps.state == _AWAITING_CONTROL_LINE:
                end = buf.find(b"\r\n")
                if buf[0] not in (_M, _H) or end < 0:
                    if end < 0 and len(buf) < _MAX_CONTROL_LINE and buf[0] in (_M, _H):
                        return  # a split line: wait for the rest
                    await slow()
                    return
                parts = bytes(buf[:end]).split()
                op, n = parts[0], len(parts)
                if op == b"MSG" and n in (4, 5) and parts[-1].isdigit() and parts[2].isdigit():
                    ps.header_needed = 0
                elif (
                    op == b"HMSG" and n in (5, 6) and parts[-1].isdigit()
                    and parts[-2].isdigit() and parts[2].isdigit()
                ):  # fmt: skip
                    ps.header_needed = int(parts[-2])
                else:
                    await slow()  # nats-py reads it, or raises ProtocolError
                    return
                ps.msg_arg["subject"] = parts[1]
                ps.msg_arg["sid"] = int(parts[2])
                ps.msg_arg["reply"] = parts[3] if n == (5 if op == b"MSG" else 6) else b""
                ps.needed = int(parts[-1])
                del buf[: end + 2]
                ps.state = _AWAITING_MSG_PAYLOAD
                continue
            needed = ps.needed
            if len(buf) < needed + 2:
                return  # wait for the rest of the payload
            arg = ps.msg_arg
            hn = ps.header_needed
            if hn > 0:
                hdr: bytes | None = bytes(buf[:hn])
                payload = bytes(buf[hn:needed])
                ps.header_needed = 0
            else:
                hdr = None
                payload = bytes(buf[:needed])
            del buf[: needed + 2]
            ps.state = _AWAITING_CONTROL_LINE
            sid = arg["sid"]
            handler = table.get(sid)
            if handler is None:
                await nc._process_msg(sid, arg["subject"], arg["reply"], payload, hdr)
            else:
                stats["in_msgs"] += 1
                stats["in_bytes"] += len(payload)
                handler(arg["subject"], arg["reply"], payload, hdr)

    return parse


def unroute(nc: Any, sid: int) -> None:
    table: dict[int, Handler] | None = getattr(nc, _ROUTES, None)
    if table is not None:
        table.pop(sid, None)


# Checked subjects and header names, encoded (outcome subjects and header names repeat).
_SUBJECTS: dict[str, bytes] = {}
_KEYS: dict[str, bytes] = {}
_CACHE_MAX = 4096


def _subject(s: str) -> bytes:
    out = _SUBJECTS.get(s)
    if out is None:
        if not s or _BAD_SUBJECT.search(s):
            raise errors.BadSubjectError
        if len(_SUBJECTS) >= _CACHE_MAX:
            _SUBJECTS.clear()
        out = _SUBJECTS[s] = s.encode()
    return out


def _key(k: str) -> bytes:
    out = _KEYS.get(k)
    if out is None:
        key = k.strip()
        if key and not _KEY.fullmatch(key):
            raise errors.BadHeaderError(key)
        if len(_KEYS) >= _CACHE_MAX:
            _KEYS.clear()
        out = _KEYS[k] = key.encode()  # b"": an empty name, skipped as nats-py does
    return out


def pub_frame(
    subject: str, reply: str | bytes, data: bytes, headers: dict[str, str] | None
) -> bytes:
    """One PUB (or HPUB with `headers`) command, as nats-py's `publish` would write it.

    A `reply` given as bytes is one the caller made itself (its own inbox): not checked.

    Example:
        >>> pub_frame("a.b", "_INBOX.x", b"hi", {"Nats-Msg-Id": "k1"})
        b'HPUB a.b _INBOX.x 29 31\\r\\nNATS/1.0\\r\\nNats-Msg-Id: k1\\r\\n\\r\\nhi\\r\\n'
    """
    subj = _subject(subject)
    rep = reply if isinstance(reply, bytes) else _subject(reply) if reply else b""
    if headers is None:
        return b"PUB %s %s %d\r\n%s\r\n" % (subj, rep, len(data), data)
    hdr = [b"NATS/1.0\r\n"]
    for k, v in headers.items():
        key = _key(k)
        if key:
            hdr.append(b"%s: %s\r\n" % (key, v.strip().translate(_NEWLINES).encode()))
    hdr.append(b"\r\n")
    block = b"".join(hdr)
    n = len(block)
    return b"HPUB %s %s %d %d\r\n%s%s\r\n" % (subj, rep, n, n + len(data), block, data)


def msg_id_frame(subject: str, reply: bytes, data: bytes, msg_id: str) -> bytes:
    """`pub_frame` with the one header ``Nats-Msg-Id`` (JetStream's dedup id), made directly.

    Example:
        >>> msg_id_frame("a.b", b"_INBOX.x", b"hi", "k1") == pub_frame(
        ...     "a.b", b"_INBOX.x", b"hi", {"Nats-Msg-Id": "k1"})
        True
    """
    block = b"NATS/1.0\r\nNats-Msg-Id: %s\r\n\r\n" % msg_id.strip().translate(_NEWLINES).encode()
    n = len(block)
    return b"HPUB %s %s %d %d\r\n%s%s\r\n" % (
        _subject(subject),
        reply,
        n,
        n + len(data),
        block,
        data,
    )


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


def server_ack_frames(replies: Iterable[bytes], body: bytes = b"") -> bytes:
    """`ack_frames` for reply subjects as the server sent them (tokens of its MSG line,
    which is split on whitespace: nothing in them to check).

    Example:
        >>> server_ack_frames([b"$JS.ACK.a.1"]) == ack_frames(["$JS.ACK.a.1"])
        True
    """
    tail = b"  %d\r\n%s\r\n" % (len(body), body)
    return b"".join([b"PUB %s%s" % (r, tail) for r in replies])


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
