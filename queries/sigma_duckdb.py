"""A thin DuckDB backend for Sigma rules on pySigma's `TextQueryBackend`.

The published SQL backends get Sigma's semantics wrong on DuckDB; this one fixes each:
- matching is case-insensitive: every string comparison is ``ILIKE … ESCAPE '\\'``;
- ``%``, ``_`` and ``\\`` in a rule's literal text are escaped for LIKE, and ``'`` is doubled
  in every SQL literal (pySigma would backslash-escape it, which DuckDB reads as text);
- a field the event lacks (SQL NULL) makes its comparison false, never NULL, so ``not`` of it
  is true as in Sigma (each comparison is wrapped in ``coalesce(…, false)``);
- fields outside the mapping read as NULL; ``tool_input.NAME`` reads the tool input JSON.
Correlation rules are not supported (neither are they by the in-Python matcher).

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
from typing import Any, ClassVar

from sigma.conditions import ConditionAND, ConditionNOT, ConditionOR
from sigma.conversion.base import TextQueryBackend
from sigma.conversion.state import ConversionState
from sigma.types import SigmaNumber, SigmaString, SpecialChars

__all__ = ["COLUMNS", "DuckDBBackend", "events_table"]

COLUMNS = (
    "EventName",
    "ToolName",
    "User",
    "Host",
    "SessionId",
    "CurrentDirectory",
    "Decision",
    "Blocked",
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
        "coalesce(len(list_filter(all_values, v -> v ILIKE {value} " + _LIKE + ")) > 0, false)"
    )
    unbound_value_num_expression: ClassVar[str] = unbound_value_str_expression
    unbound_value_re_expression: ClassVar[str] = (
        "coalesce(len(list_filter(all_values, v -> regexp_matches(v, '{value}'))) > 0, false)"
    )
    field_in_list_expression: ClassVar[str | None] = None

    def escape_and_quote_field(self, field_name: str) -> str:
        if field_name in COLUMNS:
            return '"' + field_name.replace('"', '""') + '"'
        if field_name.startswith("tool_input.") and len(field_name) > len("tool_input."):
            key = field_name[len("tool_input.") :].replace('"', '\\"')
            path = '$."' + key + '"'
            return f"json_extract_string(tool_input, {_sql_str(path)})"
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
