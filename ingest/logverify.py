"""Sealing and verification of the append-only log: the other half of `ingest/log.py`.

Rules of this file:
- The layout is `ingest/log.py`'s; this module only adds what a sealed segment holds and how
  the whole log is checked. No NATS, no DuckDB.
- Sealing is crash-safe by order: keys index and runs side file, then Parquet (each: temp
  name, fsync, rename, fsync the directory), then the manifest line (fsync), and only then
  the active JSONL is removed.
  Whatever a crash leaves, `recover_sealed` finishes or undoes at the writer's next open, and
  it only signs what still has its active source byte for byte, never a file found alone.
- A sealed segment keeps each record's exact line in its `record` column; the flat columns
  (`_BASE_COLUMNS`, then `ingest.sealcols.SEALED_EXTRA_COLUMNS`, which older segments lack)
  are a copy for queries and `verify` checks them against the records. So is the runs side
  file (`ingest.sealcols.RUN_SCHEMA`), whose sha256 the manifest line holds as `runs_sha256`
  (absent in lines written before it existed).
- `verify` never stops at the first problem and never raises: it reports every broken record,
  file and manifest line as a `VerifyError`, in chain order, and names the first.

Example:
    >>> report = verify(data_dir)
    >>> report.ok, report.first_error
    (True, None)
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import logging
import os
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, NamedTuple

import msgspec
import pyarrow as pa
import pyarrow.parquet as pq

from engine.errors import LogCorrupt, Unavailable
from engine.records import Outcome, decode_outcome_json
from ingest.log import (
    _check_worker,
    _env_key,
    _fsync_dir,
    _jsonl_lines,
    _keys_path,
    _manifest_path,
    _parquet_lines,
    _rel,
    _replace_durably,
    _root,
    _runs_path,
    _seg_path,
    _seqs,
    _set_aside,
    _stamp_name,
    _workers,
    _write_durably,
    key_digest,
    recompute_hash,
)
from ingest.sealcols import SEALED_EXTRA_COLUMNS, runs_table, sealed_write_options

__all__ = [
    "BASE_SCHEMA",
    "KEYS_MAGIC",
    "SCHEMA",
    "ErrorKind",
    "ManifestEntry",
    "ManifestLine",
    "VerifyError",
    "VerifyReport",
    "WorkerReport",
    "load_keys",
    "manifest_hmac",
    "read_manifest",
    "recover_sealed",
    "seal_segment",
    "segment_table",
    "verify",
]

KEYS_MAGIC = b"HAKEYS1\n"
_NO_KEY = bytes(16)
_logger = logging.getLogger(__name__)
_TS = pa.timestamp("us", tz="UTC")
_BASE_COLUMNS: tuple[tuple[str, Any, Callable[[Outcome], object]], ...] = (
    ("id", pa.string(), lambda o: o.event.id),
    ("ts", _TS, lambda o: o.event.ts),
    ("event", pa.string(), lambda o: o.event.event),
    ("source", pa.string(), lambda o: o.event.source),
    ("host", pa.string(), lambda o: o.event.host),
    ("user", pa.string(), lambda o: o.event.user),
    ("session_id", pa.string(), lambda o: o.event.session_id),
    ("tool_name", pa.string(), lambda o: o.event.tool_name),
    ("tool_use_id", pa.string(), lambda o: o.event.tool_use_id),
    ("cwd", pa.string(), lambda o: o.event.cwd),
    ("settings_id", pa.string(), lambda o: o.settings_id),
    ("posture", pa.string(), lambda o: o.posture),
    ("profile", pa.string(), lambda o: o.profile),
    ("blocked", pa.bool_(), lambda o: o.blocked),
    ("decision", pa.string(), lambda o: o.decision),
    ("reason", pa.string(), lambda o: o.reason),
    ("replay_id", pa.string(), lambda o: o.replay_id),
    ("worker", pa.string(), lambda o: o.worker),
    ("seq", pa.int64(), lambda o: o.seq),
    ("appended", _TS, lambda o: o.appended),
    ("prev_hash", pa.string(), lambda o: o.prev_hash),
    ("hash", pa.string(), lambda o: o.hash),
)
# every flat column a segment sealed now has: the base ones, then the additive extras
_COLUMNS = _BASE_COLUMNS + tuple((name, typ, get) for name, typ, get, _ in SEALED_EXTRA_COLUMNS)
_BASE_NAMES = frozenset(name for name, _, _ in _BASE_COLUMNS)
_RECORD = pa.field("record", pa.binary(), nullable=False)
BASE_SCHEMA = pa.schema(
    [pa.field(name, typ) for name, typ, _ in _BASE_COLUMNS] + [_RECORD],
    metadata={"hookaudit.format": "log-segment/1"},
)
"""The columns every sealed segment has (segments sealed before the extra columns: only these)."""
SCHEMA = pa.schema(
    [pa.field(name, typ) for name, typ, _ in _COLUMNS] + [_RECORD],
    metadata={"hookaudit.format": "log-segment/2"},
)
"""The columns of a segment sealed now: BASE_SCHEMA's, with the extra flat columns after `hash`."""


# ---------------------------------------------------------------- manifest


class ManifestEntry(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One sealed segment as listed in `manifest/<worker>.jsonl`.

    `first_seq`/`last_seq` are record seqs; `first_ts`/`last_ts` their `appended` times;
    `sha256`/`size` those of the Parquet file, `keys_sha256` that of its keys index,
    `runs_sha256` that of its runs side file (None, and omitted, for a segment sealed before
    runs files existed); `head` is the last record's hash and `prev_head` the previous entry's
    `head`;
    `hmac` is `manifest_hmac(entry, key)` when the writer has a key.
    """

    worker: str
    seq: int
    first_seq: int
    last_seq: int
    count: int
    first_ts: datetime | None
    last_ts: datetime | None
    sha256: str
    size: int
    keys_sha256: str
    head: str
    prev_head: str
    runs_sha256: str | None = None
    hmac: str | None = None


class ManifestLine(NamedTuple):
    line: int
    entry: ManifestEntry | None
    error: str | None  # why the line could not be read; 'torn' for a last line with no newline


_manifest_decoder = msgspec.json.Decoder(ManifestEntry)
_manifest_encoder = msgspec.json.Encoder()


def read_manifest(data_dir: str | os.PathLike[str], worker: str) -> list[ManifestLine]:
    """Every line of a worker's manifest, decoded, with its line number or why it is unreadable.

    Example:
        >>> [m.entry.count for m in read_manifest(data_dir, "w1")]
        [1000, 1000]
    """
    return list(_manifest_lines(_manifest_path(_root(data_dir), _check_worker(worker))))


def _manifest_lines(path: Path) -> Iterator[ManifestLine]:
    with contextlib.suppress(FileNotFoundError), open(path, "rb") as f:
        for n, raw in enumerate(f, 1):
            if not raw.endswith(b"\n"):
                yield ManifestLine(n, None, "torn")
                continue
            try:
                yield ManifestLine(n, _manifest_decoder.decode(raw), None)
            except msgspec.DecodeError as exc:
                yield ManifestLine(n, None, f"unreadable manifest line: {exc}")


def _append_manifest(path: Path, entry: ManifestEntry) -> None:
    """Append one line and fsync; a failed write is truncated away so no torn line stays."""
    created = not path.exists()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        size = os.fstat(fd).st_size
        try:
            os.write(fd, _manifest_encoder.encode(entry) + b"\n")
            os.fsync(fd)
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, size)
            raise
    finally:
        os.close(fd)
    if created:
        _fsync_dir(path.parent)


def manifest_hmac(entry: ManifestEntry, key: bytes) -> str:
    """HMAC-SHA256 (hex) of a manifest entry's canonical JSON (sorted keys), without `hmac`.

    Example:
        >>> len(manifest_hmac(entry, b"secret"))
        64
    """
    body: dict[str, object] = msgspec.to_builtins(entry)
    body.pop("hmac", None)
    canon = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    return hmac.new(key, canon, hashlib.sha256).hexdigest()


# ---------------------------------------------------------------- sealing


def segment_table(lines: list[bytes], records: list[Outcome | None]) -> Any:
    """The Parquet table of a segment: flat columns from `records` (None: unreadable) + `record`.

    Example:
        >>> segment_table([line], [outcome]).column_names[-1]
        'record'
    """
    arrays = [
        pa.array([None if r is None else get(r) for r in records], type=typ)
        for _, typ, get in _COLUMNS
    ]
    arrays.append(pa.array(lines, type=pa.binary()))
    return pa.Table.from_arrays(arrays, schema=SCHEMA)


def _parquet_bytes(table: Any) -> bytes:
    """A table as Parquet, with the sealed layout's encodings (`sealed_write_options`)."""
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, **sealed_write_options(table.column_names))
    data: bytes = sink.getvalue().to_pybytes()
    return data


def _runs_of(records: list[Outcome | None]) -> bytes:
    """The runs side file: one row per HookRun of the readable records, as Parquet."""
    return _parquet_bytes(runs_table(records))


def _decode_all(lines: list[bytes]) -> list[Outcome | None]:
    out: list[Outcome | None] = []
    for raw in lines:
        try:
            out.append(decode_outcome_json(raw))
        except msgspec.DecodeError:
            out.append(None)
    return out


def _decode_error(raw: bytes) -> str:
    try:
        decode_outcome_json(raw)
    except msgspec.DecodeError as exc:
        return str(exc)
    return "decoded on a second try"


def _entry(
    worker: str,
    seq: int,
    records: list[Outcome | None],
    parquet: bytes,
    keys: bytes,
    runs: bytes,
    prev: ManifestEntry | None,
    key: bytes | None,
) -> ManifestEntry:
    good = [r for r in records if r is not None]
    entry = ManifestEntry(
        worker=worker,
        seq=seq,
        first_seq=good[0].seq if good else 0,
        last_seq=good[-1].seq if good else 0,
        count=len(records),
        first_ts=good[0].appended if good else None,
        last_ts=good[-1].appended if good else None,
        sha256=hashlib.sha256(parquet).hexdigest(),
        size=len(parquet),
        keys_sha256=hashlib.sha256(keys).hexdigest(),
        head=good[-1].hash if good else "",
        prev_head=prev.head if prev is not None else "",
        runs_sha256=hashlib.sha256(runs).hexdigest(),
    )
    return msgspec.structs.replace(entry, hmac=manifest_hmac(entry, key)) if key else entry


def _keys_of(records: list[Outcome | None]) -> bytes:
    """The keys index: KEYS_MAGIC, then one 16-byte digest a row (zeros for an unreadable one)."""
    return KEYS_MAGIC + b"".join(_NO_KEY if r is None else key_digest(r) for r in records)


def seal_segment(
    root: Path, worker: str, seq: int, *, prev: ManifestEntry | None, key: bytes | None
) -> ManifestEntry:
    """Convert active segment `seq` of `worker` (under `root` = `<data_dir>/log`) to Parquet.

    Returns the manifest entry once it is durable; raises Unavailable (nothing sealed, the
    active segment untouched) when the disk fails. `prev` is the worker's last entry.

    Example:
        >>> seal_segment(Path(data_dir) / "log", "w1", 1, prev=None, key=None).count
        3
    """
    src = _seg_path(root, worker, seq, "active")
    try:
        rows = list(_jsonl_lines(src))
    except OSError as exc:
        raise Unavailable(f"{src}: cannot read the segment to seal: {exc}") from exc
    if not rows or not rows[-1][2]:
        why = "torn last line: reopen the writer to set it aside" if rows else "empty segment"
        raise LogCorrupt(_rel(root, src), rows[-1][0] if rows else None, f"cannot seal: {why}")
    lines = [raw for _, raw, _ in rows]
    records = _decode_all(lines)
    if any(r is None for r in records):
        _logger.warning("%s: sealing unreadable records as they are (verify reports them)", src)
    parquet = _parquet_bytes(segment_table(lines, records))
    keys, runs = _keys_of(records), _runs_of(records)
    entry = _entry(worker, seq, records, parquet, keys, runs, prev, key)
    dst, kdst = _seg_path(root, worker, seq, "sealed"), _keys_path(root, worker, seq)
    rdst = _runs_path(root, worker, seq)
    tmp = dst.with_name(dst.name + ".tmp")
    try:
        _replace_durably(kdst, keys)
        _replace_durably(rdst, runs)
        _write_durably(tmp, parquet, mode=os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.replace(tmp, dst)
        _fsync_dir(dst.parent)
        _append_manifest(_manifest_path(root, worker), entry)
    except OSError as exc:
        rtmp = rdst.with_name(rdst.name + ".tmp")
        leftovers = (tmp, dst, kdst, rdst, rtmp)
        for leftover in leftovers:  # copies only: the active segment is still the record
            with contextlib.suppress(OSError):
                leftover.unlink()
        raise Unavailable(f"{src}: cannot seal: {exc}") from exc
    try:
        src.unlink()
        _fsync_dir(src.parent)
    except OSError as exc:  # sealed all the same; the next open removes the leftover
        _logger.warning("%s: sealed, but the active segment could not be removed: %s", src, exc)
    return entry


def recover_sealed(
    root: Path, worker: str, *, key: bytes | None, clock: Callable[[], float]
) -> tuple[list[ManifestEntry], int]:
    """Finish or undo an interrupted seal; return the manifest entries and the highest sealed seq.

    Removes `.tmp` leftovers; sets a torn manifest line aside; lists a Parquet missing
    its manifest line only when its active source is still there, byte for byte, rewriting
    its keys index and runs side file (else moves the Parquet aside as `.stale-<ts>` if the
    active source differs, or leaves it for `verify`); removes a runs side file with neither
    a Parquet nor a manifest line (a seal interrupted before its Parquet); removes an active
    segment identical to its listed sealed copy.

    Example:
        >>> recover_sealed(Path(data_dir) / "log", "w1", key=None, clock=time.time)[1]
        0
    """
    sealed_dir = root / "sealed" / worker
    for tmp in sealed_dir.glob("*.tmp"):
        tmp.unlink()
    mpath = _manifest_path(root, worker)
    mlines = list(_manifest_lines(mpath))
    if mlines and mlines[-1].error == "torn":
        keep = mpath.read_bytes().rfind(b"\n") + 1
        aside = _set_aside(mpath, keep, "torn", clock)
        _logger.warning("%s: torn last manifest line moved to %s", mpath, aside.name)
        mlines.pop()
    for bad in (m for m in mlines if m.entry is None):
        _logger.error("%s:%d: %s (verify reports it)", mpath, bad.line, bad.error)
    entries = [m.entry for m in mlines if m.entry is not None]
    listed = {e.seq for e in entries}
    parquets = _seqs(sealed_dir, "parquet")
    actives = _seqs(root / "active" / worker, "jsonl")
    for seq in sorted(set(parquets) - listed):
        path = parquets[seq]
        if (entries and seq <= entries[-1].seq) or seq not in actives:
            _logger.error("%s: sealed segment not in the manifest; left for verify", path)
            continue
        lines = _sealed_lines(path)
        if lines is None or lines != _active_lines(actives[seq]):
            aside = path.rename(path.with_name(f"{path.name}.stale-{_stamp_name(clock)}"))
            _logger.warning("%s: differs from its active source; moved to %s", path, aside.name)
            del parquets[seq]
            continue
        records = _decode_all(lines)
        keys, runs = _keys_of(records), _runs_of(records)
        _replace_durably(_keys_path(root, worker, seq), keys)
        _replace_durably(_runs_path(root, worker, seq), runs)
        last = entries[-1] if entries else None
        entry = _entry(worker, seq, records, path.read_bytes(), keys, runs, last, key)
        _append_manifest(mpath, entry)
        entries.append(entry)
        listed.add(seq)
    for runs_file in sealed_dir.glob("*.runs.parquet"):
        stem = runs_file.name.removesuffix(".runs.parquet")
        if stem.isdigit() and int(stem) not in listed and int(stem) not in parquets:
            runs_file.unlink()  # derived from an active segment still there: rewritten at its seal
            _logger.warning("%s: runs file of an interrupted seal removed", runs_file)
    for seq in sorted(listed & set(actives) & set(parquets)):
        if _active_lines(actives[seq]) == _sealed_lines(parquets[seq]):
            actives[seq].unlink()
            _fsync_dir(actives[seq].parent)
        else:
            _logger.error("%s: differs from its sealed copy; left for verify", actives[seq])
    return entries, max(listed | set(parquets), default=0)


def _active_lines(path: Path) -> list[bytes]:
    """Every line of an active segment, a torn last one included (so it never compares equal)."""
    return [raw for _, raw, _ in _jsonl_lines(path)]


def _sealed_lines(path: Path) -> list[bytes] | None:
    """The `record` column of a sealed segment, or None when the file cannot be read."""
    try:
        return [raw for _, raw in _parquet_lines(path)]
    except (OSError, ValueError, pa.ArrowException) as exc:
        _logger.error("%s: unreadable sealed segment: %s", path, exc)
        return None


def load_keys(root: Path, entry: ManifestEntry, *, key: bytes | None = None) -> list[bytes]:
    """The key digests of a sealed segment, from its keys index, rebuilt if that is bad.

    The index is trusted only when its sha256 matches the entry's `keys_sha256` and, with
    a `key`, the entry's hmac is valid: a planted index must not make the writer skip
    new records as duplicates. Otherwise the digests come from the Parquet records.

    Example:
        >>> len(load_keys(Path(data_dir) / "log", entry)) == entry.count
        True
    """
    signed = key is None or hmac.compare_digest(str(entry.hmac), manifest_hmac(entry, key))
    path = _keys_path(root, entry.worker, entry.seq)
    if not signed:
        _logger.error("%s: manifest line not signed by the key (run verify)", path)
    with contextlib.suppress(FileNotFoundError):
        data = path.read_bytes()
        if signed and hashlib.sha256(data).hexdigest() == entry.keys_sha256:
            return _split_keys(data)
    lines = _sealed_lines(_seg_path(root, entry.worker, entry.seq, "sealed"))
    if lines is None:
        return []
    data = _keys_of(_decode_all(lines))
    if signed and hashlib.sha256(data).hexdigest() == entry.keys_sha256:
        _replace_durably(path, data)
    elif signed:
        _logger.error("%s: records do not match the manifest's keys_sha256 (run verify)", path)
    return _split_keys(data)


def _split_keys(data: bytes) -> list[bytes]:
    keys = (data[i : i + 16] for i in range(len(KEYS_MAGIC), len(data), 16))
    return [k for k in keys if k != _NO_KEY]


# ---------------------------------------------------------------- verification

ErrorKind = Literal[
    "edited", "removed", "reordered", "truncated", "deleted", "hmac", "manifest", "corrupt"
]


class VerifyError(msgspec.Struct, frozen=True, kw_only=True):
    """One problem: `file` is relative to `<data_dir>/log`; `line` is a line or Parquet row.

    kinds: edited (content changed), removed / reordered (chain or seq break), truncated
    (records missing at a segment's end, torn line), deleted (segment gone), hmac (a
    manifest line not signed by the key), manifest (listing inconsistent), corrupt
    (unreadable).
    """

    file: str
    line: int | None
    record_seq: int | None
    kind: ErrorKind
    message: str

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        seq = "" if self.record_seq is None else f"record seq {self.record_seq}: "
        return f"{where}: {seq}{self.message}"


class WorkerReport(msgspec.Struct, kw_only=True):
    records: int = 0
    sealed: int = 0
    active: int = 0
    last_seq: int = 0
    head: str = ""


class VerifyReport(msgspec.Struct, frozen=True, kw_only=True):
    """The result of `verify`; `first_error` is the first problem in chain order."""

    ok: bool
    records: int
    workers: dict[str, WorkerReport]
    errors: list[VerifyError]
    notes: list[str]
    hmac_checked: bool
    first_error: str | None

    def to_dict(self) -> dict[str, object]:
        """The report as plain JSON-ready data (for `hookaudit verify --format json`).

        Example:
            >>> verify(data_dir).to_dict()["ok"]
            True
        """
        data: dict[str, object] = msgspec.to_builtins(self)
        return data

    def raise_for_errors(self) -> None:
        """Raise LogCorrupt naming the first problem, if any.

        Example:
            >>> verify(data_dir).raise_for_errors()
        """
        if self.errors:
            e = self.errors[0]
            seq = "" if e.record_seq is None else f"record seq {e.record_seq}: "
            raise LogCorrupt(e.file, e.line, f"{seq}{e.message} ({len(self.errors)} problem(s))")


def verify(data_dir: str | os.PathLike[str], *, key: bytes | None = None) -> VerifyReport:
    """Recompute every worker chain (sealed segments in manifest order, then active) and manifest.

    `key` (default: env HOOKAUDIT_LOG_KEY) makes a missing or wrong manifest hmac an error.

    Run it while writers are stopped: an active segment's last line may be mid-write.

    Example:
        >>> verify(data_dir, key=b"secret").first_error
        'active/w1/00000002.jsonl:17: record seq 4017: hash mismatch (record edited)'
    """
    key = key if key is not None else _env_key()
    root = _root(data_dir)
    errors: list[VerifyError] = []
    notes: list[str] = []
    workers: dict[str, WorkerReport] = {}
    for worker in _workers(root):
        check = _Checker(root, worker, key)
        workers[worker] = check.run()
        errors += check.errors
        notes += check.notes
    return VerifyReport(
        ok=not errors,
        records=sum(w.records for w in workers.values()),
        workers=workers,
        errors=errors,
        notes=notes,
        hmac_checked=key is not None,
        first_error=str(errors[0]) if errors else None,
    )


class _Checker:
    """Walks one worker's segments in seq order, carrying the chain across them."""

    def __init__(self, root: Path, worker: str, key: bytes | None) -> None:
        self.root, self.worker, self.key = root, worker, key
        self.mfile = _rel(root, _manifest_path(root, worker))
        self.errors: list[VerifyError] = []
        self.notes: list[str] = []
        self.report = WorkerReport()
        self.prev = ""  # hash of the previous record
        self.next_seq = 1
        self.resync = False  # after a gap or an unreadable record: take the next as the anchor

    def err(
        self, kind: ErrorKind, file: str, msg: str, line: int | None = None, seq: int | None = None
    ) -> None:
        self.errors.append(
            VerifyError(file=file, line=line, record_seq=seq, kind=kind, message=msg)
        )

    def run(self) -> WorkerReport:
        listed: dict[int, tuple[int, ManifestEntry]] = {}
        for m in _manifest_lines(_manifest_path(self.root, self.worker)):
            e = m.entry
            if e is None:
                torn = m.error == "torn"
                why = "torn last manifest line (no newline)" if torn else str(m.error)
                self.err("truncated" if torn else "corrupt", self.mfile, why, m.line)
            elif e.worker != self.worker or e.seq in listed:
                self.err("manifest", self.mfile, "duplicate or foreign line", m.line, e.first_seq)
            else:
                if listed and e.seq < max(listed):
                    self.err("manifest", self.mfile, "lines out of order", m.line, e.first_seq)
                listed[e.seq] = (m.line, e)
        parquets = _seqs(self.root / "sealed" / self.worker, "parquet")
        actives = _seqs(self.root / "active" / self.worker, "jsonl")
        expected = 1
        for seq in sorted(set(listed) | set(parquets) | set(actives)):
            if seq > expected:
                gone = _rel(self.root, _seg_path(self.root, self.worker, expected, "sealed"))
                span = f"{expected}" if seq == expected + 1 else f"{expected}..{seq - 1}"
                self.err(
                    "deleted", gone, f"segment seq {span} missing (deleted)", None, self.next_seq
                )
                self.resync = True
            expected = seq + 1
            if seq in listed or seq in parquets:
                line, entry = listed.get(seq, (0, None))
                self.sealed(seq, parquets.get(seq), line, entry)
                if seq in actives:
                    self.leftover(actives[seq], parquets.get(seq))
            else:
                self.active(actives[seq])
        self.report.last_seq, self.report.head = self.next_seq - 1, self.prev
        return self.report

    def listing(self, mline: int, e: ManifestEntry) -> None:
        """The manifest line itself: its signature and its link to the previous segment."""
        if self.key is not None and e.hmac is None:
            self.err(
                "hmac", self.mfile, "no hmac but a key is set (unsigned line)", mline, e.first_seq
            )
        elif self.key is not None and not hmac.compare_digest(
            str(e.hmac), manifest_hmac(e, self.key)
        ):
            self.err("hmac", self.mfile, "bad hmac (line forged or edited)", mline, e.first_seq)
        if not self.resync and e.prev_head != self.prev:
            why = "prev_head does not match the previous segment's head"
            self.err("manifest", self.mfile, why, mline, e.first_seq)

    def sealed(self, seq: int, path: Path | None, mline: int, e: ManifestEntry | None) -> None:
        file = _rel(self.root, _seg_path(self.root, self.worker, seq, "sealed"))
        if e is not None:
            self.listing(mline, e)
        if path is None:
            assert e is not None
            why = f"sealed segment listed at {self.mfile}:{mline} is missing (deleted)"
            self.err("deleted", file, why, None, e.first_seq)
            self.prev, self.next_seq, self.resync = e.head, e.last_seq + 1, False
            return
        self.report.sealed += 1
        data = path.read_bytes()
        try:
            table = pq.read_table(pa.BufferReader(data))
            raw = table.column("record").to_pylist()
        except (OSError, ValueError, KeyError, pa.ArrowException) as exc:
            short = e is not None and len(data) < e.size
            kind: ErrorKind = "truncated" if short else "corrupt"
            self.err(kind, file, f"unreadable Parquet: {exc}", None, e.first_seq if e else None)
            if e is not None:
                self.prev, self.next_seq = e.head, e.last_seq + 1
            self.resync = e is None
            return
        rows = [(i, r if isinstance(r, bytes) else b"") for i, r in enumerate(raw, 1)]
        records = _decode_all([r for _, r in rows])
        if e is None:
            first = next((r.seq for r in records if r is not None), None)
            why = (
                f"not listed in {self.mfile} (its manifest line was removed, or a seal was "
                "interrupted before writing it: reopening the writer completes that seal)"
            )
            self.err("manifest", file, why, None, first)
        self.chain(file, rows, records)
        self.columns(file, table, rows, records)
        if e is not None:
            self.against_manifest(file, mline, e, data, records)
        self.runs(seq, mline, e, records)

    def runs(
        self, seq: int, mline: int, e: ManifestEntry | None, records: list[Outcome | None]
    ) -> None:
        """The runs side file: its sha256 as listed, and its rows as the records say."""
        rpath = _runs_path(self.root, self.worker, seq)
        file = _rel(self.root, rpath)
        at = f"{self.mfile}:{mline}"
        try:
            data = rpath.read_bytes()
        except FileNotFoundError:
            if e is not None and e.runs_sha256 is not None:
                why = f"runs file listed at {at} is missing (deleted)"
                self.err("deleted", file, why, None, e.first_seq)
            return
        first = e.first_seq if e is not None else None
        listed = e.runs_sha256 if e is not None else None
        if listed is not None and hashlib.sha256(data).hexdigest() != listed:
            why = f"runs file sha256 does not match {at}'s runs_sha256 (runs file rewritten)"
            self.err("manifest", file, why, None, first)
        try:
            same = pq.read_table(pa.BufferReader(data)).equals(runs_table(records))
        except (OSError, ValueError, KeyError, pa.ArrowException):
            same = False
        if not same:
            why = "runs file does not match the segment's records (one row per HookRun)"
            self.err("edited", file, why, None, first)

    def against_manifest(
        self, file: str, mline: int, e: ManifestEntry, data: bytes, records: list[Outcome | None]
    ) -> None:
        at = f"{self.mfile}:{mline}"
        short = len(records) < e.count
        if len(records) != e.count:
            kind: ErrorKind = "truncated" if short else "edited"
            self.err(kind, file, f"{len(records)} records, {at} says {e.count}", len(records))
        if hashlib.sha256(data).hexdigest() != e.sha256:
            kind = "truncated" if short else "edited"
            self.err(kind, file, f"file sha256 does not match {at} (segment rewritten)")
        good = [r for r in records if r is not None]
        actual = (good[0].seq, good[-1].seq, good[-1].hash) if good else (0, 0, "")
        if actual != (e.first_seq, e.last_seq, e.head):
            why = "seq range or head hash does not match the segment"
            self.err("manifest", self.mfile, why, mline, e.first_seq)
        kpath = _keys_path(self.root, self.worker, e.seq)
        if kpath.exists():
            kdata = kpath.read_bytes()
            if kdata != _keys_of(records) or hashlib.sha256(kdata).hexdigest() != e.keys_sha256:
                why = "keys index does not match the segment's records"
                self.err("edited", _rel(self.root, kpath), why)

    def columns(
        self, file: str, table: Any, rows: list[tuple[int, bytes]], records: list[Outcome | None]
    ) -> None:
        """The flat query columns must say what the records say."""
        expected = segment_table([r for _, r in rows], records)
        for name, typ, _ in _COLUMNS:
            if name not in table.column_names:
                if name in _BASE_NAMES:  # the extra columns are absent from older segments
                    self.err("edited", file, f"column {name!r} missing")
                continue
            col = table.column(name)
            if col.type == typ and col.equals(expected.column(name)):
                continue
            got, want = col.to_pylist(), expected.column(name).to_pylist()
            pairs = zip(got, want, strict=False)
            i = next((i for i, (a, b) in enumerate(pairs) if a != b), min(len(got), len(want)))
            rec = records[i] if i < len(records) else None
            a, b = (got[i] if i < len(got) else None), (want[i] if i < len(want) else None)
            why = f"column {name!r} is {a!r} but the record says {b!r} (column edited)"
            self.err("edited", file, why, i + 1, rec.seq if rec else None)

    def active(self, path: Path) -> None:
        file = _rel(self.root, path)
        self.report.active += 1
        rows: list[tuple[int, bytes]] = []
        torn: tuple[int, bytes] | None = None
        for n, raw, complete in _jsonl_lines(path):
            if complete:
                rows.append((n, raw))
            else:
                torn = (n, raw)
        self.chain(file, rows, _decode_all([r for _, r in rows]))
        if torn is not None:
            why = (
                f"torn last line ({len(torn[1])} bytes, no newline): segment truncated after "
                f"record seq {self.next_seq - 1}"
            )
            self.err("truncated", file, why, torn[0])
        for aside in sorted(path.parent.glob(path.name + ".torn-*")):
            self.notes.append(f"{_rel(self.root, aside)}: a torn line set aside after a crash")

    def leftover(self, path: Path, sealed: Path | None) -> None:
        file = _rel(self.root, path)
        lines = [raw for _, raw, done in _jsonl_lines(path) if done]
        try:
            same = sealed is not None and lines == [raw for _, raw in _parquet_lines(sealed)]
        except (OSError, ValueError, pa.ArrowException):
            same = False
        if same:
            self.notes.append(
                f"{file}: left over from a seal; the writer removes it at its next open"
            )
        else:
            self.err("edited", file, "active segment differs from its sealed copy of the same seq")

    def chain(
        self, file: str, rows: list[tuple[int, bytes]], records: list[Outcome | None]
    ) -> None:
        """Each record's own hash, then its link to the one before (seq and prev_hash)."""
        seen: set[int] = set()
        present = {r.seq for r in records if r is not None}
        for (n, raw), rec in zip(rows, records, strict=True):
            if rec is None:
                self.err("corrupt", file, f"unreadable record: {_decode_error(raw)}", n)
                self.resync = True
                continue
            self.report.records += 1
            seen.add(rec.seq)
            if recompute_hash(raw, rec) != rec.hash:
                self.err("edited", file, "hash mismatch (record edited)", n, rec.seq)
            want = self.next_seq
            if self.resync:
                pass
            elif rec.seq < want or (rec.seq > want and want in present and want not in seen):
                why = f"seq {rec.seq} where {want} was expected (records reordered)"
                self.err("reordered", file, why, n, rec.seq)
            elif rec.seq > want:
                span = f"{want}" if rec.seq == want + 1 else f"{want}..{rec.seq - 1}"
                self.err(
                    "removed", file, f"record seq {span} missing before it (removed)", n, rec.seq
                )
            elif rec.prev_hash != self.prev:
                why = (
                    f"prev_hash is not record seq {want - 1}'s hash "
                    "(a record before it was removed or replaced)"
                )
                self.err("removed", file, why, n, rec.seq)
            self.prev, self.next_seq, self.resync = rec.hash, rec.seq + 1, False
