"""serve's NATS side: publish an event, wait for its Reply on one shared inbox subscription.

Rules of this file:
- One NATS connection and ONE wildcard inbox subscription serve every request; a
  waiting request is a future in a dict keyed by its event id, and that dict is bounded
  (`max_pending`). Subscribing per request would cost a server round trip each time.
- A reply decides only if it is for the event it came for and, with a `Verifier`, signed
  by a trusted worker; anything else is logged and ignored (the request then times out).
- `NotPublished` says the event never reached JetStream (no record of it exists yet);
  any other `Unavailable` says it did but no decision came back.

Example:
    >>> issubclass(NotPublished, Unavailable)
    True
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path
from typing import Any

import msgspec
import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg

from engine.errors import Unavailable
from engine.records import HookEvent, encode_msgpack
from ingest.nats.streams import Names, event_subject, publish_error
from ingest.protocol import MSG_ID, PEER_HEADER, REPLY_HEADER, Reply
from ingest.replysig import Verifier
from ingest.spool.store import Sent, Spool, has_pending

__all__ = ["Gateway", "NotPublished", "flush_spool", "publish_event"]

_log = logging.getLogger("hookaudit.serve")
_reply_decoder = msgspec.msgpack.Decoder(Reply)


class NotPublished(Unavailable):
    """The event never reached JetStream (NATS down, the publish refused): no record yet."""


class Gateway:
    """Publishes events and waits for their Replies on one shared inbox subscription.

    Example:
        >>> gw = Gateway(nc, names("t1"))  # doctest: +SKIP
        >>> await gw.start(); reply = await gw.decide(event)  # doctest: +SKIP
    """

    def __init__(
        self,
        nc: Client,
        names: Names,
        *,
        timeout: float = 10.0,
        max_pending: int = 1024,
        verifier: Verifier | None = None,
    ) -> None:
        self.nc = nc
        self.verifier = verifier
        self.js = nc.jetstream()
        self.names = names
        self.timeout = timeout
        self.max_pending = max_pending
        self.inbox = nc.new_inbox()
        # A trusted worker answers this process with a keyed tag (see ingest.replysig):
        # one key agreement here, ~1 µs per reply instead of a ~60 µs signature check.
        self.peer = None if verifier is None else verifier.peer_header()
        self.pending: dict[str, asyncio.Future[Reply]] = {}
        self._sub: Any = None

    async def start(self) -> None:
        self._sub = await self.nc.subscribe(
            f"{self.inbox}.*", cb=self._on_reply, pending_msgs_limit=max(65536, self.max_pending)
        )
        await self.nc.flush()

    @property
    def status(self) -> str:
        """connected | reconnecting | draining | closed | disconnected"""
        nc = self.nc
        if nc.is_connected:
            return "connected"
        if nc.is_reconnecting:
            return "reconnecting"
        if nc.is_draining:
            return "draining"
        return "closed" if nc.is_closed else "disconnected"

    async def _on_reply(self, msg: Msg) -> None:
        key = msg.subject.rpartition(".")[2]
        fut = self.pending.get(key)
        if fut is None or fut.done():
            _log.info("late or unknown reply on %s ignored", msg.subject)
            return
        if self.verifier is not None and not self.verifier.verify_reply(msg.data, msg.headers):
            _log.warning("reply for event %s not signed by a trusted worker: ignored", key)
            return
        try:
            reply = _reply_decoder.decode(msg.data)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as exc:
            _log.warning("undecodable reply for event %s ignored: %s", key, exc)
            return
        if reply.event_id != key:
            _log.warning("reply for event %s arrived on %s; ignored", reply.event_id, key)
            return
        fut.set_result(reply)

    async def decide(self, event: HookEvent) -> Reply:
        """Publish `event` and wait for its Reply; `Unavailable` says why there is none."""
        if not self.nc.is_connected:
            raise NotPublished(f"NATS is {self.status}")
        if len(self.pending) >= self.max_pending:
            raise Unavailable(f"{len(self.pending)} requests already waiting (--max-pending)")
        if event.id in self.pending:
            raise Unavailable(f"event {event.id} is already waiting")
        fut: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        self.pending[event.id] = fut
        subject = event_subject(self.names, event.event)
        headers = {MSG_ID: event.id, REPLY_HEADER: f"{self.inbox}.{event.id}"}
        if self.peer is not None:
            headers[PEER_HEADER] = self.peer
        try:
            async with asyncio.timeout(self.timeout):
                try:
                    await self.js.publish(
                        subject, encode_msgpack(event), headers=headers, timeout=self.timeout
                    )
                except nats.errors.TimeoutError:
                    raise  # the decision's deadline says it, below
                except nats.errors.Error as exc:
                    raise NotPublished(str(publish_error(exc, subject, self.timeout))) from exc
                return await fut
        except TimeoutError as exc:
            raise Unavailable(f"no decision within {self.timeout:g} s") from exc
        finally:
            self.pending.pop(event.id, None)

    async def close(self) -> None:
        if self._sub is not None and not self.nc.is_closed:
            with contextlib.suppress(nats.errors.Error):
                await self._sub.unsubscribe()
        for fut in self.pending.values():
            fut.cancel()


async def publish_event(gateway: Gateway, event: HookEvent) -> Sent:
    """Publish a record-only event or a spooled one (a `spool.Publish`); Unavailable if not.

    A fallback notice repeats an event already stored: it has its own message id.
    """
    notice = event.fallback is not None and event.fallback.notice
    headers = {MSG_ID: f"{event.id}:fallback" if notice else event.id}
    subject = event_subject(gateway.names, event.event)
    try:
        ack = await gateway.js.publish(subject, encode_msgpack(event), headers=headers, timeout=2.0)
    except (nats.errors.Error, OSError) as exc:
        raise publish_error(exc, subject, 2.0) from exc
    return Sent(duplicate=bool(ack.duplicate))


async def flush_spool(gateway: Gateway, data_dir: Path) -> None:
    """Send what serve (or emit) spooled for `data_dir` once NATS is back; every second."""
    spool = Spool(data_dir)
    while True:
        await asyncio.sleep(1.0)
        if not gateway.nc.is_connected or not has_pending(data_dir):
            continue
        try:
            report = await spool.flush(lambda e: publish_event(gateway, e), budget=5.0)
        except Exception as exc:  # the next round tries again
            _log.warning("spool flush: %s", exc)
            continue
        if report.published or report.error:
            _log.info("spool flush: %s", report)
