"""One job process of a distributed replay (`hookaudit replay-join`); the protocol is in
`replay.workqueue`.

Rules of this file:
- An item is acked only once the coordinator has accepted a result that covers it. Until
  then the process holds it: every ack_wait/3 an in-progress ack keeps it this process's,
  and the process's progress counter goes to the coordinator on the same beat (from the
  NATS client's own thread, so a long segment does not starve it). A process that dies
  stops both, and its items come back to the queue after the ack wait.
- A process pulls until the coordinator says the replay is closed, or is gone: the items
  of a job that died come back while it waits for the other jobs, and it runs them as a
  new part (a new `replay.runner.Job` with a part number of its own).
- A process that stops on an error naks what it holds, so another job takes it at once.
- A key of another role is one line naming the refused subject (`workqueue.refused`).

Example:
    >>> _Part(0, None, []).items
    []
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import threading
import time
from collections.abc import Awaitable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, replace
from typing import Any

from engine.errors import Unavailable
from ingest.log.layout import Segment, segments
from replay import request as request_mod
from replay.request import Request
from replay.select import Piece
from replay.tally import firsts
from replay.workqueue import (
    STREAM,
    Alive,
    Connect,
    Firsts,
    Joined,
    Result,
    answer_dec,
    consumer_name,
    enc,
    joined_dec,
    refused,
    subject,
    verdict_dec,
    work_dec,
)

__all__ = ["join"]

_WHO, _ROLE = "this replay job", "replay-join"


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


class _Holder:
    """The items this process holds (pulled, not acked), kept alive on the bridge's loop."""

    def __init__(self, bridge: _Bridge, alive: str, interval: float) -> None:
        self.nc = bridge.nc
        self.alive = alive
        self.interval = interval
        self.token = f"{socket.gethostname()}:{os.getpid()}"
        self.taken = 0
        self.lock = threading.Lock()
        self.msgs: dict[int, Any] = {}  # item -> its message
        self.beat = asyncio.run_coroutine_threadsafe(self._beat(), bridge.loop)

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            with self.lock:
                held = list(self.msgs.values())
            for msg in held:
                with contextlib.suppress(Exception):
                    await msg.in_progress()
            counter = request_mod.PROGRESS
            read = (counter.value if counter is not None else 0) + self.taken
            with contextlib.suppress(Exception):
                await self.nc.publish(self.alive, enc.encode(Alive(self.token, read)))

    def hold(self, item: int, msg: Any) -> None:
        with self.lock:
            self.msgs[item] = msg
            self.taken += 1

    def release(self, item: int) -> Any:
        with self.lock:
            return self.msgs.pop(item, None)

    def stop(self) -> list[Any]:
        """Stop the beat; the messages still held."""
        self.beat.cancel()
        with self.lock:
            held, self.msgs = list(self.msgs.values()), {}
        return held


@dataclass
class _Part:
    part: int
    job: Any  # replay.runner.Job (imported late: it loads the engine)
    items: list[int]


def join(
    connect: Connect,
    replay_id: str,
    *,
    data_dir: str | None = None,
    timeout: float = 600.0,
    keep: int = 1000,
) -> int:
    """Join a distributed replay as one job process: run parts over the items it pulls,
    report them, settle them with the earliest firsts, hand their results in; until the
    replay is closed. Returns how many items this process read (-1: it was closed already).

    `data_dir` is where this machine sees the log (default: the coordinator's path).
    `timeout`: seconds to wait for a coordinator that does not answer.
    """
    bridge = _Bridge(connect)
    holder: _Holder | None = None
    try:
        nc = bridge.nc
        fresh: Joined | None = bridge.call(_join(nc, replay_id, timeout, first=True), timeout + 10)
        if fresh is None or fresh.request is None:
            return -1
        req = fresh.request
        if data_dir is not None:
            req = replace(req, data_dir=data_dir)
        named = {s.name: s for s in segments(req.data_dir)}
        js = nc.jetstream(timeout=10)
        try:
            psub = bridge.call(js.pull_subscribe_bind(consumer_name(replay_id), stream=STREAM))
            info = bridge.call(psub.consumer_info())
        except Exception as exc:
            refused(nc, _WHO, _ROLE)
            raise TimeoutError(
                f"cannot read the work queue of replay {replay_id}: {exc!r}"
            ) from exc
        ack_wait = float(info.config.ack_wait or 30.0)
        request_mod.progress_counter()
        holder = _Holder(bridge, subject(replay_id, "alive"), max(0.2, ack_wait / 3))
        open_parts: list[_Part] = []
        while True:
            msg = bridge.call(_fetch(psub))
            if msg is not None:
                if fresh is None:
                    fresh = bridge.call(_join(nc, replay_id, timeout), timeout + 10)
                if fresh is None or fresh.request is None:  # closed meanwhile
                    bridge.call(msg.nak())
                    break
                part = _run_part(bridge, psub, fresh, req, named, msg, holder, keep)
                fresh = None
                open_parts.append(part)
                report = Firsts(part.part, part.items, firsts(part.job.result.summary.rows))
            else:
                report = Firsts(-1, [], {})
            reply = bridge.call(_ask(nc, subject(replay_id, "firsts"), enc.encode(report),
                                     timeout), timeout + 10)  # fmt: skip
            answer = None if reply is None else answer_dec.decode(reply.data)
            if answer is None or answer.closed:
                break
            if answer.earliest is not None:
                for part in open_parts:
                    _hand_in(bridge, replay_id, part, answer.earliest, keep, holder, timeout)
                open_parts.clear()
        return holder.taken
    finally:
        if holder is not None:
            for msg in holder.stop():
                with contextlib.suppress(Exception):
                    bridge.call(msg.nak(), 5)
        bridge.close()


def _run_part(
    bridge: _Bridge,
    psub: Any,
    joined: Joined,
    req: Request,
    named: dict[str, Segment],
    first: Any,
    holder: _Holder,
    keep: int,
) -> _Part:
    """Run one Job over `first` and whatever else the queue hands out in a row."""
    from replay.runner import Job

    items: list[int] = []

    def mine() -> Iterator[Segment | Piece]:
        msg = first
        while msg is not None:
            w = work_dec.decode(msg.data)
            holder.hold(w.item, msg)
            seg = named.get(w.name)
            if seg is None:
                raise FileNotFoundError(f"{w.name}: not in this job's log at {req.data_dir}")
            items.append(w.item)
            yield Piece(seg, w.lo, w.hi) if w.hi else seg
            msg = bridge.call(_fetch(psub))

    job = Job(req, joined.part, segs=mine(), skip=joined.skip, keep=keep)
    job.run_sync()
    return _Part(joined.part, job, items)


def _hand_in(
    bridge: _Bridge,
    replay_id: str,
    part: _Part,
    earliest: dict[str, tuple[int, str]],
    keep: int,
    holder: _Holder,
    timeout: float,
) -> None:
    """Settle a part, send its result; ack what an accepted result covers, nak the rest."""
    settled = part.job.settle(earliest, keep)
    data = enc.encode(Result(part=part.part, result=settled))
    limit = int(getattr(bridge.nc, "max_payload", 0) or 0)
    if limit and len(data) > limit:  # one message: NATS would drop the connection
        raise Unavailable(
            f"the result of {len(part.items)} segment(s) is {len(data)} bytes, over the NATS "
            f"server's max_payload of {limit}: replay with --store none, or raise max_payload"
        )
    reply = bridge.call(_ask(bridge.nc, subject(replay_id, "result"), data, timeout),
                        timeout + 10)  # fmt: skip
    if reply is None:  # the coordinator is gone: nothing to hand in to
        return
    verdict = verdict_dec.decode(reply.data)
    covered = set(part.items if verdict.accepted else verdict.covered)
    for item in part.items:
        msg = holder.release(item)
        if msg is not None:
            bridge.call(msg.ack() if item in covered else msg.nak())


async def _fetch(psub: Any) -> Any:
    """The next work message, or None if the queue has none for us now."""
    from nats.errors import Error as NatsError
    from nats.errors import TimeoutError as NatsTimeout

    try:
        got = await psub.fetch(1, timeout=1.0)
        return got[0]
    except NatsTimeout:
        return None
    except NatsError:  # the queue is gone (replay over) or a server hiccup: ask the coordinator
        await asyncio.sleep(0.5)
        return None


async def _join(nc: Any, replay_id: str, timeout: float, *, first: bool = False) -> Joined | None:
    """A part number (and the Request); the first time again while no coordinator answers
    (jobs may start first). None: the coordinator is gone."""
    reply = await _ask(nc, subject(replay_id, "join"), b"", timeout, wait=first)
    return None if reply is None else joined_dec.decode(reply.data)


async def _ask(nc: Any, subj: str, data: bytes, timeout: float, *, wait: bool = False) -> Any:
    """A request to the coordinator, again on a timeout until `timeout` passes. None if
    nobody listens (unless `wait`: then until one does)."""
    from nats.errors import NoRespondersError
    from nats.errors import TimeoutError as NatsTimeout

    deadline = time.monotonic() + timeout
    while True:
        try:
            return await nc.request(subj, data, timeout=5)
        except NoRespondersError as exc:
            if not wait:
                return None
            if time.monotonic() > deadline:
                raise TimeoutError(f"no coordinator on {subj} in {timeout:.0f} s") from exc
        except NatsTimeout as exc:
            refused(nc, _WHO, _ROLE)
            if time.monotonic() > deadline:
                why = f"the coordinator did not answer on {subj} in {timeout:.0f} s"
                raise TimeoutError(why) from exc
        await asyncio.sleep(0.2)
