"""Input that was refused, kept on disk so that nothing vanishes: ``<data-dir>/rejects/``.

Rules of this file:
- No NATS import (`hookaudit emit` uses it on its bad-input path).
- Each reject is two files, both 0600 in a 0700 directory: ``<stamp>-<uuid>.bin``, the
  input's first `KEEP_BYTES` bytes, and ``<stamp>-<uuid>.json``, what it was: the full
  size, the sha256 of all of it, the reason, who refused it. A reject is never deleted
  here; `listing` reads both (and the older ``.why`` notes of the worker).
- `rejection` builds the `engine.records.Rejection` that goes into the log with it, so a
  refused event is also a record in the log (``decided_by = 'rejected'``).

Example:
    >>> r = keep(Path("/tmp/ha"), b"not json", "malformed JSON", stage="emit")  # doctest: +SKIP
    >>> [x.reason for x in listing(Path("/tmp/ha"))]  # doctest: +SKIP
    ['malformed JSON']
"""

from __future__ import annotations

import hashlib
import os
from datetime import UTC, datetime
from pathlib import Path

import msgspec

from engine.records import Rejection, uuid7

__all__ = ["HEAD_CHARS", "KEEP_BYTES", "Kept", "count", "keep", "listing", "rejection"]

#: How much of a rejected input is kept on disk.
KEEP_BYTES = 8 * 1024 * 1024
#: How much of it (decoded, invalid UTF-8 replaced) goes into the log record.
HEAD_CHARS = 4096


class Kept(msgspec.Struct, frozen=True, kw_only=True):
    """One reject on disk: what `hookaudit spool rejects` lists."""

    ts: str
    stage: str
    reason: str
    size: int
    sha256: str
    kept: int
    path: str
    event_id: str | None = None


_kept_decoder = msgspec.json.Decoder(Kept)


def rejects_dir(data_dir: Path) -> Path:
    """>>> rejects_dir(Path("/d"))
    PosixPath('/d/rejects')
    """
    return data_dir / "rejects"


def rejection(raw: bytes, reason: str, *, stage: str) -> Rejection:
    """The log's account of a refused input: its size, digest, why, and how much is kept.

    >>> rejection(b"xyz", "bad", stage="emit").size
    3
    """
    return Rejection(
        stage=stage,
        reason=reason,
        size=len(raw),
        sha256=hashlib.sha256(raw).hexdigest(),
        kept=min(len(raw), KEEP_BYTES),
        head=raw[:HEAD_CHARS].decode("utf-8", errors="replace"),
    )


def _write_new(path: Path, data: bytes | memoryview) -> None:
    from ingest.log.files import write_durably  # refused input is rare: not at start-up

    write_durably(path, data)


def keep(
    data_dir: Path,
    raw: bytes,
    reason: str,
    *,
    stage: str,
    event_id: str | None = None,
    full: Rejection | None = None,
) -> Kept:
    """Keep `raw` (its first KEEP_BYTES) and what it was; raises OSError if the disk refuses.

    `full` gives the size and sha256 of the whole input when `raw` is only its start.

    Example:
        >>> keep(Path("/tmp/ha"), b"[]", "expected a JSON object", stage="emit").size  # doctest: +SKIP
        2
    """
    d = rejects_dir(data_dir)
    d.mkdir(mode=0o700, parents=True, exist_ok=True)
    stem = f"{datetime.now(UTC).strftime('%Y%m%dT%H%M%S.%fZ')}-{uuid7()}"
    r = rejection(raw, reason, stage=stage)
    if full is not None:
        r = msgspec.structs.replace(r, size=full.size, sha256=full.sha256)
    bin_path = d / f"{stem}.bin"
    _write_new(bin_path, memoryview(raw)[:KEEP_BYTES])
    kept = Kept(
        ts=datetime.now(UTC).isoformat(timespec="milliseconds"),
        stage=stage,
        reason=reason,
        size=r.size,
        sha256=r.sha256,
        kept=r.kept,
        path=str(bin_path),
        event_id=event_id,
    )
    _write_new(d / f"{stem}.json", msgspec.json.encode(kept) + b"\n")
    return kept


def listing(data_dir: Path) -> list[Kept]:
    """Every reject kept under `data_dir`, oldest first (a `.bin` without its note too).

    >>> listing(Path("/nonexistent"))
    []
    """
    d = rejects_dir(data_dir)
    try:
        names = sorted(os.listdir(d))
    except (FileNotFoundError, NotADirectoryError):
        return []
    out: list[Kept] = []
    for name in names:
        if not name.endswith(".bin"):
            continue
        path = d / name
        stem = name[: -len(".bin")]
        try:
            kept = _kept_decoder.decode((d / f"{stem}.json").read_bytes())
        except (OSError, msgspec.DecodeError, msgspec.ValidationError, RecursionError):
            kept = _bare(path, d / f"{stem}.why")
        out.append(kept)
    return out


def _bare(path: Path, why: Path) -> Kept:
    """A reject kept without its note (an older version, or a crash between the files)."""
    try:
        data = path.read_bytes()
    except OSError:
        data = b""
    try:
        reason = why.read_text(errors="replace").strip()
    except OSError:
        reason = "(no note kept)"
    when = datetime.fromtimestamp(path.stat().st_mtime, UTC) if path.exists() else None
    return Kept(
        ts=when.isoformat(timespec="milliseconds") if when else "",
        stage="unknown",
        reason=reason,
        size=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        kept=len(data),
        path=str(path),
    )


def count(data_dir: Path) -> int:
    """How many rejects `data_dir` keeps (one `listdir`).

    >>> count(Path("/nonexistent"))
    0
    """
    try:
        return sum(1 for n in os.listdir(rejects_dir(data_dir)) if n.endswith(".bin"))
    except (FileNotFoundError, NotADirectoryError):
        return 0
