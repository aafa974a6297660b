"""The emitter's disk spool: events that could not reach NATS, kept until they can.

Rules of this file:
- No NATS import. Flushing takes a `Publish` callable (the NATS adapter lives in
  `ingest/emit.py`), so this module is plain files, locks and msgspec.
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

import asyncio
import base64
import contextlib
import fcntl
import os
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import IO

import msgspec

from engine.errors import HookauditError, Unavailable
from engine.records import HookEvent, decode_event_json, encode_json, uuid7

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
_OFFSET_SUFFIX = ".offset"

#: How many publishes a flush keeps in flight; acks come back in order on one connection.
WINDOW = 256
#: How often a long flush records its progress (seconds, acked events), so a crash
#: re-sends little; a checkpoint costs one small file write and a rename.
CHECKPOINT_EVERY = 1.0
CHECKPOINT_EVENTS = 2048
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
                    _append_durably(self.events_path, line, self.dir)
                    return
            # The lock stayed busy (a hung appender, a flush on a slow disk, a neighbour
            # holding it): the event becomes a batch of its own, which needs no lock.
            _write_aside(self.dir, f"{_BATCH_PREFIX}{uuid7()}{_BATCH_SUFFIX}", line)
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
                    _append_durably(self.rejects_path, data, self.dir)
                    return
            _write_aside(self.dir, f"{_REJECTS_PREFIX}{uuid7()}{_BATCH_SUFFIX}", data)
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
            start = _read_offset(path) if path.name != EVENTS else 0
            try:
                n, b = _count_lines(path, start)
            except FileNotFoundError:
                continue  # a flush finished it while we looked
            if n:
                events, size, files = events + n, size + b, files + 1
        lines = 0
        for path in self._reject_files():
            with contextlib.suppress(FileNotFoundError):
                lines += _count_lines(path, 0)[0]
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
            out += _rejected_lines(path)
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
                    total += _count_lines(b, _read_offset(b))[0]
            run = _Run(self, publish, deadline, progress, total)
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
            _fsync_dir(self.dir)

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
                base = n.removesuffix(".tmp").removesuffix(_OFFSET_SUFFIX)
                if n.endswith(".tmp") or (n.endswith(_OFFSET_SUFFIX) and base not in batches):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(self.dir / n)
        return [self.dir / n for n in batches]

    def _pending_files(self) -> list[Path]:
        return [*self._batches(), self.events_path]


class _Run:
    """One flush in progress: a window of in-flight publishes, acked in order."""

    def __init__(
        self,
        spool: Spool,
        publish: Publish,
        deadline: float | None,
        progress: Callable[[int, int], None] | None,
        total: int,
    ) -> None:
        self.spool = spool
        self.publish = publish
        self.deadline = deadline
        self.progress = progress
        self.total = total
        self.published = self.duplicates = self.rejected = self.done = 0
        self.error: str | None = None
        self.stopped = False
        self.last_report = time.monotonic()

    def out_of_time(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline

    async def batch(self, path: Path) -> bool:
        """Flush one batch; False if the flush must stop (error or budget spent)."""
        offset = _read_offset(path)
        acked = offset
        last_checkpoint, done_at_checkpoint = time.monotonic(), self.done
        inflight: deque[tuple[int, asyncio.Task[Sent] | None]] = deque()
        try:
            with open(path, "rb") as f:
                f.seek(offset)
                pos = offset
                for line in _lines(f):
                    start, pos = pos, pos + len(line)
                    if self.out_of_time():
                        self.stopped = True
                        break
                    task = self._start(path, line, start)
                    inflight.append((pos, task))
                    # The first publish goes alone: if it has to provision the streams,
                    # nothing overtakes it and the stream keeps the spool's order.
                    window = WINDOW if self.done else 1
                    while len(inflight) >= window or (inflight and inflight[0][1] is None):
                        acked = await self._settle(inflight)
                    if (
                        self.done - done_at_checkpoint >= CHECKPOINT_EVENTS
                        or time.monotonic() - last_checkpoint >= CHECKPOINT_EVERY
                    ):
                        _write_offset(path, acked)
                        last_checkpoint, done_at_checkpoint = time.monotonic(), self.done
                        self._report()
                while inflight:
                    acked = await self._settle(inflight)
        except HookauditError as e:
            self.error = str(e)
        finally:
            for _, task in inflight:
                if task is not None:
                    task.cancel()
            if inflight:
                await asyncio.gather(
                    *(t for _, t in inflight if t is not None), return_exceptions=True
                )
        if self.error is not None or self.stopped:
            _write_offset(path, acked)
            return False
        path.unlink()
        Path(f"{path}{_OFFSET_SUFFIX}").unlink(missing_ok=True)
        _fsync_dir(path.parent)
        return True

    def _start(self, path: Path, line: bytes, start: int) -> asyncio.Task[Sent] | None:
        """Start publishing `line`; None when it was rejected instead."""
        if not line.strip():
            return None
        why = None
        if not line.endswith(b"\n"):
            why = "torn line: no newline at the end of the spool (a writer crashed mid-write)"
        else:
            try:
                event = decode_event_json(line)
            except (msgspec.DecodeError, msgspec.ValidationError) as e:
                why = f"not a HookEvent: {e}"
        if why is not None:
            self.spool.reject(line, why, source=path.name, offset=start)
            self.rejected += 1
            return None
        return asyncio.ensure_future(self._publish(event, path, line, start))

    async def _publish(self, event: HookEvent, path: Path, line: bytes, start: int) -> Sent:
        sent = await self.publish(event)
        if sent.rejected is not None:
            self.spool.reject(line, sent.rejected, source=path.name, offset=start)
        return sent

    async def _settle(self, inflight: deque[tuple[int, asyncio.Task[Sent] | None]]) -> int:
        """Wait for the oldest publish; return the offset acked up to. Raises on failure."""
        end, task = inflight[0]
        if task is not None:
            sent = await task  # Unavailable propagates: stop, keep the unacked rest
            if sent.rejected is not None:
                self.rejected += 1
            elif sent.duplicate:
                self.duplicates += 1
            else:
                self.published += 1
        inflight.popleft()
        self.done += 1
        return end

    def _report(self) -> None:
        if self.progress is not None and time.monotonic() - self.last_report >= 1.0:
            self.last_report = time.monotonic()
            self.progress(self.done, self.total)


# -- file helpers ------------------------------------------------------------------------


def _append_durably(path: Path, data: bytes, directory: Path) -> None:
    """Append `data` as whole lines, then fsync; the caller holds the append lock."""
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        size = os.fstat(fd).st_size
        if size > 0 and os.pread(fd, 1, size - 1) != b"\n":
            # A writer died mid-line: end its fragment so our line stays whole.
            data = b"\n" + data
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    if size == 0:
        _fsync_dir(directory)  # the file may be new: make its name durable too


def _rejected_lines(path: Path) -> list[dict[str, object]]:
    import hashlib
    import json

    out: list[dict[str, object]] = []
    try:
        with open(path, "rb") as f:
            for line in _lines(f):
                try:
                    rec = json.loads(line)
                except ValueError:
                    rec = {"reason": "unreadable reject line"}
                if not isinstance(rec, dict):
                    rec = {"reason": "unreadable reject line"}
                body = str(rec.get("line", "")).encode()
                out.append(
                    {
                        "ts": rec.get("ts", ""),
                        "stage": "spool",
                        "reason": rec.get("reason", ""),
                        "size": len(body),
                        "sha256": hashlib.sha256(body).hexdigest(),
                        "path": f"{path}:{rec.get('offset', '')}",
                    }
                )
    except FileNotFoundError:
        return []
    return out


def _write_aside(directory: Path, name: str, data: bytes) -> None:
    """Write `data` as a new file `name`, whole or not at all, without the append lock.

    The data goes to a ``.part`` file first (a flush's cleanup leaves those alone), is
    fsynced, then renamed: a flush sees the file complete or not at all.
    """
    part = directory / f".{name}.part"
    fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.rename(part, directory / name)
    _fsync_dir(directory)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _lines(f: IO[bytes]) -> Iterator[bytes]:
    while True:
        line = f.readline()
        if not line:
            return
        yield line


def _count_lines(path: Path, start: int) -> tuple[int, int]:
    """(lines, bytes) of `path` from `start`; an unterminated tail counts as a line."""
    n = size = 0
    last = b"\n"
    with open(path, "rb") as f:
        f.seek(start)
        while chunk := f.read(1 << 20):
            n += chunk.count(b"\n")
            size += len(chunk)
            last = chunk[-1:]
    return n + (last != b"\n"), size


def _offset_path(batch: Path) -> Path:
    return Path(f"{batch}{_OFFSET_SUFFIX}")


def _read_offset(batch: Path) -> int:
    """The acked offset of `batch`; 0 when missing or unreadable (a re-send is harmless)."""
    try:
        text = _offset_path(batch).read_text().strip()
        offset = int(text)
        return offset if 0 <= offset <= batch.stat().st_size else 0
    except (OSError, ValueError):
        return 0


def _write_offset(batch: Path, offset: int) -> None:
    # Not fsynced: a lost checkpoint only means re-sending acked lines, which JetStream
    # drops as duplicates; os.replace never leaves a value larger than one we acked.
    tmp = Path(f"{batch}{_OFFSET_SUFFIX}.tmp")
    tmp.write_text(str(offset))
    os.replace(tmp, _offset_path(batch))
