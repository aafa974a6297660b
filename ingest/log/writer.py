"""The writer of the log: appends one worker's Outcomes to its hash chain and seals segments.

Rules of this file:
- One writer per worker chain, enforced by flock on `active/<worker>/.lock`, which holds
  the writer's pid (`ingest.log.files.lock`; `writer_pid` believes it only while locked).
- A batch is durable after exactly one `os.fsync`; with a log key it ends with a batch line
  signing the chain head (`ingest.log.lines.batch_line`), written in the same write.
- At open the writer recovers its chain: sealed segments through `ingest.log.seal`, the
  active ones through `ingest.log.recovery`, which sets a torn last line aside, and with
  a key the records after the last valid batch line. Nothing is ever dropped.
- Nothing rewrites or deletes a record: the only files ever removed are an active segment
  whose sealed copy and manifest line are durable and identical, and `.tmp` leftovers.
- `LogWriter` is the chain's state (seq, head, keys, segment size and age) and every
  method keeps one invariant of it; reading that state back from the files is
  `ingest.log.recovery`'s.

Longer than 400 lines: one class, the chain's state, whose every method (append, roll,
seal, lookup of what it stored, close) keeps one invariant of it (seq, head, the key
index and the active segment's size move together); recovery, sealing, the lines and the
readers are already their own modules, and splitting the class would spread that one
invariant over several.
- The dedup key is `ingest.log.lines.idempotency_key`; a key the worker stored once is
  never appended again by that worker (`ingest.log.dedup` says what readers keep across
  workers).

Example:
    >>> import tempfile
    >>> from engine.records import Outcome, new_event
    >>> d = tempfile.mkdtemp()
    >>> ev = new_event({"hook_event_name": "Stop", "session_id": "s1"})
    >>> with LogWriter.open(d, "w1") as w:
    ...     [r.seq for r in w.append_batch([Outcome(event=ev, settings_id="s")])]
    [1]
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import NamedTuple, Self

import msgspec

from engine.errors import Unavailable
from engine.records import Outcome
from ingest.log.files import holder, lock, make_dirs, open_append
from ingest.log.layout import (
    Segment,
    check_worker,
    lock_path,
    root,
    seg_path,
    seqs,
)
from ingest.log.lines import (
    batch_line,
    key_digest,
    key_digest_of,
    log_key,
    stamp,
)
from ingest.log.manifest import ManifestEntry
from ingest.log.reader import lookup_in, lookup_many_in
from ingest.log.recovery import load_active
from ingest.log.seal import load_keys, recover_sealed, seal_segment

__all__ = ["DEFAULT_MAX_AGE_S", "DEFAULT_MAX_BYTES", "Appended", "LogWriter", "writer_pid"]

DEFAULT_MAX_BYTES = 64 * 1024 * 1024
DEFAULT_MAX_AGE_S = 3600.0
_logger = logging.getLogger(__name__)


class Appended(NamedTuple):
    """What `LogWriter.append` did: the stored record, or the input when it was a duplicate."""

    outcome: Outcome
    duplicate: bool


class LogWriter:
    """Appends one worker's Outcomes to its hash chain; seals segments as they fill or age.

    Not thread-safe: one writer object per worker, used from one thread at a time.
    """

    def __init__(
        self,
        root: Path,
        worker: str,
        lock_fd: int,
        *,
        max_bytes: int,
        max_age_s: float,
        key: bytes | None,
        clock: Callable[[], float],
    ) -> None:
        self.worker = worker
        self._root = root
        self._lock_fd: int | None = lock_fd
        self._max_bytes = max_bytes
        self._max_age_s = max_age_s
        self._key = key
        self._clock = clock
        self._fd: int | None = None
        self._keys: dict[bytes, int] = {}  # key digest -> seq of the segment holding it
        self._last_entry: ManifestEntry | None = None
        self._segment = 1  # seq of the active segment appended to
        self._size = 0
        self._started: float | None = None  # clock() at the segment's first record
        self._seq = 0
        self._head = ""
        self._retry_seal_at = 0.0

    @classmethod
    def open(
        cls,
        data_dir: str | os.PathLike[str],
        worker: str,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_age_s: float = DEFAULT_MAX_AGE_S,
        key: bytes | None = None,
        clock: Callable[[], float] = time.time,
    ) -> LogWriter:
        """Lock the worker's chain and recover its state, so a restarted worker continues it.

        `key` (default: env HOOKAUDIT_LOG_KEY, else ``<data-dir>/log/key``, made for a log
        with no record yet; ``b""``: none) signs batches and manifest lines. Raises
        Unavailable when
        another writer holds the worker (naming its pid), or the disk cannot be written.

        Example:
            >>> with LogWriter.open(data_dir, "w1", max_bytes=1 << 20) as w:
            ...     stored = w.append_batch(outcomes)
        """
        base = root(data_dir)
        check_worker(worker)
        # a log with no record yet gets its own key (<data-dir>/log/key) unless one is given
        fresh = not any((base / "active").glob("*/*.jsonl")) and not any(
            (base / "sealed").glob("*/*.parquet")
        )
        try:
            for sub in (base / "active" / worker, base / "sealed" / worker, base / "manifest"):
                make_dirs(sub)
            if key is None:
                key = log_key(base, create=fresh)
            key = key or None  # b"": explicitly no key (a log as an older hookaudit wrote it)
            lock_fd = lock(lock_path(base, worker), worker)
        except OSError as exc:
            raise Unavailable(f"{base}: cannot open the log for worker {worker!r}: {exc}") from exc
        writer = cls(
            base,
            worker,
            lock_fd,
            max_bytes=max_bytes,
            max_age_s=max_age_s,
            key=key,
            clock=clock,
        )
        try:
            writer._recover()
        except OSError as exc:
            writer.close()
            raise Unavailable(f"{base}: cannot recover worker {worker!r}: {exc}") from exc
        except BaseException:
            writer.close()
            raise
        return writer

    def _recover(self) -> None:
        entries, last_sealed = recover_sealed(
            self._root, self.worker, key=self._key, clock=self._clock
        )
        self._last_entry = entries[-1] if entries else None
        for entry in entries:
            keys = load_keys(self._root, entry, key=self._key)
            self._keys.update(dict.fromkeys(keys, entry.seq))
        active = sorted(
            s for s in seqs(self._root / "active" / self.worker, "jsonl") if s > last_sealed
        )
        if self._last_entry is not None:
            self._seq, self._head = self._last_entry.last_seq, self._last_entry.head
        self._segment = last_sealed + 1
        for seq in active:
            self._segment = seq
            self._load_active(seq)
            if seq != active[-1]:  # an older unsealed segment: seal it so one stays active
                self._roll()

    def _load_active(self, seq: int) -> None:
        """Recover the chain's state from an active segment (`ingest.log.recovery`)."""
        state = load_active(
            self._root,
            self.worker,
            seq,
            self._key,
            (self._seq, self._head),
            self._started,
            self._clock,
        )
        self._keys.update(state.keys)
        self._seq, self._head = state.seq, state.head
        self._started, self._size = state.started, state.size

    @property
    def last_seq(self) -> int:
        """The seq of the last record appended to this worker's chain (0 when empty)."""
        return self._seq

    @property
    def head(self) -> str:
        """The hash of the last record appended ('' when empty)."""
        return self._head

    @property
    def active_path(self) -> Path:
        """The active segment the next batch goes to (it may not exist yet)."""
        return seg_path(self._root, self.worker, self._segment, "active")

    def contains(self, outcome: Outcome) -> bool:
        """Whether an outcome with the same idempotency key is already in this worker's log.

        Example:
            >>> w.contains(stored[0])
            True
        """
        return key_digest(outcome) in self._keys

    def lookup(self, key: str) -> Outcome | None:
        """The stored outcome with this idempotency key (`ingest.log.lines.idempotency_key`).

        For answering a re-delivered event with what was decided the first time; it reads
        the one segment that holds the key, so it is meant for duplicates, not hot paths.

        Example:
            >>> w.lookup(idempotency_key(o.event.id, o.settings_id, o.replay_id)).seq
            1
        """
        digest = key_digest_of(key)
        seq = self._keys.get(digest)
        if seq is None:
            return None
        return lookup_in(self._stored(seq), digest)

    def _stored(self, seq: int) -> Segment:
        """Where segment `seq` of this chain is now: sealed, active, or (shipped and pruned
        here) its object in the bucket (`ingest.log.ship`)."""
        sealed = seg_path(self._root, self.worker, seq, "sealed")
        if sealed.exists():
            return Segment(self.worker, seq, "sealed", sealed)
        active = seg_path(self._root, self.worker, seq, "active")
        if not active.exists():
            from ingest.log.ship import remote_segments

            url = remote_segments(self._root, self.worker).get(seq)
            if url is not None:
                return Segment(self.worker, seq, "sealed", sealed, url)
        return Segment(self.worker, seq, "active", active)

    def lookup_many(self, keys: Sequence[str]) -> dict[str, Outcome]:
        """The stored outcomes with these idempotency keys (those found), by key.

        One scan of each segment that holds any of them: a batch of re-delivered events
        (a worker that lost its acks) costs a pass per segment, not a pass per event.
        It only reads files, so the worker runs it off its event loop.

        Example:
            >>> k = idempotency_key(o.event.id, o.settings_id, o.replay_id)
            >>> w.lookup_many([k])[k].seq
            1
        """
        by_seq: dict[int, dict[bytes, str]] = {}
        for key in keys:
            digest = key_digest_of(key)
            seq = self._keys.get(digest)
            if seq is not None:
                by_seq.setdefault(seq, {})[digest] = key
        out: dict[str, Outcome] = {}
        for seq, wanted in sorted(by_seq.items()):
            for digest, outcome in lookup_many_in(self._stored(seq), set(wanted)).items():
                out[wanted[digest]] = outcome
        return out

    def append(self, outcome: Outcome) -> Appended:
        """Append one outcome (a batch of one); a duplicate is returned as given, marked.

        Example:
            >>> w.append(o).duplicate, w.append(o).duplicate
            (False, True)
        """
        stored = self.append_batch([outcome])
        return Appended(stored[0], False) if stored else Appended(outcome, True)

    def append_batch(self, outcomes: Sequence[Outcome], *, roll: bool = True) -> list[Outcome]:
        """Chain, write and fsync (once) a batch; return the stored records, duplicates excluded.

        Each stored record gets worker, seq, appended (UTC now), prev_hash and hash. Rolls
        over to a new segment, sealing the old one, when size or age limits are passed;
        with ``roll=False`` the caller does that itself (`seal_due`, `roll_if_due`), e.g.
        off its event loop.

        Example:
            >>> [r.seq for r in w.append_batch([o1, o2, o1])]
            [1, 2]
        """
        if self._lock_fd is None:
            raise ValueError(f"log writer for worker {self.worker!r} is closed")
        if roll:
            self.roll_if_due()
        now = datetime.fromtimestamp(self._clock(), UTC)
        seq, prev = self._seq, self._head
        fresh: set[bytes] = set()
        stored: list[Outcome] = []
        lines: list[bytes] = []
        for o in outcomes:
            k = key_digest(o)
            if k in self._keys or k in fresh:
                continue
            fresh.add(k)
            seq += 1
            rec, line = stamp(
                msgspec.structs.replace(
                    o, worker=self.worker, seq=seq, appended=now, prev_hash=prev, hash=""
                )
            )
            prev = rec.hash
            stored.append(rec)
            lines.append(line)
        if not lines:
            return []
        if self._key is not None:
            lines.append(batch_line(self._key, self.worker, seq, prev))
        lines.append(b"")
        self._write(b"\n".join(lines))
        self._keys.update(dict.fromkeys(fresh, self._segment))
        self._seq, self._head = seq, prev
        if self._started is None:
            self._started = now.timestamp()
        if roll:
            self.roll_if_due()
        return stored

    def _write(self, data: bytes) -> None:
        path = self.active_path
        try:
            if self._fd is None:
                self._fd, _ = open_append(path)
            view = memoryview(data)
            while view:
                view = view[os.write(self._fd, view) :]
            os.fsync(self._fd)
        except OSError as exc:
            if self._fd is not None:  # leave no partial batch behind the chain's back
                with contextlib.suppress(OSError):
                    os.ftruncate(self._fd, self._size)
            raise Unavailable(f"{path}: cannot append to the log: {exc}") from exc
        self._size += len(data)

    def seal_due(self) -> bool:
        """Whether the active segment passed `max_bytes` or `max_age_s` (and no retry waits).

        Example:
            >>> w.seal_due()
            False
        """
        if self._size == 0 or self._clock() < self._retry_seal_at:
            return False
        aged = self._started is not None and self._clock() - self._started >= self._max_age_s
        return self._size >= self._max_bytes or aged

    def roll_if_due(self) -> ManifestEntry | None:
        """Seal the active segment if it passed `max_bytes` or `max_age_s`; for idle workers too.

        A failed seal is logged and retried a minute later; appending continues meanwhile.

        Example:
            >>> w.roll_if_due() is None  # nothing due
            True
        """
        if not self.seal_due():
            return None
        try:
            return self._roll()
        except Exception as exc:  # appends must go on: the records are safe in the active segment
            self._retry_seal_at = self._clock() + 60.0
            _logger.error("%s: sealing failed, will retry: %s", self.active_path, exc)
            return None

    def seal(self) -> ManifestEntry | None:
        """Seal the active segment now (for `hookaudit log seal`); None when it is empty.

        Example:
            >>> w.seal().count
            3
        """
        if self._lock_fd is None:
            raise ValueError(f"log writer for worker {self.worker!r} is closed")
        return self._roll()

    def _roll(self) -> ManifestEntry | None:
        self._close_segment()
        if self._size == 0:
            return None
        entry = seal_segment(
            self._root, self.worker, self._segment, prev=self._last_entry, key=self._key
        )
        self._last_entry = entry
        self._segment += 1
        self._size, self._started, self._retry_seal_at = 0, None, 0.0
        return entry

    def _close_segment(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def close(self) -> None:
        """Close the active segment and release the worker lock (the segment stays active).

        Example:
            >>> w.close()
        """
        self._close_segment()
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # releases the flock
            self._lock_fd = None

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def writer_pid(data_dir: str | os.PathLike[str], worker: str) -> int | None:
    """The pid of the running writer of `worker`'s chain, or None when none holds its lock.

    Example:
        >>> writer_pid(tempfile.mkdtemp(), "w1") is None
        True
    """
    return holder(lock_path(root(data_dir), check_worker(worker)))
