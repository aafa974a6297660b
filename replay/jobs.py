"""Run a replay: its jobs (in this process or in `--jobs` processes), then store the result.

Rules of this file:
- The settings are loaded here first, so a bad settings file fails before any job
  starts; each job process loads them again itself (nothing unpicklable crosses).
- ``--jobs N`` runs N processes, each reading the segments of the log it takes from a
  shared queue (`replay.parts.SegmentQueue`); the parent meanwhile finds the stored
  copies of re-delivered events (`replay.parts.duplicates`) and sends them to every
  job, which starts without them (`replay.parts.LateSkips`: it starts over in the rare
  case they concern what it has already read, and hooks it ran for those events run
  again). Each job sends
  the first behavioural change of each session it saw (`replay.tally.firsts`); the
  parent sends back the earliest of every job's, with which each job applies the
  session rule to its part (`Tally.settle`) and sends its result to be added.
  The merged result does not depend on the number of jobs, and neither does the digest.
- A job that fails sends its exception (re-raised here); one that dies is named with
  its exit code; every job process is stopped before `replay` returns or raises.
- Results are stored in the same append-only log as live outcomes, through
  `ingest.log.writer.LogWriter`, on the chain of worker ``replay`` (``replay-2``… when another
  replay holds it): Outcomes with ``replay_id`` set, which the `replays` view of
  `queries.db` shows beside the live decision. The log dedups them by
  (event id, settings_id, replay_id). ``store="changed"`` (the default) appends the
  replayed outcome of every changed event that is not counterfactual (plus, with a
  baseline replay, the baseline's outcome under the baseline's settings_id); ``"all"``
  those of every evaluated event. The report itself (`report.build`) is written to
  ``<data-dir>/replays/<replay_id>.json`` (temp file, fsync, rename).

Example:
    >>> import tempfile
    >>> from engine.records import uuid7
    >>> d = tempfile.mkdtemp()
    >>> from pathlib import Path
    >>> Path(d, "s.json").write_text("{}")
    2
    >>> done = replay(Request(d, (("project", f"{d}/s.json"),), uuid7()))
    >>> done.report["events"], done.report["changed"]
    (0, 0)
"""

from __future__ import annotations

import contextlib
import itertools
import json
import multiprocessing
import os
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

import msgspec

from engine.effects import Executor
from engine.errors import HookauditError, LogCorrupt, Unavailable
from engine.records import decode_outcome_msgpack
from engine.sources import Effective, load_sources
from ingest.log.digests import changed_sealed
from ingest.log.layout import Segment, segments
from ingest.log.manifest import sealed_mismatches
from ingest.log.writer import LogWriter
from ingest.private import make_private
from replay import report as report_mod
from replay.parts import LateSkips, Restart, SegmentQueue, duplicates
from replay.request import JobResult, Request, progress_counter
from replay.runner import Job
from replay.select import Piece
from replay.tally import Summary, earliest, firsts

__all__ = ["Done", "replay", "store_outcomes", "summary_path", "write_summary"]

REPLAY_WORKER = "replay"
# each session's first behavioural change, between the jobs and the parent
_firsts_enc = msgspec.msgpack.Encoder()
_firsts_dec = msgspec.msgpack.Decoder(dict[str, tuple[int, str]])
_BATCH = 5000


@dataclass
class Done:
    """A finished replay: its report (the `--format json` object) and the merged result."""

    report: dict[str, Any]
    result: JobResult


def _merge(results: list[JobResult]) -> JobResult:
    """Add the jobs' results (`Summary.finish` then counts the sessions)."""
    out = JobResult(Summary())
    for r in results:
        out.summary.merge(r.summary)
        for worker, pos in r.chains.items():
            have = out.chains.get(worker)
            if have is None or pos.seq > have.seq:
                out.chains[worker] = pos
        if r.first_us is not None:
            out.first_us = r.first_us if out.first_us is None else min(out.first_us, r.first_us)
        if r.last_us is not None:
            out.last_us = r.last_us if out.last_us is None else max(out.last_us, r.last_us)
        out.stored.update(r.stored)
        out.sandbox = out.sandbox or r.sandbox
        out.read.update(r.read)
        out.spawned += r.spawned
    return out


def _in_process(req: Request, executors: dict[str, Executor] | None, keep: int) -> JobResult:
    job = Job(req, 0, executors=executors, keep=keep)
    result = job.run_sync()
    merged = _merge([job.settle(firsts(result.summary.rows), keep)])
    merged.summary.finish(keep)
    return merged


def _job_process(conn: Connection, req: Request, part: int, queue: SegmentQueue, keep: int) -> None:
    """A job process: (skip) -> its firsts; (every job's firsts) -> its JobResult."""
    taken: list[Segment | Piece] = []

    def receive(block: bool) -> Any:
        return conn.recv() if block or conn.poll() else None

    def mine() -> Iterator[Segment | Piece]:
        for seg in queue.take():
            taken.append(seg)
            yield seg

    try:
        late = LateSkips(receive)
        job = Job(req, part, segs=mine(), skip=late, keep=keep)
        try:
            result = job.run_sync()
            late.finish()
        except Restart:  # again, with the copies to skip known
            job = Job(
                req, part, segs=itertools.chain(list(taken), mine()), skip=late.known, keep=keep
            )
            result = job.run_sync()
        conn.send(("ok", _firsts_enc.encode(firsts(result.summary.rows))))
        conn.send(("ok", job.settle(_firsts_dec.decode(conn.recv()), keep)))
    except EOFError:  # the parent is gone
        pass
    except BaseException as exc:
        text = "".join(traceback.format_exception(exc))
        try:
            conn.send(("error", (exc, text)))
        except Exception:
            conn.send(("error", (None, text)))
    finally:
        conn.close()


def _send(conn: Connection, value: Any) -> None:
    """Send to a job; one that is gone is reported by `_receive`."""
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        conn.send(value)


def _receive(conn: Connection, proc: BaseProcess) -> Any:
    try:
        status, value = conn.recv()
    except EOFError:
        proc.join(5)
        raise JobFailed(f"replay {proc.name} died (exit code {proc.exitcode})") from None
    if status == "ok":
        return value
    exc, text = value
    if isinstance(exc, BaseException):
        raise exc
    last = [line for line in str(text).splitlines() if line.strip()][-1:] or ["no reason given"]
    raise JobFailed(f"replay {proc.name} failed: {last[0].strip()}")


class JobFailed(HookauditError):
    """A replay job process died or failed: one line naming it (the command exits 1)."""


def _in_processes(req: Request, keep: int) -> JobResult:
    # fork: a job needs nothing of the parent but its arguments (it loads the settings
    # itself), and fork does not re-run the caller's main module as spawn does.
    methods = multiprocessing.get_all_start_methods()
    ctx: Any = multiprocessing.get_context("fork" if "fork" in methods else "spawn")  # has .Process
    segs = segments(req.data_dir)
    conns: list[Connection] = []
    procs: list[BaseProcess] = []
    try:
        queue = SegmentQueue(segs, ctx, jobs=req.jobs)
        for k in range(req.jobs):
            here, there = ctx.Pipe()
            proc = ctx.Process(target=_job_process, args=(there, req, k, queue, keep),
                               name=f"job {k}", daemon=True)  # fmt: skip
            proc.start()
            there.close()
            conns.append(here)
            procs.append(proc)
        skip = duplicates(segs)  # while the jobs run
        for conn in conns:
            _send(conn, skip)
        every = earliest(
            [_firsts_dec.decode(_receive(c, p)) for c, p in zip(conns, procs, strict=True)]
        )
        data = _firsts_enc.encode(every)
        for conn in conns:
            _send(conn, data)
        merged = _merge([_receive(c, p) for c, p in zip(conns, procs, strict=True)])
        merged.summary.finish(keep)
        return merged
    finally:
        for conn in conns:
            conn.close()
        for proc in procs:
            proc.join(5)
            if proc.is_alive():
                proc.kill()
                proc.join()


def _run_jobs(
    req: Request, executors: dict[str, Executor] | None, keep: int, coordinator: Any = None
) -> JobResult:
    """Every job's result merged and settled, with the first `keep` changed rows.

    `coordinator` (`replay.workqueue.Coordinator`): the jobs are processes that join over
    NATS, on any machine, instead of forked here."""
    if coordinator is not None:
        return coordinator.run(req, keep)  # type: ignore[no-any-return]
    if req.jobs > 1 and executors:
        raise ValueError("custom executors need jobs=1 (they cannot be sent to job processes)")
    return _in_process(req, executors, keep) if req.jobs <= 1 else _in_processes(req, keep)


def log_total(data_dir: str | Path) -> int:
    """How many records the log holds: sealed counts from the manifests, active lines counted.

    Only for progress lines (a torn or unreadable line still counts).

    Example:
        >>> log_total(tempfile.mkdtemp())
        0
    """
    from ingest.log.layout import segments
    from ingest.log.manifest import read_manifest

    total = 0
    counts: dict[tuple[str, int], int] = {}
    segs = segments(data_dir)
    for w in {s.worker for s in segs}:
        for m in read_manifest(data_dir, w):
            if m.entry is not None:
                counts[(w, m.entry.seq)] = m.entry.count
    for seg in segs:
        if seg.kind == "sealed":
            total += counts.get((seg.worker, seg.seq), 0)
            continue
        with contextlib.suppress(OSError), open(seg.path, "rb") as f:
            while chunk := f.read(1 << 20):
                total += chunk.count(b"\n")
    return total


def _report_progress(
    progress: Callable[[str], None], counter: Any, done: threading.Event, total: int
) -> None:
    """Every few seconds, how many of the log's records the jobs have read, and the rate."""
    t0 = time.perf_counter()
    while not done.wait(3.0):
        n = counter.value
        rate = n / (time.perf_counter() - t0)
        eta = f", ~{(total - n) / rate:.0f} s left" if rate > 0 and total > n else ""
        of = f" of {total}" if total else ""
        progress(f"… {n}{of} records read ({rate:.0f}/s{eta})")


def store_outcomes(data_dir: str | Path, outcomes: list[bytes]) -> tuple[str | None, int]:
    """Append replayed outcomes (msgpack) to a ``replay`` chain; (worker, records stored)."""
    if not outcomes:
        return None, 0
    last: Unavailable | None = None
    for i in range(1, 100):
        name = REPLAY_WORKER if i == 1 else f"{REPLAY_WORKER}-{i}"
        try:
            writer = LogWriter.open(data_dir, name)
        except Unavailable as exc:  # another replay appends to this chain right now
            last = exc
            if "already open" not in str(exc):
                raise
            continue
        stored = 0
        with writer:
            for k in range(0, len(outcomes), _BATCH):
                batch = [decode_outcome_msgpack(b) for b in outcomes[k : k + _BATCH]]
                stored += len(writer.append_batch(batch))
        return name, stored
    raise Unavailable(f"no free replay chain in {data_dir}") from last


def summary_path(data_dir: str | Path, replay_id: str) -> Path:
    """Where a replay's report is kept: ``<data-dir>/replays/<replay_id>.json``."""
    return Path(data_dir) / "replays" / f"{replay_id}.json"


def write_summary(data_dir: str | Path, report: dict[str, Any]) -> Path:
    """Write a report to `summary_path` durably (temp file, fsync, rename); return the path."""
    path = summary_path(data_dir, report["replay_id"])
    folder = path.parent
    make_private(folder)
    tmp = path.with_name(path.name + ".tmp")
    data = json.dumps(report, indent=1, sort_keys=True).encode()
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    return path


def _load(specs: tuple[tuple[str, str], ...] | None, project_dir: str | None) -> Effective | None:
    return load_sources(specs, project_dir=project_dir) if specs else None


def replay(
    req: Request,
    *,
    executors: dict[str, Executor] | None = None,
    max_rows: int = 1000,
    progress: Callable[[str], None] | None = None,
    coordinator: Any = None,
) -> Done:
    """Run a replay end to end: jobs, merge, store, report (see `replay.report`).

    `executors` replaces the executor of a hook type (tests, and callers that bring
    their own model client); it needs ``jobs=1``.
    """
    started = time.perf_counter()
    cand = load_sources(req.candidate, project_dir=req.project_dir)
    base = _load(req.baseline, req.project_dir)
    done = threading.Event()
    counter = progress_counter() if progress is not None else None
    total = log_total(req.data_dir) if progress is not None else 0
    if progress is not None:
        progress(f"replaying {total} logged records with {req.jobs} job(s)…")
    if progress is not None and counter is not None:
        counter.value = 0
        threading.Thread(
            target=_report_progress, args=(progress, counter, done, total), daemon=True
        ).start()
    # A sealed segment whose bytes are not those sealed is refused before any job parses
    # it (a changed byte could stop a reader thread with no file named, or read as data).
    changed = changed_sealed(req.data_dir)
    if changed:
        done.set()
        more = f" (and {len(changed) - 1} more)" if len(changed) > 1 else ""
        raise LogCorrupt(changed[0] + more, None, "run `hookaudit verify` on this log")
    try:
        merged = _run_jobs(req, executors, max_rows, coordinator)
    finally:
        done.set()
    # A sealed segment whose bytes are not those sealed: no report over it.
    changed = sealed_mismatches(req.data_dir, merged.read)
    if changed:
        more = f" (and {len(changed) - 1} more)" if len(changed) > 1 else ""
        raise LogCorrupt(changed[0] + more, None, "run `hookaudit verify` on this log")
    seconds = time.perf_counter() - started
    worker: str | None = None
    stored = 0
    if req.policy.store != "none":
        outcomes = [b for eid in sorted(merged.stored) for b in merged.stored[eid]]
        worker, stored = store_outcomes(req.data_dir, outcomes)
    rep = report_mod.build(
        req,
        merged,
        candidate=cand,
        baseline=base,
        seconds=seconds,
        stored=(worker, stored),
        max_rows=max_rows,
    )
    if req.policy.store != "none":
        rep["stored"]["summary"] = str(summary_path(req.data_dir, req.replay_id))
        write_summary(req.data_dir, rep)
    merged.stored.clear()
    return Done(rep, merged)
