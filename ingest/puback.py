"""Publish to JetStream with one shared inbox and await the PubAcks in bulk.

Rules of this file:
- nats-py's `js.publish` makes a request per message; this keeps many publishes in
  flight on one wildcard subscription, like the Go client's PublishAsync.
- A PubAck that does not come in time, or says "error", is `Unavailable`: the caller
  does not ack what it was publishing, so JetStream redelivers it.

Example:
    acks = AckWaiter(nc); await acks.start()  # doctest: +SKIP
    await acks.wait([await acks.publish(subject, data, headers)], timeout=10.0)  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from engine.errors import Unavailable
from engine.records import uuid7

__all__ = ["AckWaiter"]


class AckWaiter:
    """Publishes to JetStream with one shared inbox and awaits PubAcks in bulk.

    nats-py's `js.publish` makes a request per message; this keeps many publishes in
    flight on one wildcard subscription, like the Go client's PublishAsync.
    """

    def __init__(self, nc: Any) -> None:
        self.nc = nc
        self.prefix = f"_INBOX.hookaudit.{uuid7().replace('-', '')}"
        self.pending: dict[str, asyncio.Future[bytes]] = {}
        self.n = 0
        self.sub: Any = None

    async def start(self) -> None:
        self.sub = await self.nc.subscribe(self.prefix + ".*", cb=self._on_ack)

    async def _on_ack(self, msg: Any) -> None:
        fut = self.pending.pop(msg.subject, None)
        if fut is not None and not fut.done():
            fut.set_result(msg.data)

    async def publish(
        self, subject: str, data: bytes, headers: dict[str, str]
    ) -> asyncio.Future[bytes]:
        self.n += 1
        inbox = f"{self.prefix}.{self.n}"
        fut: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
        self.pending[inbox] = fut
        await self.nc.publish(subject, data, reply=inbox, headers=headers)
        return fut

    async def wait(self, futures: Sequence[asyncio.Future[bytes]], timeout: float) -> None:
        if not futures:
            return
        await self.nc.flush()
        try:
            acks = await asyncio.wait_for(asyncio.gather(*futures), timeout)
        except TimeoutError as exc:
            for f in futures:
                f.cancel()
            raise Unavailable("JetStream did not acknowledge outcome publications in time") from exc
        for ack in acks:
            if b'"error"' in ack:
                raise Unavailable(f"JetStream refused an outcome: {ack[:200]!r}")
