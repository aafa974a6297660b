"""Run a replay: its jobs (in this process or in `--jobs` processes), then store the result.

Rules of this file:
- The settings are loaded here first, so a bad settings file fails before any job
  starts; each job process loads them again itself (nothing unpicklable crosses).
- Jobs are partitioned by session (`select.session_part`); the merged result does not
  depend on the number of jobs, and neither does the digest.
- Results are stored in the same append-only log as live outcomes, through
  `ingest.log.LogWriter`, on the chain of worker ``replay`` (``replay-2``… when another
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
import json
import multiprocessing
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.effects import Executor
from engine.errors import Unavailable
from engine.records import decode_outcome_msgpack
from engine.sources import Effective, load_sources
from ingest.log import LogWriter
from replay import report as report_mod
from replay.runner import JobResult, Request, progress_counter, run_job
from replay.tally import Summary

__all__ = ["Done", "replay", "store_outcomes", "summary_path", "write_summary"]

REPLAY_WORKER = "replay"
_BATCH = 5000


@dataclass
class Done:
    """A finished replay: its report (the `--format json` object) and the merged result."""

    report: dict[str, Any]
    result: JobResult


def _merge(results: list[JobResult]) -> JobResult:
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
        out.outcomes.extend(r.outcomes)
        out.sandbox = out.sandbox or r.sandbox
        out.spawned += r.spawned
    out.summary.rows.sort(key=lambda row: row.key())
    return out


def _run_jobs(req: Request, executors: dict[str, Executor] | None) -> list[JobResult]:
    if req.jobs <= 1:
        return [run_job(req, 0, executors)]
    if executors:
        raise ValueError("custom executors need jobs=1 (they cannot be sent to job processes)")
    # fork: a job needs nothing of the parent but `req` (it loads the settings itself),
    # and fork does not re-run the caller's main module as spawn does.
    methods = multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
    with ProcessPoolExecutor(max_workers=req.jobs, mp_context=ctx) as pool:
        return list(pool.map(run_job, [req] * req.jobs, range(req.jobs)))


def _report_progress(progress: Callable[[str], None], counter: Any, done: threading.Event) -> None:
    """Every few seconds, how many events the jobs have read (`runner.progress_counter`)."""
    t0 = time.perf_counter()
    while not done.wait(3.0):
        n = counter.value
        progress(f"… {n} events ({n / (time.perf_counter() - t0):.0f}/s)")


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
    folder.mkdir(parents=True, exist_ok=True)
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
    if progress is not None:
        progress(f"replaying with {req.jobs} job(s)…")
    if progress is not None and counter is not None:
        counter.value = 0
        threading.Thread(
            target=_report_progress, args=(progress, counter, done), daemon=True
        ).start()
    try:
        merged = _merge(_run_jobs(req, executors))
    finally:
        done.set()
    seconds = time.perf_counter() - started
    worker: str | None = None
    stored = 0
    if req.policy.store != "none":
        worker, stored = store_outcomes(req.data_dir, merged.outcomes)
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
    merged.outcomes.clear()
    return Done(rep, merged)
