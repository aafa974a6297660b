"""The worker: consume hook events, evaluate them, append outcomes, then ack and answer.

Rules of this file:
- Ack only **after** the batch's outcomes are durably appended (one fsync per batch).
  A crash before the ack re-delivers; the log drops the re-delivered duplicate by its
  idempotency key and the stored outcome is published and answered again.
- Each outcome is published on the outcomes stream and its PubAck awaited before the
  event is acked, so a SIEM forwarder reading that stream misses nothing.
- A waiting emitter gets its Reply only after the append: nobody acts on a decision
  that is not on disk.
- No poison message: a message that cannot be decoded, whose payload the engine's parser
  refuses, or whose evaluation raises is terminated (never redelivered), kept in
  ``<data-dir>/rejects/`` with its size, sha256 and reason, recorded in the log as a
  ``decided_by = 'rejected'`` record, and a waiting emitter gets an error Reply (so its
  ``--fail`` decides). The worker never stops because of one event.
- A spooled event that carries a `Fallback` is recorded with the answer the agent got;
  a fallback notice (the emitter gave up waiting) is recorded without evaluating again.
- SIGTERM finishes the batch in hand and exits; SIGHUP reloads the settings.

Example:
    $ hookaudit worker --data-dir D --settings project:infra/policies/security.json
"""

from __future__ import annotations

import asyncio
import logging
import signal
import socket
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from engine.errors import SettingsError, Unavailable
from engine.executors.command import CommandExecutor
from engine.failclosed import one_line
from engine.records import HookEvent, Outcome, encode_msgpack, uuid7
from engine.run import Engine
from engine.sources import Effective, load_sources
from ingest.admit import Admitted, admit, experienced, record_only, rejected
from ingest.log import LogWriter, idempotency_key
from ingest.nats import ConnectOptions, Names, outcome_subject, provision
from ingest.protocol import MSG_ID, REPLY_HEADER, SIG_HEADER, Reply, reply_subject_ok
from ingest.pull import Puller
from ingest.replysig import Signer

__all__ = ["Worker", "WorkerStats"]

_log = logging.getLogger("hookaudit.worker")


@dataclass
class WorkerStats:
    events: int = 0
    appended: int = 0
    duplicates: int = 0
    rejected: int = 0
    replies: int = 0
    batches: int = 0
    started: float = field(default_factory=time.time)


class _AckWaiter:
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


def _executors(workdir: str | None, mcp_configs: Sequence[str]) -> dict[str, Any]:
    table: dict[str, Any] = {"command": CommandExecutor(workdir=workdir)}
    if mcp_configs:
        from engine.executors.mcp import McpExecutor, load_mcp_config

        table["mcp_tool"] = McpExecutor(load_mcp_config(list(mcp_configs)), cwd=workdir)
    return table


class Worker:
    """One worker process: owns a log chain and shares the durable consumer."""

    def __init__(
        self,
        *,
        data_dir: Path,
        settings: Sequence[tuple[str, str]],
        connect: ConnectOptions,
        names: Names,
        posture: Literal["compat", "enforcing"] | None = None,
        profile: Literal["current", "legacy"] = "current",
        name: str | None = None,
        workdir: str | None = None,
        mcp_configs: Sequence[str] = (),
        batch: int = 512,
        concurrency: int = 64,
        pipeline: int = 3,
        log_key: bytes | None = None,
        max_segment_bytes: int = 64 * 1024 * 1024,
        max_segment_age: float = 3600.0,
        on_batch: Callable[[WorkerStats], None] | None = None,
        signer: Signer | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.specs = list(settings)
        self.connect_options = connect
        self.names = names
        self.posture = posture
        self.profile = profile
        self.name = name
        self.workdir = workdir
        self.batch = batch
        self.sem = asyncio.Semaphore(concurrency)
        self.pipeline = max(1, pipeline)
        self.log_key = log_key
        self.max_segment_bytes = max_segment_bytes
        self.max_segment_age = max_segment_age
        self.on_batch = on_batch
        self.signer = signer
        self.stats = WorkerStats()
        self.stopping = asyncio.Event()
        self.eff: Effective = load_sources(self.specs)
        self.engine = Engine(_executors(workdir, mcp_configs), posture=posture, profile=profile)
        self.writer: LogWriter | None = None

    # -- settings ----------------------------------------------------------------------
    def reload(self) -> None:
        """Re-read the settings files; keep the old ones when the new ones are invalid."""
        try:
            eff = load_sources(self.specs)
        except SettingsError as exc:
            _log.error("settings reload failed, keeping %s: %s", self.eff.settings_id, exc)
            return
        _log.warning("settings reloaded: %s -> %s", self.eff.settings_id, eff.settings_id)
        self.eff = eff

    def _open_log(self) -> LogWriter:
        kwargs: dict[str, Any] = {
            "max_bytes": self.max_segment_bytes,
            "max_age_s": self.max_segment_age,
        }
        if self.log_key is not None:
            kwargs["key"] = self.log_key
        if self.name:
            return LogWriter.open(self.data_dir, self.name, **kwargs)
        host = socket.gethostname().split(".")[0] or "worker"
        for i in range(1, 1000):
            try:
                writer = LogWriter.open(self.data_dir, f"{host}-{i}", **kwargs)
            except Unavailable:
                continue  # another live worker holds this chain; take the next one
            self.name = f"{host}-{i}"
            return writer
        raise Unavailable("no free worker chain name; pass --name")

    # -- main loop ---------------------------------------------------------------------
    async def run(self) -> WorkerStats:
        """Run until `stop()` (or SIGTERM when installed by the CLI)."""
        nc = await self.connect_options.connect()
        try:
            js = nc.jetstream()
            await provision(js, prefix=self.names.prefix)
            sub = Puller(nc, self.names.events_stream, self.names.worker_consumer)
            await sub.start()
            acks = _AckWaiter(nc)
            await acks.start()
            self.writer = self._open_log()
            _log.info("worker %s consuming %s", self.name, self.names.events_stream)
            inflight: set[asyncio.Task[None]] = set()
            try:
                while not self.stopping.is_set():
                    msgs = await sub.fetch(self.batch, timeout=0.5)
                    if not msgs:
                        if self.writer.seal_due():  # idle: seal an aged segment, off the loop
                            await asyncio.to_thread(self.writer.roll_if_due)
                        continue
                    handled = await self._append(nc, msgs)
                    if handled is None:
                        continue
                    # Publishing outcomes and acking overlaps the next batch's evaluation:
                    # the batch is already durable, and its events are acked only once
                    # JetStream has stored every outcome.
                    task = asyncio.create_task(self._publish_and_ack(nc, acks, *handled))
                    inflight.add(task)
                    task.add_done_callback(inflight.discard)
                    if len(inflight) >= self.pipeline:
                        done, _ = await asyncio.wait(inflight, return_when=asyncio.FIRST_COMPLETED)
                        for t in done:
                            if t.exception() is not None:
                                # Nothing is lost: the batch is on disk and its events are
                                # not acked, so JetStream redelivers them; the log drops the
                                # duplicates and the outcomes are published again.
                                _log.error("publishing a batch failed: %s", t.exception())
            finally:
                if inflight:
                    for failure in await asyncio.gather(*inflight, return_exceptions=True):
                        if isinstance(failure, BaseException):
                            _log.error("publishing a batch failed: %s", failure)
        finally:
            if self.writer is not None:
                self.writer.close()
            try:
                await nc.close()
            except OSError as exc:  # NATS is down: nothing is left to flush to it
                _log.warning("closing the NATS connection: %s", exc)
        return self.stats

    def stop(self) -> None:
        self.stopping.set()

    async def _bounded(self, coro: Coroutine[Any, Any, Outcome]) -> Outcome | BaseException:
        async with self.sem:
            try:
                return await coro
            except Exception as exc:  # one event's failure is its own record, not the batch's
                return exc

    async def _append(
        self, nc: Any, msgs: list[Any]
    ) -> tuple[list[tuple[Any, HookEvent]], list[Outcome]] | None:
        """Decode, evaluate and durably append one batch; answer waiting emitters.

        One event never stops the worker: a message that cannot be decoded, validated or
        evaluated becomes a ``rejected`` record (and is terminated, not redelivered).
        """
        assert self.writer is not None
        events: list[tuple[Any, HookEvent]] = []
        outcomes: list[Outcome | None] = []
        waiting: list[tuple[int, Coroutine[Any, Any, Outcome]]] = []
        for msg in msgs:
            admitted = self._admit(msg)
            if isinstance(admitted, Outcome):
                events.append((msg, admitted.event))
                outcomes.append(admitted)
                continue
            ev, payload = admitted
            events.append((msg, ev))
            if ev.rejected is not None:  # refused by emit or serve: record, do not evaluate
                outcomes.append(self._record_only(ev, "rejected"))
                continue
            if ev.fallback is not None and ev.fallback.notice:
                outcomes.append(self._record_only(ev, "fallback"))
                continue
            try:
                started = self.engine.start(ev, self.eff, payload=payload)
            except Exception as exc:
                outcomes.append(self._rejected(msg, ev, f"evaluation failed: {one_line(exc)}"))
                continue
            if isinstance(started, Outcome):
                outcomes.append(started)
            else:
                outcomes.append(None)
                waiting.append((len(outcomes) - 1, started))
        if waiting:
            done = await asyncio.gather(*(self._bounded(c) for _, c in waiting))
            for (i, _), o in zip(waiting, done, strict=True):
                if isinstance(o, BaseException):
                    msg, ev = events[i]
                    o = self._rejected(msg, ev, f"evaluation failed: {one_line(o)}")
                outcomes[i] = o
        ready = [experienced(o) for o in outcomes if o is not None]
        if self.writer.seal_due():
            # Sealing takes seconds for 64 MiB: off the loop, which keeps answering NATS.
            await asyncio.to_thread(self.writer.roll_if_due)
        stored = self.writer.append_batch(ready, roll=False)
        by_key = {idempotency_key(o.event.id, o.settings_id, o.replay_id): o for o in stored}
        final: list[Outcome] = []
        for o in ready:
            key = idempotency_key(o.event.id, o.settings_id, o.replay_id)
            kept = by_key.get(key)
            if kept is None:
                self.stats.duplicates += 1
                kept = self.writer.lookup(key) or o
            final.append(kept)
        # Durable now: a waiting agent may act on its decision.
        for (msg, ev), o in zip(events, final, strict=True):
            reply = (msg.headers or {}).get(REPLY_HEADER)
            if reply:
                if o.decided_by == "rejected":
                    why = o.reason or "event rejected"
                    answer = Reply(event_id=ev.id, error=f"event rejected by the worker: {why}")
                else:
                    answer = Reply(event_id=ev.id, outcome=o)
                await self._answer(nc, reply, answer)
        self.stats.appended += len(stored)
        return events, final

    async def _answer(self, nc: Any, subject: str, reply: Reply) -> None:
        """Publish a signed Reply to the emitter's inbox (and nowhere else)."""
        if not reply_subject_ok(subject):
            _log.warning("event %s: reply subject %.80r refused", reply.event_id, subject)
            return
        data = encode_msgpack(reply)
        headers = None if self.signer is None else {SIG_HEADER: self.signer.sign(data)}
        await nc.publish(subject, data, headers=headers)
        self.stats.replies += 1

    async def _publish_and_ack(
        self,
        nc: Any,
        acks: _AckWaiter,
        events: list[tuple[Any, HookEvent]],
        final: list[Outcome],
    ) -> None:
        futures = []
        for o in final:
            subject = outcome_subject(self.names, o.event.event, o.decision or "none")
            headers = {MSG_ID: idempotency_key(o.event.id, o.settings_id, o.replay_id)}
            futures.append(await acks.publish(subject, encode_msgpack(o), headers))
        await acks.wait(futures, timeout=10.0)
        for (msg, _), o in zip(events, final, strict=True):
            r = o.event.rejected
            if o.decided_by == "rejected" and r is not None and r.stage == "worker":
                await msg.term()  # recorded: never redeliver a message that cannot be used
            else:
                await msg.ack()
        await nc.flush()
        self.stats.events += len(events)
        self.stats.batches += 1
        if self.on_batch is not None:
            self.on_batch(self.stats)

    def _admit(self, msg: Any) -> Admitted:
        admitted = admit(
            bytes(msg.data), msg.subject, msg.headers or {}, self.data_dir, self.eff.settings_id
        )
        if isinstance(admitted, Outcome):
            self.stats.rejected += 1
        return admitted

    def _record_only(self, ev: HookEvent, by: Literal["rejected", "fallback"]) -> Outcome:
        if by == "rejected":
            self.stats.rejected += 1
        return record_only(ev, by, self.eff.settings_id)

    def _rejected(self, msg: Any, ev: HookEvent, why: str) -> Outcome:
        self.stats.rejected += 1
        data = bytes(msg.data)
        headers = msg.headers or {}
        return rejected(data, msg.subject, headers, ev, why, self.data_dir, self.eff.settings_id)


def install_signals(worker: Worker) -> None:
    """SIGTERM/SIGINT: finish the batch and exit. SIGHUP: reload settings."""
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, worker.stop)
    loop.add_signal_handler(signal.SIGINT, worker.stop)
    loop.add_signal_handler(signal.SIGHUP, worker.reload)
