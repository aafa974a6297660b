"""Which call a tool event belongs to, for the views that pair a call's events.

A call's Pre and Post share a `tool_use_id`. Where the agent gives none, hookaudit derives
one from the session, the tool and its input (`engine.dialects.base.derived_id`). A call
whose input the policy rewrote then runs, and reports its Post, with the rewritten input:
its Post's derived id is that of the rewritten input. In SQL, `ha_ran_as_id(...)` gives the
id a PreToolUse ran under: the one derived from the rewrite the agent was given, else its
own (`tool_calls` and the `unchecked` query pair by it).

`ha_derived_id(session, tool, input)` is `derived_id` in SQL: the same bytes hashed (the
input's JSON with sorted keys, as msgspec writes it), for an input whose values are
scalars or arrays of scalars (a shell command, a file path, ...). For a nested object it
gives another id, which pairs with nothing: such a call pairs as before, by its own id.

Example:
    >>> import duckdb
    >>> con = duckdb.connect()
    >>> register(con)
    >>> con.execute("SELECT ha_derived_id('s1', 'Bash', '{\\"command\\": \\"ls -l\\"}')").fetchall()
    [('ha-329ac72649f063e0',)]
"""

from __future__ import annotations

from typing import Any

__all__ = ["register"]


def _lower_hex() -> str:
    """SQL that rewrites JSON text `s_` with each control character's escape in lower-case
    hex (DuckDB writes a ``u001F`` escape, msgspec ``u001f``). Escaped backslashes are set
    aside first (as NUL, which JSON text cannot hold raw), so an escaped backslash followed
    by the text ``u001F`` stays as it is."""
    sql = "replace(s_, '\\\\', chr(0))"
    for code in (0x0B, 0x0E, 0x0F, *range(0x1A, 0x20)):
        sql = f"replace({sql}, '\\u{code:04X}', '\\u{code:04x}')"
    return f"replace({sql}, chr(0), '\\\\')"


_MACROS = (
    f"CREATE OR REPLACE TEMP MACRO ha_json_hex(s_) AS {_lower_hex()}",
    # The keys sorted (byte order: code point order, as Python sorts), each with its value
    # as DuckDB writes it; a list lambda, not json_each: a subquery per row would be
    # decorrelated into a join over every row of the view.
    r"""CREATE OR REPLACE TEMP MACRO ha_derived_id(session_, tool_, input_) AS
    'ha-' || left(sha256(
        encode(coalesce(session_, '')) || '\x00'::BLOB || encode(coalesce(tool_, ''))
        || '\x00'::BLOB || encode(ha_json_hex('{' || array_to_string(list_transform(
            list_sort(json_keys(input_)),
            lambda k: to_json(k) || ':' || json_extract(
                input_, '/' || replace(replace(k, '~', '~0'), '/', '~1'))::VARCHAR
        ), ',') || '}'))
    ), 16)""",
    # The id a PreToolUse row of `outcomes` ran under: for a derived id (`ha-`) whose
    # rewrite reached the agent (the policy's answer, not blocked, an updated_input object:
    # in the record's text a payload's quotes are escaped, so only its own key matches),
    # the id derived from the rewritten input; otherwise its own.
    """CREATE OR REPLACE TEMP MACRO ha_ran_as_id(id_, blocked_, record_, session_, tool_) AS
    CASE WHEN starts_with(id_, 'ha-') AND NOT coalesce(blocked_, false)
        AND contains(record_, '"updated_input":{')
        AND coalesce(json_extract_string(record_, '$.decided_by'), 'policy') = 'policy'
    THEN ha_derived_id(session_, tool_, json_extract(record_, '$.updated_input'))
    ELSE id_ END""",
)


def register(con: Any) -> None:
    """Define the macros `ha_json_hex`, `ha_derived_id` and `ha_ran_as_id` on DuckDB
    connection `con`."""
    for sql in _MACROS:
        con.execute(sql)
