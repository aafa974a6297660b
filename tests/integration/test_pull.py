"""The worker's JetStream puller against a real nats-server."""

from __future__ import annotations

import time

from nats.aio.client import Client

from ingest import nats as ha_nats
from ingest.pull import Puller


async def test_every_message_once_in_order_and_empty_fetch_returns(
    nc: Client, names: ha_nats.Names
) -> None:
    js = nc.jetstream()
    await ha_nats.provision(js, prefix=names.prefix)
    puller = Puller(nc, names.events_stream, names.worker_consumer)
    await puller.start()
    t = time.monotonic()
    assert await puller.fetch(10, timeout=0.3) == []
    assert time.monotonic() - t < 2.0
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
    t = time.monotonic()
    msgs = await puller.fetch(512, timeout=5.0)
    elapsed = time.monotonic() - t
    await task
    assert [m.data for m in msgs] == [b"x"]
    assert elapsed < 2.0, "must not wait for the rest of the batch"
    await puller.stop()
