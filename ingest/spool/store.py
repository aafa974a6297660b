"""The emitter's disk spool: events that could not reach NATS, kept until they can.

Rules of this file:
- The files (durable appends, asides, checkpoints) are `ingest.spool.files`; one flush in
  progress is `ingest.spool.flush`; this file is the spool's layout and its locks.
- No NATS import. Flushing takes a `Publish` callable (the NATS adapter lives in
  `ingest/emit/emitter.py`), so this module is plain files, locks and msgspec.
- Nothing is deleted before it is acknowledged. A line that cannot be decoded is
  moved to ``rejects.jsonl`` with the reason, never dropped.
- Re-sending is safe: every event is published with its original ``Nats-Msg-Id``, and
  JetStream stores a re-send inside the duplicate window once.

Layout, all under ``<data_dir>/spool/`` (directory 0700, files 0600: payloads hold
commands, file contents and prompts)::

    events.jsonl           appended by `hookaudit emit`: one HookEvent (JSON) a line
    batch-<uuid7>.jsonl    events.jsonl renamed by a flush; deleted once every line is acked
    batch-<uuid7>.jsonl.offset   bytes of that batch already acked (a flush resumes there)
    rejects.jsonl          lines that failed to decode or can never be published, with why
    rejects-<uuid7>.jsonl  the same, written aside while ``lock`` was busy
    lock                   flock: held to append to events.jsonl or rename it (milliseconds)
    flush.lock             flock: held for a whole flush, so flushes never run side by side

An appender writes a line, flushes and fsyncs while holding ``lock``; when ``lock`` stays
busy for `APPEND_LOCK_WAIT` it writes its line as a batch of its own instead (a ``.part``
file, fsynced, renamed), so a held lock delays an event but never loses it. A flush renames
``events.jsonl`` to a batch under ``lock`` (so appenders never write into a batch),
then publishes the batch without blocking appenders, checkpointing the acked offset.
A writer that crashed mid-line leaves an unterminated fragment; the next appender
terminates it first, so the fragment becomes a line of its own that is rejected.

Example:
    >>> spool = Spool(Path("/tmp/ha"))  # doctest: +SKIP
    >>> spool.append(new_event({"hook_event_name": "Stop"}))  # doctest: +SKIP
    >>> await spool.flush(publish, budget=2.0)  # doctest: +SKIP
    FlushReport(published=1, duplicates=0, rejected=0, remaining=0, error=None, busy=False)
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import os
import time
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import msgspec

from engine.errors import Unavailable
from engine.records import HookEvent, encode_json, uuid7
from ingest.spool.files import (
    OFFSET_SUFFIX,
    append_durably,
    count_lines,
    fsync_dir,
    read_offset,
    read_rejects,
    write_aside,
)
from ingest.spool.flush import FlushRun

__all__ = [
    "FlushReport",
    "Publish",
    "Sent",
    "Spool",
    "SpoolStatus",
    "has_pending",
    "spool_dir",
]

EVENTS = "events.jsonl"
REJECTS = "rejects.jsonl"
_REJECTS_PREFIX = "rejects-"
_BATCH_PREFIX = "batch-"
_BATCH_SUFFIX = ".jsonl"

#: How long an appender waits for the append lock before it writes its line to a file
#: of its own instead (never hang, never drop the event).
APPEND_LOCK_WAIT = 1.0


class Sent(msgspec.Struct, frozen=True, kw_only=True):
    """What publishing one event did: stored, stored before (duplicate), or never will be.

    `rejected` is set for a permanent failure of this one event (larger than the
    server accepts); a transient failure raises `Unavailable` instead.
    """

    duplicate: bool = False
    rejected: str | None = None


#: Publishes one event with Nats-Msg-Id = its id; raises Unavailable when NATS is down.
Publish = Callable[[HookEvent], Awaitable[Sent]]


class FlushReport(msgspec.Struct, frozen=True, kw_only=True):
    """The result of one flush. `remaining` counts the events left in the spool."""

    published: int = 0
    duplicates: int = 0
    rejected: int = 0
    remaining: int = 0
    error: str | None = None
    busy: bool = False


class SpoolStatus(msgspec.Struct, frozen=True):
    """What `hookaudit spool status` reports."""

    path: str
    events: int
    bytes: int
    files: int
    rejects: int
    rejected_lines: int = 0
    rejected_inputs: int = 0

    def to_dict(self) -> dict[str, object]:
        return msgspec.structs.asdict(self)


def spool_dir(data_dir: Path) -> Path:
    """Where the spool of `data_dir` lives.

    >>> spool_dir(Path("/d"))
    PosixPath('/d/spool')
    """
    return data_dir / "spool"


def has_pending(data_dir: Path) -> bool:
    """True if the spool holds anything to flush: one stat when it does not exist.

    >>> has_pending(Path("/nonexistent"))
    False
    """
    try:
        with os.scandir(spool_dir(data_dir)) as it:
            for entry in it:
                if entry.name.startswith(_BATCH_PREFIX) and entry.name.endswith(_BATCH_SUFFIX):
                    return True
                if entry.name == EVENTS and entry.stat().st_size > 0:
                    return True
    except (FileNotFoundError, NotADirectoryError):
        return False
    return False


class Spool:
    """The spool of one data dir. Safe across threads and processes (flock)."""

    def __init__(self, data_dir: Path) -> None:
        self.dir = spool_dir(data_dir)
        self.events_path = self.dir / EVENTS
        self.rejects_path = self.dir / REJECTS

    # -- appending ---------------------------------------------------------------------

    def append(self, event: HookEvent) -> None:
        """Append one event durably (flush + fsync), or raise Unavailable.

        Example:
            >>> Spool(Path("/tmp/ha")).append(event)  # doctest: +SKIP
        """
        line = encode_json(event) + b"\n"
        try:
            self._ensure_dir()
            with self._lock("lock", wait=APPEND_LOCK_WAIT) as got:
                if got:
                    append_durably(self.events_path, line, self.dir)
                    return
            # The lock stayed busy (a hung appender, a flush on a slow disk, a neighbour
            # holding it): the event becomes a batch of its own, which needs no lock.
            write_aside(self.dir, f"{_BATCH_PREFIX}{uuid7()}{_BATCH_SUFFIX}", line)
        except OSError as e:
            raise Unavailable(f"{self.events_path}: cannot spool event: {e.strerror or e}") from e

    def reject(self, line: bytes, reason: str, *, source: str, offset: int | None = None) -> None:
        """Keep `line` in rejects.jsonl with why it could not be delivered."""
        record: dict[str, object] = {
            "ts": datetime.now(UTC).isoformat(timespec="milliseconds"),
            "reason": reason,
            "source": source,
        }
        if offset is not None:
            record["offset"] = offset
        body = line.rstrip(b"\n")
        try:
            record["line"] = body.decode("utf-8")
        except UnicodeDecodeError:
            record["line_b64"] = base64.b64encode(body).decode("ascii")
        data = encode_json(record) + b"\n"
        try:
            self._ensure_dir()
            with self._lock("lock", wait=APPEND_LOCK_WAIT) as got:
                if got:
                    append_durably(self.rejects_path, data, self.dir)
                    return
            write_aside(self.dir, f"{_REJECTS_PREFIX}{uuid7()}{_BATCH_SUFFIX}", data)
        except OSError as e:
            raise Unavailable(f"{self.rejects_path}: cannot keep rejected line: {e}") from e

    # -- status ------------------------------------------------------------------------

    def status(self) -> SpoolStatus:
        """Count what is waiting: events.jsonl plus the unacked part of every batch.

        Example:
            >>> Spool(Path("/nonexistent")).status().events
            0
        """
        events = size = files = 0
        for path in self._pending_files():
            start = read_offset(path) if path.name != EVENTS else 0
            try:
                n, b = count_lines(path, start)
            except FileNotFoundError:
                continue  # a flush finished it while we looked
            if n:
                events, size, files = events + n, size + b, files + 1
        lines = 0
        for path in self._reject_files():
            with contextlib.suppress(FileNotFoundError):
                lines += count_lines(path, 0)[0]
        from ingest.rejects import count

        inputs = count(self.dir.parent)  # refused input kept under <data-dir>/rejects/
        return SpoolStatus(str(self.dir), events, size, files, lines + inputs, lines, inputs)

    def rejected_lines(self) -> list[dict[str, object]]:
        """The lines of rejects.jsonl, each with its size and sha256 (unreadable ones too).

        Example:
            >>> Spool(Path("/nonexistent")).rejected_lines()
            []
        """
        out: list[dict[str, object]] = []
        for path in self._reject_files():
            out += read_rejects(path)
        return out

    def _reject_files(self) -> list[Path]:
        """rejects.jsonl, then the rejects written aside while the lock was busy."""
        try:
            names = os.listdir(self.dir)
        except FileNotFoundError:
            return []
        aside = sorted(n for n in names if n.startswith(_REJECTS_PREFIX))
        return [self.dir / n for n in ([REJECTS] if REJECTS in names else []) + aside]

    # -- flushing ----------------------------------------------------------------------

    async def flush(
        self,
        publish: Publish,
        *,
        budget: float | None = None,
        wait_lock: float | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> FlushReport:
        """Publish every spooled event, oldest first; delete a batch only once all are acked.

        `budget` bounds the time spent publishing (the rest stays for the next flush);
        `wait_lock` is how long to wait for another flush to finish (None: do not wait,
        report ``busy``). `progress(done, total)` is called about once a second.

        Example:
            >>> report = await Spool(Path("/tmp/ha")).flush(publish)  # doctest: +SKIP
        """
        deadline = None if budget is None else time.monotonic() + budget
        with self._lock("flush.lock", wait=wait_lock) as got:
            if not got:
                return FlushReport(busy=True, remaining=self.status().events)
            self._rotate()
            batches = self._batches(cleanup=True)
            total = 0
            if progress is not None:
                for b in batches:
                    total += count_lines(b, read_offset(b))[0]
            run = FlushRun(self, publish, deadline, progress, total)
            for batch in batches:
                if not await run.batch(batch):
                    break
            remaining = self.status().events if (run.error or run.stopped) else 0
            return FlushReport(
                published=run.published,
                duplicates=run.duplicates,
                rejected=run.rejected,
                remaining=remaining,
                error=run.error,
            )

    # -- files and locks ---------------------------------------------------------------

    def _ensure_dir(self) -> None:
        if not self.dir.is_dir():
            self.dir.mkdir(mode=0o700, parents=True, exist_ok=True)

    @contextlib.contextmanager
    def _lock(self, name: str, *, wait: float | None) -> Iterator[bool]:
        """Hold flock on `name`; yields False if it stayed busy for `wait` seconds."""
        self._ensure_dir()
        fd = os.open(self.dir / name, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            deadline = time.monotonic() + (wait or 0.0)
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if wait is None or time.monotonic() >= deadline:
                        yield False
                        return
                    time.sleep(0.01)
            try:
                yield True
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def _rotate(self) -> None:
        """Rename a non-empty events.jsonl to a new batch (under the append lock)."""
        with self._lock("lock", wait=APPEND_LOCK_WAIT) as got:
            if not got:
                return  # an appender is stuck; flush the batches we already have
            try:
                if self.events_path.stat().st_size == 0:
                    return
            except FileNotFoundError:
                return
            os.rename(self.events_path, self.dir / f"{_BATCH_PREFIX}{uuid7()}{_BATCH_SUFFIX}")
            fsync_dir(self.dir)

    def _batches(self, *, cleanup: bool = False) -> list[Path]:
        """The batches, oldest first; `cleanup` (flush lock held) drops orphan checkpoints."""
        try:
            names = os.listdir(self.dir)
        except FileNotFoundError:
            return []
        batches = sorted(
            n for n in names if n.startswith(_BATCH_PREFIX) and n.endswith(_BATCH_SUFFIX)
        )
        if cleanup:  # checkpoints of batches deleted, or written, just before a crash
            for n in names:
                base = n.removesuffix(".tmp").removesuffix(OFFSET_SUFFIX)
                if n.endswith(".tmp") or (n.endswith(OFFSET_SUFFIX) and base not in batches):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(self.dir / n)
        return [self.dir / n for n in batches]

    def _pending_files(self) -> list[Path]:
        return [*self._batches(), self.events_path]
