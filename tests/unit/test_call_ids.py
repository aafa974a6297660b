"""`ha_derived_id` (SQL, for the views) is `engine.dialects.base.derived_id` (Python, for
the events): a rewritten call's Pre pairs with its Post only if the two agree."""

from __future__ import annotations

from typing import Any

import duckdb
import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.dialects.base import derived_id
from queries.calls import register

_con = duckdb.connect()
register(_con)

scalars = st.one_of(st.text(max_size=40), st.integers(-(2**62), 2**62), st.booleans(), st.none())
inputs = st.dictionaries(
    st.text(max_size=12), st.one_of(scalars, st.lists(scalars, max_size=4)), max_size=6
)


def sql_id(session: str, tool: str, tool_input: Any) -> str:
    got = _con.execute(
        "SELECT ha_derived_id(?, ?, ?::JSON)",
        [session, tool, msgspec.json.encode(tool_input).decode()],
    ).fetchall()
    return str(got[0][0])


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=20), st.sampled_from(["Bash", "Write", "mcp__s__t", "é"]), inputs)
def test_sql_derives_the_same_id_as_python(session: str, tool: str, tool_input: Any) -> None:
    assert sql_id(session, tool, tool_input) == derived_id(session, tool, tool_input)


def test_known_inputs() -> None:
    for tool_input in (
        {},
        {"command": "ls -l"},
        {"command": 'echo "x"\n\t\\ é 中 \x01 </>', "description": "d"},
        {"file_path": "/tmp/a", "content": "line1\r\nline2\u2028"},
        {"z": 1, "a": [1, "b", None, True]},
        {"\x1f": "\\u001F", "k": "\\\x1b\\\\u000B"},
    ):
        assert sql_id("s", "Bash", tool_input) == derived_id("s", "Bash", tool_input)


def test_a_nested_object_gets_no_false_pairing() -> None:
    """Nested keys are not sorted in SQL: the id differs (the call pairs by its own id, as
    before), and is still an id, never an error."""
    nested = {"edits": [{"new": "b", "old": "a"}], "path": "/x"}
    got = sql_id("s", "Edit", {"path": "/x", "edits": [{"old": "a", "new": "b"}]})
    assert got.startswith("ha-") and len(got) == 19
    assert sql_id("s", "Edit", nested) == derived_id("s", "Edit", nested)  # sorted already
