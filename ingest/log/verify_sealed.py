"""What a sealed segment's files must agree with: its manifest line, its records, its side files.

Rules of this file:
- Each check is a function of what `ingest.log.verifier` has already read (the manifest
  line, the decoded records, the Parquet table) and returns the problems it found as
  `VerifyError`s; it never raises for what a file holds and carries no chain state (the
  chain walk is the verifier's).
- The checks: the flat query columns say what the records say (`check_columns`), the
  record count, seq range, head and keys index match the manifest line (`check_counts`),
  and the runs side file has its listed sha256 and one row per HookRun (`check_runs`).

Example:
    >>> check_columns("sealed/w1/00000001.parquet", segment_table([], []), [], [])
    []
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from engine.errors import Unavailable
from engine.records import Outcome
from ingest.log.findings import ErrorKind, VerifyError
from ingest.log.layout import keys_path, rel, runs_path_of
from ingest.log.manifest import ManifestEntry
from ingest.log.objstore import is_remote, read_bytes
from ingest.log.schema import BASE_NAMES, COLUMNS, runs_table, segment_table
from ingest.log.seal import keys_of

__all__ = ["check_columns", "check_counts", "check_runs"]


def _err(
    kind: ErrorKind, file: str, msg: str, line: int | None = None, seq: int | None = None
) -> VerifyError:
    return VerifyError(file=file, line=line, record_seq=seq, kind=kind, message=msg)


def check_runs(
    root: Path,
    worker: str,
    mfile: str,
    seq: int,
    mline: int,
    e: ManifestEntry | None,
    records: list[Outcome | None],
    where: str,
) -> list[VerifyError]:
    """The runs side file: its sha256 as listed, and its rows as the records say."""
    rpath = runs_path_of(root, worker, seq)
    file = rel(root, rpath)
    at = f"{mfile}:{mline}"
    remote = is_remote(where)
    try:
        data = read_bytes(
            where.removesuffix(".parquet") + ".runs.parquet" if remote else str(rpath)
        )
    except Unavailable as exc:
        return [_err("corrupt", file, f"cannot read: {exc}", None, e.first_seq if e else None)]
    except FileNotFoundError:
        if e is not None and e.runs_sha256 is not None:
            why = f"runs file listed at {at} is missing (deleted)"
            return [_err("deleted", file, why, None, e.first_seq)]
        return []
    out: list[VerifyError] = []
    first = e.first_seq if e is not None else None
    listed = e.runs_sha256 if e is not None else None
    if listed is not None and hashlib.sha256(data).hexdigest() != listed:
        why = f"runs file sha256 does not match {at}'s runs_sha256 (runs file rewritten)"
        out.append(_err("manifest", file, why, None, first))
    try:
        same = pq.read_table(pa.BufferReader(data)).equals(runs_table(records))
    except (OSError, ValueError, KeyError, pa.ArrowException):
        same = False
    if not same:
        why = "runs file does not match the segment's records (one row per HookRun)"
        out.append(_err("edited", file, why, None, first))
    return out


def check_counts(
    root: Path,
    mfile: str,
    file: str,
    mline: int,
    e: ManifestEntry,
    records: list[Outcome | None],
) -> list[VerifyError]:
    """The manifest line's count, seq range and head, and the keys index, against the records."""
    out: list[VerifyError] = []
    at = f"{mfile}:{mline}"
    short = len(records) < e.count
    if len(records) != e.count:
        kind: ErrorKind = "truncated" if short else "edited"
        out.append(_err(kind, file, f"{len(records)} records, {at} says {e.count}", len(records)))
    good = [r for r in records if r is not None]
    actual = (good[0].seq, good[-1].seq, good[-1].hash) if good else (0, 0, "")
    if actual != (e.first_seq, e.last_seq, e.head):
        why = "seq range or head hash does not match the segment"
        out.append(_err("manifest", mfile, why, mline, e.first_seq))
    kpath = keys_path(root, e.worker, e.seq)
    if kpath.exists():
        kdata = kpath.read_bytes()
        if kdata != keys_of(records) or hashlib.sha256(kdata).hexdigest() != e.keys_sha256:
            why = "keys index does not match the segment's records"
            out.append(_err("edited", rel(root, kpath), why))
    return out


def check_columns(
    file: str, table: Any, rows: list[tuple[int, bytes]], records: list[Outcome | None]
) -> list[VerifyError]:
    """The flat query columns must say what the records say."""
    out: list[VerifyError] = []
    expected = segment_table([r for _, r in rows], records)
    for name, typ, _ in COLUMNS:
        if name not in table.column_names:
            if name in BASE_NAMES:  # the extra columns are absent from older segments
                out.append(_err("edited", file, f"column {name!r} missing"))
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
        out.append(_err("edited", file, why, i + 1, rec.seq if rec else None))
    return out
