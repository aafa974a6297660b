"""The committer: the log's one user. Appends what is decided, answers, publishes, acks.

Rules of this file:
- The worker hands decided events over in `ready` (and sets `ready_signal`); each commit
  takes everything ready so far, appends it in one batch (one fsync, in a thread), and only
  then answers the waiting emitters with a signed `Reply`: nobody acts on a decision that is
  not on disk.
- Every outcome is published on the outcomes stream and its PubAck awaited before its event
  is acked; a batch's publish-and-ack overlaps the next commit (at most `pipeline` at once).
  Events the worker rejected are terminated (``+TERM``), never redelivered.
- A log that cannot be written holds the batch (nothing acked or answered), says so in one
  line, retries every LOG_RETRY s, and says so again when it is written.
- After each batch the chain head is anchored (`ingest.log.anchors`), best effort.
- The fetch side's bookkeeping stays the worker's: it is told through `release` (events
  acked or dropped), `moved` (progress, for the stall watchdog) and asks `in_hand`.

Example (the worker builds one and runs it next to its fetch loop):
    committer = Committer(names=names, stats=stats, stopping=stopping, ...)
    task = asyncio.create_task(committer.run(writer, nc, acks))
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from engine.errors import Unavailable
from engine.records import HookEvent, Outcome, encode_msgpack
from ingest.log.anchors import Anchor, encode_anchor
from ingest.log.lines import idempotency_key
from ingest.log.writer import LogWriter
from ingest.nats.puback import AckWaiter, Batch
from ingest.nats.pull import Delivered, ack_many
from ingest.nats.streams import Names, anchor_subject, outcome_subject
from ingest.protocol import PEER_HEADER, REPLY_HEADER, Reply, reply_subject_ok
from ingest.redact import Redactor, redact_outcome
from ingest.replysig import Signer

__all__ = ["LOG_RETRY", "Committer", "WorkerStats"]

_log = logging.getLogger("hookaudit.worker")

# How often a worker whose log cannot be written (disk full) tries the held batch again.
LOG_RETRY = 1.0


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


class Committer:
    """Appends, answers, publishes and acks the events a worker decided (see the rules)."""

    def __init__(
        self,
        *,
        names: Names,
        stats: WorkerStats,
        stopping: asyncio.Event,
        release: Callable[[int], None],
        moved: Callable[[], None],
        in_hand: Callable[[], int],
        pipeline: int = 3,
        signer: Signer | None = None,
        redactor: Redactor | None = None,
        on_batch: Callable[[WorkerStats], None] | None = None,
    ) -> None:
        self.names = names
        self.stats = stats
        self.stopping = stopping
        self.release = release
        self.moved = moved
        self.in_hand = in_hand
        self.pipeline = max(1, pipeline)
        self.signer = signer
        self.redactor = redactor  # --redact-log: secrets become HMAC tokens in what is stored
        self.on_batch = on_batch
        self.writer: LogWriter | None = None
        self.ready: list[tuple[Delivered, HookEvent, Outcome]] = []
        self.ready_signal = asyncio.Event()
        self.closing = False  # nothing more will be ready: return once `ready` is empty
        self.publishing: set[asyncio.Task[None]] = set()
        self.log_blocked = False  # the log cannot be written: holding, not acking
        self._subjects: dict[tuple[str, str], str] = {}
        self._anchor_failing = False

    async def run(self, writer: LogWriter, nc: Any, acks: AckWaiter) -> None:
        """Until closed: seal when due, append what is ready, answer, publish and ack."""
        self.writer = writer
        while True:
            if not self.ready:
                if self.closing:
                    return
                self.ready_signal.clear()
                try:
                    await asyncio.wait_for(self.ready_signal.wait(), 0.5)
                except TimeoutError:
                    if self.writer.seal_due():  # idle: seal an aged segment, off the loop
                        await asyncio.to_thread(self.writer.roll_if_due)
                continue
            if self.writer.seal_due():
                # Sealing takes seconds for 64 MiB: off the loop, which keeps evaluating.
                await asyncio.to_thread(self.writer.roll_if_due)
            items, self.ready = self.ready, []
            try:
                events, final = await self._append_when_writable(nc, items)
            except BaseException:
                self.release(len(items))  # not acked: JetStream redelivers them
                raise
            # Publishing outcomes and acking overlaps the next commit: these events are
            # durable, and they are acked only once JetStream has stored every outcome.
            anchor = Anchor(worker=self.writer.worker, seq=self.writer.last_seq,
                            head=self.writer.head)  # fmt: skip
            task = asyncio.create_task(self._publish_and_ack(nc, acks, events, final, anchor))
            self.publishing.add(task)
            task.add_done_callback(self.publishing.discard)
            if len(self.publishing) >= self.pipeline:
                done, _ = await asyncio.wait(self.publishing, return_when=asyncio.FIRST_COMPLETED)
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
                    self.log_blocked = True
                    _log.error(
                        "log not writable, holding %d events (none acked) and retrying "
                        "every %.0fs: %s",
                        self.in_hand(),
                        LOG_RETRY,
                        exc,
                    )
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.stopping.wait(), LOG_RETRY)
                continue
            if since is not None:
                self.log_blocked = False
                self.moved()
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
                await self._answer(nc, reply, answer, msg.get_header(PEER_HEADER))
        self.stats.appended += len(stored)
        return events, final

    async def _answer(self, nc: Any, subject: str, reply: Reply, peer: str | None) -> None:
        """Publish a signed (or, for a `peer` key, keyed) Reply to the emitter's inbox
        (and nowhere else)."""
        if not reply_subject_ok(subject):
            _log.warning("event %s: reply subject %.80r refused", reply.event_id, subject)
            return
        data = encode_msgpack(reply)
        headers = None if self.signer is None else self.signer.reply_headers(data, peer)
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
            self.release(len(events))  # the acks are written: room for the next fetch
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
