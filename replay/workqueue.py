"""Replay jobs in processes on several machines, taking segments from a JetStream work queue.

The same protocol as `replay.jobs` runs between forked processes (segments handed out
one at a time, each job's first change per session, the earliest of all sent back, each
job's settled result merged), carried by NATS instead of pipes:

    coordinator (`hookaudit replay … --distribute`)        jobs (`hookaudit replay join`)
    stream REPLAY_<id>, work-queue retention:
      one message per segment (or half segment), largest first  <- each job pulls the next
    hookaudit.replay.<id>.join     -> part number, the Request, the copies to skip
    hookaudit.replay.<id>.firsts   <- segments taken + first change per session
                                   -> (once every job that joined has reported and every
                                       segment is taken) the earliest of all
    hookaudit.replay.<id>.result   <- the job's settled JobResult; merged, then stored

Rules of this file:
- Which segments a job reads is decided by the queue alone; the merged result and its
  digest do not depend on how many jobs there are (the same merge, `replay.jobs._merge`).
- Messages are msgpack of plain data (`Request`, `JobResult`): never pickle, since anyone
  who can publish on those subjects would otherwise run code in the coordinator.
- A job resolves a segment by its name in its own view of the log (`segments` of its
  data dir: the same files, a shared mount, or shipped segments in object storage); one
  it cannot find is an error, never a silently smaller replay.
- A job that joined and then stops answering fails the replay after `timeout` seconds
  without progress (named by its part number); a job that joins once the last segment
  has been taken and the earliest firsts sent is told the replay is closed.
- Every NATS call has a timeout; the stream is deleted when the coordinator finishes.

Example:
    >>> stream_name("0190c3a2-7b1e-7c3d-9f00-123456789abc")
    'REPLAY_0190c3a27b1e7c3d9f00123456789abc'
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import Future
from typing import Any

import msgspec

from ingest.log import Segment, segments
from replay.parts import SegmentQueue, duplicates
from replay.request import JobResult, Request
from replay.select import Piece
from replay.tally import earliest, firsts

__all__ = ["Coordinator", "join", "stream_name"]

Connect = Callable[[], Awaitable[Any]]  # returns a connected nats.aio.client.Client


def _dec_hook(t: Any, obj: Any) -> Any:
    if t is Counter or getattr(t, "__origin__", None) is Counter:
        return Counter(obj)
    raise NotImplementedError(f"cannot decode {t}")


class _Work(msgspec.Struct, array_like=True):
    name: str
    lo: int = 0  # rows [lo, hi) of a Piece; 0, 0 for the whole segment
    hi: int = 0


class _Joined(msgspec.Struct):
    part: int
    request: Request | None  # None: the replay is closed
    skip: dict[str, frozenset[int]]


class _Firsts(msgspec.Struct):
    part: int
    taken: int
    firsts: dict[str, tuple[int, str]]


class _Result(msgspec.Struct):
    part: int
    result: JobResult


_enc = msgspec.msgpack.Encoder()
_work_dec = msgspec.msgpack.Decoder(_Work)
_joined_dec = msgspec.msgpack.Decoder(_Joined, dec_hook=_dec_hook)
_firsts_dec = msgspec.msgpack.Decoder(_Firsts)
_result_dec = msgspec.msgpack.Decoder(_Result, dec_hook=_dec_hook)
_earliest_dec = msgspec.msgpack.Decoder(dict[str, tuple[int, str]])


def stream_name(replay_id: str) -> str:
    return "REPLAY_" + "".join(c for c in replay_id if c.isalnum())


def _subject(replay_id: str, what: str) -> str:
    return f"hookaudit.replay.{stream_name(replay_id)[7:]}.{what}"


def _work(item: Segment | Piece) -> _Work:
    if isinstance(item, Piece):
        return _Work(item.segment.name, item.lo, item.hi)
    return _Work(item.name)


class Coordinator:
    """Hands a replay's segments to the jobs that join it and merges what they send back.

    `run(req, keep)` is what `replay.jobs` calls in place of forking `--jobs` processes;
    `on_event(text)` hears joins and reports (for progress lines).
    """

    def __init__(
        self,
        connect: Connect,
        *,
        timeout: float = 600.0,
        pieces_for: int = 2,
        on_event: Callable[[str], None] | None = None,
    ) -> None:
        self.connect = connect
        self.timeout = timeout
        self.pieces_for = pieces_for  # how many jobs the last segments are halved for
        self.on_event = on_event or (lambda _m: None)
        self.jobs = 0  # how many joined, once `run` returns

    def run(self, req: Request, keep: int) -> JobResult:
        return asyncio.run(self._run(req, keep))

    async def _run(self, req: Request, keep: int) -> JobResult:
        from nats.js.api import RetentionPolicy, StorageType, StreamConfig

        from replay.jobs import _merge

        rid = req.replay_id
        segs = segments(req.data_dir)
        work = [_work(s) for s in SegmentQueue(segs, jobs=self.pieces_for).segs]
        skip = duplicates(segs)
        nc = await self.connect()
        js = nc.jetstream(timeout=10)
        name = stream_name(rid)
        subject = _subject(rid, "segs")
        await js.add_stream(StreamConfig(name=name, subjects=[subject],
                                         retention=RetentionPolicy.WORK_QUEUE,
                                         storage=StorageType.FILE))  # fmt: skip
        try:
            for w in work:
                await js.publish(subject, _enc.encode(w), stream=name)
            return await self._serve(nc, req, keep, len(work), skip, _merge)
        finally:
            try:
                await js.delete_stream(name)
            finally:
                await nc.close()

    async def _serve(
        self,
        nc: Any,
        req: Request,
        keep: int,
        total: int,
        skip: dict[str, frozenset[int]],
        merge: Callable[[list[JobResult]], JobResult],
    ) -> JobResult:
        rid = req.replay_id
        joined: list[int] = []
        reported: dict[int, _Firsts] = {}
        waiting: list[str] = []  # reply subjects of firsts not yet answered
        results: dict[int, JobResult] = {}
        closed = False
        progress = asyncio.Event()
        last = time.monotonic()

        async def on_join(msg: Any) -> None:
            nonlocal last
            if closed:
                await msg.respond(_enc.encode(_Joined(part=-1, request=None, skip={})))
                return
            part = len(joined)
            joined.append(part)
            last = time.monotonic()
            self.on_event(f"job {part} joined")
            await msg.respond(_enc.encode(_Joined(part=part, request=req, skip=skip)))

        async def on_firsts(msg: Any) -> None:
            nonlocal last
            f = _firsts_dec.decode(msg.data)
            if f.part not in joined or f.part in reported:
                return
            reported[f.part] = f
            waiting.append(msg.reply)
            last = time.monotonic()
            self.on_event(f"job {f.part} read {f.taken} segment(s)")
            progress.set()

        async def on_result(msg: Any) -> None:
            nonlocal last
            r = _result_dec.decode(msg.data)
            if r.part in reported and r.part not in results:
                results[r.part] = r.result
                last = time.monotonic()
                await msg.respond(b"ok")
                progress.set()

        subs = [
            await nc.subscribe(_subject(rid, "join"), cb=on_join),
            await nc.subscribe(_subject(rid, "firsts"), cb=on_firsts),
            await nc.subscribe(_subject(rid, "result"), cb=on_result),
        ]
        self.on_event(f"{total} segment(s) queued on {stream_name(rid)}")
        try:

            def stalled() -> None:
                if time.monotonic() - last > self.timeout:
                    silent = sorted(set(joined) - set(results)) or "none joined"
                    raise TimeoutError(f"replay jobs made no progress for {self.timeout:.0f} s "
                                       f"(waiting for job(s) {silent})")  # fmt: skip

            while not (joined and len(reported) == len(joined)
                       and sum(f.taken for f in reported.values()) == total):  # fmt: skip
                stalled()
                progress.clear()
                await _wait(progress, 1.0)
            closed = True
            every = _enc.encode(earliest([f.firsts for f in reported.values()]))
            for reply in waiting:
                await nc.publish(reply, every)
            while len(results) < len(joined):
                stalled()
                progress.clear()
                await _wait(progress, 1.0)
        finally:
            for sub in subs:
                await sub.unsubscribe()
        self.jobs = len(joined)
        merged = merge([results[p] for p in sorted(results)])
        merged.summary.finish(keep)
        return merged


async def _wait(event: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), seconds)


class _Bridge:
    """A NATS client on its own event loop in a thread: the job's loop calls it by `call`."""

    def __init__(self, connect: Connect) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.nc = self.call(connect())

    def call(self, coro: Awaitable[Any], timeout: float = 60.0) -> Any:
        fut: Future[Any] = asyncio.run_coroutine_threadsafe(_as_coro(coro), self.loop)
        return fut.result(timeout)

    def close(self) -> None:
        try:
            self.call(self.nc.close(), 10)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)


async def _as_coro(aw: Awaitable[Any]) -> Any:
    return await aw


def join(
    connect: Connect,
    replay_id: str,
    *,
    data_dir: str | None = None,
    timeout: float = 600.0,
    keep: int = 1000,
) -> int:
    """Join a distributed replay as one job: take segments until none is left, report,
    send the settled result. Returns how many segments this job read (-1: replay closed).

    `data_dir` is where this machine sees the log (default: the coordinator's path).
    """
    from replay.runner import Job

    bridge = _Bridge(connect)
    try:
        nc = bridge.nc
        joined = _joined_dec.decode(bridge.call(_join(nc, replay_id, timeout), timeout + 10).data)
        if joined.request is None:
            return -1
        req = joined.request
        if data_dir is not None:
            req = _with_data_dir(req, data_dir)
        named = {s.name: s for s in segments(req.data_dir)}
        js = nc.jetstream(timeout=10)
        name = stream_name(replay_id)
        psub = bridge.call(js.pull_subscribe(_subject(replay_id, "segs"), durable="jobs",
                                             stream=name))  # fmt: skip
        taken = 0

        def mine() -> Iterator[Segment | Piece]:
            nonlocal taken
            while True:
                msgs = bridge.call(_next(psub, js, name))
                if msgs is None:
                    return
                w = _work_dec.decode(msgs.data)
                bridge.call(msgs.ack())
                seg = named.get(w.name)
                if seg is None:
                    raise FileNotFoundError(f"{w.name}: not in this job's log at {req.data_dir}")
                taken += 1
                yield Piece(seg, w.lo, w.hi) if w.hi else seg

        job = Job(req, joined.part, segs=mine(), skip=joined.skip, keep=keep)
        result = job.run_sync()
        report = _Firsts(part=joined.part, taken=taken, firsts=firsts(result.summary.rows))
        answer = bridge.call(
            nc.request(_subject(replay_id, "firsts"), _enc.encode(report), timeout=timeout),
            timeout + 5,
        )
        settled = job.settle(_earliest_dec.decode(answer.data), keep)
        bridge.call(nc.request(_subject(replay_id, "result"),
                               _enc.encode(_Result(part=joined.part, result=settled)),
                               timeout=60))  # fmt: skip
        return taken
    finally:
        bridge.close()


async def _join(nc: Any, replay_id: str, timeout: float) -> Any:
    """Ask to join, again while no coordinator answers yet (jobs may start first)."""
    from nats.errors import NoRespondersError
    from nats.errors import TimeoutError as NatsTimeout

    deadline = time.monotonic() + timeout
    while True:
        try:
            return await nc.request(_subject(replay_id, "join"), b"", timeout=5)
        except (NoRespondersError, NatsTimeout) as exc:
            if time.monotonic() > deadline:
                why = f"no coordinator for replay {replay_id} in {timeout:.0f} s"
                raise TimeoutError(why) from exc
            await asyncio.sleep(0.2)


async def _next(psub: Any, js: Any, stream: str) -> Any:
    """The next work message, or None once the queue is empty."""
    from nats.errors import TimeoutError as NatsTimeout

    while True:
        try:
            got = await psub.fetch(1, timeout=1.0)
            return got[0]
        except NatsTimeout:
            info = await js.consumer_info(stream, "jobs")
            if info.num_pending == 0:
                return None


def _with_data_dir(req: Request, data_dir: str) -> Request:
    from dataclasses import replace

    return replace(req, data_dir=data_dir)
