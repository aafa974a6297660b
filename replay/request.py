"""What a replay job is asked to do and what it gives back, and the shared progress count.

Rules of this file:
- Plain data that pickles: the parent sends a `Request` to every job process and gets a
  `JobResult` back (`replay.jobs`).
- `progress_counter` lives in shared memory that forked job processes inherit.

Example:
    >>> Request("d", (("project", "s.json"),), "r1").policy.exec
    'sandbox'
"""

from __future__ import annotations

import multiprocessing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from replay.answers import Policy
from replay.select import ChainPosition, Selection
from replay.tally import Summary

__all__ = ["PROGRESS", "JobResult", "Request", "progress_counter"]

# Events read so far, in shared memory that forked job processes inherit (for progress
# lines; a lost update between two jobs only makes a progress line a little low).
PROGRESS: Any = None


def progress_counter() -> Any:
    """The shared count of events read (created on first use; None where unavailable)."""
    global PROGRESS
    if PROGRESS is None:
        try:
            PROGRESS = multiprocessing.RawValue("q", 0)
        except OSError:  # no shared memory here: no progress lines
            return None
    return PROGRESS


@dataclass(frozen=True, slots=True)
class Request:
    """Everything a job needs; it pickles, so jobs in other processes get it whole."""

    data_dir: str
    candidate: tuple[tuple[str, str], ...]
    replay_id: str
    baseline: tuple[tuple[str, str], ...] | None = None
    selection: Selection = field(default_factory=Selection)
    policy: Policy = field(default_factory=Policy)
    jobs: int = 1
    concurrency: int = 32
    project_dir: str | None = None
    home: str = field(default_factory=lambda: str(Path.home()))


@dataclass
class JobResult:
    """What one job found: counts, rows, the inputs it read, the outcomes to store."""

    summary: Summary
    chains: dict[str, ChainPosition] = field(default_factory=dict)
    first_us: int | None = None
    last_us: int | None = None
    stored: dict[str, list[bytes]] = field(default_factory=dict)  # event id -> outcomes
    sandbox: str | None = None
    spawned: int = 0
    read: dict[str, str] = field(default_factory=dict)  # segment name -> sha256 of its bytes
