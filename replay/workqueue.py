"""Replay jobs in processes on several machines, taking segments from a JetStream work queue.

The same protocol as `replay.jobs` runs between forked processes (segments handed out
one at a time, each job's first change per session, the earliest of all sent back, each
job's settled result merged), carried by NATS instead of pipes, and made to survive a job
that dies:

    coordinator (`hookaudit replay … --distribute`)        jobs (`hookaudit replay-join`)
    stream HOOK_REPLAY (work-queue retention, shared by every replay), consumer
    REPLAY_<id> on hookaudit.replay.<id>.segs (ack wait, max deliver):
      one message per work item (a segment or half of one), largest first
                                                   <- a job pulls items and holds them
                                                      (unacked, kept alive by
                                                      in-progress acks) until its result
                                                      is accepted
    hookaudit.replay.<id>.join     -> a part number, the Request, the copies to skip
    hookaudit.replay.<id>.firsts   <- a part's items and first change per session
                                   -> the earliest of all once every item has been
                                      reported by some part; "wait" before; "closed" after
    hookaudit.replay.<id>.result   <- a part's settled JobResult
                                   -> accepted (ack the items) or refused (ack the items
                                      another part's accepted result covers, nak the rest)
    hookaudit.replay.<id>.alive    <- every ack_wait/3: a job's progress counter

Rules of this file:
- A *part* is one `replay.runner.Job` over the items one job process pulled in a row; a
  process runs a new part whenever it finds more work. Which items a part reads is
  decided by the queue alone; the merged result and its digest do not depend on how many
  processes or parts there are (the same merge, `replay.jobs._merge`).
- Counted once: the coordinator accepts a part's result only if none of its items is
  covered by a result already accepted, and the replay is done when the accepted items are
  every item. A job acks an item only once a result covering it is accepted, so an item
  of a job that dies (SIGKILL, lost machine) is delivered again after the consumer's ack
  wait, to whichever job pulls next (the survivor, or one started later). A part's
  `firsts` stay valid when the part dies (they are a function of its items), so the
  earliest can be given out before every result is in.
- An item delivered `max_deliver` times without a result (every job that took it died)
  fails the replay with a line naming its segment (JetStream's max-deliveries advisory).
- The coordinator fails after `timeout` seconds without progress (a join, a report, a
  result, or a job's progress counter moving), naming what it waits for: a job that holds
  items but hangs while its process lives does not hold the replay forever.
- Messages are msgpack of plain data (`Request`, `JobResult`): never pickle, since anyone
  who can publish on those subjects would otherwise run code in the coordinator.
- A job resolves a segment by its name in its own view of the log (`segments` of its
  data dir: the same files, a shared mount, or shipped segments in object storage); one
  it cannot find is an error, never a silently smaller replay.
- Every NATS call has a timeout; the replay's consumer is deleted and its subject purged
  when the coordinator finishes (the stream stays, for the next replay). A coordinator
  that is killed leaves them: the consumer goes after twice `timeout` idle (at least an
  hour), its work items after 7 days (the stream's max age; no replay may run longer).
- Least privilege: the coordinator needs the ``replay`` role, the jobs ``replay-join``
  (`ingest.nats.auth`).

Example:
    >>> consumer_name("0190c3a2-7b1e-7c3d-9f00-123456789abc")
    'REPLAY_0190c3a27b1e7c3d9f00123456789abc'
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec

from engine.errors import Unavailable
from ingest.log.layout import Segment, segments
from replay.parts import SegmentQueue, duplicates
from replay.request import JobResult, Request
from replay.select import Piece
from replay.tally import earliest

__all__ = ["STREAM", "Coordinator", "consumer_name", "refused", "subject"]

Connect = Callable[[], Awaitable[Any]]  # returns a connected nats.aio.client.Client
STREAM = "HOOK_REPLAY"  # ingest.nats.auth.REPLAY_STREAM: the roles name it
_ALL_SEGS = "hookaudit.replay.*.segs"  # the stream's subjects: every replay's work
# What a coordinator that was killed leaves: its consumer goes once idle (inactive
# threshold), its unfinished work once this old (the stream's max age).
_LEFTOVERS = 7 * 86400.0
_STREAM_NAME_IN_USE = 10058  # JetStream's err_code: a stream of that name, other settings


def _dec_hook(t: Any, obj: Any) -> Any:
    if t is Counter or getattr(t, "__origin__", None) is Counter:
        return Counter(obj)
    raise NotImplementedError(f"cannot decode {t}")


class Work(msgspec.Struct, array_like=True):
    item: int
    name: str
    lo: int = 0  # rows [lo, hi) of a Piece; 0, 0 for the whole segment
    hi: int = 0

    def label(self) -> str:
        return f"{self.name} rows {self.lo}-{self.hi - 1}" if self.hi else self.name


class Joined(msgspec.Struct):
    part: int
    request: Request | None  # None: the replay is closed
    skip: dict[str, frozenset[int]]


class Firsts(msgspec.Struct):
    part: int  # -1: only asking how the replay stands
    items: list[int]
    firsts: dict[str, tuple[int, str]]


class Answer(msgspec.Struct):
    closed: bool = False
    earliest: dict[str, tuple[int, str]] | None = None  # None: not every item reported yet


class Result(msgspec.Struct):
    part: int
    result: JobResult


class Verdict(msgspec.Struct):
    accepted: bool
    covered: list[int]  # items of the part that an accepted result covers: ack these


class Alive(msgspec.Struct, array_like=True):
    token: str
    read: int


enc = msgspec.msgpack.Encoder()
work_dec = msgspec.msgpack.Decoder(Work)
joined_dec = msgspec.msgpack.Decoder(Joined, dec_hook=_dec_hook)
firsts_dec = msgspec.msgpack.Decoder(Firsts)
answer_dec = msgspec.msgpack.Decoder(Answer)
result_dec = msgspec.msgpack.Decoder(Result, dec_hook=_dec_hook)
verdict_dec = msgspec.msgpack.Decoder(Verdict)
alive_dec = msgspec.msgpack.Decoder(Alive)


def consumer_name(replay_id: str) -> str:
    """The replay's consumer on `STREAM`: ``REPLAY_`` and the id without its dashes."""
    return "REPLAY_" + "".join(c for c in replay_id if c.isalnum())


def subject(replay_id: str, what: str) -> str:
    """``hookaudit.replay.<id>.<what>`` (the id without its dashes, as in the consumer name)."""
    return f"hookaudit.replay.{consumer_name(replay_id)[7:]}.{what}"


def refused(nc: Any, what: str, role: str) -> None:
    """Raise `Unavailable` if NATS refused this client a subject: a key of another role.

    Example:
        >>> refused(None, "a replay job", "replay-join")
    """
    err = getattr(nc, "last_error", None)
    if err is not None and "permissions violation" in str(err).lower():
        why = str(err).removeprefix("nats: ")
        raise Unavailable(f"NATS refused {what}: {why} (it needs the {role} role's key)")


def _why(exc: Exception) -> str:
    """What JetStream said (an APIError's description), else the exception itself."""
    return str(getattr(exc, "description", None) or exc or type(exc).__name__)


def _work(k: int, item: Segment | Piece) -> Work:
    if isinstance(item, Piece):
        return Work(k, item.segment.name, item.lo, item.hi)
    return Work(k, item.name)


class Coordinator:
    """Hands a replay's segments to the jobs that join it and merges what they send back.

    `run(req, keep)` is what `replay.jobs` calls in place of forking `--jobs` processes;
    `on_event(text)` hears joins and reports (for progress lines). `ack_wait`: seconds a
    job may stay silent before its items go to another job; `max_deliver`: deliveries of
    an item before the replay fails; `timeout`: seconds without progress before it fails.
    """

    def __init__(
        self,
        connect: Connect,
        *,
        timeout: float = 600.0,
        ack_wait: float = 30.0,
        max_deliver: int = 5,
        pieces_for: int = 2,
        on_event: Callable[[str], None] | None = None,
    ) -> None:
        if timeout <= ack_wait:
            raise ValueError(f"the job timeout ({timeout:g} s) must exceed the ack wait "
                             f"({ack_wait:g} s): a dead job's items come back after it")  # fmt: skip
        self.connect = connect
        self.timeout = timeout
        self.ack_wait = ack_wait
        self.max_deliver = max_deliver
        self.pieces_for = pieces_for  # how many jobs the last segments are halved for
        self.on_event = on_event or (lambda _m: None)
        self.jobs = 0  # how many parts ran, once `run` returns
        self.accepted = 0  # how many parts' results were merged

    def run(self, req: Request, keep: int) -> JobResult:
        return asyncio.run(self._run(req, keep))

    async def _run(self, req: Request, keep: int) -> JobResult:
        from nats.js.api import (
            AckPolicy,
            ConsumerConfig,
            RetentionPolicy,
            StorageType,
            StreamConfig,
        )

        rid = req.replay_id
        segs = segments(req.data_dir)
        work = [_work(k, s) for k, s in enumerate(SegmentQueue(segs, jobs=self.pieces_for).segs)]
        skip = duplicates(segs)
        nc = await self.connect()
        js = nc.jetstream(timeout=10)
        name = consumer_name(rid)
        segs_subject = subject(rid, "segs")
        try:
            await _create_stream(js, StreamConfig(name=STREAM, subjects=[_ALL_SEGS],
                                                  retention=RetentionPolicy.WORK_QUEUE,
                                                  storage=StorageType.FILE,
                                                  max_age=_LEFTOVERS))  # fmt: skip
        except Exception as exc:
            try:
                refused(nc, "the coordinator", "replay")
                raise Unavailable(f"cannot create the work queue {STREAM}: {_why(exc)}") from exc
            finally:
                await nc.close()
        try:
            try:
                await js.add_consumer(STREAM, ConsumerConfig(
                    durable_name=name, filter_subject=segs_subject,
                    ack_policy=AckPolicy.EXPLICIT, ack_wait=self.ack_wait,
                    max_deliver=self.max_deliver, max_ack_pending=-1,
                    inactive_threshold=max(2 * self.timeout, 3600.0)))  # fmt: skip
                by_seq: dict[int, Work] = {}
                for w in work:
                    ack = await js.publish(segs_subject, enc.encode(w), stream=STREAM)
                    by_seq[ack.seq] = w
            except Exception as exc:
                refused(nc, "the coordinator", "replay")
                raise Unavailable(f"cannot queue the segments for {name}: {_why(exc)}") from exc
            return await self._serve(nc, req, keep, by_seq, skip)
        finally:
            # Best effort: a finished replay left nothing (every item acked), and a cleanup
            # refused or timed out must not hide its result (their leftovers go by themselves).
            with contextlib.suppress(Exception):  # none if add_consumer failed
                await js.delete_consumer(STREAM, name)
            with contextlib.suppress(Exception):
                await js.purge_stream(STREAM, subject=segs_subject)
            await nc.close()

    async def _serve(
        self,
        nc: Any,
        req: Request,
        keep: int,
        by_seq: dict[int, Work],
        skip: dict[str, frozenset[int]],
    ) -> JobResult:
        from replay.jobs import _merge

        rid = req.replay_id
        every = {w.item for w in by_seq.values()}
        parts = 0
        reported: dict[int, Firsts] = {}
        told: set[int] = set()  # items some part reported firsts for
        done: set[int] = set()  # items an accepted result covers
        results: dict[int, JobResult] = {}
        alive: dict[str, int] = {}
        known: dict[str, tuple[int, str]] | None = None
        failure: list[str] = []
        progress = asyncio.Event()
        last = time.monotonic()

        def moved() -> None:
            nonlocal last
            last = time.monotonic()
            progress.set()

        def closed() -> bool:
            return done >= every or bool(failure)

        async def on_join(msg: Any) -> None:
            nonlocal parts
            if closed():
                await msg.respond(enc.encode(Joined(part=-1, request=None, skip={})))
                return
            part, parts = parts, parts + 1
            self.on_event(f"job {part} joined")
            moved()
            await msg.respond(enc.encode(Joined(part=part, request=req, skip=skip)))

        async def on_firsts(msg: Any) -> None:
            nonlocal known
            f = firsts_dec.decode(msg.data)
            if 0 <= f.part < parts and f.part not in reported and set(f.items) <= every:
                reported[f.part] = f
                told.update(f.items)
                self.on_event(f"job {f.part} read {len(f.items)} segment(s)")
                moved()
            if known is None and told >= every:
                known = earliest([r.firsts for r in reported.values()])
            await msg.respond(enc.encode(Answer(closed=closed(), earliest=known)))

        async def on_result(msg: Any) -> None:
            r = result_dec.decode(msg.data)
            f = reported.get(r.part)
            items = set(f.items) if f is not None else set()
            if r.part in results:  # the same result again (its answer was lost)
                verdict = Verdict(True, sorted(items))
            elif f is None or closed() or items & done:
                verdict = Verdict(False, sorted(items & done))
                self.on_event(f"job {r.part}: result refused ({len(items & done)} of its "
                              f"{len(items)} item(s) counted already)")  # fmt: skip
            else:
                results[r.part] = r.result
                done.update(items)
                verdict = Verdict(True, sorted(items))
                moved()
            await msg.respond(enc.encode(verdict))

        async def on_alive(msg: Any) -> None:
            a = alive_dec.decode(msg.data)
            if alive.get(a.token) != a.read:
                alive[a.token] = a.read
                moved()

        async def on_max_deliveries(msg: Any) -> None:
            with contextlib.suppress(ValueError, KeyError, TypeError):
                advisory = json.loads(msg.data)
                w = by_seq.get(int(advisory["stream_seq"]))
                if w is not None and w.item not in done:
                    failure.append(
                        f"segment {w.label()} was delivered {advisory['deliveries']} times "
                        "and no job finished it (each job that took it died or gave it back)"
                    )
                    progress.set()

        advisory = f"$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.{STREAM}.{consumer_name(rid)}"
        subs = [
            await nc.subscribe(subject(rid, "join"), cb=on_join),
            await nc.subscribe(subject(rid, "firsts"), cb=on_firsts),
            await nc.subscribe(subject(rid, "result"), cb=on_result),
            await nc.subscribe(subject(rid, "alive"), cb=on_alive),
            await nc.subscribe(advisory, cb=on_max_deliveries),
        ]
        self.on_event(f"{len(every)} segment(s) queued for {consumer_name(rid)} on {STREAM}")
        try:
            while not closed():
                if time.monotonic() - last > self.timeout:
                    waiting = sorted(set(reported) - set(results)) or "none reported"
                    raise TimeoutError(
                        f"replay jobs made no progress for {self.timeout:.0f} s "
                        f"({len(done)} of {len(every)} segment(s) done; waiting for "
                        f"job(s) {waiting})"
                    )
                progress.clear()
                await _wait(progress, 1.0)
            if failure:
                raise Unavailable(failure[0])
        finally:
            for sub in subs:
                with contextlib.suppress(Exception):
                    await sub.unsubscribe()
        self.jobs, self.accepted = parts, len(results)
        merged = _merge([results[p] for p in sorted(results)])
        merged.summary.finish(keep)
        return merged


async def _create_stream(js: Any, config: Any) -> None:
    """Create `STREAM`; one that exists with other settings (an operator's: replicas, limits)
    is used as it is."""
    from nats.js.errors import BadRequestError

    try:
        await js.add_stream(config)
    except BadRequestError as exc:
        if exc.err_code != _STREAM_NAME_IN_USE:
            raise


async def _wait(event: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), seconds)
