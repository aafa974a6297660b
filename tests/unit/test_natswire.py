"""The frames `ingest.nats.wire` writes are the bytes nats-py's `publish` writes."""

from __future__ import annotations

import asyncio
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from nats import errors
from nats.aio.client import Client

from ingest.nats.wire import ack_frames, pub_frame, server_ack_frames


def _nats_py_bytes(subject: str, reply: str, data: bytes, headers: dict[str, str] | None) -> bytes:
    """What nats-py queues for one publish (its own `_send_publish`, unconnected)."""
    nc = Client()
    sent: list[bytes] = []

    async def capture(cmd: bytes, priority: bool = False) -> None:
        sent.append(cmd)

    nc._send_command = capture  # type: ignore[method-assign]
    asyncio.run(nc._send_publish(subject, reply, data, len(data), headers))
    return b"".join(sent)


@pytest.mark.parametrize(
    ("subject", "reply", "data", "headers"),
    [
        ("hooks.outcomes.Stop.none", "_INBOX.a.1", b"\x81\xa1a\x01", {"Nats-Msg-Id": "k1"}),
        ("a.b", "", b"", None),
        ("a.b", "r", b"x" * 3000, {"K": "  spaced  ", "L": "cr\r\nlf\ninjected: 1"}),
        ("a.b", "r", b"x", {"U": "é ∆", " ": "blank key skipped"}),
    ],
)
def test_frames_equal_nats_py(
    subject: str, reply: str, data: bytes, headers: dict[str, str] | None
) -> None:
    assert pub_frame(subject, reply, data, headers) == _nats_py_bytes(subject, reply, data, headers)


def test_acks_equal_nats_py() -> None:
    replies = ["$JS.ACK.S.C.1.5.5.1700000000000000000.0", "$JS.ACK.S.C.1.6.6.1700000000000000000.0"]
    assert ack_frames(replies) == b"".join(_nats_py_bytes(r, "", b"", None) for r in replies)
    assert ack_frames(replies[:1], b"+TERM") == _nats_py_bytes(replies[0], "", b"+TERM", None)
    raw = [r.encode() for r in replies]
    assert server_ack_frames(raw) == ack_frames(replies)
    assert server_ack_frames(raw, b"-NAK") == ack_frames(replies, b"-NAK")


@pytest.mark.parametrize("subject", ["", "a b", "a\r\nPUB x 0", "a\tb"])
def test_a_subject_that_could_inject_is_refused(subject: str) -> None:
    with pytest.raises(errors.BadSubjectError):
        pub_frame(subject, "", b"", None)
    with pytest.raises(errors.BadSubjectError):
        pub_frame("a.b", subject or " ", b"", None)
    with pytest.raises(errors.BadSubjectError):
        ack_frames([subject])


def test_a_header_name_nats_py_refuses_is_refused() -> None:
    with pytest.raises(errors.BadHeaderError):
        pub_frame("a.b", "", b"", {"Bad:Key": "v"})


# -- the parser: the same messages as nats-py's for any split of the stream ----------------

_STREAM = [
    b'INFO {"server_id":"x","max_payload":1048576}\r\n',
    b"MSG a.b 1 5\r\nhello\r\n",
    b"MSG a.b 2 _INBOX.r 0\r\n\r\n",
    b"+OK\r\n",
    b"HMSG $JS.x 1 $JS.ACK.s.c.1.2.3.4.0 28 33\r\nNATS/1.0\r\nNats-Msg-Id: k\r\n\r\nabcde\r\n",
    b"PING\r\n",
    b"HMSG _INBOX.p 1 16 16\r\nNATS/1.0 404\r\n\r\n\r\n",
    b"MSG x 2 3\r\n\r\n\n\r\n",
    b"PONG\r\n",
    b"HMSG a 2 r 12 14\r\nNATS/1.0\r\n\r\nok\r\n",
    b"MSG tail 1 2\r\nzz\r\n",
]


def _client(events: list[tuple[object, ...]]) -> Client:
    nc = Client()

    async def slow_msg(sid: int, subject: bytes, reply: bytes, data: bytes, hdr: object) -> None:
        events.append(("msg", sid, subject, reply, data, hdr))

    async def ping() -> None:
        events.append(("ping",))

    async def pong() -> None:
        events.append(("pong",))

    async def info(i: dict[str, object], initial_connection: bool = False) -> None:
        events.append(("info", i["server_id"]))

    nc._process_msg = slow_msg  # type: ignore[method-assign]
    nc._process_ping = ping  # type: ignore[method-assign]
    nc._process_pong = pong  # type: ignore[method-assign]
    nc._process_info = info  # type: ignore[method-assign]
    return nc


def _feed(nc: Client, chunks: list[bytes]) -> None:
    async def go() -> None:
        for c in chunks:
            await nc._ps.parse(c)

    asyncio.run(go())


@settings(max_examples=300, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=len(b"".join(_STREAM))), max_size=12))
def test_the_fast_parser_reads_any_split_as_nats_py(cuts: list[int]) -> None:
    from ingest.nats.wire import route

    data = b"".join(_STREAM)
    bounds = sorted({0, len(data), *cuts})
    chunks = [data[a:b] for a, b in itertools.pairwise(bounds)]
    want: list[tuple[object, ...]] = []
    _feed(_client(want), [data])  # nats-py's own parser, one chunk
    got: list[tuple[object, ...]] = []
    nc = _client(got)
    route(nc, 1, lambda s, r, d, h: got.append(("msg", 1, s, r, d, h)))
    _feed(nc, chunks)
    assert got == want
    assert nc._ps.buf == bytearray() and nc.stats["in_msgs"] == 4


def test_a_malformed_line_is_nats_py_s_protocol_error() -> None:
    from nats.errors import ProtocolError

    from ingest.nats.wire import route

    nc = _client([])
    route(nc, 1, lambda s, r, d, h: None)
    with pytest.raises(ProtocolError):
        _feed(nc, [b"MSG a 1 x\r\nHMSG b\r\n"])


@pytest.mark.parametrize("msg_id", ["e1:s1:", "  padded  ", "inj\r\nNats-Expected-Stream: X", "é"])
def test_a_msg_id_frame_equals_nats_py(msg_id: str) -> None:
    from ingest.nats.wire import msg_id_frame

    want = _nats_py_bytes("a.b", "_INBOX.q.7", b"data", {"Nats-Msg-Id": msg_id})
    assert msg_id_frame("a.b", b"_INBOX.q.7", b"data", msg_id) == want
