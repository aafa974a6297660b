"""The columns of the query views; the sealed-segment columns are re-exported from ingest.

Rules of this file:
- Data only, no I/O: what each column is called, its type, how it is computed from an
  Outcome (for active lines) and how it is derived in SQL from a record's JSON line (for
  sealed segments that lack it).
- `SEALED_EXTRA_COLUMNS`, `RUN_COLUMNS`, `RUN_SCHEMA`, `sealed_write_options` and
  `tool_input_values` are defined by `ingest.log.schema` (the sealer owns the layout: additive
  flat columns of a sealed segment and a runs side file with one row per HookRun) and
  re-exported here. Segments sealed before them lack both; the views derive them from `record`.
- `queries.view_docs.VIEW_DOCS` documents every public view, column by column.

Example:
    >>> [name for name, *_ in SEALED_EXTRA_COLUMNS][:3]
    ['engine_version', 'continue', 'stop_reason']
"""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa

from ingest.log.schema import (
    RUN_COLUMNS,
    RUN_SCHEMA,
    SCHEMA,
    SEALED_EXTRA_COLUMNS,
    Getter,
    sealed_write_options,
    tool_input_values,
)

__all__ = [
    "BASE_COLUMNS",
    "BASE_TYPES",
    "EVENT_COLUMNS",
    "EXTRA_TYPES",
    "LINE_SCHEMA",
    "LOG_COLUMNS",
    "OUTCOME_SCHEMA",
    "RUNS_JSON",
    "RUN_COLUMNS",
    "RUN_NAMES",
    "RUN_SCHEMA",
    "RUN_TYPES",
    "SEALED_EXTRA_COLUMNS",
    "TOOL_INPUT_COLUMNS",
    "duck_type",
    "sealed_write_options",
    "tool_input_values",
]

_TS = pa.timestamp("us", tz="UTC")


# The flat columns sealed segments have today (ingest.log.schema.SCHEMA), with the getters
# that fill them for active lines.
BASE_COLUMNS: tuple[tuple[str, Getter], ...] = (
    ("id", lambda o: o.event.id),
    ("ts", lambda o: o.event.ts),
    ("event", lambda o: o.event.event),
    ("source", lambda o: o.event.source),
    ("host", lambda o: o.event.host),
    ("user", lambda o: o.event.user),
    ("session_id", lambda o: o.event.session_id),
    ("tool_name", lambda o: o.event.tool_name),
    ("tool_use_id", lambda o: o.event.tool_use_id),
    ("cwd", lambda o: o.event.cwd),
    ("settings_id", lambda o: o.settings_id),
    ("posture", lambda o: o.posture),
    ("profile", lambda o: o.profile),
    ("blocked", lambda o: o.blocked),
    ("decision", lambda o: o.decision),
    ("reason", lambda o: o.reason),
    ("replay_id", lambda o: o.replay_id),
    ("worker", lambda o: o.worker),
    ("seq", lambda o: o.seq),
    ("appended", lambda o: o.appended),
    ("prev_hash", lambda o: o.prev_hash),
    ("hash", lambda o: o.hash),
)

RUNS_JSON = json.dumps(
    [
        {
            "hook": {
                k: "VARCHAR"
                for k in ("type", "source", "matcher", "command", "url", "prompt", "callable", "if")
            },
            "hook_id": "VARCHAR",
            "outcome": "VARCHAR",
            "exit_code": "BIGINT",
            "duration_ms": "DOUBLE",
            "error_kind": "VARCHAR",
            "http_status": "BIGINT",
            "decision": "VARCHAR",
            "message": "VARCHAR",
            "stdout_bytes": "BIGINT",
            "stderr_bytes": "BIGINT",
            "truncated": "BOOLEAN",
        }
    ]
)

_S = pa.string()
_EVENT_FIELDS = (
    "id",
    "ts",
    "event",
    "source",
    "host",
    "user",
    "session_id",
    "tool_name",
    "tool_use_id",
    "cwd",
    "transcript_path",
    "permission_mode",
    "agent_id",
    "agent_type",
    "agent",
    "agent_tool",
)
_HOOK_FIELDS = ("type", "source", "matcher", "command", "url", "prompt", "callable", "if")
RUN_LINE_TYPE = pa.struct(
    [
        ("hook", pa.struct([(k, _S) for k in _HOOK_FIELDS])),
        ("hook_id", _S),
        ("outcome", _S),
        ("exit_code", pa.int64()),
        ("duration_ms", pa.float64()),
        ("error_kind", _S),
        ("http_status", pa.int64()),
        ("decision", _S),
        ("message", _S),
        ("stdout_bytes", pa.int64()),
        ("stderr_bytes", pa.int64()),
        ("truncated", pa.bool_()),
    ]
)
# The part of a log line (an Outcome's JSON) the views use, for pyarrow's JSON reader
# (active segments); other fields are ignored. Types are those of engine.records.
LINE_SCHEMA = pa.schema(
    [
        ("event", pa.struct([(f, _TS if f == "ts" else _S) for f in _EVENT_FIELDS])),
        ("settings_id", _S),
        ("engine_version", _S),
        ("posture", _S),
        ("profile", _S),
        ("blocked", pa.bool_()),
        ("decision", _S),
        ("reason", _S),
        ("continue", pa.bool_()),
        ("stop_reason", _S),
        ("errors", pa.list_(_S)),
        ("runs", pa.list_(RUN_LINE_TYPE)),
        ("replay_id", _S),
        ("worker", _S),
        ("seq", pa.int64()),
        ("appended", _TS),
        ("prev_hash", _S),
        ("hash", _S),
    ]
)
EVENT_COLUMNS = frozenset(_EVENT_FIELDS)
TOOL_INPUT_COLUMNS = ("command", "file_path", "url")


BASE_TYPES: dict[str, Any] = {name: SCHEMA.field(name).type for name, _ in BASE_COLUMNS}
EXTRA_TYPES: dict[str, Any] = {name: typ for name, typ, _, _ in SEALED_EXTRA_COLUMNS}
LOG_COLUMNS = [name for name, _ in BASE_COLUMNS] + [name for name, *_ in SEALED_EXTRA_COLUMNS]
RUN_NAMES = [name for name, *_ in RUN_COLUMNS]
RUN_TYPES: dict[str, Any] = {name: typ for name, typ, _, _ in RUN_COLUMNS}
OUTCOME_SCHEMA = pa.schema(
    [pa.field(n, BASE_TYPES[n]) for n, _ in BASE_COLUMNS]
    + [pa.field(n, t) for n, t, _, _ in SEALED_EXTRA_COLUMNS]
    + [pa.field("record", pa.large_string())]
)


def duck_type(t: Any) -> str:
    """The DuckDB type of an Arrow type used in these schemas."""
    if pa.types.is_timestamp(t):
        return "TIMESTAMPTZ"
    if pa.types.is_list(t):
        return duck_type(t.value_type) + "[]"
    return {
        pa.string(): "VARCHAR",
        pa.large_string(): "VARCHAR",
        pa.bool_(): "BOOLEAN",
        pa.int64(): "BIGINT",
        pa.int32(): "INTEGER",
        pa.float64(): "DOUBLE",
    }[t]
