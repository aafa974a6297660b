"""Split the log between replay jobs: whole segments per job, and the copies none may read.

Rules of this file:
- Jobs read disjoint sets of segments, so no record is decompressed or decoded twice
  (sessions then span jobs: `replay.tally` applies the session rule after the merge).
- A `SegmentQueue` hands the segments out one at a time, largest first (by estimated
  rows: a sealed segment's Parquet footer; an active segment's size at
  ``ACTIVE_ROW_BYTES`` a record), to whichever job asks next, so that the jobs finish
  together whatever their segments cost. Which job reads which segment does not change
  any result.
- `duplicates` finds the live events stored more than once (a re-delivery appended by
  two workers) and names every copy but the first in log order (worker, seq, row), the
  one `replay.select.select` keeps when it reads the log alone. Sealed segments are
  scanned through their flat ``id``/``replay_id`` columns with DuckDB; active segments
  and sealed ones without flat columns line by line (the layout the log writer writes
  is read without decoding; any other line is decoded). A copy `select` could not read
  does not count.
- A job does not wait for `duplicates` (the parent runs it while the jobs start): its
  `LateSkips` answers "nothing to skip" for the segments it begins before the answer
  arrives, and raises `Restart` if the answer names a row of one of those (rare: a
  re-delivered copy in the first segment a job reads); the job then starts over with
  the answer known.
- Nothing here writes.

Example:
    >>> list(SegmentQueue([]).take())
    []
    >>> duplicates([])
    {}
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import msgspec

from ingest.log.layout import Segment
from ingest.log.lines import HEAD_ID, LIVE_TAIL
from ingest.log.objstore import duckdb_filesystem
from ingest.log.reader import iter_raw_lines
from ingest.log.scan import ACTIVE_ROW_BYTES, estimated_rows, has_columns
from replay.select import Piece

__all__ = ["ACTIVE_ROW_BYTES", "LateSkips", "Restart", "SegmentQueue", "duplicates"]

_logger = logging.getLogger(__name__)
_rows = estimated_rows


class SegmentQueue:
    """The segments of a replay, largest first, each taken by one job (`take`); forked
    job processes share the position (a `multiprocessing.Value`). The last ``2 * jobs``
    sealed segments are handed out in halves (`replay.select.Piece`), so that the jobs
    finish within half a segment of each other (each half decompresses its segment's
    records again: a small price at the end only).

    Example:
        >>> q = SegmentQueue([])
        >>> list(q.take()), q.segs
        ([], [])
    """

    def __init__(self, segs: list[Segment], ctx: Any = None, *, jobs: int = 1) -> None:
        import multiprocessing

        sized = sorted(((_rows(s), s) for s in segs), key=lambda t: -t[0])  # ties: log order
        tail = [i for i, (_, s) in enumerate(sized) if s.kind == "sealed"]
        halve = set(tail[-2 * jobs :]) if jobs > 1 else set()
        self.segs: list[Segment | Piece] = []
        for i, (rows, seg) in enumerate(sized):
            if i in halve and rows > 1:
                mid = 1 + rows // 2
                self.segs += [Piece(seg, 1, mid), Piece(seg, mid, rows + 1)]
            else:
                self.segs.append(seg)
        self._next = (ctx or multiprocessing).Value("i", 0)

    def take(self) -> Iterator[Segment | Piece]:
        """The next segments no job has taken yet, until none is left."""
        while True:
            with self._next.get_lock():
                i = self._next.value
                self._next.value = i + 1
            if i >= len(self.segs):
                return
            yield self.segs[i]


class _Id(msgspec.Struct):
    id: str


class _IdKey(msgspec.Struct):
    event: _Id
    replay_id: str | None = None


_id_decoder = msgspec.json.Decoder(_IdKey)
_FLAT = ("id", "replay_id")
# How `ingest.log.writer.LogWriter` writes a record (`ingest.log.lines`): the event's id first,
# the outcome's replay_id after every nested object.
_HEAD_ID = HEAD_ID
_LIVE_TAIL = LIVE_TAIL


def _flat(seg: Segment) -> bool:
    """Whether a sealed segment has the flat ``id``/``replay_id`` columns."""
    return has_columns(seg, _FLAT)


def _line_ids(seg: Segment) -> list[tuple[str, int]]:
    """(event id, row number) of the live records of a segment read line by line.

    A line laid out as the log writer writes it is read by its first and last bytes; any
    other is decoded. A record misread here can only make `duplicates` look closer (its
    positions are then checked by decoding), never hide a copy.
    """
    out = []
    for n, raw in iter_raw_lines(seg):
        m = _HEAD_ID.match(raw)
        at = raw.rfind(b',"replay_id":')
        if m is not None and at >= 0 and raw.startswith(_LIVE_TAIL, at + 13):
            out.append((m.group(1).decode(), n))
            continue
        try:
            key = _id_decoder.decode(raw)
        except (msgspec.DecodeError, RecursionError):
            continue  # unreadable: `select` skips it with a warning
        if key.replay_id is None:
            out.append((key.event.id, n))
    return out


def _selectable(seg: Segment, rows: set[int]) -> set[int]:
    """The rows (numbers from 1) of a line-read segment that `select` would read as live."""
    from replay.select import BaseRecord

    decoder = msgspec.json.Decoder(BaseRecord)
    ok = set()
    for n, raw in iter_raw_lines(seg):
        if n in rows:
            try:
                if decoder.decode(raw).replay_id is None:
                    ok.add(n)
            except (msgspec.DecodeError, RecursionError):
                pass
    return ok


def duplicates(segs: list[Segment]) -> dict[str, frozenset[int]]:
    """Every copy but the first (log order) of each live event stored more than once, as
    segment name -> row numbers from 1 (`select`'s `skip`); {} when there is none.

    One DuckDB pass over every live id finds the ids stored more than once (usually
    none); only then are their copies located and checked.

    Example:
        >>> duplicates([])
        {}
    """
    import duckdb

    order = {seg.name: i for i, seg in enumerate(segs)}
    flat = [seg for seg in segs if seg.kind == "sealed" and _flat(seg)]
    by_path = {seg.location: seg.name for seg in flat}
    scanned = set(by_path.values())
    lines = {seg.name: _line_ids(seg) for seg in segs if seg.name not in scanned}
    if not flat and not any(lines.values()):
        return {}
    try:
        con = duckdb.connect(config={"threads": 1})
        remote = duckdb_filesystem(list(by_path))
        if remote is not None:  # shipped segments: DuckDB reads them through pyarrow's S3 client
            con.register_filesystem(remote)
        rows = _copies(con, lines, list(by_path))
    except duckdb.Error as exc:  # a sealed file DuckDB cannot read: read every record
        _logger.warning("scanning sealed ids with DuckDB failed (%s); reading the records", exc)
        by_path = {}
        lines = {seg.name: _line_ids(seg) for seg in segs}
        counts = Counter(eid for found in lines.values() for eid, _ in found)
        rows = [(e, name, n) for name, f in lines.items() for e, n in f if counts[e] > 1]
    return _later_copies(rows, by_path, order, {seg.name: seg for seg in segs}) if rows else {}


def _copies(con: Any, lines: dict[str, list[tuple[str, int]]], sealed: list[str]) -> list[Any]:
    """(id, segment name or sealed path, row) of every live copy of an id stored more
    than once, `lines` holding the line-read segments' ids; [] when there is none."""
    import pyarrow as pa

    ids = [eid for found in lines.values() for eid, _ in found]
    union = "SELECT id FROM read_parquet(?) WHERE replay_id IS NULL UNION ALL " if sealed else ""
    params: list[Any] = [sealed] if sealed else []
    try:
        con.register("lines", pa.table({"id": pa.array(ids, pa.string())}))
        repeated = con.execute(
            f"SELECT id FROM ({union}SELECT id FROM lines) GROUP BY id HAVING count(*) > 1",
            params,
        ).fetchall()
        if not repeated:  # the usual answer
            return []
        # where each copy of those ids is (rare)
        wanted = {r[0] for r in repeated}
        rows: list[Any] = [
            (eid, name, n) for name, found in lines.items() for eid, n in found if eid in wanted
        ]
        if sealed:
            con.register("repeated", pa.table({"id": pa.array(sorted(wanted), pa.string())}))
            rows += con.execute(
                "SELECT id, filename, file_row_number + 1 "
                "FROM read_parquet(?, filename = true, file_row_number = true) "
                "WHERE replay_id IS NULL AND id IN (SELECT id FROM repeated)",
                params,
            ).fetchall()
        return rows
    finally:
        con.close()


def _later_copies(
    rows: list[tuple[str, str, int]],
    by_path: dict[str, str],
    order: dict[str, int],
    named: dict[str, Segment],
) -> dict[str, frozenset[int]]:
    """From every copy of the repeated ids, those after the first readable one."""
    wanted: dict[str, set[int]] = {}
    for _, seg, n in rows:
        if seg not in by_path:  # a line-read segment: check what `select` makes of it
            wanted.setdefault(seg, set()).add(int(n))
    readable = {name: _selectable(named[name], ns) for name, ns in wanted.items()}
    copies: dict[str, list[tuple[int, int, str]]] = {}
    for eid, seg, n in rows:
        name = by_path.get(seg, seg)
        if name in readable and int(n) not in readable[name]:
            continue
        copies.setdefault(eid, []).append((order[name], int(n), name))
    skip: dict[str, set[int]] = {}
    for found in copies.values():
        found.sort()
        for _, n, name in found[1:]:
            skip.setdefault(name, set()).add(n)
    if skip:
        _logger.info(
            "%d stored copies of re-delivered events left out", sum(map(len, skip.values()))
        )
    return {name: frozenset(ns) for name, ns in skip.items()}


class Restart(Exception):
    """The copies to skip arrived too late: a segment already read holds one of them."""


_NONE: frozenset[int] = frozenset()


class LateSkips(Mapping[str, frozenset[int]]):
    """`select`'s `skip`, filled in when `receive` (polled, never blocking until `finish`)
    delivers the parent's `duplicates`.

    Example:
        >>> late = LateSkips(lambda block: {"active/w1/00000001.jsonl": frozenset({2})})
        >>> late.get("sealed/w1/00000001.parquet", frozenset())
        frozenset()
        >>> late.finish()
        >>> late.known
        {'active/w1/00000001.jsonl': frozenset({2})}
    """

    def __init__(self, receive: Callable[[bool], Mapping[str, frozenset[int]] | None]) -> None:
        self.receive = receive  # receive(block): the answer, or None when not there yet
        self.known: Mapping[str, frozenset[int]] | None = None
        self.early: list[str] = []  # segments begun before the answer

    def _poll(self, block: bool) -> None:
        if self.known is None:
            got = self.receive(block)
            if got is not None:
                self.known = got
                if any(got.get(name) for name in self.early):
                    raise Restart(f"re-delivered copies in {', '.join(self.early)}")

    def get(self, name: str, default: Any = _NONE) -> Any:
        self._poll(False)
        if self.known is None:
            self.early.append(name)
            return default
        return self.known.get(name, default)

    def finish(self) -> None:
        """Wait for the answer (a job that read everything before it came); may `Restart`."""
        self._poll(True)

    def __getitem__(self, name: str) -> frozenset[int]:
        value: frozenset[int] = self.get(name, None)
        if value is None:
            raise KeyError(name)
        return value

    def __iter__(self) -> Iterator[str]:
        return iter(self.known or {})

    def __len__(self) -> int:
        return len(self.known or {})
