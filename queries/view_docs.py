"""Every public query view documented column by column: name, DuckDB type, meaning.

Rules of this file: data only. `tests/integration/test_queries.py` holds `VIEW_DOCS` to the
views DuckDB really has (names, order, types); the columns themselves are defined in
`queries.columns` and `ingest.log.schema`.

Example:
    >>> VIEW_DOCS["outcomes"][1][0][:2]
    ('id', 'VARCHAR')
"""

from __future__ import annotations

__all__ = ["VIEW_DOCS"]

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
agent | VARCHAR | the agent that raised the event: claude_code, codex, gemini_cli, ...
agent_tool | VARCHAR | the agent's own tool name (tool_name is the canonical, Claude Code name)
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
agent | VARCHAR | the agent that raised the event: claude_code, codex, gemini_cli, ...
agent_tool | VARCHAR | the agent's own tool name (tool_name is the canonical, Claude Code name)
payload | JSON | the hook input the engine saw: Claude Code's verbatim; another agent's normalised to Claude Code's names
agent_payload | JSON | another agent's hook input, verbatim (NULL for Claude Code)
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
    "and tool_use_id; where identical calls share a derived id, the nth call the agent let run "
    "pairs with the nth Post; a derived id's call that ran with a rewritten input pairs by "
    "the id of that input, as its Post has); an event decided twice counts once (its first "
    "decision)",
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
