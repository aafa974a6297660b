"""The append-only log of Outcomes: the one owner of its layout on disk.

Layout under ``<data_dir>/log/``::

    active/<worker>/<seq:08d>.jsonl     one Outcome a line (exact `encode_json` bytes), fsync per batch
    active/<worker>/.lock               flock held by the one writer of that worker's chain
    sealed/<worker>/<seq:08d>.parquet   a sealed segment: flat query columns + each record's line
    sealed/<worker>/<seq:08d>.keys      its idempotency keys (a derived index, checked by sha256)
    sealed/<worker>/<seq:08d>.runs.parquet  one row per HookRun of its records (derived, for
                                        queries; checked by sha256; absent for older segments)
    manifest/<worker>.jsonl             one line per sealed segment: range, count, sha256, heads, hmac

Rules of this file:
- Only this module and its other half, `ingest/logverify.py` (sealing and verification), know
  these paths. `queries/` and `replay/` find and read segments through `segments`,
  `read_segment` and `iter_outcomes`. No NATS, no DuckDB; pyarrow only to read sealed segments.
- One chain per worker: seq 1, 2, …; `prev_hash` is the previous record's `hash`; `hash` is
  `chain_hash(record)`. A line is exactly `encode_json(record)`, so its hash is recomputed from
  the line's bytes alone (`recompute_hash`) and nothing a reader ignores can be changed unseen.
- One writer per worker chain, enforced by flock; readers never lock. A line exists once its
  newline is written: readers skip a trailing partial line, the writer moves it aside at open.
- A batch is durable after exactly one `os.fsync`; creating or renaming a file also fsyncs its
  directory. Nothing rewrites or deletes a record: the only files ever removed are an active
  segment whose sealed copy and manifest line are durable and identical, and `.tmp` leftovers.
  A torn last line is moved to `<segment>.torn-<ts>`, never dropped.
- Bad lines are reported as (file, line, reason) and skipped by readers; never a crash.

Example:
    >>> import tempfile
    >>> from engine.records import Outcome, new_event
    >>> d = tempfile.mkdtemp()
    >>> ev = new_event({"hook_event_name": "Stop", "session_id": "s1"})
    >>> with LogWriter.open(d, "w1") as w:
    ...     [r.seq for r in w.append_batch([Outcome(event=ev, settings_id="s")])]
    [1]
    >>> [o.event.id == ev.id for o in iter_outcomes(d)]
    [True]
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import re
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Literal, NamedTuple, Self

import msgspec

from engine.errors import Unavailable
from engine.records import Outcome, chain_hash, decode_outcome_json, encode_json
from ingest.protocol import idempotency_key

if TYPE_CHECKING:
    from ingest.logverify import ManifestEntry, VerifyReport

__all__ = [
    "DEFAULT_MAX_AGE_S",
    "DEFAULT_MAX_BYTES",
    "KEY_ENV",
    "Appended",
    "LogWriter",
    "OnCorrupt",
    "Segment",
    "SegmentKind",
    "iter_outcomes",
    "iter_raw_lines",
    "key_digest",
    "lookup_in",
    "read_segment",
    "recompute_hash",
    "runs_path",
    "segments",
    "verify",
]

DEFAULT_MAX_BYTES = 64 * 1024 * 1024
DEFAULT_MAX_AGE_S = 3600.0
KEY_ENV = "HOOKAUDIT_LOG_KEY"

SegmentKind = Literal["active", "sealed"]
OnCorrupt = Callable[[str, int, str], None]
"""Called with (file, line, reason) for a record that cannot be read; the record is skipped."""

_logger = logging.getLogger(__name__)
_WORKER_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")
_SEGMENT_RE = re.compile(r"(\d{8,})\.(jsonl|parquet)\Z")
_EXT: dict[SegmentKind, str] = {"active": "jsonl", "sealed": "parquet"}
_HASH_TAIL = b',"hash":""}'  # how every canonical encoding ends: `hash` is Outcome's last field
_HEX_LEN = 64
_encoder = msgspec.json.Encoder()


# ---------------------------------------------------------------- layout (shared with logverify)


def _root(data_dir: str | os.PathLike[str]) -> Path:
    return Path(data_dir) / "log"


def _check_worker(worker: str) -> str:
    if not _WORKER_RE.match(worker):
        raise ValueError(
            f"worker name {worker!r}: expected 1-128 of [A-Za-z0-9._-], not starting with . _ -"
        )
    return worker


def _seg_path(root: Path, worker: str, seq: int, kind: SegmentKind) -> Path:
    return root / kind / worker / f"{seq:08d}.{_EXT[kind]}"


def _keys_path(root: Path, worker: str, seq: int) -> Path:
    return root / "sealed" / worker / f"{seq:08d}.keys"


def _runs_path(root: Path, worker: str, seq: int) -> Path:
    return root / "sealed" / worker / f"{seq:08d}.runs.parquet"


def _manifest_path(root: Path, worker: str) -> Path:
    return root / "manifest" / f"{worker}.jsonl"


def _rel(root: Path, path: Path) -> str:
    return path.relative_to(root).as_posix()


def _stamp_name(clock: Callable[[], float]) -> str:
    return datetime.fromtimestamp(clock(), UTC).strftime("%Y%m%dT%H%M%S%fZ")


def _seqs(folder: Path, ext: str) -> dict[int, Path]:
    """Segment files named `<seq>.<ext>` in a folder, by seq (other files are ignored)."""
    found: dict[int, Path] = {}
    with contextlib.suppress(FileNotFoundError):
        for entry in os.scandir(folder):
            m = _SEGMENT_RE.match(entry.name)
            if m and m.group(2) == ext:
                found[int(m.group(1))] = Path(entry.path)
    return found


def _workers(root: Path) -> list[str]:
    names: set[str] = set()
    for kind in ("active", "sealed"):
        with contextlib.suppress(FileNotFoundError):
            names.update(e.name for e in os.scandir(root / kind) if e.is_dir())
    with contextlib.suppress(FileNotFoundError):
        names.update(
            e.name[:-6] for e in os.scandir(root / "manifest") if e.name.endswith(".jsonl")
        )
    return sorted(n for n in names if _WORKER_RE.match(n))


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _make_dirs(path: Path) -> None:
    """mkdir -p, fsyncing each parent that gained an entry, so new segments' dirs survive a crash."""
    if path.is_dir():
        return
    _make_dirs(path.parent)
    with contextlib.suppress(FileExistsError):
        path.mkdir()
        _fsync_dir(path.parent)


def _write_durably(
    path: Path, data: bytes, *, mode: int = os.O_WRONLY | os.O_CREAT | os.O_EXCL
) -> None:
    """Write, fsync and close `path` (the caller fsyncs the directory after a rename)."""
    fd = os.open(path, mode | os.O_CLOEXEC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)


def _replace_durably(path: Path, data: bytes) -> None:
    """Atomically replace `path` with `data`: temp name, fsync, rename, fsync the directory."""
    tmp = path.with_name(path.name + ".tmp")
    _write_durably(tmp, data, mode=os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.replace(tmp, path)
    _fsync_dir(path.parent)


def _set_aside(path: Path, keep: int, suffix: str, clock: Callable[[], float]) -> Path:
    """Move bytes after offset `keep` to `<path>.<suffix>-<ts>`, then truncate `path` to `keep`."""
    with open(path, "rb") as f:
        f.seek(keep)
        tail = f.read()
    aside = path.with_name(f"{path.name}.{suffix}-{_stamp_name(clock)}")
    _write_durably(aside, tail)
    os.truncate(path, keep)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    _fsync_dir(path.parent)
    return aside


# ---------------------------------------------------------------- record lines


def _stamp(rec: Outcome) -> tuple[Outcome, bytes]:
    """Set `hash` on a record whose other chain fields are set; return it and its line bytes.

    One encode for both the hash and the line: the canonical bytes end in `"hash":""}`, so
    the line is those bytes with the digest spliced in (`test_log` asserts the equivalence).
    """
    canon = _encoder.encode(rec if rec.hash == "" else msgspec.structs.replace(rec, hash=""))
    if canon.endswith(_HASH_TAIL):
        digest = hashlib.sha256(canon).hexdigest()
        return msgspec.structs.replace(rec, hash=digest), canon[:-2] + digest.encode() + b'"}'
    stamped = msgspec.structs.replace(rec, hash=chain_hash(rec))  # a future field after `hash`
    return stamped, encode_json(stamped)


def recompute_hash(line: bytes, record: Outcome) -> str:
    """The chain hash of the record stored on `line`, recomputed from the line's exact bytes.

    A line this module wrote ends with its 64-hex `hash`; everything before it is hashed
    as written, so even fields this version does not know are covered. Any other line
    shape falls back to `chain_hash(record)`.

    Example:
        >>> rec, line = _stamp(Outcome(event=new_event({"hook_event_name": "Stop"}), settings_id="s"))
        >>> recompute_hash(line, rec) == rec.hash == chain_hash(rec)
        True
    """
    n = _HEX_LEN + 2
    if (
        len(line) > n + 8
        and line[-2:] == b'"}'
        and line[-n - 9 : -n] == b',"hash":"'
        and line[-n:-2].decode("ascii", "replace") == record.hash
    ):
        h = hashlib.sha256(memoryview(line)[:-n])
        h.update(b'"}')
        return h.hexdigest()
    return chain_hash(record)


def _digest(key: str) -> bytes:
    return hashlib.blake2b(key.encode(), digest_size=16).digest()


def key_digest(outcome: Outcome) -> bytes:
    """The 16-byte digest of the outcome's idempotency key, which a worker's log stores once.

    The key is `ingest.protocol.idempotency_key(event.id, settings_id, replay_id)`.

    Example:
        >>> o = Outcome(event=new_event({"hook_event_name": "Stop"}), settings_id="s")
        >>> key_digest(o) == key_digest(msgspec.structs.replace(o, seq=9))
        True
    """
    return _digest(idempotency_key(outcome.event.id, outcome.settings_id, outcome.replay_id))


class _EventRef(msgspec.Struct):
    id: str


class _LineView(msgspec.Struct):
    """The few fields the writer needs from a line to recover its state (fast to decode)."""

    event: _EventRef
    settings_id: str
    replay_id: str | None = None
    seq: int = 0
    appended: datetime | None = None
    hash: str = ""


_view_decoder = msgspec.json.Decoder(_LineView)


# ---------------------------------------------------------------- reading


@dataclass(frozen=True, slots=True, order=True)
class Segment:
    """One segment file: `kind` 'active' (JSONL, still appended) or 'sealed' (Parquet)."""

    worker: str
    seq: int
    kind: SegmentKind
    path: Path = field(compare=False)

    @property
    def name(self) -> str:
        """The path under `<data_dir>/log/`, as `verify` reports it: 'active/w1/00000002.jsonl'."""
        return f"{self.kind}/{self.worker}/{self.path.name}"


def runs_path(seg: Segment) -> Path:
    """The runs side file of a segment (one row per HookRun, `ingest.sealcols.RUN_SCHEMA`).

    Only sealed segments have one, and only those sealed since it exists: check `exists()`.

    Example:
        >>> runs_path(segments(data_dir)[0]).name
        '00000001.runs.parquet'
    """
    return _runs_path(seg.path.parents[2], seg.worker, seg.seq)


def segments(data_dir: str | os.PathLike[str], *, worker: str | None = None) -> list[Segment]:
    """Every segment, by worker then seq; a seq both sealed and active counts as sealed.

    Example:
        >>> segments(tempfile.mkdtemp())
        []
    """
    root = _root(data_dir)
    found: list[Segment] = []
    for w in [_check_worker(worker)] if worker is not None else _workers(root):
        sealed = _seqs(root / "sealed" / w, "parquet")
        active = _seqs(root / "active" / w, "jsonl")
        found += [Segment(w, s, "sealed", p) for s, p in sealed.items()]
        found += [Segment(w, s, "active", p) for s, p in active.items() if s not in sealed]
    return sorted(found)


def _jsonl_lines(path: Path) -> Iterator[tuple[int, bytes, bool]]:
    """(line number, bytes without the newline, complete) for each line of a JSONL file."""
    with open(path, "rb") as f:
        for n, raw in enumerate(f, 1):
            if raw.endswith(b"\n"):
                yield n, raw[:-1], True
            else:
                yield n, raw, False


def _parquet_lines(path: Path) -> Iterator[tuple[int, bytes]]:
    import pyarrow.parquet as pq  # here, so that appending never pays for importing pyarrow

    n = 0
    with pq.ParquetFile(path) as pf:
        if "record" not in pf.schema_arrow.names:
            raise ValueError(f"{path}: no 'record' column: not a hookaudit log segment")
        for batch in pf.iter_batches(columns=["record"]):
            for value in batch.column(0).to_pylist():
                n += 1
                yield n, value if isinstance(value, bytes) else b""


def iter_raw_lines(seg: Segment) -> Iterator[tuple[int, bytes]]:
    """(line or row number from 1, exact record bytes) of a segment; a partial last line is skipped.

    An active segment sealed meanwhile is read from its sealed copy.

    Example:
        >>> for n, raw in iter_raw_lines(segments(data_dir)[0]):
        ...     print(n, raw[:9])
        1 b'{"event":'
    """
    path = seg.path
    if seg.kind == "active":
        try:
            f = open(path, "rb")  # noqa: SIM115 - closed below; opened first to detect sealing
        except FileNotFoundError:
            path = path.parents[2] / "sealed" / seg.worker / f"{seg.seq:08d}.parquet"
            if not path.exists():
                raise
        else:
            with f:
                for n, raw in enumerate(f, 1):
                    if raw.endswith(b"\n"):
                        yield n, raw[:-1]
            return
    yield from _parquet_lines(path)


def _warn_corrupt(file: str, line: int, reason: str) -> None:
    _logger.warning("%s:%d: skipped unreadable record: %s", file, line, reason)


def read_segment(seg: Segment, *, on_corrupt: OnCorrupt | None = None) -> Iterator[Outcome]:
    """The Outcomes of one segment in order; an unreadable one goes to `on_corrupt` and is skipped.

    `on_corrupt(file, line, reason)` defaults to a logged warning; a sealed file that
    cannot be opened is reported with line 0.

    Example:
        >>> [o.seq for o in read_segment(segments(data_dir)[0])]
        [1, 2, 3]
    """
    report = on_corrupt or _warn_corrupt
    lines = iter_raw_lines(seg)
    while True:
        try:
            item = next(lines, None)
        except (OSError, ValueError) as exc:  # pyarrow's errors derive from these
            report(str(seg.path), 0, f"cannot read segment: {exc}")
            return
        if item is None:
            return
        n, raw = item
        try:
            yield decode_outcome_json(raw)
        except msgspec.DecodeError as exc:
            report(str(seg.path), n, str(exc))


def iter_outcomes(
    data_dir: str | os.PathLike[str],
    *,
    worker: str | None = None,
    on_corrupt: OnCorrupt | None = None,
) -> Iterator[Outcome]:
    """Every Outcome in the log (sealed and active), by worker then seq.

    Example:
        >>> bad = []
        >>> n = sum(1 for _ in iter_outcomes(data_dir, on_corrupt=lambda *a: bad.append(a)))
    """
    for seg in segments(data_dir, worker=worker):
        yield from read_segment(seg, on_corrupt=on_corrupt)


def lookup_in(seg: Segment, digest: bytes) -> Outcome | None:
    """The record in `seg` whose `key_digest` is `digest`, or None (a scan of that segment).

    Example:
        >>> lookup_in(segments(data_dir)[0], key_digest(o)).seq
        1
    """
    for _, raw in iter_raw_lines(seg):
        try:
            view = _view_decoder.decode(raw)
        except msgspec.DecodeError:
            continue
        if _digest(idempotency_key(view.event.id, view.settings_id, view.replay_id)) == digest:
            return decode_outcome_json(raw)
    return None


def verify(data_dir: str | os.PathLike[str], *, key: bytes | None = None) -> VerifyReport:
    """Check every chain and manifest of the log; see `ingest.logverify.verify`.

    Example:
        >>> verify(data_dir).ok
        True
    """
    from ingest import logverify  # logverify builds on this module's layout

    return logverify.verify(data_dir, key=key)


# ---------------------------------------------------------------- writing


class Appended(NamedTuple):
    """What `LogWriter.append` did: the stored record, or the input when it was a duplicate."""

    outcome: Outcome
    duplicate: bool


def _env_key() -> bytes | None:
    value = os.environ.get(KEY_ENV, "")
    return value.encode() if value else None


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

        `key` (default: env HOOKAUDIT_LOG_KEY) signs manifest lines. Raises Unavailable when
        another writer holds the worker, or the disk cannot be written.

        Example:
            >>> with LogWriter.open(data_dir, "w1", max_bytes=1 << 20) as w:
            ...     stored = w.append_batch(outcomes)
        """
        root = _root(data_dir)
        _check_worker(worker)
        try:
            for sub in (root / "active" / worker, root / "sealed" / worker, root / "manifest"):
                _make_dirs(sub)
            lock_fd = _lock(root / "active" / worker / ".lock", worker)
        except OSError as exc:
            raise Unavailable(f"{root}: cannot open the log for worker {worker!r}: {exc}") from exc
        writer = cls(
            root,
            worker,
            lock_fd,
            max_bytes=max_bytes,
            max_age_s=max_age_s,
            key=key if key is not None else _env_key(),
            clock=clock,
        )
        try:
            writer._recover()
        except OSError as exc:
            writer.close()
            raise Unavailable(f"{root}: cannot recover worker {worker!r}: {exc}") from exc
        except BaseException:
            writer.close()
            raise
        return writer

    def _recover(self) -> None:
        from ingest import logverify  # logverify builds on this module's layout

        entries, last_sealed = logverify.recover_sealed(
            self._root, self.worker, key=self._key, clock=self._clock
        )
        self._last_entry = entries[-1] if entries else None
        for entry in entries:
            keys = logverify.load_keys(self._root, entry, key=self._key)
            self._keys.update(dict.fromkeys(keys, entry.seq))
        active = sorted(
            s for s in _seqs(self._root / "active" / self.worker, "jsonl") if s > last_sealed
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
        path = _seg_path(self._root, self.worker, seq, "active")
        good = 0  # bytes up to the last complete line
        self._size, self._started = 0, None
        for n, raw, complete in _jsonl_lines(path):
            if not complete:
                aside = _set_aside(path, good, "torn", self._clock)
                _logger.warning(
                    "%s: torn last line (%d bytes, no newline) moved to %s",
                    path,
                    len(raw),
                    aside.name,
                )
                break
            good += len(raw) + 1
            try:
                view = _view_decoder.decode(raw)
            except msgspec.DecodeError as exc:
                _logger.warning(
                    "%s:%d: unreadable record (verify will report it): %s", path, n, exc
                )
                continue
            key = idempotency_key(view.event.id, view.settings_id, view.replay_id)
            self._keys[_digest(key)] = seq
            self._seq, self._head = view.seq, view.hash
            if self._started is None:
                self._started = view.appended.timestamp() if view.appended else self._clock()
        self._size = good

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
        return _seg_path(self._root, self.worker, self._segment, "active")

    def contains(self, outcome: Outcome) -> bool:
        """Whether an outcome with the same idempotency key is already in this worker's log.

        Example:
            >>> w.contains(stored[0])
            True
        """
        return key_digest(outcome) in self._keys

    def lookup(self, key: str) -> Outcome | None:
        """The stored outcome with this idempotency key (`ingest.protocol.idempotency_key`).

        For answering a re-delivered event with what was decided the first time; it reads
        the one segment that holds the key, so it is meant for duplicates, not hot paths.

        Example:
            >>> w.lookup(idempotency_key(o.event.id, o.settings_id, o.replay_id)).seq
            1
        """
        digest = _digest(key)
        seq = self._keys.get(digest)
        if seq is None:
            return None
        sealed = _seg_path(self._root, self.worker, seq, "sealed")
        kind: SegmentKind = "sealed" if sealed.exists() else "active"
        return lookup_in(
            Segment(self.worker, seq, kind, _seg_path(self._root, self.worker, seq, kind)), digest
        )

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
            rec, line = _stamp(
                msgspec.structs.replace(
                    o, worker=self.worker, seq=seq, appended=now, prev_hash=prev, hash=""
                )
            )
            prev = rec.hash
            stored.append(rec)
            lines.append(line)
        if not lines:
            return []
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
                created = not path.exists()
                self._fd = os.open(
                    path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644
                )
                if created:
                    _fsync_dir(path.parent)
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
        from ingest import logverify  # logverify builds on this module's layout

        self._close_segment()
        if self._size == 0:
            return None
        entry = logverify.seal_segment(
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


def _lock(path: Path, worker: str) -> int:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
        os.close(fd)
        raise Unavailable(
            f"{path}: the log of worker {worker!r} is already open by another writer (pid {holder}); "
            "give each worker process its own worker name"
        ) from None
    except OSError:
        os.close(fd)
        raise
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd
