"""DuckDB views over the append-only log: the read side security teams ask anything.

`open_db(data_dir)` returns a DuckDB connection (in memory, or a file on request) with
these views over every segment `ingest.log.segments` lists, sealed Parquet and active JSONL:

    outcomes      one row per live Outcome (replay_id NULL)
    events        one row per HookEvent of a live outcome; the agent's input as JSON `payload`
    hook_runs     one row per HookRun of a live outcome
    tool_calls    one row per PreToolUse, joined to its PostToolUse/PostToolUseFailure
    sessions      one row per session_id: start, end, who, where, counts, denials
    replays       one row per replayed Outcome (replay_id set), beside the live decision
    all_outcomes  live and replayed outcomes (`outcomes` without the live-only filter)
    unreadable    records skipped because they cannot be read: file, line, reason

`queries.columns.VIEW_DOCS` holds every view's columns with their types and meaning.

Rules of this file:
- The only module of `queries/` that imports duckdb; DuckDB errors become `QueryError` here.
- Segments are found through `ingest.log.segments`, never by globbing. Sealed Parquet is read
  by DuckDB with projection and filter pushdown on its flat columns; a record's JSON line
  (`record`) is parsed only for a column its segment lacks (`queries.columns`: flat columns
  proposed for sealed segments, used as soon as a segment has them).
- Explicit schemas, never auto-detection: sealed files whose columns do not have the types of
  `ingest.log.schema.SCHEMA` are skipped with a warning; active lines are decoded by the log's
  own decoder (`decode_outcome_json`), so a line is readable here iff it is for `iter_outcomes`,
  and loaded into DuckDB as Arrow tables with declared types.
- A record is never shown twice: rows are deduplicated by the log's one rule
  (`ingest.log.dedup`: of the copies of a key, the first in log order, worker then seq),
  by idempotency key (event id, settings_id, replay_id) and, for the event views, by live
  event id. Only segments that hold a duplicate pay for the anti-join (see `_Dedup`).
- The dedup cache is private (0600 in a 0700 folder), like the log.
- After the views are built the connection is locked: file access only to the segments,
  no configuration change. User values reach SQL only as bound parameters.

Example:
    >>> con = open_db(data_dir)
    >>> con.sql("SELECT count(*) FROM outcomes").fetchall()
    [(3,)]
"""

from __future__ import annotations

import bisect
import json
import logging
import os
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import duckdb
import msgspec
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj
import pyarrow.parquet as pq

from engine.records import decode_outcome_json
from ingest.log import (
    EVENT_PARTITION,
    KEY_PARTITION,
    OnCorrupt,
    Segment,
    active_data,
    sealed_copy,
    segments,
    sql_copy,
)
from ingest.log.layout import runs_location
from ingest.log.objstore import arrow_input, duckdb_filesystem, stat
from queries.catalog import NamedQuery, QueryError, bind_params
from queries.columns import (
    BASE_COLUMNS,
    BASE_TYPES,
    EVENT_COLUMNS,
    EXTRA_TYPES,
    LINE_SCHEMA,
    LOG_COLUMNS,
    OUTCOME_SCHEMA,
    RUN_COLUMNS,
    RUN_NAMES,
    RUN_SCHEMA,
    RUN_TYPES,
    RUNS_JSON,
    SEALED_EXTRA_COLUMNS,
    TOOL_INPUT_COLUMNS,
    tool_input_values,
)

__all__ = [
    "PUBLIC_VIEWS",
    "QueryError",
    "Result",
    "check_read_only",
    "open_db",
    "run_named",
    "run_sql",
]

_logger = logging.getLogger(__name__)
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _lit(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _paths(files: Sequence[Path | str]) -> str:
    return "[" + ", ".join(_lit(str(f)) for f in files) + "]"


# ----------------------------------------------------------------------------- active segments


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


@dataclass
class _ActiveSegment:
    """The readable lines of one active segment: checked, not yet parsed."""

    path: str
    data: bytes  # the file's bytes up to its last newline
    spans: list[tuple[int, int]]  # (start, end) of each readable line in `data`, no newline
    numbers: list[int]  # their line numbers, from 1
    tool: list[tuple[str | None, str | None, str | None]]  # their command, file_path, url
    whole: bool  # every line of `data` is readable

    def text(self) -> bytes:
        """The readable lines, each ending in a newline."""
        if self.whole:
            return self.data
        return b"".join(self.data[a : b + 1] for a, b in self.spans)


def _read_active(
    segs: Sequence[Segment], problems: _Problems
) -> tuple[list[_ActiveSegment], list[Segment]]:
    """Check every line of the active segments with the log's decoder; an unreadable line is
    reported and left out. Also returns the segments sealed since they were listed.

    The tool_input columns come from the decoded records (`tool_input_values`), the other
    columns from `_parse_lines`.
    """
    out: list[_ActiveSegment] = []
    moved: list[Segment] = []
    for seg in segs:
        try:
            got = active_data(seg)
        except OSError as exc:
            problems(str(seg.path), 0, f"cannot read segment: {exc}")
            continue
        if got is None:  # sealed meanwhile: its Parquet copy holds the same records
            sealed = sealed_copy(seg)
            if sealed.path.exists():
                moved.append(sealed)
            continue
        part = _ActiveSegment(str(seg.path), got.data, [], [], [], got.whole)
        view = memoryview(part.data)
        for n, pos, nl in got.spans:
            try:
                o = decode_outcome_json(cast(bytes, view[pos:nl]))
            except msgspec.DecodeError as exc:
                problems(part.path, n, str(exc))
                part.whole = False
            else:
                part.spans.append((pos, nl))
                part.numbers.append(n)
                part.tool.append(tool_input_values(o))
        if part.spans:
            out.append(part)
    return out, moved


_JSON_PARSE = pj.ParseOptions(explicit_schema=LINE_SCHEMA, unexpected_field_behavior="ignore")
_JSON_READ = pj.ReadOptions(block_size=8 << 20)


def _read_json(data: bytes) -> Any:
    return pj.read_json(pa.BufferReader(data), read_options=_JSON_READ, parse_options=_JSON_PARSE)


def _parse_lines(part: _ActiveSegment, problems: _Problems) -> Any:
    """The segment's readable lines as a LINE_SCHEMA table (pyarrow's multithreaded reader).

    A line the log's decoder accepts but pyarrow cannot type (not expected) is reported and
    dropped with its tool values, so every list of `part` stays aligned with the table.
    """
    try:
        return _read_json(part.text())
    except pa.ArrowInvalid:
        pass
    tables, keep = [], []
    for (a, b), n in zip(part.spans, part.numbers, strict=True):
        try:
            line = pa.BufferReader(part.data[a : b + 1])
            tables.append(pj.read_json(line, parse_options=_JSON_PARSE))
            keep.append(True)
        except pa.ArrowInvalid as exc:
            problems(part.path, n, f"unexpected types: {exc}")
            keep.append(False)
    part.spans = [x for x, k in zip(part.spans, keep, strict=True) if k]
    part.numbers = [x for x, k in zip(part.numbers, keep, strict=True) if k]
    part.tool = [x for x, k in zip(part.tool, keep, strict=True) if k]
    part.whole = False
    return pa.concat_tables(tables) if tables else LINE_SCHEMA.empty_table()


def _record_strings(part: _ActiveSegment) -> Any:
    """The segment's readable lines as a large_string array over one buffer, no copy: each
    keeps its newline, which the views trim (`_ACTIVE_RECORD`)."""
    data = part.text()
    offsets, pos = [0], 0
    for a, b in part.spans:
        pos += b - a + 1
        offsets.append(pos)
    return pa.LargeStringArray.from_buffers(
        len(part.spans), pa.array(offsets, type=pa.int64()).buffers()[1], pa.py_buffer(data)
    )


def _load_active(con: Any, segs: Sequence[Segment], problems: _Problems) -> list[Segment]:
    """Parse the active segments' readable lines once, typed by `LINE_SCHEMA`, into two Arrow
    tables registered with DuckDB: `_ha_active` (the columns of a sealed segment + record)
    and `_ha_active_runs` (one row a HookRun). Returns the segments sealed meanwhile."""
    parts, moved = _read_active(segs, problems)
    parsed = [_parse_lines(p, problems) for p in parts]
    lines = pa.concat_tables(parsed).combine_chunks() if parsed else LINE_SCHEMA.empty_table()
    tool = [t for p in parts for t in p.tool]
    records = [_record_strings(p) for p in parts if p.spans]
    event = lines.column("event").combine_chunks()
    cols: dict[str, Any] = {}
    for name in LOG_COLUMNS:
        typ = OUTCOME_SCHEMA.field(name).type
        if name in TOOL_INPUT_COLUMNS:
            k = TOOL_INPUT_COLUMNS.index(name)
            cols[name] = pa.array([t[k] for t in tool], type=typ)
        elif name == "n_runs":
            cols[name] = pc.list_value_length(lines.column("runs")).fill_null(0).cast(typ)
        elif name in EVENT_COLUMNS:
            cols[name] = event.field(name)
        else:
            cols[name] = lines.column(name)
    cols["record"] = pa.chunked_array(records, type=pa.large_string())
    outcomes = pa.table([cols[f.name] for f in OUTCOME_SCHEMA], schema=OUTCOME_SCHEMA)
    con.register("_ha_active", outcomes)
    con.register("_ha_active_runs", _active_runs(lines, outcomes))
    return moved


def _active_runs(lines: Any, outcomes: Any) -> Any:
    """One row per element of the lines' `runs` lists, with the columns of RUN_SCHEMA."""
    runs = (
        lines.column("runs").combine_chunks()
        if lines.num_rows
        else pa.array([], LINE_SCHEMA.field("runs").type)
    )
    flat = pc.list_flatten(runs)
    owner = pc.list_parent_indices(runs)
    offsets = runs.offsets.cast(pa.int64())
    position = pc.add(pa.array(range(len(flat)), type=pa.int64()), offsets[0])
    index = pc.add(pc.subtract(position, pc.take(offsets, owner)), 1)
    out: dict[str, Any] = {}
    for name, typ, _, expr in RUN_COLUMNS:
        if name == "run":
            out[name] = index.cast(typ)
        elif expr.startswith("x.hook."):
            out[name] = flat.field("hook").field(name)
        elif expr.startswith("x."):
            out[name] = flat.field(name)
        else:
            out[name] = pc.take(outcomes.column(name), owner)
    return pa.table([out[f.name] for f in RUN_SCHEMA], schema=RUN_SCHEMA)


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
        except (OSError, ValueError, KeyError, TypeError):
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


# ----------------------------------------------------------------------------- views


# the active rows as the views see them: each record without the newline it is stored with
_ACTIVE_ROWS = "SELECT * REPLACE (rtrim(record, chr(10)) AS record) FROM _ha_active"


def _union(parts: Sequence[str]) -> str:
    return "\nUNION ALL\n".join(parts)


def _build_views(
    con: Any,
    sealed: Sequence[_Sealed],
    hidden: pa.Table,
    problems: _Problems,
) -> None:
    """The internal views the public ones are written over: `_ha_log` (every record, key
    dedup), `_ha_live` (live records), `_ha_live_events` (live, one per event) and
    `_ha_runs` (runs of live records). Each is a UNION ALL of scans; a scan pays for the
    anti-join only if its files hold a duplicate, and for the live filter only if they hold
    a replayed record."""
    dirty_files = set(hidden.column("file").to_pylist())
    con.register("_ha_hidden", hidden)
    cols = ", ".join(f"x.{_q(c)}" for c in [*LOG_COLUMNS, "record"])
    run_cols = ", ".join(f"x.{_q(c)}" for c in RUN_NAMES)
    key_anti = " ANTI JOIN (SELECT worker, seq FROM _ha_hidden WHERE key_dup) h USING (worker, seq)"
    evt_anti = " ANTI JOIN (SELECT worker, seq FROM _ha_hidden) h USING (worker, seq)"

    def branch(select: str, src: str, anti: str | None, live: bool = False) -> str:
        return f"SELECT {select} FROM ({src}) x{anti or ''}" + (
            " WHERE x.replay_id IS NULL" if live else ""
        )

    parts: dict[str, list[str]] = {"log": [], "live": [], "events": [], "runs": []}
    groups: dict[tuple[frozenset[str], bool, bool, bool], list[_Sealed]] = {}
    for s in sealed:  # newest first, kept within each group
        group = (s.extras, s.null_ids != 0, s.seg.location in dirty_files, s.replays)
        groups.setdefault(group, []).append(s)
    for (extras, nulls, dirty, replays), files in groups.items():
        where = " WHERE id IS NOT NULL" if nulls else ""
        scan = _outcome_scan(files, extras, where)
        anti: tuple[str | None, str | None] = (key_anti, evt_anti) if dirty else (None, None)
        parts["log"].append(branch(cols, scan, anti[0]))
        parts["live"].append(branch(cols, scan, anti[0], live=replays))
        parts["events"].append(branch(cols, scan, anti[1], live=replays))
        with_runs = [f for f in files if f.runs is not None]
        without = [f for f in files if f.runs is None]
        if with_runs:
            parts["runs"].append(branch(run_cols, _runs_scan(with_runs), anti[0], live=replays))
        if without:
            derived = _derived_runs_scan(without, where)
            parts["runs"].append(branch(run_cols, derived, anti[0], live=replays))
    anti = (key_anti, evt_anti) if "active" in dirty_files else (None, None)
    parts["log"].append(branch(cols, _ACTIVE_ROWS, anti[0]))
    parts["live"].append(branch(cols, _ACTIVE_ROWS, anti[0], live=True))
    parts["events"].append(branch(cols, _ACTIVE_ROWS, anti[1], live=True))
    parts["runs"].append(branch(run_cols, "SELECT * FROM _ha_active_runs", anti[0], live=True))
    for name, sqls in (
        ("_ha_log", parts["log"]),
        ("_ha_live", parts["live"]),
        ("_ha_live_events", parts["events"]),
        ("_ha_runs", parts["runs"]),
    ):
        con.execute(f"CREATE OR REPLACE TEMP VIEW {name} AS {_union(sqls)}")
    con.register(
        "_ha_unreadable",
        pa.table(
            {
                "file": pa.array([p[0] for p in problems.rows], pa.string()),
                "line": pa.array([p[1] for p in problems.rows], pa.int64()),
                "reason": pa.array([p[2] for p in problems.rows], pa.string()),
            }
        ),
    )
    for sql in _PUBLIC_VIEWS:
        con.execute(sql)


_OUTCOME_SELECT = """
    id, ts, event, source, host, "user", session_id, tool_name, tool_use_id, cwd,
    command, file_path, url, settings_id, posture, profile, blocked, decision, reason,
    "continue", stop_reason, n_runs, errors, engine_version, transcript_path,
    permission_mode, agent_id, agent_type, replay_id,
    coalesce(json_extract_string(record, '$.decided_by'), 'policy') AS decided_by,
    worker, seq, appended, prev_hash, hash, record
"""
# The record of refused input (`decided_by = 'rejected'`): a substring test first, so
# only those records are parsed (a payload's quotes are escaped: it cannot match there).
_REJECTED = """(contains(record, '"decided_by":"rejected"')
    AND json_extract_string(record, '$.decided_by') = 'rejected')"""
_PUBLIC_VIEWS = (
    f"CREATE OR REPLACE TEMP VIEW all_outcomes AS SELECT {_OUTCOME_SELECT} FROM _ha_log",
    f"CREATE OR REPLACE TEMP VIEW outcomes AS SELECT {_OUTCOME_SELECT} FROM _ha_live",
    """CREATE OR REPLACE TEMP VIEW events AS
    SELECT id, ts, event, source, host, "user", session_id, tool_name, tool_use_id, cwd,
        transcript_path, permission_mode, agent_id, agent_type,
        CAST(json_extract_string(record, '$.event.payload') AS JSON) AS payload
    FROM _ha_live_events""",
    """CREATE OR REPLACE TEMP VIEW hook_runs AS
    SELECT id, ts, event, tool_name, session_id, settings_id, worker, seq, run, hook_id,
        type, source, matcher, command, url, prompt, callable, "if", outcome, exit_code,
        duration_ms, error_kind, http_status, decision, message, stdout_bytes, stderr_bytes,
        truncated
    FROM _ha_runs""",
    """CREATE OR REPLACE TEMP VIEW tool_calls AS
    WITH pre AS (
        SELECT * FROM _ha_live_events WHERE event = 'PreToolUse' AND tool_use_id IS NOT NULL
    ), post AS (
        SELECT id, ts, event, session_id, tool_use_id, record FROM _ha_live_events
        WHERE event IN ('PostToolUse', 'PostToolUseFailure') AND tool_use_id IS NOT NULL
    )
    SELECT pre.tool_use_id, pre.session_id, pre.ts AS started, post.ts AS finished,
        pre."user", pre.host, pre.cwd, pre.tool_name AS tool, pre.command, pre.file_path,
        pre.url, pre.decision, pre.blocked, pre.reason, post.id IS NOT NULL AS ran,
        CASE
            WHEN post.event = 'PostToolUse' THEN 'success'
            WHEN post.event = 'PostToolUseFailure' THEN 'failure'
            WHEN pre.decision = 'deny' OR pre.blocked THEN 'denied'
            ELSE 'not_run'
        END AS status,
        CASE WHEN post.id IS NOT NULL THEN coalesce(
            TRY_CAST(json_extract(json_extract_string(post.record, '$.event.payload'),
                                  '$.duration_ms') AS DOUBLE),
            (epoch_us(post.ts) - epoch_us(pre.ts)) / 1000.0) END AS duration_ms,
        pre.settings_id, pre.id AS pre_id, post.id AS post_id
    FROM pre LEFT JOIN post
        ON post.tool_use_id = pre.tool_use_id AND post.session_id = pre.session_id""",
    """CREATE OR REPLACE TEMP VIEW sessions AS
    SELECT session_id, min(ts) AS started, max(ts) AS ended,
        arg_min("user", ts) AS "user", arg_min(host, ts) AS host, arg_min(cwd, ts) AS cwd,
        count(*) AS events,
        count(*) FILTER (WHERE event = 'UserPromptSubmit') AS prompts,
        count(*) FILTER (WHERE event = 'PreToolUse') AS tool_calls,
        count(*) FILTER (WHERE decision = 'deny') AS denials,
        count(*) FILTER (WHERE event = 'PreToolUse' AND decision = 'ask') AS asks,
        CAST(sum(n_runs) AS BIGINT) AS hook_runs,
        bool_or(event = 'SessionEnd') AS closed,
        count(DISTINCT settings_id) AS settings
    FROM _ha_live_events WHERE session_id <> '' GROUP BY session_id""",
    """CREATE OR REPLACE TEMP VIEW replays AS
    SELECT r.replay_id, r.id, r.ts, r.event, r.session_id, r."user", r.host, r.tool_name,
        r.command, r.file_path, r.url, r.settings_id, r.decision, r.blocked, r.reason,
        r.n_runs, r.appended AS replayed_at, l.settings_id AS live_settings_id,
        l.decision AS live_decision, l.blocked AS live_blocked, l.reason AS live_reason,
        (r.decision IS DISTINCT FROM l.decision OR r.blocked IS DISTINCT FROM l.blocked)
            AS changed,
        r.worker, r.seq
    FROM (SELECT * FROM _ha_log WHERE replay_id IS NOT NULL) r
    LEFT JOIN (SELECT id, settings_id, decision, blocked, reason FROM _ha_live_events) l
        ON l.id = r.id""",
    "CREATE OR REPLACE TEMP VIEW unreadable AS SELECT file, line, reason FROM _ha_unreadable",
    f"""CREATE OR REPLACE TEMP VIEW rejects AS
    SELECT id, ts, event, source, host, "user", session_id,
        json_extract_string(record, '$.event.rejected.stage') AS stage,
        json_extract_string(record, '$.event.rejected.reason') AS reason,
        CAST(json_extract(record, '$.event.rejected.size') AS BIGINT) AS size,
        json_extract_string(record, '$.event.rejected.sha256') AS sha256,
        CAST(json_extract(record, '$.event.rejected.kept') AS BIGINT) AS kept,
        json_extract_string(record, '$.event.rejected.head') AS head,
        worker, seq, appended
    FROM _ha_log WHERE {_REJECTED}""",
)

PUBLIC_VIEWS = (
    "outcomes",
    "events",
    "hook_runs",
    "tool_calls",
    "sessions",
    "replays",
    "all_outcomes",
    "unreadable",
    "rejects",
)


def open_db(
    data_dir: str | os.PathLike[str],
    *,
    database: str | None = None,
    on_corrupt: OnCorrupt | None = None,
    cache: bool = True,
    lock: bool = True,
) -> Any:
    """A DuckDB connection with the views of this module over the log in `data_dir`.

    `database`: a DuckDB file to use instead of memory (the views are temporary: the file
    is not changed). `on_corrupt(file, line, reason)` is called for each record skipped as
    unreadable (default: a logged warning); each is also listed in the `unreadable` view.
    `cache=False` skips the dedup cache under `<data_dir>/cache/queries/`. `lock=False` leaves
    file access and configuration open (for callers that export with DuckDB themselves).

    An empty or missing log gives empty views. Raises QueryError when DuckDB fails.

    Example:
        >>> con = open_db(data_dir)
        >>> con.sql("SELECT decision, count(*) FROM outcomes GROUP BY 1 ORDER BY 1").fetchall()
        [('deny', 1), (None, 2)]
    """
    root = Path(data_dir)
    problems = _Problems(on_corrupt)
    try:
        # read_only: the file must exist and is never changed (temp views still work)
        con = duckdb.connect(database, read_only=True) if database else duckdb.connect(":memory:")
        con.execute("SET TimeZone = 'UTC'")  # timestamps come back as UTC, whatever the host's
    except duckdb.Error as exc:
        raise QueryError(f"{database}: cannot open the DuckDB database: {exc}") from exc
    try:
        segs = segments(root) if root.exists() else []
        con.execute("SET parquet_metadata_cache = true")  # footers are read once, not per query
        moved = _load_active(con, [s for s in segs if s.kind == "active"], problems)
        sealed_segs = [s for s in segs if s.kind == "sealed"] + moved
        remote = duckdb_filesystem([s.location for s in sealed_segs])
        if remote is not None:  # shipped segments: read through pyarrow's S3 client
            con.execute("SET autoload_known_extensions = false")  # never try to fetch httpfs
            con.register_filesystem(remote)
        found = (_inspect_sealed(s, problems) for s in sealed_segs)
        # newest first: a top-N by time (ORDER BY ts DESC LIMIT n) fills up from the first
        # files read, then skips the older ones by their ts statistics
        sealed = sorted((x for x in found if x), key=lambda x: x.newest, reverse=True)
        hidden = _Dedup(con, root, cache).hidden(sealed)
        _report_null_ids(con, [s for s in sealed if s.null_ids != 0], problems)
        _build_views(con, sealed, hidden, problems)
        if lock:
            allowed = [s.seg.location for s in sealed] + [s.runs for s in sealed if s.runs]
            if allowed:  # the views read these files, and nothing else may be read
                con.execute("SET allowed_paths = $p", {"p": allowed})
            con.execute("SET enable_external_access = false")
            con.execute("SET python_enable_replacements = false")
            con.execute("SET lock_configuration = true")
    except duckdb.Error as exc:
        con.close()
        raise QueryError(f"{root}: cannot build the query views: {_one_line(exc)}") from exc
    except BaseException:
        con.close()
        raise
    return con


def _report_null_ids(con: Any, files: Sequence[_Sealed], problems: _Problems) -> None:
    """Sealed rows the sealer could not decode (flat columns NULL): named and skipped."""
    for f in files:
        rows = con.execute(
            f"SELECT file_row_number FROM read_parquet({_paths([f.seg.location])}, "
            "file_row_number = true) WHERE id IS NULL"
        ).fetchall()
        for (n,) in rows:
            problems(f.seg.location, int(n) + 1, "unreadable record (sealed as it was; see verify)")


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    return first


# ----------------------------------------------------------------------------- results


@dataclass
class Result:
    """A query's columns (name, DuckDB type) and its rows, read once.

    Nothing runs until `batches()` or `arrow()` is called; runtime errors then raise QueryError.
    """

    columns: list[tuple[str, str]]
    _rel: Any
    _what: str = ""

    def batches(self, size: int = 10_000) -> Iterator[list[tuple[Any, ...]]]:
        """The rows as lists of tuples (Python values: datetime, list, dict, ...)."""
        batch: list[tuple[Any, ...]] = []
        try:
            for row in self._rel.iter_rows(size):
                batch.append(row)
                if len(batch) >= size:
                    yield batch
                    batch = []
        except duckdb.Error as exc:
            raise QueryError(f"{self._what}{_one_line(exc)}") from exc
        if batch:
            yield batch

    def arrow(self) -> Any:
        """The whole result as a pyarrow Table."""
        try:
            return self._rel.to_arrow_table()
        except duckdb.Error as exc:
            raise QueryError(f"{self._what}{_one_line(exc)}") from exc


def _relation(con: Any, sql: str, params: Mapping[str, object] | None, what: str) -> Result:
    try:
        rel = con.sql(sql, params=dict(params) if params else None)
    except duckdb.Error as exc:
        raise QueryError(f"{what}{_one_line(exc)}") from exc
    if rel is None:
        raise QueryError(f"{what}the statement returns no rows")
    return Result([(d[0], str(d[1])) for d in rel.description], rel, what)


_ALLOWED = {"SELECT", "EXPLAIN"}


def check_read_only(sql: str) -> list[str]:
    """The statements of `sql`, or QueryError when one is not a read (SELECT, EXPLAIN).

    Example:
        >>> check_read_only("COPY outcomes TO 'x.csv'")
        Traceback (most recent call last):
        queries.db.QueryError: refused: COPY statements are not allowed (read-only: SELECT only)
    """
    try:
        stmts = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise QueryError(f"bad SQL: {_one_line(exc)}") from exc
    if not stmts:
        raise QueryError("bad SQL: no statement")
    out = []
    for st in stmts:
        kind = str(st.type).rsplit(".", 1)[-1]
        if kind not in _ALLOWED:
            raise QueryError(f"refused: {kind} statements are not allowed (read-only: SELECT only)")
        out.append(st.query)
    return out


def run_sql(con: Any, sql: str) -> Result:
    """Run one read-only statement; anything that is not a SELECT or EXPLAIN is QueryError.

    Example:
        >>> next(run_sql(con, "SELECT count(*) AS n FROM outcomes").batches())
        [(3,)]
    """
    stmts = check_read_only(sql)
    if len(stmts) > 1:
        raise QueryError(f"one statement at a time, got {len(stmts)}")
    return _relation(con, stmts[0], None, "")


# ----------------------------------------------------------------------------- named queries


def run_named(con: Any, query: NamedQuery, given: Mapping[str, str]) -> Result:
    """Run a named query with its parameters bound (never formatted into the SQL).

    Example:
        >>> r = run_named(con, load_catalog()["denied"], {"tool": "Bash"})
        >>> [c for c, _ in r.columns][:3]
        ['ts', 'user', 'host']
    """
    values = bind_params(query, given)
    used = set(re.findall(r"\$([a-z_][a-z0-9_]*)", query.sql))
    bound = {k: v for k, v in values.items() if k in used}
    return _relation(con, query.sql, bound, f"query {query.name!r}: ")
