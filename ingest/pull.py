"""A lean JetStream pull loop for the worker.

nats-py's `fetch` waits for each message with its own `wait_for` (a task per
message) and, on a lingering request, keeps waiting for the rest of the batch.
This puller instead keeps one inbox subscription whose callback appends to a
buffer, asks the server for batches itself (`$JS.API.CONSUMER.MSG.NEXT`), and
returns as soon as anything is there: messages that arrive later for the same
request are simply taken by the next call.

Rules of this file:
- Never loses a message: everything delivered to the inbox is returned by some
  `fetch` call, in delivery order. Acking stays the caller's job (`msg.ack()`).
- Status messages (404 no messages, 408 request expired, 409 …, 100 heartbeats)
  are never returned; they only end a wait.

Example:
    puller = Puller(nc, "HOOK_EVENTS", "workers"); await puller.start()
    msgs = await puller.fetch(512, timeout=0.5)
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

__all__ = ["Puller"]


class Puller:
    """Pull batches from a durable JetStream pull consumer.

    At most one pull request is outstanding: it asks for `batch` messages and
    lingers until they are delivered or it expires. A new one is sent only when the
    last is used up, expired or refused, so an idle worker costs one request per
    `timeout` and a busy one a request per batch.
    """

    def __init__(self, nc: Any, stream: str, consumer: str) -> None:
        self.nc = nc
        self.subject = f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}"
        self.inbox = nc.new_inbox()
        self.buf: list[Any] = []
        self.signal = asyncio.Event()
        self.remaining = 0  # messages the outstanding request may still deliver
        self.expires_at = 0.0
        self.last_status: str | None = None
        self.sub: Any = None

    async def start(self) -> None:
        self.sub = await self.nc.subscribe(self.inbox, cb=self._on_msg, pending_msgs_limit=-1)

    async def stop(self) -> None:
        if self.sub is not None:
            await self.sub.unsubscribe()
            self.sub = None

    async def _on_msg(self, msg: Any) -> None:
        headers = msg.headers
        status = headers.get("Status") if headers else None
        if status and not msg.data:
            self.last_status = status
            if status != "100":  # 404/408/409: the request is over
                self.remaining = 0
        else:
            self.buf.append(msg)
            self.remaining -= 1
        self.signal.set()

    def _take(self, limit: int) -> list[Any]:
        out, self.buf = self.buf[:limit], self.buf[limit:]
        if not self.buf:
            self.signal.clear()
        return out

    async def _request(self, batch: int, expires: float) -> None:
        req = {"batch": batch, "expires": int(expires * 1e9)}
        self.remaining = batch
        self.expires_at = time.monotonic() + expires
        await self.nc.publish(self.subject, json.dumps(req).encode(), reply=self.inbox)

    async def fetch(self, batch: int, timeout: float) -> list[Any]:
        """Up to `batch` messages; an empty list when none arrived within `timeout`."""
        if self.remaining <= 0 or time.monotonic() >= self.expires_at:
            if not self.buf:
                self.signal.clear()
            await self._request(batch, timeout)
        if not self.buf:
            try:
                await asyncio.wait_for(self.signal.wait(), timeout)
            except TimeoutError:
                return []
            if self.buf:
                await asyncio.sleep(0)  # a burst is usually in flight: one loop turn for it
        return self._take(batch)
