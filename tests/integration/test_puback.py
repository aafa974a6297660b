"""Publishing in bulk with PubAcks counted off (`ingest.nats.puback`) against a real nats-server."""

from __future__ import annotations

import pytest
from nats.aio.client import Client

from engine.errors import Unavailable
from ingest.nats import streams as ha_nats
from ingest.nats.puback import AckWaiter


async def test_a_batch_is_stored_once_and_deduplicated_by_msg_id(
    nc: Client, names: ha_nats.Names
) -> None:
    js = nc.jetstream()
    await ha_nats.provision(js, prefix=names.prefix)
    acks = AckWaiter(nc)
    await acks.start()
    subject = ha_nats.outcome_subject(names, "Stop", "none")
    items = [(subject, f"o{i}".encode(), f"k{i}") for i in range(1000)]
    await acks.wait_batch(await acks.publish_many(items), timeout=10.0)
    await acks.wait_batch(await acks.publish_many(items[:10]), timeout=10.0)  # again: dups
    info = await js.stream_info(names.outcomes_stream)
    assert info.state.messages == 1000
    assert acks.pending == {}
    await acks.stop()


async def test_a_publication_no_stream_takes_is_unavailable(
    nc: Client, names: ha_nats.Names
) -> None:
    """No stream on the subject: the server's 503 status is no PubAck (fail closed)."""
    acks = AckWaiter(nc)
    await acks.start()
    batch = await acks.publish_many([(f"{names.prefix}.nowhere", b"x", "k")])
    with pytest.raises(Unavailable, match="no stream took"):
        await acks.wait_batch(batch, timeout=5.0)
    await acks.stop()


async def test_a_subject_that_could_inject_is_refused_before_anything_is_sent(nc: Client) -> None:
    from nats import errors

    acks = AckWaiter(nc)
    await acks.start()
    with pytest.raises(errors.BadSubjectError):
        await acks.publish_many([("a b", b"x", "k")])
    with pytest.raises(errors.BadSubjectError):
        await acks.publish_many([("a.b\r\nPUB x 0", b"x", "k")])
    assert acks.pending == {}
    await acks.stop()
