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
from typing import Any

__all__ = ["Puller"]


class Puller:
    """Pull batches from a durable JetStream pull consumer."""

    def __init__(self, nc: Any, stream: str, consumer: str) -> None:
        self.nc = nc
        self.subject = f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}"
        self.inbox = nc.new_inbox()
        self.buf: list[Any] = []
        self.signal = asyncio.Event()
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
        else:
            self.buf.append(msg)
        self.signal.set()

    def _take(self, limit: int) -> list[Any]:
        out, self.buf = self.buf[:limit], self.buf[limit:]
        if not self.buf:
            self.signal.clear()
        return out

    async def _request(self, batch: int, *, no_wait: bool, expires: float | None) -> None:
        req: dict[str, Any] = {"batch": batch}
        if no_wait:
            req["no_wait"] = True
        if expires is not None:
            req["expires"] = int(expires * 1e9)
        self.signal.clear()
        self.last_status = None
        await self.nc.publish(self.subject, json.dumps(req).encode(), reply=self.inbox)

    async def fetch(self, batch: int, timeout: float) -> list[Any]:
        """Up to `batch` messages; an empty list when none arrived within `timeout`."""
        if self.buf:
            return self._take(batch)
        await self._request(batch, no_wait=True, expires=None)
        await self._wait(timeout)
        if self.buf:
            return self._take(batch)
        # Nothing waiting: linger until a message arrives or the request expires.
        await self._request(batch, no_wait=False, expires=timeout)
        await self._wait(timeout + 0.5)
        return self._take(batch)

    async def _wait(self, timeout: float) -> None:
        try:
            await asyncio.wait_for(self.signal.wait(), timeout)
        except TimeoutError:
            return
        if self.buf:
            # A burst is usually in flight: give the rest of it one loop turn.
            await asyncio.sleep(0)
