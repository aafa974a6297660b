"""The DuckDB backend against the in-Python matcher: same rules, same events, same matches."""

from __future__ import annotations

import json
from typing import Any

import duckdb
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sigma.collection import SigmaCollection

from queries.sigma import load_rules
from queries.sigma_duckdb import DuckDBBackend, events_table, rule_sql
from tests.support.sigma_reference import matches

FIELDS = ["CommandLine", "TargetFilename", "ToolName", "tool_input.title", "Nope"]
# A small alphabet and short values, so that rules match events often enough to tell
# case, wildcards and escapes apart.
TEXT = st.text(alphabet="aAéÉ%_'\\*?", max_size=3)
MODS = ["", "|contains", "|startswith", "|endswith", "|re"]


@st.composite
def detection(draw: Any) -> tuple[str, list[str]]:
    names = []
    lines = []
    for i in range(draw(st.integers(1, 3))):
        items = []
        for _ in range(draw(st.integers(1, 2))):
            field = draw(st.sampled_from(FIELDS))
            mod = draw(st.sampled_from(MODS))
            if mod == "|re":
                value = (
                    "^"
                    + "".join("\\" + c if c in "\\*?|.%" else c for c in draw(TEXT))
                    + draw(st.sampled_from(["", ".*", "$"]))
                )
                if draw(st.booleans()):
                    mod = "|re|i"
            else:
                value = draw(TEXT)
            if draw(st.booleans()) and mod != "|re" and mod != "|re|i":
                items.append(
                    f"{json.dumps(field + mod)}: [{json.dumps(value)}, {json.dumps(draw(TEXT))}]"
                )
            else:
                items.append(f"{json.dumps(field + mod)}: {json.dumps(value)}")
        if draw(st.booleans()):
            items.append(f"{json.dumps(draw(st.sampled_from(FIELDS)))}: null")
        lines.append(f"  s{i}: {{{', '.join(items)}}}")
        names.append(f"s{i}")
    return "\n".join(lines), names


@st.composite
def condition(draw: Any, names: list[str]) -> str:
    parts = [("not " if draw(st.booleans()) else "") + n for n in names]
    out = parts[0]
    for p in parts[1:]:
        out = f"({out} {draw(st.sampled_from(['and', 'or']))} {p})"
    return ("not " if draw(st.booleans()) else "") + out


EVENT = st.fixed_dictionaries(
    {"Agent": st.sampled_from(["claude_code", "codex", "cline"])},
    optional={
        "CommandLine": TEXT,
        "TargetFilename": TEXT,
        "ToolName": TEXT,
        "tool_input.title": TEXT,
    },
)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), st.lists(EVENT, min_size=1, max_size=6))
def test_duckdb_backend_agrees_with_the_python_matcher(
    data: Any, events: list[dict[str, Any]]
) -> None:
    det, names = data.draw(detection())
    cond = data.draw(condition(names))
    product = data.draw(st.sampled_from(["claude_code", "codex", "coding_agent"]))
    text = f"title: t\nlogsource: {{product: {product}}}\ndetection:\n{det}\n  condition: {cond}\n"
    (rule,) = load_rules(text, "gen.yml")
    want = [i for i, ev in enumerate(events) if matches(rule, ev)]
    where = rule_sql(rule)  # the agents the product names, and the detection
    con = duckdb.connect()
    events_table(con, events)
    got = [
        r[0]
        for r in con.execute(f"SELECT rid FROM detect_events WHERE {where} ORDER BY rid").fetchall()
    ]
    assert got == want, (text, where, events)


def test_shipped_rules_agree() -> None:
    from pathlib import Path

    from tests.support.sigma_reference import event_fields
    from tests.unit.test_sigma import CASES, shipped

    con = duckdb.connect()
    rules_dir = Path(__file__).resolve().parents[2] / "infra" / "sigma"
    for stem, outcome, want in CASES:
        ev = event_fields(outcome)
        rule = shipped()[stem]
        if (
            rule.tools is not None
            and not matches(rule, ev)
            and ev.get("ToolName") not in rule.tools
        ):
            continue  # the category (which tools) is applied by the caller, not in SQL
        if ev.get("EventName") != "PreToolUse":
            continue
        events_table(con, [ev])
        (where,) = DuckDBBackend().convert(
            SigmaCollection.from_yaml((rules_dir / f"{stem}.yml").read_text())
        )
        got = con.execute(f"SELECT count(*) FROM detect_events WHERE {where}").fetchone()
        assert bool(got and got[0]) is want, (stem, ev)


SEMANTICS = [
    ('"CommandLine|contains": "ECHO"', {"CommandLine": "echo hi"}, True),
    ('"CommandLine|contains": "50%"', {"CommandLine": "50x"}, False),
    ('"CommandLine|contains": "50%"', {"CommandLine": "at 50% now"}, True),
    ('"CommandLine|contains": "a_b"', {"CommandLine": "axb"}, False),
    ('"CommandLine|contains": "it\'s"', {"CommandLine": "it's"}, True),
    ('"CommandLine": "a\\\\b"', {"CommandLine": "a\\b"}, True),
    ('"CommandLine": "a\\\\*"', {"CommandLine": "a*"}, True),
    ('"CommandLine": "a\\\\*"', {"CommandLine": "ab"}, False),
    ('"CommandLine": "a?"', {"CommandLine": "ab"}, True),
    ('"CommandLine|re": "^ECHO"', {"CommandLine": "echo"}, False),
    ('"CommandLine|re|i": "^ECHO"', {"CommandLine": "echo"}, True),
    ('"TargetFilename": null', {"CommandLine": "x"}, True),
    ('"tool_input.title": "X"', {"tool_input.title": "x"}, True),
    # the modifiers beyond pySigma's rewriting (queries.sigma's rules of the file)
    ('"CommandLine|cased": "Echo*"', {"CommandLine": "Echo hi"}, True),
    ('"CommandLine|cased": "Echo*"', {"CommandLine": "echo hi"}, False),
    ('"CommandLine|contains|cased": "HI"', {"CommandLine": "echo hi"}, False),
    ('"CommandLine|exists": true', {"CommandLine": ""}, True),
    ('"CommandLine|exists": true', {"TargetFilename": "x"}, False),
    ('"CommandLine|exists": false', {"TargetFilename": "x"}, True),
    ('"tool_input.title|gt": 5', {"tool_input.title": "12"}, True),
    ('"tool_input.title|gt": 5', {"tool_input.title": "5"}, False),
    ('"tool_input.title|gte": 5', {"tool_input.title": "5"}, True),
    ('"tool_input.title|lt": 1.5', {"tool_input.title": "-3"}, True),
    ('"tool_input.title|lte": 0', {"tool_input.title": "1e3"}, False),
    ('"tool_input.title|gt": 0', {"tool_input.title": "0x10"}, False),
    ('"tool_input.title|gt": 0', {"tool_input.title": "true"}, False),
    ('"tool_input.title|gt": 0', {"CommandLine": "1"}, False),
    ('"CommandLine|fieldref": "TargetFilename"', {"CommandLine": "A", "TargetFilename": "a"}, True),
    ('"CommandLine|fieldref": "TargetFilename"', {"CommandLine": "a"}, False),
    (
        '"CommandLine|fieldref|startswith": "ToolName"',
        {"CommandLine": "Bash x", "ToolName": "bash"},
        True,
    ),
    (
        '"CommandLine|fieldref|endswith": "ToolName"',
        {"CommandLine": "Bash x", "ToolName": "bash"},
        False,
    ),
    (
        '"CommandLine|fieldref|contains": "ToolName"',
        {"CommandLine": "a BASH b", "ToolName": "bash"},
        True,
    ),
]


def test_semantics_table() -> None:
    con = duckdb.connect()
    for item, ev, want in SEMANTICS:
        for negate in (False, True):
            cond = "not s" if negate else "s"
            text = f"title: t\nlogsource: {{product: coding_agent}}\ndetection:\n  s: {{{item}}}\n  condition: {cond}\n"
            (rule,) = load_rules(text, "t.yml")
            assert matches(rule, ev) is (want != negate), text
            (where,) = DuckDBBackend().convert(SigmaCollection.from_yaml(text))
            events_table(con, [ev])
            got = con.execute(f"SELECT count(*) FROM detect_events WHERE {where}").fetchone()
            assert bool(got and got[0]) is (want != negate), (text, where)
    # a rule about a field this event lacks: 'not' of it is true in both
    text = "title: t\nlogsource: {product: coding_agent}\ndetection:\n  s: {CommandLine: x}\n  condition: not s\n"
    (where,) = DuckDBBackend().convert(SigmaCollection.from_yaml(text))
    events_table(con, [{}])
    assert con.execute(f"SELECT count(*) FROM detect_events WHERE {where}").fetchone() == (1,)
