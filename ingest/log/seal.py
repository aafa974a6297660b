"""Sealing: an active segment becomes Parquet plus a signed manifest line, crash-safe by order.

Rules of this file:
- Sealing checks the segment's chain first (`check_chain`): every record readable, its
  hash recomputed from its bytes, its seq and prev_hash continuing the chain, and with a
  log key every record covered by a valid batch line. A broken chain is never sealed
  (LogCorrupt naming the first bad line): the manifest would sign it.
- Crash-safe by order: keys index and runs side file, then Parquet (each: temp name,
  fsync, rename, fsync the directory), then the manifest line (fsync), and only then the
  active JSONL is removed. Whatever a crash leaves, `recover_sealed` finishes or undoes at
  the writer's next open, and it only signs what still has its active source byte for
  byte, never a file found alone.
- A sealed segment keeps each record's exact line in its `record` column (batch lines
  are not records: they stay behind, their work done by the manifest's hmac); the flat
  columns are a copy for queries that `verify` checks against the records.

Example:
    >>> seal_segment(Path(data_dir) / "log", "w1", 1, prev=None, key=None).count
    3
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pyarrow as pa
import pyarrow.parquet as pq

from engine.errors import LogCorrupt, Unavailable
from engine.records import Outcome, decode_outcome_json
from ingest.log.files import fsync_dir, replace_durably, set_aside, write_durably
from ingest.log.layout import (
    keys_path,
    manifest_path,
    rel,
    runs_path_of,
    seg_path,
    seqs,
    stamp_name,
)
from ingest.log.lines import (
    batch_hmac,
    decode_batch,
    is_batch_line,
    key_digest,
    recompute_hash,
)
from ingest.log.manifest import (
    ManifestEntry,
    append_manifest,
    manifest_hmac,
    manifest_lines,
)
from ingest.log.reader import jsonl_lines, parquet_lines
from ingest.log.schema import runs_table, sealed_write_options, segment_table

__all__ = [
    "KEYS_MAGIC",
    "active_lines",
    "check_chain",
    "decode_all",
    "decode_error",
    "keys_of",
    "load_keys",
    "recover_sealed",
    "seal_segment",
    "sealed_lines",
]

KEYS_MAGIC = b"HAKEYS1\n"
_NO_KEY = bytes(16)
_logger = logging.getLogger(__name__)


def _parquet_bytes(table: Any) -> bytes:
    """A table as Parquet, with the sealed layout's encodings (`sealed_write_options`)."""
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, **sealed_write_options(table.column_names))
    data: bytes = sink.getvalue().to_pybytes()
    return data


def _runs_of(records: list[Outcome | None]) -> bytes:
    """The runs side file: one row per HookRun of the readable records, as Parquet."""
    return _parquet_bytes(runs_table(records))


def decode_all(lines: list[bytes]) -> list[Outcome | None]:
    out: list[Outcome | None] = []
    for raw in lines:
        try:
            out.append(decode_outcome_json(raw))
        except msgspec.DecodeError:
            out.append(None)
    return out


def decode_error(raw: bytes) -> str:
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


def keys_of(records: list[Outcome | None]) -> bytes:
    """The keys index: KEYS_MAGIC, then one 16-byte digest a row (zeros for an unreadable one)."""
    return KEYS_MAGIC + b"".join(_NO_KEY if r is None else key_digest(r) for r in records)


def check_chain(
    file: str,
    rows: list[tuple[int, bytes, bool]],
    prev: ManifestEntry | None,
    key: bytes | None,
) -> tuple[list[bytes], list[Outcome | None]]:
    """The record lines and records of an active segment about to be sealed, or LogCorrupt.

    The chain must continue `prev` (the worker's last sealed entry) record by record, each
    hash recomputed from its line; with `key`, every record must be followed by a batch
    line whose HMAC signs the chain head at that point.

    Example:
        >>> check_chain("active/w1/00000001.jsonl", [], None, None)
        ([], [])
    """
    seq, head = (prev.last_seq, prev.head) if prev is not None else (0, "")
    lines: list[bytes] = []
    records: list[Outcome | None] = []
    unsigned: tuple[int, int] | None = None  # (line, seq) of the first record not yet signed
    for n, raw, _ in rows:
        if is_batch_line(raw):
            try:
                mark = decode_batch(raw)
            except msgspec.DecodeError as exc:
                raise LogCorrupt(file, n, f"cannot seal: unreadable batch line: {exc}") from None
            if key is not None:
                good = hmac.compare_digest(
                    mark.hmac, batch_hmac(key, mark.worker, mark.last_seq, mark.head)
                )
                if not good or (mark.last_seq, mark.head) != (seq, head):
                    why = "bad batch hmac (records forged or re-hashed)"
                    raise LogCorrupt(file, n, f"cannot seal: {why}")
                unsigned = None
            continue
        try:
            rec = decode_outcome_json(raw)
        except msgspec.DecodeError as exc:
            raise LogCorrupt(file, n, f"cannot seal: unreadable record: {exc}") from None
        if recompute_hash(raw, rec) != rec.hash:
            raise LogCorrupt(file, n, f"cannot seal: record seq {rec.seq}: hash mismatch (edited)")
        if rec.seq != seq + 1 or rec.prev_hash != head:
            why = f"record seq {rec.seq} does not continue the chain at seq {seq}"
            raise LogCorrupt(file, n, f"cannot seal: {why} (removed, reordered or forged)")
        seq, head = rec.seq, rec.hash
        if unsigned is None:
            unsigned = (n, rec.seq)
        lines.append(raw)
        records.append(rec)
    if key is not None and unsigned is not None:
        why = f"record seq {unsigned[1]}: not signed by the log key (appended by another writer)"
        raise LogCorrupt(file, unsigned[0], f"cannot seal: {why}")
    return lines, records


def seal_segment(
    root: Path, worker: str, seq: int, *, prev: ManifestEntry | None, key: bytes | None
) -> ManifestEntry:
    """Convert active segment `seq` of `worker` (under `root` = `<data_dir>/log`) to Parquet.

    Returns the manifest entry once it is durable; raises Unavailable (nothing sealed, the
    active segment untouched) when the disk fails, LogCorrupt when its chain is broken
    (`check_chain`). `prev` is the worker's last entry.

    Example:
        >>> seal_segment(Path(data_dir) / "log", "w1", 1, prev=None, key=None).count
        3
    """
    src = seg_path(root, worker, seq, "active")
    try:
        rows = list(jsonl_lines(src))
    except OSError as exc:
        raise Unavailable(f"{src}: cannot read the segment to seal: {exc}") from exc
    if not rows or not rows[-1][2]:
        why = "torn last line: reopen the writer to set it aside" if rows else "empty segment"
        raise LogCorrupt(rel(root, src), rows[-1][0] if rows else None, f"cannot seal: {why}")
    lines, records = check_chain(rel(root, src), rows, prev, key)
    parquet = _parquet_bytes(segment_table(lines, records))
    keys, runs = keys_of(records), _runs_of(records)
    entry = _entry(worker, seq, records, parquet, keys, runs, prev, key)
    dst, kdst = seg_path(root, worker, seq, "sealed"), keys_path(root, worker, seq)
    rdst = runs_path_of(root, worker, seq)
    tmp = dst.with_name(dst.name + ".tmp")
    try:
        replace_durably(kdst, keys)
        replace_durably(rdst, runs)
        write_durably(tmp, parquet, mode=os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.replace(tmp, dst)
        fsync_dir(dst.parent)
        append_manifest(manifest_path(root, worker), entry)
    except OSError as exc:
        rtmp = rdst.with_name(rdst.name + ".tmp")
        leftovers = (tmp, dst, kdst, rdst, rtmp)
        for leftover in leftovers:  # copies only: the active segment is still the record
            with contextlib.suppress(OSError):
                leftover.unlink()
        raise Unavailable(f"{src}: cannot seal: {exc}") from exc
    try:
        src.unlink()
        fsync_dir(src.parent)
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
    mpath = manifest_path(root, worker)
    mlines = list(manifest_lines(mpath))
    if mlines and mlines[-1].error == "torn":
        keep = mpath.read_bytes().rfind(b"\n") + 1
        aside = set_aside(mpath, keep, "torn", clock)
        _logger.warning("%s: torn last manifest line moved to %s", mpath, aside.name)
        mlines.pop()
    for bad in (m for m in mlines if m.entry is None):
        _logger.error("%s:%d: %s (verify reports it)", mpath, bad.line, bad.error)
    entries = [m.entry for m in mlines if m.entry is not None]
    listed = {e.seq for e in entries}
    parquets = seqs(sealed_dir, "parquet")
    actives = seqs(root / "active" / worker, "jsonl")
    for seq in sorted(set(parquets) - listed):
        path = parquets[seq]
        if (entries and seq <= entries[-1].seq) or seq not in actives:
            _logger.error("%s: sealed segment not in the manifest; left for verify", path)
            continue
        lines = sealed_lines(path)
        if lines is None or lines != active_lines(actives[seq]):
            aside = path.rename(path.with_name(f"{path.name}.stale-{stamp_name(clock)}"))
            _logger.warning("%s: differs from its active source; moved to %s", path, aside.name)
            del parquets[seq]
            continue
        records = decode_all(lines)
        keys, runs = keys_of(records), _runs_of(records)
        replace_durably(keys_path(root, worker, seq), keys)
        replace_durably(runs_path_of(root, worker, seq), runs)
        last = entries[-1] if entries else None
        entry = _entry(worker, seq, records, path.read_bytes(), keys, runs, last, key)
        append_manifest(mpath, entry)
        entries.append(entry)
        listed.add(seq)
    for runs_file in sealed_dir.glob("*.runs.parquet"):
        stem = runs_file.name.removesuffix(".runs.parquet")
        if stem.isdigit() and int(stem) not in listed and int(stem) not in parquets:
            runs_file.unlink()  # derived from an active segment still there: rewritten at its seal
            _logger.warning("%s: runs file of an interrupted seal removed", runs_file)
    for seq in sorted(listed & set(actives) & set(parquets)):
        if active_lines(actives[seq]) == sealed_lines(parquets[seq]):
            actives[seq].unlink()
            fsync_dir(actives[seq].parent)
        else:
            _logger.error("%s: differs from its sealed copy; left for verify", actives[seq])
    return entries, max(listed | set(parquets), default=0)


def active_lines(path: Path) -> list[bytes]:
    """Every record line of an active segment, a torn last one included (never equal then)."""
    return [raw for _, raw, _ in jsonl_lines(path) if not is_batch_line(raw)]


def sealed_lines(path: Path) -> list[bytes] | None:
    """The `record` column of a sealed segment, or None when the file cannot be read."""
    try:
        return [raw for _, raw in parquet_lines(path)]
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
    path = keys_path(root, entry.worker, entry.seq)
    if not signed:
        _logger.error("%s: manifest line not signed by the key (run verify)", path)
    with contextlib.suppress(FileNotFoundError):
        data = path.read_bytes()
        if signed and hashlib.sha256(data).hexdigest() == entry.keys_sha256:
            return _split_keys(data)
    lines = sealed_lines(seg_path(root, entry.worker, entry.seq, "sealed"))
    if lines is None:
        return []
    data = keys_of(decode_all(lines))
    if signed and hashlib.sha256(data).hexdigest() == entry.keys_sha256:
        replace_durably(path, data)
    elif signed:
        _logger.error("%s: records do not match the manifest's keys_sha256 (run verify)", path)
    return _split_keys(data)


def _split_keys(data: bytes) -> list[bytes]:
    keys = (data[i : i + 16] for i in range(len(KEYS_MAGIC), len(data), 16))
    return [k for k in keys if k != _NO_KEY]
