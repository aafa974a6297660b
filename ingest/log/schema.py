"""The schema of a sealed segment: its flat columns, its `record` column and its runs side file.

Rules of this file:
- Data only, no I/O, stdlib + msgspec + pyarrow + engine.records: what the sealer writes
  beside each record's line, and how each column is computed from an Outcome.
  `queries.columns` re-exports these names; the log never imports `queries`.
- `BASE_SCHEMA` holds the columns every sealed segment has; `SCHEMA` those of a segment
  sealed now: the base ones, then `SEALED_EXTRA_COLUMNS` after `hash` (additive: older
  segments lack them and readers derive them from `record` with the SQL given here).
- `RUN_COLUMNS` are the columns of `sealed/<worker>/<seq:08d>.runs.parquet`, one row per
  HookRun of the segment's records (`RUN_SCHEMA`).
- `sealed_write_options` gives the Parquet encodings that make both fast to scan; options the
  installed pyarrow does not know are left out.

Example:
    >>> [name for name, *_ in SEALED_EXTRA_COLUMNS][:3]
    ['engine_version', 'continue', 'stop_reason']
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import msgspec
import pyarrow as pa
import pyarrow.parquet as pq

from engine.records import HookRun, Outcome

__all__ = [
    "BASE_NAMES",
    "BASE_SCHEMA",
    "COLUMNS",
    "RUN_COLUMNS",
    "RUN_SCHEMA",
    "SCHEMA",
    "SEALED_EXTRA_COLUMNS",
    "Getter",
    "RunGetter",
    "runs_table",
    "sealed_write_options",
    "segment_table",
    "tool_input_values",
]

_TS = pa.timestamp("us", tz="UTC")

Getter = Callable[[Outcome], object]
RunGetter = Callable[[Outcome, int, HookRun], object]


class _ToolInputView(msgspec.Struct):
    command: object = None
    file_path: object = None
    notebook_path: object = None
    url: object = None


class _PayloadView(msgspec.Struct):
    tool_input: _ToolInputView | None = None


_payload_view = msgspec.json.Decoder(_PayloadView)
_last_tool: list[Any] = [None, (None, None, None)]  # the last outcome looked at, and its values


def _str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def tool_input_values(o: Outcome) -> tuple[str | None, str | None, str | None]:
    """The payload's tool_input command, file path (file_path, else notebook_path) and url,
    each only when it is a string. Parsed once per outcome for the three getters.

    Example:
        >>> tool_input_values(Outcome(event=new_event({"hook_event_name": "PreToolUse",
        ...     "tool_name": "Read", "tool_input": {"file_path": "/etc/passwd"}}), settings_id="s"))
        (None, '/etc/passwd', None)
    """
    if _last_tool[0] is o:
        values: tuple[str | None, str | None, str | None] = _last_tool[1]
        return values
    values = (None, None, None)
    if o.event.tool_name is not None:
        try:
            ti = _payload_view.decode(o.event.payload).tool_input
        except msgspec.ValidationError:  # tool_input is not an object
            ti = None
        if ti is not None:
            path = _str(ti.file_path)
            values = (
                _str(ti.command),
                path if path is not None else _str(ti.notebook_path),
                _str(ti.url),
            )
    _last_tool[0], _last_tool[1] = o, values
    return values


_TOOL_INPUT = "json_extract(json_extract_string(record, '$.event.payload'), '$.tool_input')"


def _str_at(doc: str, path: str) -> str:
    """SQL: the string at `path` of JSON `doc`, NULL when absent or not a string."""
    return f"CASE WHEN json_type({doc}, '{path}') = 'VARCHAR' THEN json_extract_string({doc}, '{path}') END"


# Flat columns proposed for sealed segments (additive, after `hash`): (name, Arrow type,
# getter, SQL that derives the column from `record` for a segment without it).
SEALED_EXTRA_COLUMNS: tuple[tuple[str, Any, Getter, str], ...] = (
    (
        "engine_version",
        pa.string(),
        lambda o: o.engine_version,
        "json_extract_string(record, '$.engine_version')",
    ),
    (
        "continue",
        pa.bool_(),
        lambda o: o.continue_,
        "CAST(json_extract(record, '$.continue') AS BOOLEAN)",
    ),
    (
        "stop_reason",
        pa.string(),
        lambda o: o.stop_reason,
        "json_extract_string(record, '$.stop_reason')",
    ),
    (
        "errors",
        pa.list_(pa.string()),
        lambda o: o.errors,
        "CAST(json_extract(record, '$.errors') AS VARCHAR[])",
    ),
    (
        "transcript_path",
        pa.string(),
        lambda o: o.event.transcript_path,
        "json_extract_string(record, '$.event.transcript_path')",
    ),
    (
        "permission_mode",
        pa.string(),
        lambda o: o.event.permission_mode,
        "json_extract_string(record, '$.event.permission_mode')",
    ),
    (
        "agent_id",
        pa.string(),
        lambda o: o.event.agent_id,
        "json_extract_string(record, '$.event.agent_id')",
    ),
    (
        "agent_type",
        pa.string(),
        lambda o: o.event.agent_type,
        "json_extract_string(record, '$.event.agent_type')",
    ),
    (
        "command",
        pa.string(),
        lambda o: tool_input_values(o)[0],
        f"CASE WHEN tool_name IS NOT NULL THEN {_str_at(_TOOL_INPUT, '$.command')} END",
    ),
    (
        "file_path",
        pa.string(),
        lambda o: tool_input_values(o)[1],
        f"CASE WHEN tool_name IS NOT NULL THEN coalesce({_str_at(_TOOL_INPUT, '$.file_path')}, "
        f"{_str_at(_TOOL_INPUT, '$.notebook_path')}) END",
    ),
    (
        "url",
        pa.string(),
        lambda o: tool_input_values(o)[2],
        f"CASE WHEN tool_name IS NOT NULL THEN {_str_at(_TOOL_INPUT, '$.url')} END",
    ),
    (
        "agent",
        pa.string(),
        lambda o: o.event.agent,
        "coalesce(json_extract_string(record, '$.event.agent'), 'claude_code')",
    ),
    (
        "agent_tool",
        pa.string(),
        lambda o: o.event.agent_tool if o.event.agent_tool is not None else o.event.tool_name,
        "coalesce(json_extract_string(record, '$.event.agent_tool'), "
        "json_extract_string(record, '$.event.tool_name'))",
    ),
    (
        "n_runs",
        pa.int32(),
        lambda o: len(o.runs),
        "CAST(coalesce(json_array_length(record, '$.runs'), 0) AS INTEGER)",
    ),
)

# One row per HookRun, proposed as a side file of each sealed segment
# (`sealed/<worker>/<seq>.runs.parquet`): (name, Arrow type, getter, SQL over `x`, one element
# of the record's `runs` as a struct, and `i`, its 1-based index).
RUN_COLUMNS: tuple[tuple[str, Any, RunGetter, str], ...] = (
    ("worker", pa.string(), lambda o, i, r: o.worker, "worker"),
    ("seq", pa.int64(), lambda o, i, r: o.seq, "seq"),
    ("run", pa.int32(), lambda o, i, r: i, "CAST(i AS INTEGER)"),
    ("id", pa.string(), lambda o, i, r: o.event.id, "id"),
    ("ts", _TS, lambda o, i, r: o.event.ts, "ts"),
    ("event", pa.string(), lambda o, i, r: o.event.event, "event"),
    ("tool_name", pa.string(), lambda o, i, r: o.event.tool_name, "tool_name"),
    ("session_id", pa.string(), lambda o, i, r: o.event.session_id, "session_id"),
    ("settings_id", pa.string(), lambda o, i, r: o.settings_id, "settings_id"),
    ("replay_id", pa.string(), lambda o, i, r: o.replay_id, "replay_id"),
    ("hook_id", pa.string(), lambda o, i, r: r.hook_id, "x.hook_id"),
    ("type", pa.string(), lambda o, i, r: r.hook.type, "x.hook.type"),
    ("source", pa.string(), lambda o, i, r: r.hook.source, "x.hook.source"),
    ("matcher", pa.string(), lambda o, i, r: r.hook.matcher, "x.hook.matcher"),
    ("command", pa.string(), lambda o, i, r: r.hook.command, "x.hook.command"),
    ("url", pa.string(), lambda o, i, r: r.hook.url, "x.hook.url"),
    ("prompt", pa.string(), lambda o, i, r: r.hook.prompt, "x.hook.prompt"),
    ("callable", pa.string(), lambda o, i, r: r.hook.callable, "x.hook.callable"),
    ("if", pa.string(), lambda o, i, r: r.hook.if_, 'x.hook."if"'),
    ("outcome", pa.string(), lambda o, i, r: r.outcome, "x.outcome"),
    ("exit_code", pa.int64(), lambda o, i, r: r.exit_code, "x.exit_code"),
    ("duration_ms", pa.float64(), lambda o, i, r: r.duration_ms, "x.duration_ms"),
    ("error_kind", pa.string(), lambda o, i, r: r.error_kind, "x.error_kind"),
    ("http_status", pa.int64(), lambda o, i, r: r.http_status, "x.http_status"),
    ("decision", pa.string(), lambda o, i, r: r.decision, "x.decision"),
    ("message", pa.string(), lambda o, i, r: r.message, "x.message"),
    ("stdout_bytes", pa.int64(), lambda o, i, r: r.stdout_bytes, "x.stdout_bytes"),
    ("stderr_bytes", pa.int64(), lambda o, i, r: r.stderr_bytes, "x.stderr_bytes"),
    ("truncated", pa.bool_(), lambda o, i, r: r.truncated, "x.truncated"),
)

RUN_SCHEMA = pa.schema([pa.field(n, t) for n, t, _, _ in RUN_COLUMNS])


def runs_table(records: list[Outcome | None]) -> Any:
    """The runs side file of a segment: one row per HookRun of its readable records.

    Example:
        >>> runs_table([outcome]).num_rows == len(outcome.runs)
        True
    """
    pairs = [(o, i, r) for o in records if o is not None for i, r in enumerate(o.runs, 1)]
    arrays = [
        pa.array([get(o, i, r) for o, i, r in pairs], type=typ) for _, typ, get, _ in RUN_COLUMNS
    ]
    return pa.Table.from_arrays(arrays, schema=RUN_SCHEMA)


# pq.write_table options proposed for sealed segments and runs files: the time and sequence
# columns are nearly sorted, so DELTA_BINARY_PACKED makes them ~3x faster to scan than
# dictionary/plain; unique strings skip the dictionary attempt; a page index lets time
# filters skip pages inside a row group; bloom filters on session_id and tool_use_id let a
# lookup of one session or tool call skip the files that do not hold it (~1% larger files).
_DELTA = ("ts", "appended", "seq")
_UNIQUE = ("id", "tool_use_id", "prev_hash", "hash", "record")
# random ids looked up by equality: a bloom filter lets a scan skip the files without them
_BLOOM = {"session_id": 16_384, "tool_use_id": 65_536}
# what this pyarrow's write_table accepts (bloom_filter_options needs pyarrow >= 21)
_WRITE_PARAMS = frozenset(inspect.signature(pq.write_table).parameters)


def sealed_write_options(names: list[str]) -> dict[str, Any]:
    """Keyword arguments for `pyarrow.parquet.write_table` of a table with these columns.

    Example:
        >>> sealed_write_options(["id", "ts", "event"])["column_encoding"]
        {'ts': 'DELTA_BINARY_PACKED'}
    """
    options: dict[str, Any] = {
        "compression": "zstd",
        "use_dictionary": [n for n in names if n not in _DELTA and n not in _UNIQUE],
        "column_encoding": {n: "DELTA_BINARY_PACKED" for n in names if n in _DELTA},
        "write_page_index": True,  # lets a time filter skip pages, not only row groups
        "bloom_filter_options": {
            n: {"ndv": ndv, "fpp": 0.01} for n, ndv in _BLOOM.items() if n in names
        },
    }
    return {k: v for k, v in options.items() if k in _WRITE_PARAMS}


# ---------------------------------------------------------------- the segment's columns

_BASE_COLUMNS: tuple[tuple[str, Any, Callable[[Outcome], object]], ...] = (
    ("id", pa.string(), lambda o: o.event.id),
    ("ts", _TS, lambda o: o.event.ts),
    ("event", pa.string(), lambda o: o.event.event),
    ("source", pa.string(), lambda o: o.event.source),
    ("host", pa.string(), lambda o: o.event.host),
    ("user", pa.string(), lambda o: o.event.user),
    ("session_id", pa.string(), lambda o: o.event.session_id),
    ("tool_name", pa.string(), lambda o: o.event.tool_name),
    ("tool_use_id", pa.string(), lambda o: o.event.tool_use_id),
    ("cwd", pa.string(), lambda o: o.event.cwd),
    ("settings_id", pa.string(), lambda o: o.settings_id),
    ("posture", pa.string(), lambda o: o.posture),
    ("profile", pa.string(), lambda o: o.profile),
    ("blocked", pa.bool_(), lambda o: o.blocked),
    ("decision", pa.string(), lambda o: o.decision),
    ("reason", pa.string(), lambda o: o.reason),
    ("replay_id", pa.string(), lambda o: o.replay_id),
    ("worker", pa.string(), lambda o: o.worker),
    ("seq", pa.int64(), lambda o: o.seq),
    ("appended", _TS, lambda o: o.appended),
    ("prev_hash", pa.string(), lambda o: o.prev_hash),
    ("hash", pa.string(), lambda o: o.hash),
)
# every flat column a segment sealed now has: the base ones, then the additive extras
COLUMNS = _BASE_COLUMNS + tuple((name, typ, get) for name, typ, get, _ in SEALED_EXTRA_COLUMNS)
BASE_NAMES = frozenset(name for name, _, _ in _BASE_COLUMNS)
_RECORD = pa.field("record", pa.binary(), nullable=False)
BASE_SCHEMA = pa.schema(
    [pa.field(name, typ) for name, typ, _ in _BASE_COLUMNS] + [_RECORD],
    metadata={"hookaudit.format": "log-segment/1"},
)
"""The columns every sealed segment has (segments sealed before the extra columns: only these)."""
SCHEMA = pa.schema(
    [pa.field(name, typ) for name, typ, _ in COLUMNS] + [_RECORD],
    metadata={"hookaudit.format": "log-segment/2"},
)
"""The columns of a segment sealed now: BASE_SCHEMA's, with the extra flat columns after `hash`."""


def segment_table(lines: list[bytes], records: list[Outcome | None]) -> Any:
    """The Parquet table of a segment: flat columns from `records` (None: unreadable) + `record`.

    Example:
        >>> segment_table([line], [outcome]).column_names[-1]
        'record'
    """
    arrays = [
        pa.array([None if r is None else get(r) for r in records], type=typ)
        for _, typ, get in COLUMNS
    ]
    arrays.append(pa.array(lines, type=pa.binary()))
    return pa.Table.from_arrays(arrays, schema=SCHEMA)
