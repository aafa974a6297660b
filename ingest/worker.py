"""The worker: consume hook events, evaluate them, append outcomes, then ack and answer.

Rules of this file:
- Ack only **after** an event's outcome is durably appended (one fsync per commit).
  A crash before the ack re-delivers; the log drops the re-delivered duplicate by its
  idempotency key and the stored outcome is published and answered again.
- Each outcome is published on the outcomes stream and its PubAck awaited before the
  event is acked, so a SIEM forwarder reading that stream misses nothing.
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
  worker: the batch is held, one line says why, it is retried every second, and appending
  and acking resume (one line) once the disk takes it.
- SIGTERM finishes every event in hand and exits; SIGHUP reloads the settings.

Example:
    $ hookaudit worker --data-dir D --settings project:infra/policies/security.json
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
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
from engine.records import HookEvent, Outcome, Posture, Profile, encode_msgpack
from engine.run import Engine
from engine.sources import Effective, load_sources
from ingest.admit import Admitted, admit, experienced, observed, record_only, rejected
from ingest.log import LogWriter, idempotency_key
from ingest.log.anchors import Anchor, encode_anchor
from ingest.nats import ConnectOptions, Names, anchor_subject, outcome_subject, provision
from ingest.protocol import REPLY_HEADER, SIG_HEADER, Reply, reply_subject_ok
from ingest.puback import AckWaiter, Batch
from ingest.pull import Delivered, Puller, ack_many
from ingest.replysig import Signer
from ingest.siem.redact import Redactor, redact_outcome

__all__ = ["Worker", "WorkerStats"]

_log = logging.getLogger("hookaudit.worker")

# Events in hand that have not moved for this long mean a stalled connection (see _watch).
# Above the longest a healthy publish-and-ack takes (a PubAck wait of 10 s and a flush).
STALL_AFTER = 30.0
# How often a worker whose log cannot be written (disk full) tries the held batch again.
LOG_RETRY = 1.0
# The collector's first threshold while a worker runs (CPython's default is 700). Each
# event leaves a few thousand short-lived containers; at 700 the collector ran every ~20
# events and cost ~6 us of an event's ~50 us of CPU, at 10,000 it costs ~1 us
# (in-process worker over 20k events, gc callbacks timed).
GC_GEN0 = 10_000


class _Collector:
    """GC_GEN0 while any worker of this process runs; the threshold before it after the last."""

    running = 0
    before: tuple[int, int, int] = (700, 10, 10)

    @classmethod
    def enter(cls) -> None:
        if cls.running == 0:
            cls.before = gc.get_threshold()
            gc.set_threshold(GC_GEN0, *cls.before[1:])
        cls.running += 1

    @classmethod
    def leave(cls) -> None:
        cls.running -= 1
        if cls.running == 0:
            gc.set_threshold(*cls.before)


@dataclass
class WorkerStats:
    events: int = 0
    appended: int = 0
    duplicates: int = 0
    rejected: int = 0
    replies: int = 0
    batches: int = 0
    anchors: int = 0  # chain heads published (`ingest.log.anchors`)
    started: float = field(default_factory=time.time)


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
        self.pipeline = max(1, pipeline)
        self.log_key = log_key
        self.max_segment_bytes = max_segment_bytes
        self.max_segment_age = max_segment_age
        self.on_batch = on_batch
        self.signer = signer
        self.redactor = redactor  # --redact-log: secrets become HMAC tokens in what is stored
        self.max_open = max(1, batch) * (self.pipeline + 1)
        self.progress_every = 10.0  # s; well inside the consumer's ack wait (30 s)
        self._open = 0  # events fetched and not yet acked or terminated
        self._room = asyncio.Event()
        self._ready: list[tuple[Delivered, HookEvent, Outcome]] = []
        self._subjects: dict[tuple[str, str], str] = {}
        self._anchor_failing = False
        self._ready_signal = asyncio.Event()
        self._evals: set[asyncio.Task[None]] = set()
        self._publishing: set[asyncio.Task[None]] = set()
        self._closing = False
        self._progress = 0.0  # when events in hand last moved
        self._log_blocked = False  # the log cannot be written: holding, not acking
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
        _Collector.enter()
        try:
            return await self._run()
        finally:
            _Collector.leave()

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
            committer = asyncio.create_task(self._commit_loop(nc, acks))
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
                self._closing = True
                self._ready_signal.set()
                failure = (await asyncio.gather(committer, return_exceptions=True))[0]
                if self._publishing:
                    for f in await asyncio.gather(*self._publishing, return_exceptions=True):
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
            if waiting <= 0 or self._log_blocked:
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
        self._closing = True
        committer.cancel()
        for t in (*self._evals, *self._publishing):
            t.cancel()
        self._evals.clear()
        self._publishing.clear()
        self._ready.clear()

    def stop(self) -> None:
        self.stopping.set()

    # -- scheduling --------------------------------------------------------------------
    # An event's reply waits only for its own hooks and the fsync of the commit it joins:
    # the fetch loop starts every event as it arrives, outcomes queue in `_ready` as they
    # are decided, and the committer appends whatever is ready (one fsync), answers those
    # emitters, and hands them to publish-then-ack. A slow hook holds back its own event
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
        self._ready.append((msg, ev, o))
        self._ready_signal.set()

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

    async def _commit_loop(self, nc: Any, acks: AckWaiter) -> None:
        """The log's one user: seal when due, append what is ready, answer, publish."""
        assert self.writer is not None
        while True:
            if not self._ready:
                if self._closing:
                    return
                self._ready_signal.clear()
                try:
                    await asyncio.wait_for(self._ready_signal.wait(), 0.5)
                except TimeoutError:
                    if self.writer.seal_due():  # idle: seal an aged segment, off the loop
                        await asyncio.to_thread(self.writer.roll_if_due)
                continue
            if self.writer.seal_due():
                # Sealing takes seconds for 64 MiB: off the loop, which keeps evaluating.
                await asyncio.to_thread(self.writer.roll_if_due)
            items, self._ready = self._ready, []
            try:
                events, final = await self._append_when_writable(nc, items)
            except BaseException:
                self._release(len(items))  # not acked: JetStream redelivers them
                raise
            # Publishing outcomes and acking overlaps the next commit: these events are
            # durable, and they are acked only once JetStream has stored every outcome.
            anchor = Anchor(worker=self.writer.worker, seq=self.writer.last_seq,
                            head=self.writer.head)  # fmt: skip
            task = asyncio.create_task(self._publish_and_ack(nc, acks, events, final, anchor))
            self._publishing.add(task)
            task.add_done_callback(self._publishing.discard)
            if len(self._publishing) >= self.pipeline:
                done, _ = await asyncio.wait(self._publishing, return_when=asyncio.FIRST_COMPLETED)
                for t in done:
                    if t.exception() is not None:
                        # Nothing is lost: the outcomes are on disk and their events are
                        # not acked, so JetStream redelivers them; the log drops the
                        # duplicates and the outcomes are published again.
                        _log.error("publishing a batch failed: %s", t.exception())

    async def _append_when_writable(
        self, nc: Any, items: list[tuple[Delivered, HookEvent, Outcome]]
    ) -> tuple[list[tuple[Delivered, HookEvent]], list[Outcome]]:
        """`_append`, holding the batch while the log cannot be written (disk full,
        read-only, I/O error): nothing is acked or answered meanwhile, fetching stops once
        `max_open` events are in hand, one line says so, and the batch is tried again every
        LOG_RETRY s until it is written (one line again) or the worker is stopped."""
        since: float | None = None
        while True:
            try:
                out = await self._append(nc, items)
            except Unavailable as exc:
                if self.stopping.is_set():
                    raise
                if since is None:
                    since = time.monotonic()
                    self._log_blocked = True
                    _log.error(
                        "log not writable, holding %d events (none acked) and retrying "
                        "every %.0fs: %s",
                        self._open,
                        LOG_RETRY,
                        exc,
                    )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.stopping.wait(), LOG_RETRY)
                continue
            if since is not None:
                self._log_blocked = False
                self._moved()
                _log.warning(
                    "log writable again after %.0fs: appending and acking resumed",
                    time.monotonic() - since,
                )
            return out

    async def _append(
        self, nc: Any, items: list[tuple[Delivered, HookEvent, Outcome]]
    ) -> tuple[list[tuple[Delivered, HookEvent]], list[Outcome]]:
        """Durably append decided events (one fsync); answer their waiting emitters."""
        assert self.writer is not None
        events = [(msg, ev) for msg, ev, _ in items]
        ready = [o for _, _, o in items]
        if self.redactor is not None:  # the log (and HOOK_OUTCOMES) keep the redacted copy
            plain = {idempotency_key(o.event.id, o.settings_id, o.replay_id): o for o in ready}
            ready = [redact_outcome(o, self.redactor) for o in ready]
        # Chaining, writing and the fsync run in a thread: the loop goes on fetching,
        # evaluating and publishing meanwhile, and what is decided during one fsync joins
        # the next commit (group commit). On a shared disk an fsync can take 30 ms and more;
        # on the loop it stopped everything for as long. The committer is the writer's one
        # user, so nothing else touches it meanwhile.
        stored = await asyncio.to_thread(self.writer.append_batch, ready, roll=False)
        by_key = {idempotency_key(o.event.id, o.settings_id, o.replay_id): o for o in stored}
        keys = [idempotency_key(o.event.id, o.settings_id, o.replay_id) for o in ready]
        dups = [k for k in keys if k not in by_key]
        if dups:
            # Re-delivered events (acks lost in a reconnect or a leader change): answer with
            # what was decided the first time. One scan per segment for the whole batch,
            # off the loop: a scan per event on the loop blocked it for minutes on a big
            # segment, past the ack wait, so the same events came back again and again.
            self.stats.duplicates += len(dups)
            by_key.update(await asyncio.to_thread(self.writer.lookup_many, dups))
        final = [by_key.get(k, o) for k, o in zip(keys, ready, strict=True)]
        # Durable now: a waiting agent may act on its decision.
        for (msg, ev), o, k in zip(events, final, keys, strict=True):
            reply = msg.get_header(REPLY_HEADER)
            if reply and self.redactor is not None and k not in dups:
                o = plain[k]  # the agent acts on the real answer (an updated input, say)
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
        acks: AckWaiter,
        events: list[tuple[Delivered, HookEvent]],
        final: list[Outcome],
        anchor: Anchor | None = None,
    ) -> None:
        anchoring: Batch | None = None
        try:
            subject = self._outcome_subject
            batch = await acks.publish_many(
                [
                    (
                        subject(o.event.event, o.decision or "none"),
                        encode_msgpack(o),
                        idempotency_key(o.event.id, o.settings_id, o.replay_id),
                    )
                    for o in final
                ]
            )
            if anchor is not None and anchor.seq > 0:
                # Sent with the outcomes, so its PubAck comes with theirs; awaited after
                # the acks, since an anchor is best effort and holds no event back.
                anchoring = await self._anchor_publish(acks, anchor)
            await acks.wait_batch(batch, timeout=10.0)
            done: list[Delivered] = []
            terminated: list[Delivered] = []  # recorded: never redeliver what cannot be used
            for (msg, _), o in zip(events, final, strict=True):
                r = o.event.rejected
                if o.decided_by == "rejected" and r is not None and r.stage == "worker":
                    terminated.append(msg)
                else:
                    done.append(msg)
            await ack_many(nc, done)  # one write for the batch's acks
            await ack_many(nc, terminated, b"+TERM")
        except BaseException:
            if anchoring is not None:
                acks.forget(anchoring)
            raise
        finally:
            self._release(len(events))  # the acks are written: room for the next fetch
        await nc.flush()  # the server has the acks
        if anchor is not None and anchoring is not None:
            await self._anchor_wait(acks, anchor, anchoring)
        self.stats.events += len(events)
        self.stats.batches += 1
        if self.on_batch is not None:
            self.on_batch(self.stats)

    # Chain heads after each batch (`ingest.log.anchors`). Best effort: the events are
    # acked already, and a head not anchored only leaves `verify --anchors` less to
    # compare; a failure is logged once until anchoring works again.

    async def _anchor_publish(self, acks: AckWaiter, anchor: Anchor) -> Batch | None:
        subject = anchor_subject(self.names, anchor.worker)
        msg_id = f"anchor:{anchor.worker}:{anchor.seq}:{anchor.head[:16]}"
        try:
            return await acks.publish_many([(subject, encode_anchor(anchor), msg_id)])
        except Exception as exc:
            self._anchor_failed(anchor, exc)
            return None

    async def _anchor_wait(self, acks: AckWaiter, anchor: Anchor, batch: Batch) -> None:
        try:
            await acks.wait_batch(batch, timeout=10.0)
        except Exception as exc:
            self._anchor_failed(anchor, exc)
        else:
            if self._anchor_failing:
                _log.warning("chain heads anchored again (seq %d)", anchor.seq)
            self._anchor_failing = False
            self.stats.anchors += 1

    def _anchor_failed(self, anchor: Anchor, exc: Exception) -> None:
        if not self._anchor_failing:
            subject = anchor_subject(self.names, anchor.worker)
            _log.warning("chain head not anchored on %s (seq %d): %s", subject, anchor.seq, exc)
        self._anchor_failing = True

    def _outcome_subject(self, event: str, decision: str) -> str:
        """`outcome_subject`, remembered: a few event names and decisions make them all."""
        key = (event, decision)
        subject = self._subjects.get(key)
        if subject is None:
            if len(self._subjects) >= 1024:  # names an agent made up: keep it bounded
                self._subjects.clear()
            subject = self._subjects[key] = outcome_subject(self.names, event, decision)
        return subject

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
