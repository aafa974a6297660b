"""The forwarder: a durable JetStream consumer on HOOK_OUTCOMES feeding one sink.

Rules of this file:
- Ack a message only after every record made from it was accepted by the sink or parked
  (parked records are fsynced to ``parked.jsonl`` first). Nothing is dropped silently.
- A batch the sink cannot take is kept in hand and sent again with exponential back-off
  (0.5 s doubling to `max_backoff`), its messages kept alive with in-progress acks so
  JetStream hands them to no one else; items a sink asks to retry go again the same way.
- After a restart the durable consumer resumes where the last acked message left off; a
  batch in hand when the process died is delivered again after ``ack_wait``.
- Two stages: a producer task fetches and formats the next batches while the sender sends
  one and waits for the sink; at most three batches are in hand (the one being sent, one
  queued, one the producer waits to queue), all kept alive together during an outage.
  Batches are sent, and records retried, in delivery order: a batch goes only after the
  one before it was accepted or parked.
- A sink with ``window = 2`` (HEC) has up to two batches in flight: the next is sent while
  the one before waits for its indexer ack; each is re-sent alone when its ack does not
  come, and acked only after its own ack (so batches may arrive out of order).
- SIGTERM finishes the send in hand, then naks what is not acked, the queued batches too
  (redelivered at once to the next run), and stops. Started before the stream exists (no
  worker has made it yet), it waits for it.

Example:
    await Forwarder(connect=co, names=names(), name="splunk", fmt="ocsf", sink=sink,
                    redactor=Redactor(key=k), data_dir=d).run()

Longer than 400 lines: the forwarder's no-loss contract (the consumer, its two stages, the
held batches and the acks after the sink took them) is one state machine, read in one place.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from engine.errors import Unavailable
from ingest.gc_threshold import Collector
from ingest.nats.pull import Puller, ack_many
from ingest.nats.streams import ConnectOptions, Names
from ingest.redact import Redactor
from ingest.siem.formats import Formatted, format_view
from ingest.siem.held import Item, parked_message, parked_record, stream_seq
from ingest.siem.sink import Sink, SinkDown, printable
from ingest.siem.state import (
    Counters,
    Parked,
    append_parked,
    encode_counters,
    load_counters,
    put_counters,
    write_counters,
)
from ingest.siem.view import view_of_msgpack

__all__ = ["NAME_OK", "Forwarder", "consumer_name"]

_log = logging.getLogger("hookaudit.siem")
NAME_OK = re.compile(r"[A-Za-z0-9_-]{1,64}")
_STREAM_NOT_FOUND = 10059  # JetStream's "stream not found"


class _NoStream(Exception): ...


def consumer_name(name: str) -> str:
    """The durable consumer of sink `name`.

    Example:
        >>> consumer_name("splunk")
        'siem-splunk'
    """
    return f"siem-{name}"


@dataclass
class Forwarder:
    connect: ConnectOptions
    names: Names
    name: str
    fmt: str
    sink: Sink
    redactor: Redactor
    data_dir: Path
    filter: str | None = None
    batch: int = 256
    ack_wait: float = 120.0
    max_backoff: float = 10.0
    to: str = ""
    #: where a new sink starts: "all" (every outcome the stream holds) or "now" (new ones)
    start: str = "all"
    #: told where the sink starts, once its consumer is known (the command prints it)
    notice: Callable[[str], None] | None = None
    #: told the backlog (outcomes to forward) once the consumer is known, then each count
    #: of outcomes acked (the command's catch-up progress)
    backlog: Callable[[int], None] | None = None
    forwarded: Callable[[int], None] | None = None
    stopping: asyncio.Event = field(default_factory=asyncio.Event)
    counters: Counters = field(init=False)
    _saved_at: float = field(init=False, default=0.0)
    _dirty: bool = field(init=False, default=False)
    _latest: bytes | None = field(init=False, default=None)
    _save_wanted: asyncio.Event = field(init=False, default_factory=asyncio.Event)
    _writer_done: bool = field(init=False, default=False)
    _held: list[list[Item]] = field(init=False, default_factory=list)
    window: int = field(init=False, default=1)  # batches in flight to the sink

    def __post_init__(self) -> None:
        prev = load_counters(self.data_dir, self.name)
        self.counters = prev or Counters(name=self.name)
        self.counters.to, self.counters.format = self.to, self.fmt
        self.counters.consumer = consumer_name(self.name)
        self.counters.stream = self.names.outcomes_stream
        self.counters.pid, self.counters.started_at = os.getpid(), time.time()

    def stop(self) -> None:
        self.stopping.set()

    async def _ensure_consumer(self, js: Any) -> None:
        from nats.js import api as js_api

        subject = self.names.outcomes_subjects
        if self.filter:
            subject = f"{self.names.outcomes_prefix}.{self.filter}"
        cfg = js_api.ConsumerConfig(
            name=consumer_name(self.name),
            durable_name=consumer_name(self.name),
            description=f"hookaudit siem {self.name}: ack after the SIEM accepted",
            deliver_policy=js_api.DeliverPolicy.NEW
            if self.start == "now"
            else js_api.DeliverPolicy.ALL,
            ack_policy=js_api.AckPolicy.EXPLICIT,
            ack_wait=self.ack_wait,
            max_ack_pending=max(4 * self.batch, 1024),
            filter_subject=subject,
        )
        try:
            try:
                info = await js.consumer_info(self.names.outcomes_stream, cfg.durable_name)
            except Exception as e:  # not found: create it
                if "not found" not in str(e).lower() and "10014" not in str(e):
                    raise
                made = await js.add_consumer(self.names.outcomes_stream, cfg)
                if self.backlog is not None:
                    self.backlog(made.num_pending)
                self._tell(
                    f"new sink {self.name}: starts with the oldest outcome the stream holds "
                    f"({made.num_pending} to forward; --from now starts with new ones)"
                    if self.start != "now"
                    else f"new sink {self.name}: starts with the outcomes appended from now on"
                )
                return
        except Exception as e:
            if getattr(e, "err_code", None) == _STREAM_NOT_FOUND:
                raise _NoStream(f"stream {self.names.outcomes_stream} does not exist yet") from e
            raise Unavailable(
                f"consumer {cfg.durable_name} on {self.names.outcomes_stream}: {e}"
            ) from e
        have = info.config.filter_subject
        if have == subject:
            if self.backlog is not None:
                self.backlog(info.num_pending + info.num_ack_pending)
            self._tell(
                f"sink {self.name}: resumes where it left off ({info.num_pending} outcomes to "
                "forward)"
            )
        if have != subject:
            raise Unavailable(
                f"consumer {cfg.durable_name} exists with filter {have!r} (want {subject!r}); "
                f"use another --name or remove it (nats consumer rm "
                f"{self.names.outcomes_stream} {cfg.durable_name})"
            )

    def _tell(self, message: str) -> None:
        if self.notice is not None:
            self.notice(message)

    async def _await_consumer(self, js: Any) -> bool:
        """The consumer, once the stream exists (a worker makes it): False if stopped first."""
        wait = 0.5
        while True:
            try:
                await self._ensure_consumer(js)
            except _NoStream as e:
                if wait == 0.5:  # said once
                    _log.warning("%s: waiting (a worker or `hookaudit nats provision` makes it)", e)
            else:
                return True
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), wait)
            if self.stopping.is_set():
                return False
            wait = min(wait * 2, 5.0)

    def _format(self, msg: Any) -> tuple[list[Formatted], str | None]:
        seq = stream_seq(msg)
        try:
            view = view_of_msgpack(msg.data, seq=seq, redactor=self.redactor)
        except (msgspec.DecodeError, msgspec.ValidationError, ValueError) as e:
            return [], f"not an Outcome record: {e}"
        return format_view(self.fmt, view), None

    async def run(self) -> Counters:
        # Each outcome leaves a few hundred short-lived containers (decoded payload, view,
        # records): at CPython's threshold of 700 the collector would run every few events.
        Collector.enter()
        try:
            return await self._run()
        finally:
            Collector.leave()

    async def _run(self) -> Counters:
        nc = await self.connect.connect()
        writer: asyncio.Task[None] | None = None
        producer: asyncio.Task[None] | None = None
        try:
            js = nc.jetstream()
            if not await self._await_consumer(js):
                return self.counters  # stopped while waiting for the stream
            puller = Puller(nc, self.names.outcomes_stream, consumer_name(self.name))
            await puller.start()
            write_counters(self.data_dir, self.counters)
            writer = asyncio.create_task(self._writer())
            # Two stages: the producer fetches and formats batch k+1 while this task sends
            # batch k and acks it; one batch waits between them. Batches are sent and acked
            # in delivery order, each only after the sink took it.
            ready: asyncio.Queue[list[Item] | None] = asyncio.Queue(maxsize=1)
            producer = asyncio.create_task(self._produce(puller, ready))
            # A sink with a window (HEC: the indexer acks late) gets the next batches while
            # earlier ones wait for their acks; each batch is still acked on its own answer.
            self.window = window = max(1, min(int(getattr(self.sink, "window", 1)), 2))
            flying: set[asyncio.Task[None]] = set()
            while (items := await ready.get()) is not None:
                if not items:  # idle: the last batch's counters go to disk now
                    if self._dirty:
                        self._save(force=True)
                    continue
                if self.stopping.is_set():  # fetched before the stop: hand back unsent
                    await self._nak(items)
                    continue
                if window == 1:
                    await self._handle(nc, items)
                else:
                    while len(flying) >= window:
                        done, flying = await asyncio.wait(
                            flying, return_when=asyncio.FIRST_COMPLETED
                        )
                        for t in done:
                            t.result()  # a bug in a delivery ends the run, as it would inline
                    flying.add(asyncio.create_task(self._handle(nc, items)))
                self._dirty = True
                self._save(force=ready.empty() and not puller.buf)  # caught up: show it now
            if flying:
                await asyncio.gather(*flying)
            await producer
            await puller.stop()
        finally:
            if producer is not None and not producer.done():
                producer.cancel()
                with contextlib.suppress(BaseException):
                    await producer
            if writer is not None:  # let a write in its thread end before the last one
                self._latest = None
                self._writer_done = True
                self._save_wanted.set()
                with contextlib.suppress(Exception):
                    await writer
            with contextlib.suppress(Exception):
                await self.sink.close()
            self.counters.pid = None
            write_counters(self.data_dir, self.counters)
            with contextlib.suppress(Exception):
                await nc.close()
        return self.counters

    async def _produce(self, puller: Puller, ready: asyncio.Queue[list[Item] | None]) -> None:
        """Fetch and format batches until stopped; an empty list for a fetch that timed
        out, None at the end. A batch is in `_held` (kept alive during an outage) from
        the moment it is formatted until its last message is acked or nak'd."""
        try:
            while not self.stopping.is_set():
                msgs = await puller.fetch(self.batch, timeout=1.0)
                items = self._prepare(msgs) if msgs else []
                if items:
                    self._held.append(items)
                await ready.put(items)
        except Exception:  # the sender takes what is queued, then sees the error at the end
            await ready.put(None)
            raise
        await ready.put(None)

    def _prepare(self, msgs: list[Any]) -> list[Item]:
        items: list[Item] = []
        for m in msgs:
            records, bad = self._format(m)
            items.append(Item(m, records, set(range(len(records))), bad))
        return items

    async def _nak(self, items: list[Item]) -> None:
        for it in items:
            with contextlib.suppress(Exception):
                await it.msg.nak()
        self._release(items)

    def _release(self, items: list[Item]) -> None:
        for k, held in enumerate(self._held):
            if held is items:
                del self._held[k]
                break

    async def _handle(self, nc: Any, items: list[Item]) -> None:
        parked = [parked_message(it.msg, it.bad) for it in items if it.bad is not None]
        if parked:  # undecodable messages: park them, their ack follows below
            append_parked(self.data_dir, self.name, parked)
            self.counters.parked += len(parked)
        try:
            await self._deliver(nc, list(items))  # acked items leave the copy
        finally:
            self._release(items)
            if self.window > 1:  # this batch may end after the others: nothing held, save
                self._dirty = True
                self._save(force=not self._held)

    async def _deliver(self, nc: Any, items: list[Item]) -> None:
        backoff, first = 0.5, True
        while True:
            todo = [(it, i) for it in items for i in sorted(it.pending)]
            if not todo:
                break
            if not first:
                self.counters.retried += len(todo)
            first = False
            try:
                delivery = await self.sink.send(
                    [it.records[i] for it, i in todo], self._keepalive(items)
                )
            except SinkDown as e:
                self._failed(str(e))
            else:
                if delivery.accepted_all:  # the common case, in one pass
                    for it in items:
                        it.pending.clear()
                    self.counters.sent += len(todo)
                    self.counters.last_sent_at = time.time()
                    break
                retry = set(delivery.retry)
                gone: list[Parked] = []
                for k, why in delivery.parked:
                    it, i = todo[k]
                    gone.append(parked_record(it.records[i], why))
                    it.pending.discard(i)
                    retry.discard(k)
                append_parked(self.data_dir, self.name, gone)
                self.counters.parked += len(gone)
                for k, (it, i) in enumerate(todo):
                    if k not in retry and i in it.pending:
                        it.pending.discard(i)
                        self.counters.sent += 1
                if retry:
                    self._failed(f"{self.sink.name}: {len(retry)} record(s) to retry")
                else:
                    self.counters.last_sent_at = time.time()
                    break
            await self._ack_done(nc, items)
            self._save(force=True)  # status shows an outage as it lasts
            if self.stopping.is_set():
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), backoff)
            backoff = min(backoff * 2, self.max_backoff)
            await self._keepalive(items)()
        await self._ack_done(nc, items)
        for it in items:  # stopping with records in hand: hand them back at once
            with contextlib.suppress(Exception):
                await it.msg.nak()

    def _save(self, *, force: bool = False) -> None:
        """Counters to disk at most twice a second (a SIGKILL loses at most that much of
        them; never a record: those are tracked by JetStream acks, not by the counters)."""
        now = time.monotonic()
        if force or now - self._saved_at >= 0.5:
            self._latest = encode_counters(self.counters)
            self._save_wanted.set()
            self._saved_at, self._dirty = now, False

    async def _writer(self) -> None:
        """Writes the latest counters from a thread, off the event loop; saves asked for
        while one is being written coalesce into the next."""
        while not self._writer_done:
            await self._save_wanted.wait()
            self._save_wanted.clear()
            data, self._latest = self._latest, None
            if data is not None:
                await asyncio.to_thread(put_counters, self.data_dir, self.name, data)

    def _keepalive(self, items: list[Item]) -> Any:
        async def alive() -> None:
            # The batches fetched behind this one wait as long as it does: keep them alive
            # too, or JetStream would deliver them again while they are still in hand.
            mine = {id(it) for it in items}
            behind = [it for held in self._held for it in held if id(it) not in mine]
            for it in [*items, *behind]:
                if it.pending:
                    with contextlib.suppress(Exception):
                        await it.msg.in_progress()

        return alive

    async def _ack_done(self, nc: Any, items: list[Item]) -> None:
        done = [it for it in items if not it.pending]
        if not done:
            return
        # One write of every ack (the bytes `msg.ack()` sends one coroutine each): 4.1 ->
        # 0.3 us of CPU per message.
        await ack_many(nc, [it.msg for it in done])
        items[:] = [it for it in items if it.pending]
        self.counters.messages += len(done)
        await nc.flush()  # the acks reached the server before we count them as done
        if self.forwarded is not None:
            self.forwarded(len(done))

    def _failed(self, why: str) -> None:
        self.counters.failed += 1
        why = printable(why)  # a receiver's answer: no forged log lines
        self.counters.last_error, self.counters.last_error_at = why, time.time()
        _log.warning("%s", why)
