"""A thin DuckDB backend for Sigma rules on pySigma's `TextQueryBackend`.

The published SQL backends get Sigma's semantics wrong on DuckDB; this one fixes each:
- matching is case-insensitive: every string comparison is ``ILIKE … ESCAPE '\\'``;
- ``%``, ``_`` and ``\\`` in a rule's literal text are escaped for LIKE, and ``'`` is doubled
  in every SQL literal (pySigma would backslash-escape it, which DuckDB reads as text);
- a field the event lacks (SQL NULL) makes its comparison false, never NULL, so ``not`` of it
  is true as in Sigma (each comparison is wrapped in ``coalesce(…, false)``);
- fields outside the mapping read as NULL; ``tool_input.NAME`` reads the tool input JSON.
Correlation rules are `queries.sigma_correlation_duckdb`'s, over the same events.

It converts a rule to a WHERE condition over the `events_table` (one row per event, the
columns of `queries.sigma.FIELDS`, all VARCHAR, ``all_values`` the list of every value).

Example:
    >>> from sigma.collection import SigmaCollection
    >>> r = SigmaCollection.from_yaml(
    ...     "title: t\\nlogsource: {product: claude_code}\\ndetection:\\n"
    ...     "  s: {CommandLine|contains: '50%'}\\n  condition: s\\n")
    >>> DuckDBBackend().convert(r)[0]
    'coalesce("CommandLine" ILIKE \\'%50\\\\%%\\' ESCAPE \\'\\\\\\', false)'
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar

from sigma.conditions import ConditionAND, ConditionNOT, ConditionOR
from sigma.conversion.base import TextQueryBackend
from sigma.conversion.state import ConversionState
from sigma.exceptions import SigmaError
from sigma.types import CompareOperators, SigmaNumber, SigmaString, SpecialChars

from queries.sigma import NUMBER, Rule, RuleError

__all__ = [
    "COLUMNS",
    "DuckDBBackend",
    "Match",
    "category_sql",
    "detect_history",
    "events_table",
    "rule_sql",
    "sigma_events_sql",
]

COLUMNS = (
    "EventName",
    "ToolName",
    "Agent",
    "AgentToolName",
    "User",
    "Host",
    "SessionId",
    "CurrentDirectory",
    "Decision",
    "Blocked",
    "DecidedBy",
    "CommandLine",
    "Image",
    "TargetFilename",
    "c-uri",
    "Url",
    "cs-host",
    "UrlHost",
    "McpServer",
    "McpTool",
    "Prompt",
)

_LIKE = "ESCAPE '\\'"
_SCALAR = "('VARCHAR', 'BIGINT', 'UBIGINT', 'BOOLEAN')"
_NUMBER_RE = "'" + NUMBER.replace("'", "''") + "'"


def _sql_str(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


class DuckDBBackend(TextQueryBackend):
    """Sigma rule -> DuckDB WHERE condition (see the module docstring)."""

    name: ClassVar[str] = "hookaudit DuckDB"
    formats: ClassVar[dict[str, str]] = {"default": "a WHERE condition"}
    requires_pipeline: ClassVar[bool] = False

    precedence: ClassVar[tuple[Any, Any, Any]] = (ConditionNOT, ConditionAND, ConditionOR)
    group_expression: ClassVar[str] = "({expr})"
    token_separator: str = " "
    or_token: ClassVar[str] = "OR"
    and_token: ClassVar[str] = "AND"
    not_token: ClassVar[str] = "NOT"
    eq_token: ClassVar[str] = " ILIKE "
    eq_expression: ClassVar[str] = "coalesce({field} ILIKE {value} " + _LIKE + ", false)"
    str_quote: ClassVar[str] = "'"
    escape_char: ClassVar[str] = "\\"
    wildcard_multi: ClassVar[str] = "%"
    wildcard_single: ClassVar[str] = "_"
    bool_values: ClassVar[dict[bool, str | None]] = {True: "'true'", False: "'false'"}
    wildcard_match_expression: ClassVar[str] = eq_expression
    re_expression: ClassVar[str] = "coalesce(regexp_matches({field}, '{regex}'), false)"
    re_escape_char: ClassVar[str] = "'"
    re_escape: ClassVar[list[str]] = ["'"]
    re_escape_escape_char = False
    re_flag_prefix = True
    field_null_expression: ClassVar[str] = "({field} IS NULL OR {field} = '')"
    unbound_value_str_expression: ClassVar[str] = (
        "coalesce(len(list_filter(all_values, lambda v: v ILIKE {value} " + _LIKE + ")) > 0, false)"
    )
    unbound_value_num_expression: ClassVar[str] = unbound_value_str_expression
    unbound_value_re_expression: ClassVar[str] = (
        "coalesce(len(list_filter(all_values, lambda v: regexp_matches(v, '{value}'))) > 0, false)"
    )
    field_in_list_expression: ClassVar[str | None] = None
    # cased: LIKE is case-sensitive in DuckDB (wildcards as for ILIKE)
    case_sensitive_match_expression: ClassVar[str | None] = (
        "coalesce({field} LIKE {value} " + _LIKE + ", false)"
    )
    # exists: the event has the field (NULL is absent; an empty string is a value)
    field_exists_expression: ClassVar[str | None] = "({field} IS NOT NULL)"
    field_not_exists_expression: ClassVar[str | None] = "({field} IS NULL)"
    # gt/gte/lt/lte: only text that is a decimal number (queries.sigma.NUMBER) compares
    compare_op_expression: ClassVar[str | None] = (
        "coalesce(CASE WHEN regexp_full_match({field}, " + _NUMBER_RE + ") "
        "THEN CAST({field} AS DOUBLE) {operator} {value} END, false)"
    )
    compare_operators: ClassVar[dict[CompareOperators, str] | None] = {
        CompareOperators.GT: ">",
        CompareOperators.GTE: ">=",
        CompareOperators.LT: "<",
        CompareOperators.LTE: "<=",
    }
    # fieldref: the two fields' values, case-insensitively; a missing field compares false
    field_equals_field_expression: ClassVar[str | None] = (
        "coalesce(lower({field1}) = lower({field2}), false)"
    )
    field_equals_field_startswith_expression: ClassVar[str | None] = (
        "coalesce(starts_with(lower({field1}), lower({field2})), false)"
    )
    field_equals_field_endswith_expression: ClassVar[str | None] = (
        "coalesce(suffix(lower({field1}), lower({field2})), false)"
    )
    field_equals_field_contains_expression: ClassVar[str | None] = (
        "coalesce(contains(lower({field1}), lower({field2})), false)"
    )

    def escape_and_quote_field(self, field_name: str) -> str:
        if field_name in COLUMNS:
            return '"' + field_name.replace('"', '""') + '"'
        if field_name.startswith("tool_input.") and len(field_name) > len("tool_input."):
            key = field_name[len("tool_input.") :].replace('"', '\\"')
            path = _sql_str('$."' + key + '"')
            # a string, integer or boolean field; lists, objects and floats match nothing
            return (
                f"(CASE WHEN json_type(tool_input, {path}) IN {_SCALAR} "
                f"THEN json_extract_string(tool_input, {path}) END)"
            )
        return "CAST(NULL AS VARCHAR)"

    def convert_value_str(self, s: SigmaString, state: ConversionState) -> str:
        out = []
        for part in s.s:
            if part is SpecialChars.WILDCARD_MULTI:
                out.append("%")
            elif part is SpecialChars.WILDCARD_SINGLE:
                out.append("_")
            elif isinstance(part, str):
                out.append(re.sub(r"([\\%_])", r"\\\1", part))
        return _sql_str("".join(out))

    def _eq(self, cond: Any, value: str) -> str:
        return self.eq_expression.format(field=self.escape_and_quote_field(cond.field), value=value)

    def convert_condition_field_eq_val_bool(self, cond: Any, state: ConversionState) -> Any:
        return self._eq(cond, _sql_str("true" if cond.value.boolean else "false"))

    def convert_condition_field_eq_val_num(self, cond: Any, state: ConversionState) -> Any:
        n: SigmaNumber = cond.value
        return self._eq(cond, _sql_str(str(n.number)))


def events_table(con: Any, rows: list[dict[str, Any]], name: str = "detect_events") -> None:
    """Load flat events (`queries.sigma.event_fields`) into a DuckDB table `name`."""
    import json

    cols = ", ".join(f'"{c}" VARCHAR' for c in COLUMNS)
    con.execute(
        f"CREATE OR REPLACE TEMP TABLE {name} (rid INTEGER, {cols}, tool_input JSON, "
        "all_values VARCHAR[])"
    )
    data = []
    for i, r in enumerate(rows):
        vals = [_text(r.get(c)) for c in COLUMNS]
        ti = {k[len("tool_input.") :]: v for k, v in r.items() if k.startswith("tool_input.")}
        every = [t for t in (_text(v) for v in r.values()) if t is not None]
        data.append([i, *vals, json.dumps(ti), every])
    if data:
        marks = ", ".join("?" for _ in range(len(COLUMNS) + 3))
        con.executemany(f"INSERT INTO {name} VALUES ({marks})", data)


def _text(v: Any) -> str | None:
    if v is None:
        return None
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str | int | float):
        return str(v)
    return None


# --- over the history: the log source mapping of queries.sigma, in SQL ----------------------


def _obj_str(obj: str, key: str) -> str:
    """The string field `key` of JSON object `obj`, else NULL (a number is no string here)."""
    path = _sql_str(f"$.{key}")
    return f"(CASE WHEN json_type({obj}, {path}) = 'VARCHAR' THEN json_extract_string({obj}, {path}) END)"


_SCHEME = "^[a-zA-Z][a-zA-Z0-9+.-]*://"
_HOST = _SCHEME + r"(?:[^/@]*@)?(\[[^\]]*\]|[^/:?#]*)"
_WS = r"[ \t\n\r\f\v]"
_STRING_COLUMNS = [c for c in COLUMNS if c != "Blocked"]

# One row per live outcome, with the columns of `queries.sigma.FIELDS` computed as
# `queries.sigma.event_fields` computes them (the differential test holds the two together).
_SIGMA_EVENTS = f"""
WITH o AS (
    SELECT id, ts, worker, seq, event, tool_name, agent, agent_tool, "user", host, session_id, cwd, decision,
        blocked, coalesce(decided_by, 'policy') AS decided_by, settings_id,
        json_extract_string(record, '$.event.payload') AS payload_text
    FROM outcomes WHERE {{where}}
), p AS (
    SELECT *, CASE WHEN json_valid(payload_text) THEN CAST(payload_text AS JSON) END AS payload
    FROM o
), t AS (
    SELECT *, CASE WHEN json_type(payload, '$.tool_input') = 'OBJECT'
        THEN json_extract(payload, '$.tool_input') END AS tool_input
    FROM p
), f AS (
    SELECT id, ts, worker, seq, settings_id, tool_input,
        event AS "EventName", tool_name AS "ToolName", agent AS "Agent",
        agent_tool AS "AgentToolName", "user" AS "User", host AS "Host",
        session_id AS "SessionId", cwd AS "CurrentDirectory",
        coalesce(decision, 'none') AS "Decision",
        CASE WHEN blocked AND decided_by <> 'observed' THEN 'true' ELSE 'false' END AS "Blocked",
        decided_by AS "DecidedBy",
        {_obj_str("tool_input", "command")} AS "CommandLine",
        coalesce(nullif({_obj_str("tool_input", "file_path")}, ''),
                 nullif({_obj_str("tool_input", "notebook_path")}, ''),
                 nullif({_obj_str("tool_input", "path")}, '')) AS "TargetFilename",
        {_obj_str("tool_input", "url")} AS "c-uri",
        {_obj_str("payload", "prompt")} AS "Prompt",
        CASE WHEN starts_with(tool_name, 'mcp__') THEN substr(tool_name, 6) END AS mcp
    FROM t
)
SELECT *,
    regexp_extract("CommandLine", '^{_WS}*([^ \\t\\n\\r\\f\\v]*)', 1) AS "Image",
    "c-uri" AS "Url",
    CASE WHEN regexp_matches("c-uri", '{_SCHEME}')
        THEN lower(regexp_extract("c-uri", '{_HOST}', 1)) END AS "cs-host",
    CASE WHEN regexp_matches("c-uri", '{_SCHEME}')
        THEN lower(regexp_extract("c-uri", '{_HOST}', 1)) END AS "UrlHost",
    CASE WHEN strpos(mcp, '__') > 0 THEN substr(mcp, 1, strpos(mcp, '__') - 1) ELSE mcp END
        AS "McpServer",
    CASE WHEN strpos(mcp, '__') > 0 THEN substr(mcp, strpos(mcp, '__') + 2)
        WHEN mcp IS NOT NULL THEN '' END AS "McpTool"
FROM f
"""


def sigma_events_sql(where: str = "true") -> str:
    """The SELECT of the flat Sigma events over the `outcomes` view of `queries.db`, for
    the outcomes that satisfy `where` (SQL over that view's columns)."""
    cols = ", ".join(f'"{c}"' for c in COLUMNS)
    strings = ", ".join(f'"{c}"' for c in _STRING_COLUMNS)
    # keywords (values without a field) match any string value, the tool input's included
    return f"""SELECT id, ts, worker, seq, settings_id, tool_input, {cols},
        list_concat(
            list_filter([{strings}], lambda x: x IS NOT NULL),
            coalesce(list_filter(list_transform(
                map_values(TRY_CAST(tool_input AS MAP(VARCHAR, JSON))),
                lambda v: CASE WHEN json_type(v) = 'VARCHAR' THEN json_extract_string(v, '$') END),
                lambda x: x IS NOT NULL), [])) AS all_values
    FROM ({_SIGMA_EVENTS.format(where=where)})"""


def category_sql(tools: tuple[str, ...] | None) -> str:
    """The SQL form of a rule's log source category: PreToolUse events of those tools.

    Example:
        >>> category_sql(("Bash",))
        '("EventName" = \\'PreToolUse\\' AND ("ToolName" = \\'Bash\\'))'
    """
    if tools is None:
        return "true"
    alts = [
        f'starts_with("ToolName", {_sql_str(t)})'
        if t.endswith("__")
        else f'"ToolName" = {_sql_str(t)}'
        for t in tools
    ]
    return f"(\"EventName\" = 'PreToolUse' AND ({' OR '.join(alts)}))"


@dataclass(frozen=True)
class Match:
    """One (rule, outcome) match over the history."""

    rule: Rule
    id: str
    ts: datetime
    worker: str
    seq: int
    session_id: str
    user: str
    host: str
    tool: str | None
    decision: str
    what: str
    agent: str = "claude_code"


def rule_sql(rule: Rule) -> str:
    """The WHERE condition of `rule` over `sigma_events` (its category and detection).
    Raises RuleError naming the rule when pySigma cannot convert it."""
    if rule.sigma is None:
        raise RuleError(f"{rule.path}: {rule.title}: no pySigma rule to convert")
    try:
        queries = DuckDBBackend().convert_rule(rule.sigma)
    except SigmaError as e:
        raise RuleError(f"{rule.path}: {rule.title}: {e}") from e
    detection = " OR ".join(f"({q})" for q in queries) or "false"
    agents = "true"
    if rule.agents is not None:
        agents = f'"Agent" IN ({", ".join(_sql_str(a) for a in rule.agents)})'
    return f"{agents} AND {category_sql(rule.tools)} AND ({detection})"


def detect_history(
    con: Any,
    rules: list[Rule],
    *,
    since: datetime | None = None,
    after: dict[str, int] | None = None,
    on_rule: Callable[[], None] | None = None,
) -> tuple[list[Match], dict[str, int]]:
    """Every match of `rules` over the live outcomes of the `queries.db` connection `con`
    (at or after `since`, past the log positions `after`: worker -> last seq seen), in log
    time order, and the new positions (pass them as `after` to read only what follows).
    `on_rule` is called as each rule is done (progress).

    Example:
        >>> matches, pos = detect_history(open_db(d), rules)  # doctest: +SKIP
        >>> more, pos = detect_history(open_db(d), rules, after=pos)  # doctest: +SKIP
    """
    where = ["true"]
    if since is not None:
        where.append(f"ts >= TIMESTAMPTZ {_sql_str(since.isoformat())}")
    if after:
        cases = " ".join(f"WHEN {_sql_str(w)} THEN seq > {int(n)}" for w, n in after.items())
        where.append(f"(CASE worker {cases} ELSE true END)")
    con.execute(
        "CREATE OR REPLACE TEMP TABLE sigma_events AS " + sigma_events_sql(" AND ".join(where))
    )
    positions = dict(after or {})
    for w, n in con.execute("SELECT worker, max(seq) FROM sigma_events GROUP BY worker").fetchall():
        positions[w] = max(positions.get(w, 0), int(n))
    out: list[Match] = []
    for rule in rules:
        rows = con.execute(
            'SELECT id, ts, worker, seq, "SessionId", "User", "Host", "ToolName", "Decision", '
            'coalesce("CommandLine", "TargetFilename", "c-uri", \'\'), "Agent" '
            f"FROM sigma_events WHERE {rule_sql(rule)}"
        ).fetchall()
        out += [Match(rule, *r) for r in rows]
        if on_rule is not None:
            on_rule()
    out.sort(key=lambda m: (m.ts, m.worker, m.seq))
    return out, positions
