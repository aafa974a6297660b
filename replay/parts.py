"""Split the log between replay jobs: whole segments per job, and the copies none may read.

Rules of this file:
- Jobs read disjoint sets of segments, so no record is decompressed or decoded twice
  (sessions then span jobs: `replay.tally` applies the session rule after the merge).
- `assign` balances the jobs by estimated rows (a sealed segment's Parquet footer; an
  active segment's size at ``ACTIVE_ROW_BYTES`` a record) and is deterministic: the
  same log and job count give the same split.
- `duplicates` finds the live events stored more than once (a re-delivery appended by
  two workers) and names every copy but the first in log order (worker, seq, row), the
  one `replay.select.select` keeps when it reads the log alone. Sealed segments are
  scanned through their flat ``id``/``replay_id`` columns with DuckDB; active segments
  and sealed ones without flat columns by decoding only those two fields of each line.
- Nothing here writes.

Example:
    >>> import tempfile
    >>> assign([], 2)
    [[], []]
    >>> duplicates([])
    {}
"""

from __future__ import annotations

import logging
from typing import Any

import msgspec

from ingest.log import Segment, iter_raw_lines

__all__ = ["ACTIVE_ROW_BYTES", "assign", "duplicates"]

_logger = logging.getLogger(__name__)
ACTIVE_ROW_BYTES = 2048  # a typical stored record (event, decision, runs) as JSON


def _rows(seg: Segment) -> int:
    """Estimated records in a segment (exact for sealed Parquet)."""
    if seg.kind == "sealed":
        import pyarrow.parquet as pq

        try:
            return int(pq.read_metadata(seg.path).num_rows)
        except (OSError, ValueError):
            pass
    try:
        return max(1, seg.path.stat().st_size // ACTIVE_ROW_BYTES)
    except OSError:  # sealed and removed meanwhile: read from its sealed copy
        return 1


def assign(segs: list[Segment], jobs: int) -> list[list[Segment]]:
    """`segs` in `jobs` groups of about equal rows (largest first to the lightest job);
    each group keeps log order.

    Example:
        >>> assign([], 3)
        [[], [], []]
    """
    loads = [0] * max(1, jobs)
    groups: list[list[tuple[int, Segment]]] = [[] for _ in loads]
    sized = sorted(((_rows(s), i, s) for i, s in enumerate(segs)), key=lambda t: (-t[0], t[1]))
    for rows, i, seg in sized:
        k = min(range(len(loads)), key=lambda j: (loads[j], j))
        loads[k] += rows
        groups[k].append((i, seg))
    return [[seg for _, seg in sorted(g, key=lambda t: t[0])] for g in groups]


class _Id(msgspec.Struct):
    id: str


class _IdKey(msgspec.Struct):
    event: _Id
    replay_id: str | None = None


_id_decoder = msgspec.json.Decoder(_IdKey)
_FLAT = ("id", "replay_id")


def _flat(seg: Segment) -> bool:
    """Whether a sealed segment has the flat ``id``/``replay_id`` columns."""
    import pyarrow.parquet as pq

    try:
        names = pq.read_schema(seg.path).names
    except (OSError, ValueError):
        return False
    return all(n in names for n in _FLAT)


def _line_ids(seg: Segment) -> list[tuple[str, int]]:
    """(event id, row number) of the live records of a segment read line by line."""
    out = []
    for n, raw in iter_raw_lines(seg):
        try:
            key = _id_decoder.decode(raw)
        except msgspec.DecodeError:
            continue  # unreadable: `select` skips it with a warning
        if key.replay_id is None:
            out.append((key.event.id, n))
    return out


def duplicates(segs: list[Segment]) -> dict[str, frozenset[int]]:
    """Every copy but the first (log order) of each live event stored more than once, as
    segment name -> row numbers from 1 (`select`'s `skip`); {} when there is none.

    Example:
        >>> duplicates([])
        {}
    """
    import duckdb
    import pyarrow as pa

    order = {seg.name: i for i, seg in enumerate(segs)}
    flat = [seg for seg in segs if seg.kind == "sealed" and _flat(seg)]
    by_path = {str(seg.path): seg.name for seg in flat}
    scanned = set(by_path.values())
    rest: list[tuple[str, str, int]] = []
    for seg in segs:
        if seg.name not in scanned:
            rest.extend((eid, seg.name, n) for eid, n in _line_ids(seg))
    if not flat and not rest:
        return {}
    con = duckdb.connect()
    try:
        lines = pa.table(
            {
                "id": pa.array([r[0] for r in rest], pa.string()),
                "seg": pa.array([r[1] for r in rest], pa.string()),
                "n": pa.array([r[2] for r in rest], pa.int64()),
            }
        )
        con.register("lines", lines)
        parts = ["SELECT id, seg, n FROM lines"]
        params: list[Any] = []
        if flat:
            parts.append(
                "SELECT id, filename AS seg, file_row_number + 1 AS n "
                "FROM read_parquet(?, filename = true, file_row_number = true) "
                "WHERE replay_id IS NULL"
            )
            params.append(list(by_path))
        rows = con.execute(
            f"WITH live AS ({' UNION ALL '.join(parts)}) "
            "SELECT id, seg, n FROM live WHERE id IN "
            "(SELECT id FROM live GROUP BY id HAVING count(*) > 1)",
            params,
        ).fetchall()
    finally:
        con.close()
    copies: dict[str, list[tuple[int, int, str]]] = {}
    for eid, seg, n in rows:
        name = by_path.get(seg, seg)
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
