"""Drive the engine's decision flow over selected history: one replay job.

Rules of this file:
- The decision is made by `engine.run.Engine.drive`, the driver live workers, eval and
  serve use: this module only passes the answerer of the policy (`replay.answers`: the
  log, this process, the sandbox or nobody), and compares the result. The engine keeps
  the session's ``once`` state as a worker does.
- An event with a hook that is not evaluated gets no decision: it is counted apart and
  never compared.
- The posture and profile are `Engine.context`'s: `Policy.posture`, else the candidate
  settings' for the event, else the recorded one; the profile is the recorded one.
- Events whose hooks all answer inline are finished without the event loop; the others
  run as tasks: at most ``concurrency`` hooks at a time per job (`replay.answers`), and
  ``_QUEUE`` times as many events in flight, so that hooks keep running while the job
  reads the next segment.
- A job reads segments from `replay.parts.SegmentQueue`, so a session may span jobs: it
  returns its `Tally.partial`, then `settle`s with every job's first changes (`replay.jobs`).

Example:
    >>> job = Job(Request("d", (), "r1"), 0, keep=10)
    >>> job.policy.exec, job.keep
    ('sandbox', 10)
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Coroutine, Iterable, Mapping, Sequence
from typing import Any

from engine.effects import Executor
from engine.events import ALL_TYPES
from engine.flow import Evaluation
from engine.outcome import to_outcome
from engine.records import HookRun, Posture, Profile, encode_msgpack
from engine.run import Engine, NotEvaluated
from engine.sources import Effective, load_sources
from ingest.log.layout import Segment
from replay import request
from replay.answers import Answers, How
from replay.diff import ENGINE_HOOK, Change, attribute, compare, event_label, hook_meta
from replay.request import JobResult, Request
from replay.rowgate import RowGate
from replay.select import BaseRecord, ChainPosition, Piece, Selected, select
from replay.tally import HOUR_US, Row, Tally

__all__ = ["Job"]

_EMPTY: dict[str, Any] = {}
# Events in flight per hook slot: enough queued hooks to keep the slots busy while the
# job reads a segment without yielding (decompressing a sealed row group, scanning an
# active segment for a time window: up to ~0.3 s, i.e. ~300 spawns here).
_QUEUE = 64
# Row keys a job keeps beyond twice `keep` before it trims them (`replay.rowgate`).
_TRIM_SLACK = 256


_Result = Evaluation | NotEvaluated


class Job:
    """Evaluates the selected events of one session partition."""

    def __init__(
        self,
        req: Request,
        part: int,
        *,
        executors: dict[str, Executor] | None = None,
        segs: Iterable[Segment | Piece] | None = None,
        skip: Mapping[str, frozenset[int]] | None = None,
        keep: int | None = None,
    ) -> None:
        self.req = req
        self.part = part
        self.segs = segs  # the segments this job reads (None: the whole log)
        self.skip = skip  # the later copies of re-delivered events (None: found while reading)
        # The rows a report shows: the first `keep` by time (None: every row).
        self.keep = keep
        self.rows = RowGate(keep, _TRIM_SLACK)
        self.policy = req.policy
        self.cand = load_sources(req.candidate, project_dir=req.project_dir)
        self.base = (
            load_sources(req.baseline, project_dir=req.project_dir) if req.baseline else None
        )
        self.answers = Answers(
            req.policy,
            workdir=req.project_dir,
            executors=executors,
            concurrency=req.concurrency,
            hidden=(str(req.data_dir),),
        )
        self._answer = self.answers.answer
        # The driver of every entry point, one per settings (each keeps its own `once`
        # state); the policy answers every hook (`replay.answers`), so the engine creates
        # no executor of its own.
        routed = dict.fromkeys((*ALL_TYPES, "python"), self.answers)
        self._engines = {
            id(s): Engine(routed, profile=None, posture=req.policy.posture, home=req.home)
            for s in (self.cand, self.base)
            if s is not None
        }
        self.tally = Tally()
        self.result = JobResult(self.tally.summary)
        self._chains: dict[str, BaseRecord] = {}  # worker -> its last record read
        self._first = self._last = -1  # µs of the earliest and latest event read (-1: none)
        self._stored: dict[str, list[bytes]] = {}  # event id -> replayed outcomes to append
        _Ctx = tuple[Posture, Profile, Evaluation | None]
        # id(settings) -> event name (recorded posture compat, profile current: the
        # usual) or (event, posture, profile) -> its context
        self._contexts: dict[int, dict[str | tuple[str, str, str], _Ctx]] = {
            id(self.cand): {},
            id(self.base): {},
        }

    def _evaluate(
        self, sel: Selected, eff: Effective, how: How
    ) -> _Result | Coroutine[Any, Any, _Result]:
        b = sel.base
        ev = b.event
        cache = self._contexts[id(eff)]
        usual = b.posture == "compat" and b.profile == "current"
        key = ev.event if usual else (ev.event, b.posture, b.profile)
        ctx = cache.get(key)
        if ctx is None:
            ctx = cache[key] = self._context(eff, ev.event, b)
        posture, profile, quiet = ctx
        if quiet is not None:  # no hook for this event: the decision is always the same
            return quiet
        self.answers.begin(sel, how)
        return self._engines[id(eff)].drive(
            ev.event,
            sel.payload(),
            ev.payload.encode(),
            eff,
            posture,
            profile,
            self._answer,
            project_dir=ev.project_dir,
        )

    def _context(
        self, eff: Effective, event: str, b: BaseRecord
    ) -> tuple[Posture, Profile, Evaluation | None]:
        """Posture and profile for an event (`Engine.context`, the rule of every entry
        point), and its decision when no hook can run for it."""
        engine = self._engines[id(eff)]
        posture, profile = engine.context(
            event, eff, recorded_posture=b.posture, recorded_profile=b.profile
        )
        quiet = None
        if not eff.has_hooks(event):  # no hook: no invocation, nothing answered
            done = engine.drive(event, _EMPTY, b"", eff, posture, profile, self._answer)
            assert isinstance(done, Evaluation)
            quiet = done
        return posture, profile, quiet

    # ------------------------------------------------------------------ bookkeeping
    def _count_runs(self, runs: Sequence[HookRun], how: How) -> None:
        t = self.tally
        for item in how:
            t.answers[item] += 1
        for run in runs:
            hid = run.hook_id
            t.runs[hid, run.outcome == "error"] += 1
            if hid not in t.meta:
                t.meta[hid] = hook_meta(run)

    def conclude(
        self, sel: Selected, ts_us: int, cand: _Result, base: _Result | None, how: How
    ) -> None:
        """Compare one event's candidate decision with its baseline and count it."""
        ev = sel.base.event
        if isinstance(cand, NotEvaluated) or isinstance(base, NotEvaluated):
            self._count_runs((), how)
            self.tally.not_evaluated()
            return
        if how or cand.runs:
            self._count_runs(cand.runs, how)
        tally = self.tally
        tally.summary.events += 1  # Tally.events_seen, inline: once per event
        tally.users[ev.user] += 1
        tally.hours[ts_us // HOUR_US] += 1
        change = compare(sel.base if base is None else base.decision, cand.decision)
        self._conclude(sel, ts_us, cand, base, change)

    def _conclude(
        self,
        sel: Selected,
        ts_us: int,
        cand: Evaluation,
        base: Evaluation | None,
        change: Change | None,
    ) -> None:
        """The rest of `conclude`, once the event is counted and compared."""
        ev = sel.base.event
        row: Row | None = None
        if change is not None:
            meta = self.tally.meta
            if base is None:
                hooks = attribute(sel.verdicts(), cand.runs, change)
                if any(h not in meta and h != ENGINE_HOOK for h in hooks):  # a new stored hook
                    for run in sel.runs():
                        if run.hook_id in hooks and run.hook_id not in meta:
                            meta[run.hook_id] = hook_meta(run)
            else:
                hooks = attribute(base.runs, cand.runs, change)
                for run in base.runs:
                    if run.hook_id in hooks and run.hook_id not in meta:
                        meta[run.hook_id] = hook_meta(run)
            key = (ts_us, ev.id)
            if self.rows.needless(ev.session_id, key):
                # Counterfactual whatever the other jobs found, and past the rows a
                # report shows (`replay.rowgate`): counted as its row would be.
                self.tally.counterfactual_row(ev.user, change.transition, hooks)
                self.tally.add(ev.session_id, ts_us, ev.id, None)
                if self.policy.store == "all":
                    self._store(sel, cand, base)
                return
            self.rows.made(ev.session_id, key, behavioural=change.behavioural)
            base_reason = sel.base.reason if base is None else base.decision.reason
            row = Row(
                ev.id, ts_us, ev.session_id, ev.user, ev.host, ev.event, ev.tool_name,
                event_label(ev, sel.payload()), change.baseline, change.candidate, change.transition,
                change.kinds, hooks, change.behavioural,
                baseline_reason=base_reason, candidate_reason=cand.decision.reason,
            )  # fmt: skip
        self.tally.add(ev.session_id, ts_us, ev.id, row)
        store = self.policy.store
        if store == "all" or (store == "changed" and row is not None):
            self._store(sel, cand, base)

    def _store(self, sel: Selected, cand: Evaluation, base: Evaluation | None) -> None:
        """Keep the replayed outcome(s) of an event, to append to the log."""
        ev = sel.base.event
        rid = self.req.replay_id
        kept = [encode_msgpack(to_outcome(ev, cand, self.cand, replay_id=rid))]
        if base is not None and self.base is not None:
            kept.append(encode_msgpack(to_outcome(ev, base, self.base, replay_id=rid)))
        self._stored[ev.id] = kept

    def process(self, sel: Selected) -> Coroutine[Any, Any, None] | None:
        """Evaluate one event: done inline (None), or a coroutine finishing it."""
        b = sel.base
        ev = b.event
        # The inputs read: each worker chain's last record, the time range.
        have = self._chains.get(b.worker)
        if have is None or b.seq > have.seq:
            self._chains[b.worker] = b
        ts_us = int(ev.ts.timestamp() * 1_000_000)
        if ts_us < self._first or self._first < 0:
            self._first = ts_us
        if ts_us > self._last:
            self._last = ts_us
        how: How = []
        cand = self._evaluate(sel, self.cand, how)
        if self.base is None:
            if type(cand) is Evaluation:  # the usual case, inline: `conclude` in short
                if how or cand.runs:
                    self._count_runs(cand.runs, how)
                tally = self.tally
                tally.summary.events += 1
                tally.users[ev.user] += 1
                tally.hours[ts_us // HOUR_US] += 1
                change = compare(b, cand.decision)
                if change is None and self.policy.store != "all":
                    tally.add(ev.session_id, ts_us, ev.id, None)
                    return None
                self._conclude(sel, ts_us, cand, None, change)
                return None
            if type(cand) is NotEvaluated:
                self.conclude(sel, ts_us, cand, None, how)
                return None
            return self._conclude_later(sel, ts_us, cand, None, how)
        base = self._evaluate(sel, self.base, [])
        if (type(cand) is Evaluation or type(cand) is NotEvaluated) and (
            type(base) is Evaluation or type(base) is NotEvaluated
        ):
            self.conclude(sel, ts_us, cand, base, how)
            return None
        return self._conclude_later(sel, ts_us, cand, base, how)

    async def _conclude_later(
        self, sel: Selected, ts_us: int, cand: Any, base: Any, how: How
    ) -> None:
        c = await cand if asyncio.iscoroutine(cand) else cand
        b = await base if asyncio.iscoroutine(base) else base
        self.conclude(sel, ts_us, c, b, how)

    def settle(
        self, first_changes: dict[str, tuple[int, str]], keep: int | None = None
    ) -> JobResult:
        """Apply the session rule (`Tally.settle`, keeping `keep` rows) and, when storing
        changed events, drop the outcomes of counterfactual ones (that history would not
        have happened)."""
        rows = self.tally.summary.rows
        self.tally.settle(first_changes, keep)
        if self.policy.store == "changed":
            for row in rows:
                if row.counterfactual:
                    self.result.stored.pop(row.event_id, None)
        return self.result

    def run_sync(self) -> JobResult:
        """`run` on a new event loop, with the collector tuned for many live objects."""
        threshold = gc.get_threshold()
        gc.set_threshold(100_000, 50, 100)  # a job keeps many small objects alive: collect rarely
        done: list[JobResult] = []

        async def main() -> None:
            # The main task returns None: on Python 3.11, asyncio.run's SIGINT check
            # formats the main task's repr, result included (whole seconds for a big one).
            done.append(await self.run())

        try:
            asyncio.run(main())
        finally:
            gc.set_threshold(*threshold)
        return done[0]

    async def run(self) -> JobResult:
        """Evaluate every selected event of this job's sessions."""
        req = self.req
        limit = asyncio.Semaphore(max(1, req.concurrency) * _QUEUE)
        inflight: set[asyncio.Task[None]] = set()
        failures: list[BaseException] = []

        def finished(task: asyncio.Task[None]) -> None:
            inflight.discard(task)
            limit.release()
            exc = None if task.cancelled() else task.exception()
            if exc is not None:
                failures.append(exc)

        n = -1
        try:
            self.answers.warm_up(self.cand, self.base)
            for n, sel in enumerate(
                select(
                    req.data_dir,
                    req.selection,
                    segs=self.segs,
                    skip=self.skip,
                    digests=self.result.read,
                )
            ):
                if not n & 16383 and n and request.PROGRESS is not None:
                    request.PROGRESS.value += 16384
                later = self.process(sel)
                if later is None:
                    if inflight and not n & 63:
                        await asyncio.sleep(0)  # let running hooks make progress
                    continue
                await limit.acquire()
                if failures:
                    later.close()
                    break
                task = asyncio.create_task(later)
                inflight.add(task)
                task.add_done_callback(finished)
            self.tally.summary.selected += n + 1
            if inflight:
                await asyncio.wait(set(inflight))
            if failures:
                raise failures[0]
        finally:
            await self.answers.aclose()
        self.result.sandbox = self.answers.sandbox
        self.result.spawned = self.answers.spawned
        self.tally.summary.llm.update(self.answers.llm_stats)
        self.tally.partial()
        self.result.stored = self._stored
        self._stored = {}
        self.result.chains = {w: ChainPosition(b.seq, b.hash) for w, b in self._chains.items()}
        if self._first >= 0:
            self.result.first_us, self.result.last_us = self._first, self._last
        return self.result
