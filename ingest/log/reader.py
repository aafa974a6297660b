"""Reading the log: every reader of segments, active JSONL and sealed Parquet, is here.

Rules of this file:
- `queries/` and `replay/` read segments through these functions, never by opening
  the files themselves: `iter_raw_lines` (exact record bytes), `read_segment` and
  `iter_outcomes` (decoded), `active_data` (an active segment's complete lines in one
  buffer, for bulk loaders), `lookup_in` (one key).
- Readers never lock. A line exists once its newline is written: a trailing partial line
  is skipped. Batch lines (`ingest.log.lines.is_batch_line`) are not records: skipped.
- An active segment sealed meanwhile is read from its sealed copy.
- Bad lines are reported as (file, line, reason) and skipped; never a crash.
- pyarrow only to read sealed segments, imported when one is read.

Example:
    >>> import tempfile
    >>> list(iter_outcomes(tempfile.mkdtemp()))
    []
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import msgspec

from engine.records import Outcome, decode_outcome_json
from ingest.log.layout import Segment, sealed_copy, segments
from ingest.log.lines import is_batch_line, key_digest_of, view_decoder

__all__ = [
    "ActiveData",
    "OnCorrupt",
    "active_data",
    "hashed_lines",
    "iter_outcomes",
    "iter_raw_lines",
    "jsonl_lines",
    "lookup_in",
    "lookup_many_in",
    "parquet_lines",
    "read_segment",
]

OnCorrupt = Callable[[str, int, str], None]
"""Called with (file, line, reason) for a record that cannot be read; the record is skipped."""

_logger = logging.getLogger(__name__)


def jsonl_lines(path: Path) -> Iterator[tuple[int, bytes, bool]]:
    """(line number, bytes without the newline, complete) for each line of a JSONL file."""
    with open(path, "rb") as f:
        for n, raw in enumerate(f, 1):
            if raw.endswith(b"\n"):
                yield n, raw[:-1], True
            else:
                yield n, raw, False


def parquet_lines(path: Path | str | Any) -> Iterator[tuple[int, bytes]]:
    """(row number from 1, record bytes) of a sealed segment; ValueError/OSError if unreadable.

    `path`: a local path, an ``s3://`` location (`ingest.log.objstore`) or a pyarrow buffer."""
    import pyarrow.parquet as pq  # here, so that appending never pays for importing pyarrow

    from ingest.log.objstore import arrow_input

    n = 0
    source = arrow_input(str(path)) if isinstance(path, (str, Path)) else path
    with pq.ParquetFile(source) as pf:
        if "record" not in pf.schema_arrow.names:
            raise ValueError(f"{path}: no 'record' column: not a hookaudit log segment")
        for batch in pf.iter_batches(columns=["record"]):
            for value in batch.column(0).to_pylist():
                n += 1
                yield n, value if isinstance(value, bytes) else b""


def iter_raw_lines(seg: Segment) -> Iterator[tuple[int, bytes]]:
    """(line or row number from 1, exact record bytes) of a segment; a partial last line is skipped.

    An active segment sealed meanwhile is read from its sealed copy; batch lines are skipped.

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
            path = sealed_copy(seg).path
            if not path.exists():
                raise
        else:
            with f:
                for n, raw in enumerate(f, 1):
                    if raw.endswith(b"\n") and not is_batch_line(raw):
                        yield n, raw[:-1]
            return
        yield from parquet_lines(path)
        return
    yield from parquet_lines(seg.location)


class ActiveData(NamedTuple):
    """An active segment's bytes up to its last newline, and where each record line is."""

    data: bytes
    spans: list[tuple[int, int, int]]  # (line number from 1, start, end without the newline)
    whole: bool  # every line of `data` is a record line


def active_data(seg: Segment) -> ActiveData | None:
    """One read of an active segment: its complete lines, batch lines left out.

    None when it was sealed meanwhile (read `sealed_copy(seg)` instead); OSError when
    it cannot be read.

    Example:
        >>> active_data(segments(data_dir)[-1]).spans[0][0]
        1
    """
    try:
        data = seg.path.read_bytes()
    except FileNotFoundError:
        return None
    end = data.rfind(b"\n") + 1  # a torn last line is still being written: not yet a record
    data = data[:end]
    spans: list[tuple[int, int, int]] = []
    whole = True
    pos = n = 0
    while pos < end:
        nl = data.index(b"\n", pos)
        n += 1
        if data.startswith(b'{"batch":', pos):
            whole = False
        else:
            spans.append((n, pos, nl))
        pos = nl + 1
    return ActiveData(data, spans, whole)


def hashed_lines(seg: Segment) -> tuple[str, list[tuple[int, bytes]]]:
    """The sha256 of every byte of a segment as read now, and its records as `iter_raw_lines`
    gives them, both from one read (an active segment: up to its last newline).

    Example:
        >>> digest, lines = hashed_lines(segments(data_dir)[0])
    """
    got = active_data(seg) if seg.kind == "active" else None
    if got is not None:
        data = got.data
        return hashlib.sha256(data).hexdigest(), [(n, data[a:b]) for n, a, b in got.spans]
    import pyarrow as pa

    from ingest.log.objstore import read_bytes

    data = read_bytes(sealed_copy(seg).location)
    return hashlib.sha256(data).hexdigest(), list(parquet_lines(pa.BufferReader(data)))


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
    """Every Outcome in the log (sealed and active), in log order (worker, then seq).

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
            view = view_decoder.decode(raw)
        except (msgspec.DecodeError, RecursionError):
            continue
        if key_digest_of(view.key()) == digest:
            return decode_outcome_json(raw)
    return None


def lookup_many_in(seg: Segment, digests: set[bytes]) -> dict[bytes, Outcome]:
    """The records in `seg` whose `key_digest` is in `digests`, by digest (one scan of `seg`).

    A batch of re-delivered events costs one pass over each segment that holds them,
    not one pass per event.

    Example:
        >>> list(lookup_many_in(segments(data_dir)[0], {key_digest(o)}).values())[0].seq
        1
    """
    found: dict[bytes, Outcome] = {}
    for _, raw in iter_raw_lines(seg):
        try:
            view = view_decoder.decode(raw)
        except (msgspec.DecodeError, RecursionError):
            continue
        d = key_digest_of(view.key())
        if d in digests and d not in found:
            found[d] = decode_outcome_json(raw)
            if len(found) == len(digests):
                break
    return found
