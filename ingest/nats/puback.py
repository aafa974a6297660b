"""Publish to JetStream with one shared inbox and await the PubAcks in bulk.

Rules of this file:
- nats-py's `js.publish` makes a request per message; this keeps many publishes in
  flight on one wildcard subscription, like the Go client's PublishAsync. A batch is
  one write to the connection (`ingest.nats.wire`), and its PubAcks are counted off
  as they come, without a `Msg` or a future each.
- A PubAck that does not come in time, says "error", or is a status with no body (503:
  no stream took the subject) is `Unavailable`: the caller does not ack what it was
  publishing, so JetStream redelivers it.

Example:
    acks = AckWaiter(nc); await acks.start()  # doctest: +SKIP
    await acks.wait_batch(await acks.publish_many([(subject, data, msg_id)]), 10.0)  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from engine.errors import Unavailable
from engine.records import uuid7
from ingest.nats.wire import msg_id_frame, route, sid, unroute, write

__all__ = ["AckWaiter", "Batch"]


class Batch:
    """The PubAcks one `publish_many` waits for."""

    __slots__ = ("done", "error", "inboxes", "left")

    def __init__(self, inboxes: list[bytes], done: asyncio.Future[None]) -> None:
        self.inboxes = inboxes
        self.left = len(inboxes)
        self.error: bytes | None = None
        self.done = done

    def got(self, data: bytes) -> None:
        if self.error is None and (not data or b'"error"' in data):
            self.error = data or b"no stream took the message (status reply, no PubAck)"
        self.left -= 1
        if self.left <= 0 and not self.done.done():
            self.done.set_result(None)


class AckWaiter:
    """Publishes to JetStream with one shared inbox and awaits PubAcks in bulk."""

    def __init__(self, nc: Any) -> None:
        self.nc = nc
        self.prefix = f"_INBOX.hookaudit.{uuid7().replace('-', '')}"
        self.pending: dict[bytes, Batch] = {}
        self.n = 0
        self.sub: Any = None

    async def start(self) -> None:
        self.sub = await self.nc.subscribe(self.prefix + ".*", cb=_unrouted)
        route(self.nc, sid(self.sub), self._on_ack)

    async def stop(self) -> None:
        if self.sub is not None:
            unroute(self.nc, sid(self.sub))
            await self.sub.unsubscribe()
            self.sub = None

    def _on_ack(self, subject: bytes, reply: bytes, data: bytes, hdr: bytes | None) -> None:
        batch = self.pending.pop(subject, None)
        if batch is not None:
            batch.got(data)

    async def publish_many(self, items: Sequence[tuple[str, bytes, str]]) -> Batch:
        """Publish every (subject, data, Nats-Msg-Id) in one write; `wait_batch` the result."""
        loop = asyncio.get_running_loop()
        frames: list[bytes] = []
        inboxes: list[bytes] = []
        biggest = 0
        prefix = self.prefix.encode() + b"."
        n = self.n
        for subject, data, msg_id in items:
            n += 1
            inbox = b"%s%d" % (prefix, n)  # ours: no subject check needed
            frames.append(msg_id_frame(subject, inbox, data, msg_id))
            inboxes.append(inbox)
            if len(data) > biggest:
                biggest = len(data)
        self.n = n
        batch = Batch(inboxes, loop.create_future())
        if not inboxes:
            batch.done.set_result(None)
            return batch
        for key in inboxes:
            self.pending[key] = batch
        try:
            await write(self.nc, frames, payload=biggest)
        except BaseException:
            self.forget(batch)
            raise
        return batch

    async def wait_batch(self, batch: Batch, timeout: float) -> None:
        """Every PubAck of `batch` came and none is an error, or `Unavailable`."""
        try:
            await asyncio.wait_for(asyncio.shield(batch.done), timeout)
        except TimeoutError as exc:
            self.forget(batch)
            raise Unavailable("JetStream did not acknowledge outcome publications in time") from exc
        if batch.error is not None:
            raise Unavailable(f"JetStream refused an outcome: {batch.error[:200]!r}")

    def forget(self, batch: Batch) -> None:
        """Stop waiting for `batch`'s PubAcks (a batch given up)."""
        for key in batch.inboxes:
            self.pending.pop(key, None)


async def _unrouted(msg: Any) -> None:
    """Never called: the PubAck inbox is routed (`ingest.nats.wire.route`)."""
