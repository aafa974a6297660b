"""A lean JetStream pull loop for the worker.

nats-py's `fetch` waits for each message with its own `wait_for` (a task per
message) and, on a lingering request, keeps waiting for the rest of the batch.
This puller instead keeps one inbox subscription whose callback appends to a
buffer, asks the server for batches itself (`$JS.API.CONSUMER.MSG.NEXT`), and
returns as soon as anything is there: messages that arrive later for the same
request are simply taken by the next call. The inbox is routed past nats-py's
per-message work (`ingest.nats.wire.route`): a delivered message is a `Delivered`,
whose headers are parsed only when asked for, and the worker acks a batch in one
write (`ack_many`).

Rules of this file:
- Never loses a message: everything delivered to the inbox is returned by some
  `fetch` call, in delivery order. Acking stays the caller's job (`msg.ack()`).
- Status messages (404 no messages, 408 request expired, 409 …, 100 heartbeats)
  are never returned; they only end a wait.
- A `Delivered` answers what a nats-py `Msg` does (subject, reply, data, headers,
  ack/nak/term/in_progress, metadata), the acks through a real `Msg`.

Example:
    puller = Puller(nc, "HOOK_EVENTS", "workers"); await puller.start()
    msgs = await puller.fetch(512, timeout=0.5)
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from nats.aio.msg import Msg

from ingest.nats.wire import parse_header_lines, route, server_ack_frames, sid, unroute, write

__all__ = ["Delivered", "Puller", "ack_many"]

_HDR_LINE = b"NATS/1.0"


class Delivered:
    """One message delivered by JetStream, as it came off the wire.

    Example:
        m = (await puller.fetch(1, timeout=1.0))[0]; m.get_header("Nats-Msg-Id")  # doctest: +SKIP
    """

    __slots__ = ("_hdr", "_headers", "_msg", "_nc", "_reply", "_subject", "data")

    def __init__(
        self, nc: Any, subject: bytes, reply: bytes, data: bytes, hdr: bytes | None
    ) -> None:
        self._nc = nc
        self._subject = subject  # as on the wire: decoded when asked for
        self._reply = reply  # a token of the server's MSG line: no whitespace in it
        self.data = data
        self._hdr = hdr
        self._headers: dict[str, str] | bool | None = False  # False: not parsed yet
        self._msg: Msg | None = None

    @property
    def subject(self) -> str:
        return self._subject.decode()

    @property
    def reply(self) -> str:
        return self._reply.decode()

    @property
    def headers(self) -> dict[str, str] | None:
        """The headers, parsed as nats-py does (the first time they are asked for)."""
        if self._headers is False:
            raw = self._hdr
            if not raw or len(raw) <= len(_HDR_LINE) + 4:
                self._headers = None
            else:
                self._headers = parse_header_lines(raw[len(_HDR_LINE) + 2 :]) or None
        return self._headers  # type: ignore[return-value]

    def get_header(self, name: str) -> str | None:
        """One header's value; a message that does not carry the name is not parsed."""
        raw = self._hdr
        if not raw or name.encode() not in raw:
            return None
        return (self.headers or {}).get(name)

    def lazy_headers(self) -> Mapping[str, str]:
        """The headers as a mapping that is parsed only if it is read."""
        return _LazyHeaders(self)

    def _as_msg(self) -> Msg:
        if self._msg is None:
            self._msg = Msg(
                _client=self._nc,
                subject=self.subject,
                reply=self.reply,
                data=self.data,
                headers=self.headers,
            )
        return self._msg

    @property
    def metadata(self) -> Msg.Metadata:
        return self._as_msg().metadata

    async def ack(self) -> None:
        await self._as_msg().ack()

    async def nak(self, delay: float | None = None) -> None:
        await self._as_msg().nak(delay)

    async def term(self) -> None:
        await self._as_msg().term()

    async def in_progress(self) -> None:
        await self._as_msg().in_progress()


class _LazyHeaders(Mapping[str, str]):
    __slots__ = ("_m",)

    def __init__(self, m: Delivered) -> None:
        self._m = m

    def __getitem__(self, key: str) -> str:
        return (self._m.headers or {})[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._m.headers or {})

    def __len__(self) -> int:
        return len(self._m.headers or {})


async def ack_many(nc: Any, msgs: Sequence[Delivered], body: bytes = b"") -> None:
    """Ack (or ``+TERM`` with `body`) many messages in one write to the connection."""
    if msgs:
        frames = server_ack_frames([m._reply for m in msgs], body)
        await write(nc, [frames], payload=len(body), count=len(msgs))


class Puller:
    """Pull batches from a durable JetStream pull consumer.

    At most one pull request is outstanding: it asks for `batch` messages and
    lingers until they are delivered or it expires. A new one is sent only when the
    last is used up, expired or refused, so an idle worker costs one request per
    `timeout` and a busy one a request per batch. With `ahead`, a request whose messages
    were all delivered and taken is followed at once by the next (one batch ahead of the
    caller, who must `release` what it leaves unused when it stops); that request asks for
    the `batch` of the call that used up the last one.
    """

    def __init__(self, nc: Any, stream: str, consumer: str, *, ahead: bool = False) -> None:
        self.nc = nc
        self.ahead = ahead
        self.subject = f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{consumer}"
        self.inbox = nc.new_inbox()
        self.buf: list[Delivered] = []
        self.signal = asyncio.Event()
        self.remaining = 0  # messages the outstanding request may still deliver
        self.expires_at = 0.0
        self.last_status: str | None = None
        self.sub: Any = None

    async def start(self) -> None:
        self.sub = await self.nc.subscribe(self.inbox, cb=_unrouted, pending_msgs_limit=-1)
        route(self.nc, sid(self.sub), self._on_msg)

    async def stop(self) -> None:
        if self.sub is not None:
            unroute(self.nc, sid(self.sub))
            await self.sub.unsubscribe()
            self.sub = None

    def _on_msg(self, subject: bytes, reply: bytes, data: bytes, hdr: bytes | None) -> None:
        # A status is "NATS/1.0 404 ..." with no body (nats-py's reading of it).
        if not data and hdr and hdr[len(_HDR_LINE) : len(_HDR_LINE) + 1] == b" ":
            status = hdr[len(_HDR_LINE) + 1 : len(_HDR_LINE) + 4].strip().decode()
            if status.isdigit():
                self.last_status = status
                if status != "100":  # 404/408/409: the request is over
                    self.remaining = 0
                self.signal.set()
                return
        self.buf.append(Delivered(self.nc, subject, reply, data, hdr))
        self.remaining -= 1
        self.signal.set()

    def _take(self, limit: int) -> list[Delivered]:
        out, self.buf = self.buf[:limit], self.buf[limit:]
        if not self.buf:
            self.signal.clear()
        return out

    async def _request(self, batch: int, expires: float) -> None:
        req = {"batch": batch, "expires": int(expires * 1e9)}
        self.remaining = batch
        self.expires_at = time.monotonic() + expires
        await self.nc.publish(self.subject, json.dumps(req).encode(), reply=self.inbox)

    async def fetch(self, batch: int, timeout: float) -> list[Delivered]:
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
        out = self._take(batch)
        if self.ahead and self.remaining <= 0 and not self.buf:
            # This request is used up: ask for the next batch now, so that it is on its
            # way while the caller works on this one (instead of a round trip and the
            # server's delivery of a batch each time the caller comes back).
            await self._request(batch, timeout)
        return out

    async def release(self) -> None:
        """Give back what is buffered and not taken (``-NAK``: redelivered at once, not
        after the ack wait), e.g. when the caller stops."""
        msgs, self.buf = self.buf, []
        await ack_many(self.nc, msgs, b"-NAK")


async def _unrouted(msg: Msg) -> None:
    """Never called: the inbox is routed (`ingest.nats.wire.route`)."""
