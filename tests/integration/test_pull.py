"""The worker's JetStream puller against a real nats-server."""

from __future__ import annotations

import asyncio

from nats.aio.client import Client

from ingest.nats import streams as ha_nats
from ingest.nats.pull import Puller


async def test_every_message_once_in_order_and_empty_fetch_returns(
    nc: Client, names: ha_nats.Names
) -> None:
    js = nc.jetstream()
    await ha_nats.provision(js, prefix=names.prefix)
    puller = Puller(nc, names.events_stream, names.worker_consumer)
    await puller.start()
    # an empty fetch returns empty when its timeout passes (a fetch that hung would meet
    # the 30 s limit)
    assert await asyncio.wait_for(puller.fetch(10, timeout=0.3), 30) == []
    for i in range(1000):
        await js.publish(ha_nats.event_subject(names, "Stop"), str(i).encode())
    got: list[int] = []
    while len(got) < 1000:
        msgs = await puller.fetch(64, timeout=1.0)
        assert msgs, "stalled"
        assert len(msgs) <= 64
        for m in msgs:
            got.append(int(m.data))
            await m.ack()
    assert got == list(range(1000))
    assert await puller.fetch(10, timeout=0.3) == []
    await nc.flush()
    info = await js.consumer_info(names.events_stream, names.worker_consumer)
    assert info.num_ack_pending == 0 and info.num_pending == 0
    await puller.stop()


async def test_a_message_published_while_lingering_returns_promptly(
    nc: Client, names: ha_nats.Names
) -> None:
    import asyncio

    js = nc.jetstream()
    await ha_nats.provision(js, prefix=names.prefix)
    puller = Puller(nc, names.events_stream, names.worker_consumer)
    await puller.start()

    async def later() -> None:
        await asyncio.sleep(0.2)
        await js.publish(ha_nats.event_subject(names, "Stop"), b"x")

    task = asyncio.create_task(later())
    # a 120 s fetch: waiting for the rest of the batch would meet the 60 s limit
    msgs = await asyncio.wait_for(puller.fetch(512, timeout=120.0), 60)
    await task
    assert [m.data for m in msgs] == [b"x"]
    await puller.stop()


async def test_delivered_answers_as_a_nats_py_message(nc: Client, names: ha_nats.Names) -> None:
    """Headers, metadata, ack and term of a routed delivery read as nats-py's own Msg."""
    from ingest.nats.pull import ack_many

    js = nc.jetstream()
    await ha_nats.provision(js, prefix=names.prefix)
    subject = ha_nats.event_subject(names, "Stop")
    odd = {"Nats-Msg-Id": "m1", "Hookaudit-Reply": "_INBOX.x.y", "X-Sp": "  a b  ", "X-U": "é"}
    for i, h in enumerate([odd, {"Nats-Msg-Id": "m2"}, None]):
        await js.publish(subject, f"{i}".encode(), headers=h)
    puller = Puller(nc, names.events_stream, names.worker_consumer)
    await puller.start()
    msgs = await puller.fetch(3, timeout=2.0)
    while len(msgs) < 3:
        msgs += await puller.fetch(3, timeout=2.0)
    # The same messages read by nats-py (an ordered consumer parses headers its own way).
    theirs = await js.subscribe(subject, ordered_consumer=True)
    for m in msgs:
        ref = await theirs.next_msg(timeout=2.0)
        assert (m.data, m.subject, m.headers) == (ref.data, ref.subject, ref.headers)
        assert m.get_header("Nats-Msg-Id") == (ref.headers or {}).get("Nats-Msg-Id")
        assert m.get_header("Hookaudit-Reply") == (ref.headers or {}).get("Hookaudit-Reply")
        assert dict(m.lazy_headers()) == (ref.headers or {})
    await theirs.unsubscribe()
    assert [m.metadata.sequence.stream for m in msgs] == [1, 2, 3]
    assert msgs[0].metadata.num_delivered == 1
    await ack_many(nc, msgs[:2])
    await ack_many(nc, msgs[2:], b"+TERM")
    await nc.flush()
    info = await js.consumer_info(names.events_stream, names.worker_consumer)
    assert info.num_ack_pending == 0 and info.num_pending == 0
    assert info.num_redelivered == 0
    await puller.stop()


async def test_a_nak_redelivers_and_an_unacked_batch_is_not_lost(
    nc: Client, names: ha_nats.Names
) -> None:
    js = nc.jetstream()
    await ha_nats.provision(js, prefix=names.prefix)
    await js.publish(ha_nats.event_subject(names, "Stop"), b"once")
    puller = Puller(nc, names.events_stream, names.worker_consumer)
    await puller.start()
    (m,) = await puller.fetch(1, timeout=2.0)
    await m.nak()
    again: list[object] = []
    while not again:
        again = list(await puller.fetch(1, timeout=2.0))
    (m2,) = again
    assert m2.data == b"once"  # type: ignore[attr-defined]
    assert m2.metadata.num_delivered == 2  # type: ignore[attr-defined]
    await m2.ack()  # type: ignore[attr-defined]
    await puller.stop()


async def test_the_next_batch_is_asked_for_ahead_and_given_back_on_release(
    nc: Client, names: ha_nats.Names
) -> None:
    """A used-up request is followed by the next at once; `release` NAKs what came ahead,
    so it is redelivered now rather than after the consumer's ack wait (30 s)."""
    import asyncio

    js = nc.jetstream()
    await ha_nats.provision(js, prefix=names.prefix)
    for i in range(10):
        await js.publish(ha_nats.event_subject(names, "Stop"), str(i).encode())
    puller = Puller(nc, names.events_stream, names.worker_consumer, ahead=True)
    await puller.start()
    first: list[object] = []
    while len(first) < 5:  # always 5: the request sent ahead asks for the last call's size
        first += await puller.fetch(5, timeout=2.0)
    assert [int(m.data) for m in first] == [0, 1, 2, 3, 4]  # type: ignore[attr-defined]
    for _ in range(100):  # the request sent ahead delivers the other five meanwhile
        if len(puller.buf) == 5:
            break
        await asyncio.sleep(0.05)
    assert [int(m.data) for m in puller.buf] == [5, 6, 7, 8, 9]
    await puller.release()
    assert puller.buf == []
    again = Puller(nc, names.events_stream, names.worker_consumer)
    await again.start()
    got: list[object] = []
    while len(got) < 5:
        msgs = await again.fetch(5, timeout=5.0)
        assert msgs, "NAKed messages not redelivered within 5 s"
        got += msgs
    assert sorted(int(m.data) for m in got) == [5, 6, 7, 8, 9]  # type: ignore[attr-defined]
    assert {m.metadata.num_delivered for m in got} == {2}  # type: ignore[attr-defined]
    await puller.stop()
    await again.stop()
