"""`hookaudit emit`'s NATS side: connect as the emitter, publish, flush the spool.

Rules of this file:
- nats is imported inside the functions, never at module level: emit validates stdin
  before it pays for nats' imports.
- A short-lived process: one quick reconnect, then the caller fails over to the spool.
  Transient failures raise Unavailable (`ingest.nats.streams.publish_error`); an event the server
  can never take is a `Sent` with ``rejected`` set, not an exception.
- The streams are provisioned once, if no stream answers a publish.

Example:
    >>> Publisher.__call__.__doc__ is None
    True
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from engine.records import HookEvent, encode_msgpack
from ingest.protocol import MSG_ID, PEER_HEADER, REPLY_HEADER
from ingest.spool.store import FlushReport, Sent, Spool

if TYPE_CHECKING:
    from nats.aio.client import Client

    from ingest.emit.emitter import Target

__all__ = ["Publisher", "connect", "flush_spool", "quiet_nats_logs"]

#: JetStream's "message size exceeds maximum allowed" (a permanent, per-event failure).
_JS_MSG_TOO_BIG = 10054


def quiet_nats_logs() -> None:
    # ingest.nats.streams logs reconnect trouble; with no handler Python would print it on
    # stderr, and observe mode promises silence. Failures are reported by Result.
    logging.getLogger("hookaudit.nats").addHandler(logging.NullHandler())
    logging.getLogger("hookaudit.nats").propagate = False


async def connect(t: Target) -> Client:
    from ingest.nats.options import connect_options

    co = connect_options(
        t.nats_args(),
        t.data_dir,
        "emitter",
        name="hookaudit-emit",
        connect_timeout=t.connect_timeout,
        # A short-lived process: one quick reconnect, then fail over to the spool.
        max_reconnect=1,
        reconnect_wait=0.1,
    )
    return await co.connect()


class Publisher:
    """Publishes HookEvents to JetStream (a `spool.Publish`); provisions the streams once
    if no stream answers. Transient failures raise Unavailable.

    Example:
        >>> sent = await Publisher(nc, Target(data_dir=d))(event)  # doctest: +SKIP
        >>> sent.duplicate  # doctest: +SKIP
        False
    """

    def __init__(self, nc: Client, t: Target) -> None:
        from ingest.nats.streams import names

        self.nc = nc
        self.js = nc.jetstream(timeout=t.publish_timeout)
        self.names = names(t.prefix)
        self.prefix = t.prefix
        self.timeout = t.publish_timeout
        self.provisioned = False
        self.provision_lock = asyncio.Lock()

    async def __call__(
        self, event: HookEvent, reply_to: str | None = None, peer: str | None = None
    ) -> Sent:
        import nats.errors
        import nats.js.errors

        from ingest.nats.streams import event_subject, provision, publish_error

        subject = event_subject(self.names, event.event)
        # A fallback notice repeats an event already stored: its own id for dedup.
        notice = event.fallback is not None and event.fallback.notice
        headers = {MSG_ID: f"{event.id}:fallback" if notice else event.id}
        if reply_to is not None:
            headers[REPLY_HEADER] = reply_to
            if peer is not None:  # the worker may answer with a tag keyed for this process
                headers[PEER_HEADER] = peer
        data = encode_msgpack(event)
        retried = False
        while True:
            try:
                ack = await self.js.publish(subject, data, timeout=self.timeout, headers=headers)
                return Sent(duplicate=bool(ack.duplicate))
            except nats.js.errors.NoStreamResponseError as e:
                if retried:
                    raise publish_error(e, subject, self.timeout) from e
                retried = True
                async with self.provision_lock:  # a flush has many publishes in flight
                    if not self.provisioned:
                        await provision(self.js, prefix=self.prefix)
                        self.provisioned = True
            except nats.errors.MaxPayloadError:
                return Sent(
                    rejected=f"{len(data)} bytes exceed the NATS server's max_payload "
                    f"({self.nc.max_payload} bytes); raise max_payload in its config"
                )
            except nats.js.errors.APIError as e:
                if e.err_code == _JS_MSG_TOO_BIG:
                    return Sent(rejected=f"stream refused {len(data)} bytes: {e.description}")
                raise publish_error(e, subject, self.timeout) from e
            except (OSError, nats.errors.Error) as e:
                raise publish_error(e, subject, self.timeout) from e


async def _flush(
    t: Target, progress: Callable[[int, int], None] | None, wait_lock: float
) -> FlushReport:
    nc = await connect(t)
    try:
        return await Spool(t.data_dir).flush(
            Publisher(nc, t), wait_lock=wait_lock, progress=progress
        )
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(nc.close(), timeout=2.0)


def flush_spool(
    t: Target,
    *,
    progress: Callable[[int, int], None] | None = None,
    wait_lock: float = 60.0,
) -> FlushReport:
    """Publish everything spooled under `t.data_dir`; raises Unavailable if NATS is down.

    Example:
        >>> flush_spool(Target(data_dir=Path("/tmp/ha"), nats_url=url)).remaining  # doctest: +SKIP
        0
    """
    quiet_nats_logs()
    return asyncio.run(_flush(t, progress, wait_lock))
