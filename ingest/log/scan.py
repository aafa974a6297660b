"""Replay's fast reader of sealed segments: select records by their flat columns, then hand them out.

Rules of this file:
- A sealed segment's flat columns (`ingest.log.schema.SCHEMA`) filter records before any is
  decoded: a row group whose ``ts`` statistics lie outside the time range is not read at
  all, the ``record`` column is read only for row groups with a selected row, and records
  are handed out as memoryviews of the Arrow buffer (no copies).
- The ``record`` column is read `_SLICE` rows at a time: a whole row group's records are
  ~100 MB, which the allocator maps afresh and the kernel zeroes for every group (a
  fifth of a replay's time went to that); slices of a few MB reuse the same memory.
- A segment without flat columns gets None: the caller reads it line by line.
- The filter is any `RowFilter` (replay's `Selection`): the log knows no replay type.
- `estimated_rows` and `has_columns` answer from a Parquet footer, for planning reads.
- A reader that wants to say what it read (replay's digest) passes `digests`: the sha256
  of every byte of each segment it read, taken from the very bytes it parses.
- Nothing here writes.

Example:
    >>> import tempfile
    >>> from replay.select import Selection
    >>> sealed_rows(Segment("w1", 1, "sealed", Path(tempfile.mkdtemp()) / "none.parquet"),
    ...             Selection(), frozenset(), None) is None
    True
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from typing import Any, NamedTuple, Protocol

from engine.errors import HookauditError
from ingest.log.layout import Segment

__all__ = ["ACTIVE_ROW_BYTES", "Batch", "RowFilter", "estimated_rows", "has_columns", "sealed_rows"]

ACTIVE_ROW_BYTES = 2048  # a typical stored record (event, decision, runs) as JSON


class RowFilter(Protocol):
    """Which live records to hand out: a time range [lo_us, hi_us), a session, events, ids."""

    @property
    def since(self) -> datetime | None: ...
    @property
    def until(self) -> datetime | None: ...
    @property
    def session(self) -> str | None: ...
    @property
    def event(self) -> tuple[str, ...]: ...
    @property
    def ids(self) -> frozenset[str] | None: ...
    @property
    def lo_us(self) -> float: ...
    @property
    def hi_us(self) -> float: ...


def estimated_rows(seg: Segment) -> int:
    """Estimated records in a segment (exact for sealed Parquet, from its footer).

    Example:
        >>> estimated_rows(Segment("w1", 1, "active", Path("/nonexistent")))
        1
    """
    if seg.kind == "sealed":
        import pyarrow.parquet as pq

        try:
            from ingest.log.objstore import arrow_input

            return int(pq.read_metadata(arrow_input(seg.location)).num_rows)
        except (OSError, ValueError, HookauditError):
            pass
    try:
        return max(1, seg.path.stat().st_size // ACTIVE_ROW_BYTES)
    except OSError:  # sealed and removed meanwhile: read from its sealed copy
        return 1


def has_columns(seg: Segment, names: Sequence[str]) -> bool:
    """Whether a sealed segment has all these flat columns (False when unreadable)."""
    import pyarrow.parquet as pq

    from ingest.log.objstore import arrow_input

    try:
        have = pq.read_schema(arrow_input(seg.location)).names
    except (OSError, ValueError, HookauditError):
        return False
    return all(n in have for n in names)


_FLAT = ("id", "ts", "event", "session_id", "replay_id", "record")
_SLICE = 4096  # records read at a time (~8 MB of JSON)


def _us(value: object) -> float | None:
    """µs since the epoch of a Parquet statistic of the `ts` column (None when unknown)."""
    if isinstance(value, datetime):
        when = value if value.tzinfo else value.replace(tzinfo=UTC)
        return when.timestamp() * 1e6
    return float(value) if isinstance(value, int) else None


def _groups(pf: Any, sel: RowFilter) -> Iterator[int]:
    """Row groups that may hold selected events: the `ts` statistics prune the others."""
    md = pf.metadata
    leaf = None
    if md.num_row_groups and (sel.since is not None or sel.until is not None):
        first = md.row_group(0)
        leaf = next((j for j in range(first.num_columns)
                     if first.column(j).path_in_schema == "ts"), None)  # fmt: skip
    for group in range(md.num_row_groups):
        st = md.row_group(group).column(leaf).statistics if leaf is not None else None
        if st is not None and st.has_min_max:
            lo, hi = _us(st.min), _us(st.max)
            if (hi is not None and hi < sel.lo_us) or (lo is not None and lo >= sel.hi_us):
                continue
        yield group


def _keep(
    small: Any, sel: RowFilter, first: int, skip: frozenset[int], span: tuple[int, int] | None
) -> list[int] | None:
    """Indexes of the rows of a row group to select (None: all of them); `first` is the
    row number (from 1) of its first row in the segment, `skip` rows never selected,
    `span` the row numbers [lo, hi) to read (None: all)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    mask = pc.is_null(small.column("replay_id"))  # live outcomes only
    if sel.session is not None:
        sids = pc.fill_null(small.column("session_id"), "")
        mask = pc.and_(mask, pc.equal(sids, sel.session))
    if sel.event:
        events = pa.array(sorted(sel.event), pa.string())
        mask = pc.and_(mask, pc.is_in(small.column("event"), value_set=events))
    if sel.ids is not None:
        ids = pa.array(sorted(sel.ids), pa.string())
        mask = pc.and_(mask, pc.is_in(small.column("id"), value_set=ids))
    if sel.since is not None or sel.until is not None:
        ts = small.column("ts").cast(pa.int64())
        if sel.since is not None:
            mask = pc.and_(mask, pc.greater_equal(ts, int(sel.lo_us)))
        if sel.until is not None:
            mask = pc.and_(mask, pc.less(ts, int(sel.hi_us)))
    mask = pc.fill_null(mask, False)
    hidden = [n - first for n in skip if first <= n < first + len(small)]
    lo, hi = (0, len(small)) if span is None else (max(0, span[0] - first), span[1] - first)
    if not hidden and lo == 0 and hi >= len(small) and pc.all(mask).as_py():
        return None
    keep: list[int] = pc.indices_nonzero(mask).to_pylist()
    if hidden or lo > 0 or hi < len(small):
        gone = set(hidden)
        keep = [i for i in keep if lo <= i < hi and i not in gone]
    return keep


class Batch(NamedTuple):
    """Selected records of one row group: record ``i`` is ``data[offsets[i]:offsets[i + 1]]``
    for each ``i`` in `indices` (memoryviews of the Arrow buffers: no copies)."""

    data: memoryview
    offsets: memoryview
    indices: Sequence[int]


def sealed_rows(
    seg: Segment,
    sel: RowFilter,
    skip: frozenset[int],
    span: tuple[int, int] | None,
    digests: dict[str, str] | None = None,
) -> Iterator[Batch] | None:
    """Batches of the records of a sealed segment (rows `span` of it, else all) that pass
    the filters, using its flat columns; None when the segment has no such columns (then
    every record is decoded).

    With `digests`, the file is mapped once, its sha256 stored under the segment's name,
    and the records are read from exactly the bytes hashed (the compressed file: ~0.2 µs
    a record)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ingest.log.objstore import is_remote, read_bytes

    try:
        if is_remote(seg.location):  # one GET of the whole object, then read from memory
            buf = pa.py_buffer(read_bytes(seg.location))
            if digests is not None:
                digests[seg.name] = hashlib.sha256(buf).hexdigest()
            pf = pq.ParquetFile(pa.BufferReader(buf))
        elif digests is None:
            pf = pq.ParquetFile(seg.path)
        else:
            with pa.memory_map(str(seg.path)) as mm:
                buf = mm.read_buffer()
            digests[seg.name] = hashlib.sha256(buf).hexdigest()
            pf = pq.ParquetFile(pa.BufferReader(buf))
    except (OSError, ValueError):  # Unavailable (object storage down) is not "unreadable"
        return None
    if not all(name in pf.schema_arrow.names for name in _FLAT):
        pf.close()
        return None

    needed = ["replay_id"]  # the flat columns the filters read
    needed += ["session_id"] if sel.session is not None else []
    needed += ["event"] if sel.event else []
    needed += ["id"] if sel.ids is not None else []
    needed += ["ts"] if sel.since is not None or sel.until is not None else []
    md = pf.metadata
    starts = [1]  # row number of each row group's first row
    for group in range(md.num_row_groups):
        starts.append(starts[-1] + md.row_group(group).num_rows)

    def batches() -> Iterator[Batch]:
        with pf:
            for group in _groups(pf, sel):
                if span is not None and (starts[group + 1] <= span[0] or starts[group] >= span[1]):
                    continue
                small = pf.read_row_group(group, columns=needed)
                keep = _keep(small, sel, starts[group], skip, span)
                if keep is not None and not keep:
                    continue
                # The records in slices of _SLICE rows: a whole row group's column is
                # ~100 MB, which the allocator maps afresh (zeroing every page) and
                # unmaps for each group; slices reuse the same few megabytes.
                start = 0
                at = 0  # position in `keep` of the first index at or after `start`
                for rb in pf.iter_batches(
                    batch_size=_SLICE, row_groups=[group], columns=["record"], use_threads=False
                ):
                    records = rb.column(0)
                    end = start + len(records)
                    if keep is None:
                        yield _batch(records, None)
                    else:
                        first = at
                        while at < len(keep) and keep[at] < end:
                            at += 1
                        if at > first:
                            yield _batch(records, [i - start for i in keep[first:at]])
                    start = end

    return batches()


def _batch(records: Any, keep: list[int] | None) -> Batch:
    """The values of an Arrow binary array (those at `keep`, else all; never a null)."""
    import pyarrow as pa

    _, offsets, data = records.buffers()
    if data is None or offsets is None:  # no bytes at all: every value is null or empty
        return Batch(memoryview(b""), memoryview(b""), ())
    start = records.offset
    raw = memoryview(offsets)
    wide = pa.types.is_large_binary(records.type)
    off = (raw.cast("q") if wide else raw.cast("i"))[start : start + len(records) + 1]
    indices: Sequence[int] = range(len(records)) if keep is None else keep
    if records.null_count:
        valid = records.is_valid().to_pylist()
        indices = [i for i in indices if valid[i]]
    return Batch(memoryview(data), off, indices)
