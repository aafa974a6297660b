"""How the log's segments become DuckDB relations: sealed files, the scans, the dedup.

Split from `queries.db` (whose header has the rules): `_inspect_sealed` checks a sealed
file's footer, the `_*_scan` functions write the SQL that reads sealed Parquet with
pushdown, and `_Dedup` finds the rows that repeat a key (the log's one dedup rule,
`ingest.log.dedup`), paying for the anti-join only where a duplicate is. `_Problems`
collects unreadable records for the `unreadable` view.
"""

from __future__ import annotations

import bisect
import json
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from ingest.log.dedup import EVENT_PARTITION, KEY_PARTITION, sql_copy
from ingest.log.layout import Segment, runs_location
from ingest.log.objstore import arrow_input, stat
from ingest.log.reader import OnCorrupt
from queries.columns import (
    BASE_COLUMNS,
    BASE_TYPES,
    EXTRA_TYPES,
    RUN_COLUMNS,
    RUN_NAMES,
    RUN_TYPES,
    RUNS_JSON,
    SEALED_EXTRA_COLUMNS,
)

_logger = logging.getLogger(__name__)

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _lit(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _paths(files: Sequence[Path | str]) -> str:
    return "[" + ", ".join(_lit(str(f)) for f in files) + "]"


@dataclass
class _Problems:
    """Unreadable records: reported once each (to the callback, else as a logged warning) and
    kept for the `unreadable` view."""

    on_corrupt: OnCorrupt | None
    rows: list[tuple[str, int, str]] = field(default_factory=list)

    def __call__(self, file: str, line: int, reason: str) -> None:
        self.rows.append((file, line, reason))
        if self.on_corrupt is not None:
            self.on_corrupt(file, line, reason)
        else:
            _logger.warning("%s:%d: skipped unreadable record: %s", file, line, reason)


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    return first


# ----------------------------------------------------------------------------- sealed segments


def _runs_file(seg: Segment) -> str:
    """The runs side file of a sealed segment (absent for segments sealed before it existed):
    a local path, or the object of a shipped segment pruned here."""
    return runs_location(seg)


@dataclass
class _Sealed:
    """A readable sealed segment: which proposed columns it has, and its unreadable rows."""

    seg: Segment
    extras: frozenset[str]
    null_ids: int
    runs: str | None  # location
    oldest: int  # min ts (epoch us) in the file, from its statistics
    newest: int  # max ts; 0 when the statistics are missing (the file may hold any ts)
    size: int
    mtime_ns: int
    replays: bool  # holds replayed records (replay_id set); unknown counts as True


def _inspect_sealed(seg: Segment, problems: _Problems) -> _Sealed | None:
    """Check a sealed file's schema from its footer; None (reported) when it cannot be used."""
    try:
        meta = pq.read_metadata(arrow_input(seg.location))
        schema = meta.schema.to_arrow_schema()
    except (OSError, ValueError, pa.ArrowException) as exc:
        problems(str(seg.path), 0, f"cannot read sealed segment: {exc}")
        return None
    types = {f.name: f.type for f in schema}
    wrong = [n for n, t in BASE_TYPES.items() if types.get(n) != t]
    if wrong or types.get("record") not in (pa.binary(), pa.large_binary()):
        why = f"columns {wrong or ['record']} missing or of another type"
        problems(str(seg.path), 0, f"not a hookaudit log segment: {why}")
        return None
    extras = frozenset(n for n, t in EXTRA_TYPES.items() if types.get(n) == t)
    null_ids = newest = 0
    oldest = 2**63 - 1
    known, replays = True, False
    id_col, ts_col = schema.get_field_index("id"), schema.get_field_index("ts")
    replay_col = schema.get_field_index("replay_id")
    for g in range(meta.num_row_groups):
        rg = meta.row_group(g)
        rstats = rg.column(replay_col).statistics
        if rstats is None or not rstats.has_null_count or rstats.null_count < rg.num_rows:
            replays = True
        stats = rg.column(id_col).statistics
        if null_ids >= 0 and (stats is None or not stats.has_null_count):
            null_ids = -1  # unknown: filter this file
        elif null_ids >= 0:
            null_ids += stats.null_count
        tstats = rg.column(ts_col).statistics
        if tstats is not None and tstats.has_min_max and isinstance(tstats.max, datetime):
            newest = max(newest, _us(tstats.max))
            oldest = min(oldest, _us(tstats.min))
        else:
            known = False
    runs = _runs_file(seg)
    if stat(runs) is not None:
        try:
            rtypes = {f.name: f.type for f in pq.read_schema(arrow_input(runs))}
        except (OSError, ValueError, pa.ArrowException) as exc:
            _logger.warning("%s: unreadable runs file, derived from records: %s", runs, exc)
            rtypes = {}
        if any(rtypes.get(n) != t for n, t in RUN_TYPES.items()):
            runs_file: str | None = None
        else:
            runs_file = runs
    else:
        runs_file = None
    size, mtime_ns = stat(seg.location) or (0, 0)
    if not known or meta.num_rows == 0:
        oldest, newest = 0, 0
    return _Sealed(seg, extras, null_ids, runs_file, oldest, newest, size, mtime_ns, replays)


def _us(when: datetime) -> int:
    aware = when if when.tzinfo is not None else when.replace(tzinfo=UTC)
    return (aware - _EPOCH) // timedelta(microseconds=1)


def _outcome_scan(files: Sequence[_Sealed], extras: frozenset[str], where: str) -> str:
    cols = [_q(n) for n, _ in BASE_COLUMNS]
    for name, _, _, derive in SEALED_EXTRA_COLUMNS:
        cols.append(_q(name) if name in extras else f"{derive} AS {_q(name)}")
    cols.append("record")
    src = f"read_parquet({_paths([f.seg.location for f in files])}, binary_as_string = true)"
    return f"SELECT {', '.join(cols)} FROM {src}{where}"


def _runs_from_list(src: str, runs: str, where: str) -> str:
    """SQL: one row per element of the list `runs` (record-shaped HookRuns) of each row of `src`."""
    outer = ", ".join(f"{expr} AS {_q(name)}" for name, _, _, expr in RUN_COLUMNS)
    keep = "worker, seq, id, ts, event, tool_name, session_id, settings_id, replay_id"
    inner = (
        f"SELECT {keep}, unnest(list_transform({runs}, "
        f"lambda e, n: struct_pack(x := e, i := n))) AS u FROM {src}{where}"
    )
    return f"SELECT {outer} FROM (SELECT {keep}, u.x AS x, u.i AS i FROM ({inner}))"


def _derived_runs_scan(files: Sequence[_Sealed], where: str) -> str:
    src = f"read_parquet({_paths([f.seg.location for f in files])}, binary_as_string = true)"
    runs = f"from_json(json_extract(record, '$.runs'), {_lit(RUNS_JSON)})"
    return _runs_from_list(src, runs, where)


def _runs_scan(files: Sequence[_Sealed]) -> str:
    cols = ", ".join(_q(n) for n in RUN_NAMES)
    return f"SELECT {cols} FROM read_parquet({_paths([f.runs for f in files if f.runs])})"


# ----------------------------------------------------------------------------- dedup


class _Dedup:
    """Which rows repeat an idempotency key (or, for `events`, a live event id).

    A duplicate has the same event, hence the same `ts`, as the record it repeats. Phase 1
    finds the `ts` values held by more than one row of one class (live, or one replay run);
    phase 2 reads only the rows with those `ts` (in the files whose time range holds one)
    and ranks them. Phase 1 over sealed segments, the one full scan, is cached in
    `<data_dir>/cache/queries/dedup.json` per set of sealed files (sealed files never change);
    newly sealed files and active rows are compared only with the files their time range
    overlaps.
    """

    def __init__(self, con: Any, data_dir: Path, cache: bool) -> None:
        self.con = con
        self.path = data_dir / "cache" / "queries" / "dedup.json"
        self.cache = cache

    def _load(self) -> tuple[dict[str, list[int]], list[int]] | None:
        if not self.cache:
            return None
        try:
            data = json.loads(self.path.read_text())
            return dict(data["files"]), [int(x) for x in data["ts"]]
        except (OSError, ValueError, KeyError, TypeError, RecursionError):
            return None

    def _save(self, files: dict[str, list[int]], ts: list[int]) -> None:
        if not self.cache:
            return
        try:
            for folder in (self.path.parent.parent, self.path.parent):
                folder.mkdir(mode=0o700, exist_ok=True)
                os.chmod(folder, 0o700)
            tmp = self.path.with_name(f"dedup.{os.getpid()}.tmp")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
            with os.fdopen(fd, "w") as f:
                os.fchmod(fd, 0o600)
                f.write(json.dumps({"version": 1, "files": files, "ts": ts}))
            os.replace(tmp, self.path)
        except OSError as exc:  # a read-only data dir: the next open computes it again
            _logger.debug("%s: cannot write the dedup cache: %s", self.path, exc)

    def _repeated(self, scope: Sequence[_Sealed], probe: str, extra: str = "") -> set[int]:
        """ts (epoch us) held twice in one class among `scope` files (+ `extra` rows),
        restricted to the ts values `probe` (SQL) yields."""
        parts = [f"SELECT ts, replay_id FROM read_parquet({_files(scope)}) WHERE id IS NOT NULL"]
        parts = parts if scope else []
        if extra:
            parts.append(extra)
        if not parts:
            return set()
        rows = self.con.execute(
            f"SELECT DISTINCT epoch_us(ts) FROM ({' UNION ALL '.join(parts)}) "
            f"WHERE ts IN ({probe}) GROUP BY ts, replay_id HAVING count(*) > 1"
        ).fetchall()
        return {int(r[0]) for r in rows}

    def _sealed_ts(self, files: Sequence[_Sealed]) -> set[int]:
        now = {f.seg.name: [f.size, f.mtime_ns] for f in files}
        cached = self._load()
        if cached is not None and all(now.get(k) == v for k, v in cached[0].items()):
            new = [f for f in files if f.seg.name not in cached[0]]
            ts = set(cached[1])
            if new:
                lo, hi = min(f.oldest for f in new), max(f.newest for f in new)
                scope = files if any(f.newest == 0 for f in new) else _overlapping(files, lo, hi)
                probe = f"SELECT ts FROM read_parquet({_files(new)})"
                ts |= self._repeated(scope, probe)
        else:
            ts = set()
            if len(files) > 0:
                only = (
                    f"SELECT ts, replay_id FROM read_parquet({_files(files)}) WHERE id IS NOT NULL"
                )
                rows = self.con.execute(
                    f"SELECT DISTINCT epoch_us(ts) FROM ({only}) GROUP BY ts, replay_id "
                    "HAVING count(*) > 1"
                ).fetchall()
                ts = {int(r[0]) for r in rows}
        self._save(now, sorted(ts))
        return ts

    def hidden(self, files: Sequence[_Sealed]) -> pa.Table:
        """(file, worker, seq, key_dup, event_dup) of every row to hide; usually empty.

        Active rows are read from `_ha_active`; their file is 'active'.
        """
        con = self.con
        ts = self._sealed_ts(files) if files else set()
        lo, hi = con.execute(
            "SELECT epoch_us(min(ts)), epoch_us(max(ts)) FROM _ha_active"
        ).fetchall()[0]
        if lo is not None:
            active = "SELECT ts, replay_id FROM _ha_active"
            probe = "SELECT ts FROM _ha_active"
            ts |= self._repeated(_overlapping(files, int(lo), int(hi)), probe, active)
        empty = pa.table(
            {
                "file": pa.array([], pa.string()),
                "worker": pa.array([], pa.string()),
                "seq": pa.array([], pa.int64()),
                "key_dup": pa.array([], pa.bool_()),
                "event_dup": pa.array([], pa.bool_()),
            }
        )
        if not ts:
            return empty
        cand = sorted(ts)
        scope = [f for f in files if _holds_any(cand, f.oldest, f.newest)]
        con.register(
            "_ha_dup_ts",
            pa.table({"t": pa.array(cand, pa.int64()).cast(pa.timestamp("us", tz="UTC"))}),
        )
        try:
            cols = "id, ts, settings_id, replay_id, worker, seq, appended"
            parts = [f"SELECT 'active' AS file, {cols} FROM _ha_active"]
            if scope:
                parts.append(
                    f"SELECT filename AS file, {cols} FROM read_parquet({_files(scope)}, "
                    "filename = true) WHERE id IS NOT NULL"
                )
            rows = con.sql(
                f"""
                WITH c AS (SELECT * FROM ({" UNION ALL ".join(parts)})
                           WHERE ts IN (SELECT t FROM _ha_dup_ts)),
                r AS (
                    SELECT file, worker, seq,
                        {sql_copy(KEY_PARTITION)} AS key_dup,
                        replay_id IS NULL AND {sql_copy(EVENT_PARTITION)} AS event_dup
                    FROM c)
                SELECT file, worker, seq, key_dup, event_dup FROM r WHERE key_dup OR event_dup
                """
            ).to_arrow_table()
        finally:
            con.unregister("_ha_dup_ts")
        return rows.cast(empty.schema) if rows.num_rows else empty


def _files(files: Sequence[_Sealed]) -> str:
    return _paths([f.seg.location for f in files])


def _overlapping(files: Sequence[_Sealed], lo: int, hi: int) -> list[_Sealed]:
    """The files whose ts range meets [lo, hi] (a file without statistics always does)."""
    return [f for f in files if f.newest == 0 or (f.oldest <= hi and f.newest >= lo)]


def _holds_any(sorted_ts: Sequence[int], oldest: int, newest: int) -> bool:
    if newest == 0:
        return True
    k = bisect.bisect_left(sorted_ts, oldest)
    return k < len(sorted_ts) and sorted_ts[k] <= newest
