"""The frames `ingest.natswire` writes are the bytes nats-py's `publish` writes."""

from __future__ import annotations

import asyncio

import pytest
from nats import errors
from nats.aio.client import Client

from ingest.natswire import ack_frames, pub_frame


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
