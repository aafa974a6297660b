"""The columns of the query views; the sealed-segment columns are re-exported from ingest.

Rules of this file:
- Data only, no I/O: what each column is called, its type, how it is computed from an
  Outcome (for active lines) and how it is derived in SQL from a record's JSON line (for
  sealed segments that lack it).
- `SEALED_EXTRA_COLUMNS`, `RUN_COLUMNS`, `RUN_SCHEMA`, `sealed_write_options` and
  `tool_input_values` are defined by `ingest.log.schema` (the sealer owns the layout: additive
  flat columns of a sealed segment and a runs side file with one row per HookRun) and
  re-exported here. Segments sealed before them lack both; the views derive them from `record`.
- `VIEW_DOCS` documents every public view, column by column.

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
    "VIEW_DOCS",
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


# ----------------------------------------------------------------------------- view docs

VIEW_DOCS: dict[str, tuple[str, list[tuple[str, str, str]]]] = {}
"""view -> (what a row is, [(column, DuckDB type, meaning)]), for --help, README and tests."""


def _doc(view: str, what: str, cols: str) -> None:
    rows = []
    for line in cols.strip().splitlines():
        name, typ, meaning = (p.strip() for p in line.split("|", 2))
        rows.append((name, typ, meaning))
    VIEW_DOCS[view] = (what, rows)


_OUTCOME_DOC = """
id | VARCHAR | event id (UUIDv7, time-ordered)
ts | TIMESTAMPTZ | when the agent raised the event (UTC)
event | VARCHAR | hook event name: PreToolUse, UserPromptSubmit, ...
source | VARCHAR | claude-code, backfill, ...
host | VARCHAR | machine the agent ran on
user | VARCHAR | user the agent ran as
session_id | VARCHAR | agent session ('' when none)
tool_name | VARCHAR | tool of a tool event
tool_use_id | VARCHAR | ties PreToolUse to its PostToolUse
cwd | VARCHAR | working directory of the agent
command | VARCHAR | tool_input.command (Bash)
file_path | VARCHAR | tool_input.file_path or notebook_path (Read, Edit, Write, ...)
url | VARCHAR | tool_input.url (WebFetch)
settings_id | VARCHAR | hash of the effective settings that decided
posture | VARCHAR | compat or enforcing
profile | VARCHAR | current or legacy
blocked | BOOLEAN | the action was blocked
decision | VARCHAR | allow, deny, ask, defer, or NULL when no hook decided
reason | VARCHAR | the decision's reason
continue | BOOLEAN | false when a hook stopped the agent
stop_reason | VARCHAR | why, when continue is false
n_runs | INTEGER | hooks that ran
errors | VARCHAR[] | non-blocking hook errors
engine_version | VARCHAR | hookaudit engine that decided
transcript_path | VARCHAR | agent transcript
permission_mode | VARCHAR | agent permission mode
agent_id | VARCHAR | subagent id
agent_type | VARCHAR | subagent type
replay_id | VARCHAR | NULL for live outcomes
decided_by | VARCHAR | policy (the engine decided), fallback (emit/serve answered alone: timeout, NATS down, fail mode; blocked/decision/reason are that answer) rejected (refused input: see the rejects view) or observed (the engine decided but nobody waited: observe mode or backfill, the agent was not stopped; blocked/decision/reason are what enforcing would have done)
worker | VARCHAR | worker chain that appended the record
seq | BIGINT | record number in the worker chain
appended | TIMESTAMPTZ | when the worker appended it
prev_hash | VARCHAR | previous record's hash in the chain
hash | VARCHAR | this record's chain hash
record | VARCHAR | the exact JSON line of the log (an Outcome)
"""
_doc("outcomes", "one row per live Outcome (replay_id IS NULL), deduplicated", _OUTCOME_DOC)
_doc("all_outcomes", "one row per Outcome, live and replayed, deduplicated", _OUTCOME_DOC)
_doc(
    "events",
    "one row per HookEvent of a live outcome (an event decided twice shows once)",
    """
id | VARCHAR | event id (UUIDv7)
ts | TIMESTAMPTZ | when the agent raised it (UTC)
event | VARCHAR | hook event name
source | VARCHAR | claude-code, backfill, ...
host | VARCHAR | machine
user | VARCHAR | user
session_id | VARCHAR | agent session
tool_name | VARCHAR | tool of a tool event
tool_use_id | VARCHAR | tool call id
cwd | VARCHAR | working directory
transcript_path | VARCHAR | agent transcript
permission_mode | VARCHAR | agent permission mode
agent_id | VARCHAR | subagent id
agent_type | VARCHAR | subagent type
payload | JSON | the agent's hook input, verbatim
""",
)
_doc(
    "hook_runs",
    "one row per HookRun of a live outcome",
    """
id | VARCHAR | event id of the outcome
ts | TIMESTAMPTZ | event time
event | VARCHAR | hook event name
tool_name | VARCHAR | tool of a tool event
session_id | VARCHAR | agent session
settings_id | VARCHAR | settings that ran the hook
worker | VARCHAR | outcome's worker chain
seq | BIGINT | outcome's record number (worker, seq identify the outcome)
run | INTEGER | position of the run in the outcome (from 1)
hook_id | VARCHAR | stable digest of the hook identity
type | VARCHAR | command, http, prompt, agent, python, ...
source | VARCHAR | settings scope the hook came from
matcher | VARCHAR | matcher of its group
command | VARCHAR | command of a command hook
url | VARCHAR | url of an http hook
prompt | VARCHAR | prompt of a prompt/agent hook
callable | VARCHAR | callable of a python hook
if | VARCHAR | the hook's if rule
outcome | VARCHAR | allow, deny, error or noop
exit_code | BIGINT | exit code of a command hook
duration_ms | DOUBLE | run time
error_kind | VARCHAR | timeout, nonzero_exit, ... when outcome is error
http_status | BIGINT | status of an http hook
decision | VARCHAR | what this hook decided
message | VARCHAR | the hook's message (reason or error)
stdout_bytes | BIGINT | bytes written to stdout
stderr_bytes | BIGINT | bytes written to stderr
truncated | BOOLEAN | output was capped
""",
)
_doc(
    "tool_calls",
    "one row per live PreToolUse event, with its PostToolUse/PostToolUseFailure (same session "
    "and tool_use_id); an event decided twice counts once (its first decision)",
    """
tool_use_id | VARCHAR | tool call id
session_id | VARCHAR | agent session
started | TIMESTAMPTZ | PreToolUse time
finished | TIMESTAMPTZ | PostToolUse/PostToolUseFailure time, NULL if none
user | VARCHAR | user
host | VARCHAR | machine
cwd | VARCHAR | working directory
tool | VARCHAR | tool name
command | VARCHAR | tool_input.command
file_path | VARCHAR | tool_input.file_path / notebook_path
url | VARCHAR | tool_input.url
decision | VARCHAR | PreToolUse decision (allow, deny, ask, defer, NULL)
blocked | BOOLEAN | PreToolUse blocked the call
reason | VARCHAR | decision reason
ran | BOOLEAN | a PostToolUse or PostToolUseFailure was recorded
status | VARCHAR | success, failure, denied, or not_run (no post event: declined, pending, lost)
duration_ms | DOUBLE | the post event's duration_ms, else finished - started
settings_id | VARCHAR | settings that decided the PreToolUse
pre_id | VARCHAR | PreToolUse event id
post_id | VARCHAR | post event id
""",
)
_doc(
    "sessions",
    "one row per live session_id ('' excluded); counts are of events (an event decided twice "
    "counts once)",
    """
session_id | VARCHAR | agent session
started | TIMESTAMPTZ | first event
ended | TIMESTAMPTZ | last event
user | VARCHAR | user of the first event
host | VARCHAR | machine of the first event
cwd | VARCHAR | working directory of the first event
events | BIGINT | outcomes in the session
prompts | BIGINT | UserPromptSubmit events
tool_calls | BIGINT | PreToolUse events
denials | BIGINT | outcomes with decision deny
asks | BIGINT | PreToolUse outcomes with decision ask
hook_runs | BIGINT | hooks run
closed | BOOLEAN | a SessionEnd was recorded
settings | BIGINT | distinct settings_id seen
""",
)
_doc(
    "replays",
    "one row per replayed Outcome (an Outcome with replay_id set, appended to the same log by "
    "the replay command), beside the live outcome of the same event; empty until a replay ran",
    """
replay_id | VARCHAR | the replay run
id | VARCHAR | event id
ts | TIMESTAMPTZ | event time
event | VARCHAR | hook event name
session_id | VARCHAR | agent session
user | VARCHAR | user
host | VARCHAR | machine
tool_name | VARCHAR | tool
command | VARCHAR | tool_input.command
file_path | VARCHAR | tool_input.file_path
url | VARCHAR | tool_input.url
settings_id | VARCHAR | settings replayed with
decision | VARCHAR | replayed decision
blocked | BOOLEAN | replayed blocked
reason | VARCHAR | replayed reason
n_runs | INTEGER | hooks run in the replay
replayed_at | TIMESTAMPTZ | when the replay appended it
live_settings_id | VARCHAR | settings of the live outcome
live_decision | VARCHAR | live decision
live_blocked | BOOLEAN | live blocked
live_reason | VARCHAR | live reason
changed | BOOLEAN | decision or blocked differ from live
worker | VARCHAR | worker chain of the replayed record
seq | BIGINT | its record number
""",
)
_doc(
    "unreadable",
    "one row per record the views skipped because it cannot be read (also warned on stderr)",
    """
file | VARCHAR | segment file
line | BIGINT | line (active JSONL) or row (sealed Parquet) from 1; 0 for a whole file
reason | VARCHAR | why it was skipped
""",
)
_doc(
    "rejects",
    "one row per refused input recorded in the log (decided_by = 'rejected'): too large, too deep, duplicate keys, wrong field types, undecodable, failed evaluation",
    """
id | VARCHAR | event id (the emitter's, or a new one for an undecodable message)
ts | TIMESTAMPTZ | when it was raised or received (UTC)
event | VARCHAR | hook event name it gave, or 'unknown'
source | VARCHAR | claude-code, http, ... or 'unknown'
host | VARCHAR | machine, when known
user | VARCHAR | user, when known
session_id | VARCHAR | agent session, when known
stage | VARCHAR | who refused it: emit, serve or worker
reason | VARCHAR | why, naming the limit or field
size | BIGINT | its full size in bytes
sha256 | VARCHAR | SHA-256 of all of it
kept | BIGINT | bytes of it kept under <data-dir>/rejects/ (on the refusing machine)
head | VARCHAR | its first 4096 bytes as text (invalid UTF-8 replaced)
worker | VARCHAR | worker chain that appended the record
seq | BIGINT | record number in the worker chain
appended | TIMESTAMPTZ | when the worker appended it
""",
)
