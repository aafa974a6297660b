"""DuckDB views over the append-only log: the read side security teams ask anything.

`open_db(data_dir)` returns a DuckDB connection (in memory, or a file on request) with
these views over every segment `ingest.log.layout.segments` lists, sealed Parquet and active JSONL:

    outcomes      one row per live Outcome (replay_id NULL)
    events        one row per HookEvent of a live outcome; the agent's input as JSON `payload`
    hook_runs     one row per HookRun of a live outcome
    tool_calls    one row per PreToolUse, joined to its PostToolUse/PostToolUseFailure
    sessions      one row per session_id: start, end, who, where, counts, denials
    replays       one row per replayed Outcome (replay_id set), beside the live decision
    all_outcomes  live and replayed outcomes (`outcomes` without the live-only filter)
    unreadable    records skipped because they cannot be read: file, line, reason

`queries.view_docs.VIEW_DOCS` holds every view's columns with their types and meaning.

Rules of this file:
- This module builds the views and opens the connection; `queries.scan` (sealed files, the
  scans, the dedup), `queries.active` (active JSONL as Arrow) and `queries.execute`
  (running SQL) are its parts. They are the only modules of `queries/` that import duckdb;
  DuckDB errors become `QueryError` there.
- Segments are found through `ingest.log.layout.segments`, never by globbing. Sealed Parquet is read
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

import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

from ingest.log.digests import changed_sealed
from ingest.log.layout import segments
from ingest.log.objstore import duckdb_filesystem
from ingest.log.reader import OnCorrupt
from queries.active import _load_active
from queries.calls import register as register_calls
from queries.catalog import QueryError
from queries.columns import (
    LOG_COLUMNS,
    RUN_NAMES,
)
from queries.execute import Result, check_read_only, run_named, run_sql
from queries.scan import (
    _Dedup,
    _derived_runs_scan,
    _inspect_sealed,
    _one_line,
    _outcome_scan,
    _paths,
    _Problems,
    _q,
    _runs_scan,
    _Sealed,
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
    register_calls(con)
    for sql in _PUBLIC_VIEWS:
        con.execute(sql)


_OUTCOME_SELECT = """
    id, ts, event, source, host, "user", session_id, tool_name, tool_use_id, cwd,
    command, file_path, url, settings_id, posture, profile, blocked, decision, reason,
    "continue", stop_reason, n_runs, errors, engine_version, transcript_path,
    permission_mode, agent_id, agent_type, agent, agent_tool, replay_id,
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
        transcript_path, permission_mode, agent_id, agent_type, agent, agent_tool,
        CAST(json_extract_string(record, '$.event.payload') AS JSON) AS payload,
        CAST(json_extract_string(record, '$.event.agent_payload') AS JSON) AS agent_payload
    FROM _ha_live_events""",
    """CREATE OR REPLACE TEMP VIEW hook_runs AS
    SELECT id, ts, event, tool_name, session_id, settings_id, worker, seq, run, hook_id,
        type, source, matcher, command, url, prompt, callable, "if", outcome, exit_code,
        duration_ms, error_kind, http_status, decision, message, stdout_bytes, stderr_bytes,
        truncated
    FROM _ha_runs""",
    # A call's Pre and Post share a tool_use_id; where an agent gives none it is derived from
    # the input, so identical calls of a session share one: the nth call the agent let run
    # pairs with the nth Post (a call stopped at Pre never gets one). A derived id's call
    # that ran rewritten pairs by the id of its rewritten input (`queries.calls`).
    """CREATE OR REPLACE TEMP VIEW tool_calls AS
    WITH pre0 AS (
        SELECT *, blocked AND coalesce(json_extract_string(record, '$.decided_by'), 'policy')
            <> 'observed' AS stopped,
            ha_ran_as_id(tool_use_id, blocked, record, session_id, tool_name) AS ran_as
        FROM _ha_live_events WHERE event = 'PreToolUse' AND tool_use_id IS NOT NULL
    ), pre AS (
        SELECT *, CASE WHEN NOT stopped THEN row_number() OVER (
            PARTITION BY session_id, ran_as, stopped ORDER BY ts, id) END AS nth
        FROM pre0
    ), post AS (
        SELECT id, ts, event, session_id, tool_use_id, record, row_number() OVER (
            PARTITION BY session_id, tool_use_id ORDER BY ts, id) AS nth
        FROM _ha_live_events
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
        ON post.tool_use_id = pre.ran_as AND post.session_id = pre.session_id
        AND post.nth = pre.nth""",
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
        changed = changed_sealed(root, sealed_segs)  # before DuckDB parses a changed file
        if changed:
            more = f" (and {len(changed) - 1} more)" if len(changed) > 1 else ""
            raise QueryError(f"{root / 'log' / changed[0]}{more}: run `hookaudit verify`")
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
