"""The worker: consume hook events, evaluate them, append outcomes, then ack and answer.

Rules of this file:
- Ack only **after** an event's outcome is durably appended (one fsync per commit).
  A crash before the ack re-delivers; the log drops the re-delivered duplicate by its
  idempotency key and the stored outcome is published and answered again.
- Each outcome is published on the outcomes stream and its PubAck awaited before the
  event is acked, so a SIEM forwarder reading that stream misses nothing. The commit side
  (append, answer, publish, ack, anchor) is `ingest.worker.committer`'s; its rules are there.
- A waiting emitter gets its Reply only after the append: nobody acts on a decision
  that is not on disk. It waits for nothing else: events are evaluated as they arrive and
  each commit takes the outcomes decided so far, so a slow hook delays only its own event.
- The log chain has one writer, the committer: records are chained in commit order
  (the order in which events were decided), one chain per worker.
- No poison message: a message that cannot be decoded, whose payload the engine's parser
  refuses, or whose evaluation raises is terminated (never redelivered), kept in
  ``<data-dir>/rejects/`` with its size, sha256 and reason, recorded in the log as a
  ``decided_by = 'rejected'`` record, and a waiting emitter gets an error Reply (so its
  ``--fail`` decides). The worker never stops because of one event.
- A spooled event that carries a `Fallback` is recorded with the answer the agent got;
  a fallback notice (the emitter gave up waiting) is recorded without evaluating again.
- A log that cannot be written (disk full, read-only, I/O error) stops the acks, not the
  worker: the committer holds the batch and retries it until the disk takes it.
- SIGTERM finishes every event in hand and exits; SIGHUP reloads the settings.

Example:
    $ hookaudit worker --data-dir D --settings project:infra/policies/security.json
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import time
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any, Literal

from engine.errors import SettingsError, Unavailable
from engine.executors.command import CommandExecutor
from engine.failclosed import one_line
from engine.records import HookEvent, Outcome, Posture, Profile
from engine.run import Engine
from engine.sources import Effective, load_sources
from ingest.gc_threshold import Collector
from ingest.log.writer import LogWriter
from ingest.nats.puback import AckWaiter
from ingest.nats.pull import Delivered, Puller
from ingest.nats.streams import ConnectOptions, Names, provision
from ingest.protocol import REPLY_HEADER
from ingest.redact import Redactor
from ingest.replysig import Signer
from ingest.worker.admit import Admitted, admit, experienced, observed, record_only, rejected
from ingest.worker.committer import Committer, WorkerStats

__all__ = ["Worker", "WorkerStats"]

_log = logging.getLogger("hookaudit.worker")

# Events in hand that have not moved for this long mean a stalled connection (see _watch).
# Above the longest a healthy publish-and-ack takes (a PubAck wait of 10 s and a flush).
STALL_AFTER = 30.0


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
        posture: Posture | None = None,
        profile: Profile = "current",
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
        redactor: Redactor | None = None,
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
        self.log_key = log_key
        self.max_segment_bytes = max_segment_bytes
        self.max_segment_age = max_segment_age
        self.max_open = max(1, batch) * (max(1, pipeline) + 1)
        self.progress_every = 10.0  # s; well inside the consumer's ack wait (30 s)
        self._open = 0  # events fetched and not yet acked or terminated
        self._room = asyncio.Event()
        self._evals: set[asyncio.Task[None]] = set()
        self._progress = 0.0  # when events in hand last moved
        self.stats = WorkerStats()
        self.stopping = asyncio.Event()
        self.committer = Committer(
            names=names,
            stats=self.stats,
            stopping=self.stopping,
            release=self._release,
            moved=self._moved,
            in_hand=lambda: self._open,
            pipeline=pipeline,
            signer=signer,
            redactor=redactor,
            on_batch=on_batch,
        )
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
        Collector.enter()
        try:
            return await self._run()
        finally:
            Collector.leave()

    async def _run(self) -> WorkerStats:
        nc = await self.connect_options.connect()
        try:
            js = nc.jetstream()
            await self._provision(js)
            sub = Puller(nc, self.names.events_stream, self.names.worker_consumer, ahead=True)
            await sub.start()
            acks = AckWaiter(nc)
            await acks.start()
            self.writer = self._open_log()
            _log.info("worker %s consuming %s", self.name, self.names.events_stream)
            committer = asyncio.create_task(self.committer.run(self.writer, nc, acks))
            self._moved()
            watchdog = asyncio.create_task(self._watch())
            try:
                await self._fetch_loop(sub, committer, watchdog)
                if not watchdog.done():
                    with contextlib.suppress(Exception):  # best effort: else the ack wait
                        await sub.release()  # fetched ahead, never started: redeliver now
                if watchdog.done():
                    self._abandon(committer)
                    raise watchdog.result()
            finally:
                watchdog.cancel()
                # SIGTERM: finish every event in hand, commit, publish, ack.
                if self._evals:
                    await asyncio.gather(*self._evals, return_exceptions=True)
                self.committer.closing = True
                self.committer.ready_signal.set()
                failure = (await asyncio.gather(committer, return_exceptions=True))[0]
                if self.committer.publishing:
                    publishing = self.committer.publishing
                    for f in await asyncio.gather(*publishing, return_exceptions=True):
                        if isinstance(f, BaseException):
                            _log.error("publishing a batch failed: %s", f)
            if isinstance(failure, BaseException):
                raise failure  # the log could not be written: Unavailable, say why
        finally:
            if self.writer is not None:
                self.writer.close()
            try:
                await asyncio.wait_for(nc.close(), 5.0)
            except (OSError, TimeoutError) as exc:  # NATS is down: nothing left to flush
                _log.warning("closing the NATS connection: %s", exc)
        return self.stats

    async def _provision(self, js: Any) -> None:
        """Provision, retrying while JetStream does not answer (a cluster electing a leader,
        a node restarting): a worker is a service and waits for it; a conflict is fatal."""
        wait = 0.25
        while True:
            try:
                await provision(js, prefix=self.names.prefix)
                return
            except Unavailable as exc:
                if self.stopping.is_set():
                    raise
                _log.warning("%s; retrying in %.1fs", exc, wait)
                await asyncio.sleep(wait)
                wait = min(wait * 2, 5.0)

    # -- liveness ----------------------------------------------------------------------
    # nats-py can wedge a connection while it reconnects (seen with TLS when a cluster
    # node dies: PubAck waits and flushes that never return). A worker whose events in
    # hand stop moving for STALL_AFTER, while none is waiting on its own hooks, exits with
    # an error instead of holding them forever: they are not acked, so JetStream
    # redelivers them (the log drops the copies), and the service manager starts it again
    # (infra/systemd, infra/compose: restart always).

    def _moved(self) -> None:
        self._progress = time.monotonic()

    async def _watch(self) -> Unavailable:
        while True:
            await asyncio.sleep(1.0)
            waiting = self._open - len(self._evals)  # events not held by their own hooks
            if waiting <= 0 or self.committer.log_blocked:
                # Idle, only hooks at work (they have their own timeouts), or waiting for
                # the disk, which the committer reports itself: not a stalled connection.
                self._moved()
            elif time.monotonic() - self._progress > STALL_AFTER:
                return Unavailable(
                    f"{waiting} events in hand made no progress for {STALL_AFTER:.0f}s "
                    "(NATS connection stalled); exiting so they are redelivered"
                )

    def _abandon(self, committer: asyncio.Task[None]) -> None:
        """Drop everything in hand on a stalled connection: nothing of it is acked."""
        self.committer.closing = True
        committer.cancel()
        for t in (*self._evals, *self.committer.publishing):
            t.cancel()
        self._evals.clear()
        self.committer.publishing.clear()
        self.committer.ready.clear()

    def stop(self) -> None:
        self.stopping.set()

    # -- scheduling --------------------------------------------------------------------
    # An event's reply waits only for its own hooks and the fsync of the commit it joins:
    # the fetch loop starts every event as it arrives, outcomes queue in the committer's
    # `ready` as they are decided, and the committer appends whatever is ready (one fsync),
    # answers those emitters, and hands them to publish-then-ack. A slow hook holds back its own event
    # only (and one of `concurrency` evaluation slots). At most `max_open` events are
    # between fetch and ack at once; fetching waits for room.

    async def _fetch_loop(
        self, sub: Puller, committer: asyncio.Task[None], watchdog: asyncio.Task[Unavailable]
    ) -> None:
        while not self.stopping.is_set() and not committer.done() and not watchdog.done():
            room = self.max_open - self._open
            if room <= 0:
                self._room.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._room.wait(), 0.5)
                continue
            msgs = await sub.fetch(min(self.batch, room), timeout=0.5)
            if msgs:
                self._moved()
            for msg in msgs:
                self._start(msg)
            await asyncio.sleep(0)  # let the committer take this fetch's ready outcomes

    def _start(self, msg: Delivered) -> None:
        """Admit one message and start its evaluation; an outcome known at once is ready.

        One event never stops the worker: a message that cannot be decoded, validated or
        evaluated becomes a ``rejected`` record (and is terminated, not redelivered).
        """
        self._open += 1
        admitted = self._admit(msg)
        if isinstance(admitted, Outcome):
            self._decided(msg, admitted.event, admitted)
            return
        ev, payload = admitted
        if ev.rejected is not None:  # refused by emit or serve: record, do not evaluate
            self._decided(msg, ev, self._record_only(ev, "rejected"))
            return
        if ev.fallback is not None and ev.fallback.notice:
            self._decided(msg, ev, self._record_only(ev, "fallback"))
            return
        try:
            started = self.engine.start(ev, self.eff, payload=payload)
        except Exception as exc:
            self._decided(msg, ev, self._rejected(msg, ev, f"evaluation failed: {one_line(exc)}"))
            return
        if isinstance(started, Outcome):
            self._decided(msg, ev, started)
            return
        task = asyncio.create_task(self._evaluate(msg, ev, started))
        self._evals.add(task)
        task.add_done_callback(self._evals.discard)

    def _decided(self, msg: Delivered, ev: HookEvent, outcome: Outcome) -> None:
        o = experienced(outcome)
        if not msg.get_header(REPLY_HEADER):  # nobody waits: the agent went on
            o = observed(o)
        committer = self.committer
        committer.ready.append((msg, ev, o))
        committer.ready_signal.set()

    async def _evaluate(
        self, msg: Delivered, ev: HookEvent, coro: Coroutine[Any, Any, Outcome]
    ) -> None:
        try:
            async with self.sem:
                task = asyncio.ensure_future(coro)
                # A hook may outlast the consumer's ack wait: tell JetStream we are on it,
                # so it does not redeliver the event to another worker meanwhile.
                while not (await asyncio.wait({task}, timeout=self.progress_every))[0]:
                    with contextlib.suppress(Exception):
                        await msg.in_progress()
                outcome = task.result()
        except Exception as exc:  # one event's failure is its own record, not the worker's
            outcome = self._rejected(msg, ev, f"evaluation failed: {one_line(exc)}")
        self._decided(msg, ev, outcome)

    def _release(self, n: int) -> None:
        self._open -= n
        self._room.set()
        self._moved()

    def _admit(self, msg: Delivered) -> Admitted:
        admitted = admit(
            msg.data, msg.subject, msg.lazy_headers(), self.data_dir, self.eff.settings_id
        )
        if isinstance(admitted, Outcome):
            self.stats.rejected += 1
        return admitted

    def _record_only(self, ev: HookEvent, by: Literal["rejected", "fallback"]) -> Outcome:
        if by == "rejected":
            self.stats.rejected += 1
        return record_only(ev, by, self.eff.settings_id)

    def _rejected(self, msg: Delivered, ev: HookEvent, why: str) -> Outcome:
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
