"""`detect`'s DuckDB path against the in-Python matcher, over the same log and rules.

Hypothesis writes outcomes to a real log (LogWriter), then the rules run twice: as SQL over
the log's `outcomes` view (`detect_history`, what `hookaudit detect` runs) and in Python over
`iter_outcomes` + `event_fields` (the documented log source mapping). The events and rule
values mix case, LIKE's ``%`` and ``_``, quotes, backslashes, wildcards, missing and empty
fields, non-string tool input values, categories, keywords and ``not``.
"""

from __future__ import annotations

import json
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from engine.records import Outcome, new_event
from ingest.log.reader import iter_outcomes
from ingest.log.writer import LogWriter
from queries.db import open_db
from queries.sigma import load_rules
from queries.sigma_duckdb import detect_history
from tests.support.sigma_reference import event_fields, matches

# Few, tricky tokens, so that rule values and event values often meet: in another case,
# through LIKE's % or _, a quote, a backslash, a Sigma wildcard or white space.
TOKENS = ["a", "A", "é", "É", "%", "_", "'", "\\", "*", "?", " ", "\t", "ab", "AB", "x"]
TOKENS += ["1", "2", ".", "-", "e"]  # numbers (and what is nearly one) for gt/gte/lt/lte
TEXT = st.lists(st.sampled_from(TOKENS), max_size=3).map("".join)
FIELDS = [  # the often-filled fields more often
    *("CommandLine", "CommandLine", "TargetFilename", "c-uri", "tool_input.title"),
    "CommandLine",
    "Image",
    "TargetFilename",
    "c-uri",
    "cs-host",
    "McpServer",
    "McpTool",
    "ToolName",
    "Decision",
    "Blocked",
    "DecidedBy",
    "Prompt",
    "tool_input.title",
    "Nope",
]
MODS = ["", "|contains", "|startswith", "|endswith", "|re"]
MODS += ["|cased", "|contains|cased", "|startswith|cased", "|endswith|cased"]
FIELDREF = ["|fieldref", "|fieldref|startswith", "|fieldref|endswith", "|fieldref|contains"]
COMPARE = ["|gt", "|gte", "|lt", "|lte"]
CATEGORIES = [None, None, None, "process_creation", "file_event", "file_access", "web", "mcp"]


def vocab_text(vocab: list[str]) -> st.SearchStrategy[str]:
    """A word of the example's vocabulary, often in another case or inside other text (so
    that rules and events meet), or any text."""
    near = st.sampled_from(vocab).flatmap(
        lambda v: st.sampled_from([v, v.swapcase(), v.upper(), "x" + v, v + " y", v.lower()])
    )
    return st.one_of(near, near, TEXT)


@st.composite
def rule(draw: Any, vocab: list[str]) -> str:
    TEXT = vocab_text(vocab)
    names, lines = [], []
    for i in range(draw(st.integers(1, 3))):
        if draw(st.integers(0, 5)) == 0:  # keywords: values of any field
            words = draw(st.lists(TEXT.filter(bool), min_size=1, max_size=2))
            lines.append(f"  s{i}: {json.dumps(words)}")
            names.append(f"s{i}")
            continue
        items = []
        for _ in range(draw(st.integers(1, 2))):
            field = draw(st.sampled_from(FIELDS))
            mod = draw(st.sampled_from(MODS))
            if field in ("Blocked", "tool_input.title") and draw(st.booleans()):
                items.append(f"{json.dumps(field)}: {draw(st.sampled_from(['true', 'false']))}")
                continue
            kind = draw(st.integers(0, 9))
            if kind == 0:  # exists: true / false
                value = draw(st.sampled_from(["true", "false"]))
                items.append(f"{json.dumps(field + '|exists')}: {value}")
                continue
            if kind == 1:  # a numeric comparison
                op = draw(st.sampled_from(COMPARE))
                number = draw(st.sampled_from(["0", "1", "-1", "1.5", "12", "0.5", "1000"]))
                items.append(f"{json.dumps(field + op)}: {number}")
                continue
            if kind == 2:  # a field compared with another
                ref = draw(st.sampled_from(FIELDREF))
                other = draw(st.sampled_from(FIELDS))
                items.append(f"{json.dumps(field + ref)}: {json.dumps(other)}")
                continue
            if mod == "|re":
                text = "".join("\\" + c if c in "\\*?|.%" else c for c in draw(TEXT))
                value = "^" + text + draw(st.sampled_from(["", ".*", "$"]))
                mod += draw(st.sampled_from(["", "|i"]))
                items.append(f"{json.dumps(field + mod)}: {json.dumps(value)}")
            elif draw(st.booleans()):
                values = [draw(TEXT), draw(TEXT)]
                items.append(f"{json.dumps(field + mod)}: {json.dumps(values)}")
            else:
                items.append(f"{json.dumps(field + mod)}: {json.dumps(draw(TEXT))}")
        if draw(st.booleans()):
            items.append(f"{json.dumps(draw(st.sampled_from(FIELDS)))}: null")
        lines.append(f"  s{i}: {{{', '.join(items)}}}")
        names.append(f"s{i}")
    parts = [("not " if draw(st.booleans()) else "") + n for n in names]
    cond = parts[0]
    for p in parts[1:]:
        cond = f"({cond} {draw(st.sampled_from(['and', 'or']))} {p})"
    cond = ("not " if draw(st.booleans()) else "") + cond
    cat = draw(st.sampled_from(CATEGORIES))
    logsource = "{product: claude_code" + (f", category: {cat}" if cat else "") + "}"
    det = "\n".join(lines)
    return f"title: t\nlogsource: {logsource}\ndetection:\n{det}\n  condition: {cond}\n"


@st.composite
def outcome(draw: Any, vocab: list[str]) -> Outcome:
    TEXT = vocab_text(vocab)
    SCALAR = TEXT | st.integers(-3, 3) | st.booleans() | st.just(1.5) | st.lists(TEXT, max_size=2)
    tool = draw(
        st.sampled_from(["Bash", "Bash", "Read", "Write", "WebFetch", "Other"])
        | st.builds(lambda a, b: "mcp__" + a + b, TEXT, st.sampled_from(["", "__x", "__A__b"]))
    )
    event = draw(st.sampled_from(["PreToolUse"] * 4 + ["PostToolUse", "UserPromptSubmit"]))
    ti: dict[str, Any] = {}
    for key, gen in [
        ("command", TEXT | st.integers(0, 2)),
        ("file_path", st.just("") | TEXT),
        ("notebook_path", TEXT),
        ("path", TEXT | st.integers(0, 2)),
        (
            "url",
            st.builds(lambda a, b: a + b, st.sampled_from(["", "http://", "HTTPS://u@"]), TEXT),
        ),
        ("title", SCALAR),
    ]:
        if draw(st.integers(0, 3)):
            ti[key] = draw(gen)
    payload: dict[str, Any] = {"hook_event_name": event, "session_id": "s", "tool_name": tool}
    payload["tool_input"] = ti if draw(st.integers(0, 5)) else draw(st.sampled_from([[1], "x"]))
    if event == "UserPromptSubmit":
        payload["prompt"] = draw(TEXT | st.integers(0, 2))
    decision = draw(st.sampled_from(["allow", "deny", None]))
    ev = new_event(
        payload,
        host=draw(TEXT),
        user=draw(st.sampled_from(["", "Alice"])),
        ts=datetime.now(UTC) - timedelta(minutes=5),
    )
    by = draw(
        st.sampled_from(["policy", "policy", "observed", "fallback"])
    )  # observed: not stopped
    return Outcome(
        event=ev, settings_id="sid", decision=decision, blocked=decision == "deny", decided_by=by
    )


@settings(
    max_examples=80,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.data())
def test_detect_sql_over_the_log_agrees_with_the_python_matcher(data: Any) -> None:
    vocab = data.draw(st.lists(TEXT.filter(bool), min_size=1, max_size=4), label="vocabulary")
    texts = data.draw(st.lists(rule(vocab), min_size=1, max_size=3), label="rules")
    outcomes = data.draw(st.lists(outcome(vocab), min_size=1, max_size=8), label="outcomes")
    rules = [r for i, t in enumerate(texts) for r in load_rules(t, f"r{i}.yml")]
    with tempfile.TemporaryDirectory(prefix="detect-diff-") as tmp:
        d = Path(tmp)
        with LogWriter.open(d, "w1") as w:
            w.append_batch(outcomes)
        want = {
            (rules.index(r), o.event.id)
            for o in iter_outcomes(d)
            if o.replay_id is None
            for r in rules
            if matches(r, event_fields(o))
        }
        con = open_db(d)
        try:
            found, positions = detect_history(con, rules)
        finally:
            con.close()
        got = {(rules.index(m.rule), m.id) for m in found}
        assert got == want, (texts, [o.event.payload for o in outcomes])
        assert positions == {"w1": len(outcomes)}


def test_follow_reads_only_past_its_positions(tmp_path: Path) -> None:
    """A second turn with the positions of the first sees only the outcomes appended since."""
    (curl,) = load_rules(
        "title: c\nlogsource: {product: claude_code, category: process_creation}\n"
        "detection:\n  s: {CommandLine|contains: curl}\n  condition: s\n",
        "c.yml",
    )

    def bash(cmd: str) -> Outcome:
        p = {"hook_event_name": "PreToolUse", "tool_name": "Bash", "tool_input": {"command": cmd}}
        return Outcome(event=new_event(p, host="h", user="u"), settings_id="sid")

    first = [bash("curl a"), bash("ls")]
    with LogWriter.open(tmp_path, "w1") as w:
        w.append_batch(first)
    con = open_db(tmp_path)
    found, pos = detect_history(con, [curl])
    con.close()
    assert [m.id for m in found] == [first[0].event.id] and pos == {"w1": 2}
    later = [bash("CURL b"), bash("pwd")]
    with LogWriter.open(tmp_path, "w1") as w:
        w.append_batch(later)
    con = open_db(tmp_path)
    again, pos = detect_history(con, [curl], after=pos)
    con.close()
    assert [m.id for m in again] == [later[0].event.id] and pos == {"w1": 4}


# (detection item, tool, tool input, expected): the mapping and Sigma's semantics, case by case
TABLE: list[tuple[str, str, dict[str, Any], bool]] = [
    ('"CommandLine|contains": "CURL"', "Bash", {"command": "curl x"}, True),
    ('"CommandLine|contains": "50%"', "Bash", {"command": "50x"}, False),
    ('"CommandLine|contains": "50%"', "Bash", {"command": "at 50% now"}, True),
    ('"CommandLine|contains": "a_b"', "Bash", {"command": "axb"}, False),
    ('"CommandLine|contains": "it\'s"', "Bash", {"command": "it's"}, True),
    ('"CommandLine": "a\\\\*"', "Bash", {"command": "ab"}, False),
    ('"CommandLine": "a\\\\*"', "Bash", {"command": "a*"}, True),
    ('"CommandLine|re": "^ECHO"', "Bash", {"command": "echo"}, False),
    ('"CommandLine|re|i": "^ECHO"', "Bash", {"command": "echo"}, True),
    ('"Image": "curl"', "Bash", {"command": " \tCURL -s x"}, True),
    ('"TargetFilename": "/b"', "Read", {"file_path": "", "path": "/B"}, True),
    ('"TargetFilename": null', "Read", {"file_path": 3}, True),
    ('"cs-host": "pastebin.com"', "WebFetch", {"url": "HTTPS://u:p@PasteBin.com:443/x"}, True),
    ('"McpTool": "create__issue"', "mcp__gh__create__issue", {}, True),
    ('"McpServer": "gh"', "mcp__gh", {}, True),
    ('"tool_input.n": 5', "Bash", {"n": 5}, True),
    ('"tool_input.n": "5"', "Bash", {"n": 5.0}, False),
    ('"tool_input.n": true', "Bash", {"n": True}, True),
    ('"tool_input.n|contains": "a"', "Bash", {"n": ["a"]}, False),
    ('"Blocked": true', "Bash", {}, False),
    ('"Nope": "x"', "Bash", {}, False),
]


def test_mapping_table_through_the_log(tmp_path: Path) -> None:
    outcomes = []
    for _, tool, ti, _ in TABLE:
        p = {"hook_event_name": "PreToolUse", "tool_name": tool, "tool_input": ti}
        outcomes.append(Outcome(event=new_event(p, host="h", user="u"), settings_id="sid"))
    with LogWriter.open(tmp_path, "w1") as w:
        w.append_batch(outcomes)
    for (item, _, _, want), o in zip(TABLE, outcomes, strict=True):
        for negate in (False, True):
            cond = "not s" if negate else "s"
            text = (
                "title: t\nlogsource: {product: claude_code}\ndetection:\n"
                f"  s: {{{item}}}\n  f: {{ToolName: {json.dumps(o.event.tool_name)}}}\n"
                f"  condition: f and {cond}\n"
            )
            (r,) = load_rules(text, "t.yml")
            assert matches(r, event_fields(o)) is (want != negate), text
            con = open_db(tmp_path)
            try:
                found = {m.id for m in detect_history(con, [r])[0]}
            finally:
                con.close()
            assert (o.event.id in found) is (want != negate), (text, found)


# --- correlations: the SQL windows against `queries.sigma_correlation.correlate` ----------

T0 = datetime(2026, 1, 1, tzinfo=UTC)
# offsets in seconds: many pairs exactly 1, 2 or 5 s apart (the timespans), ties, and near misses
OFFSETS = [0, 0, 0.5, 1, 1, 1.000001, 2, 3, 4.999999, 5, 6, 7]
SPANS = ["1s", "2s", "5s", "1m"]
GROUP_FIELDS = [  # often present (SessionId, Blocked) or empty (User), or often missing
    *("SessionId", "SessionId", "User", "Blocked"),
    *("CommandLine", "TargetFilename", "tool_input.title"),
]
KIND_NAMES = ["event_count", "value_count", "temporal", "temporal_ordered"]


def us(t: datetime) -> int:
    return (t - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)


@st.composite
def base_rule(draw: Any, i: int, vocab: list[str]) -> str:
    word = draw(vocab_text(vocab))
    det = draw(
        st.sampled_from(
            [
                "{ToolName: Bash}",
                "{Decision: deny}",
                "{EventName: PreToolUse}",
                f"{{CommandLine|contains: {json.dumps(word)}}}",
                f"{{TargetFilename|contains: {json.dumps(word)}}}",
                "{ToolName: [Read, Write]}",
            ]
        )
    )
    neg = draw(st.sampled_from(["s", "s", "s", "not s"]))
    return (
        f"title: r{i}\nname: r{i}\nlogsource: {{product: claude_code}}\n"
        f"detection:\n  s: {det}\n  condition: {neg}\n"
    )


@st.composite
def correlation(draw: Any, n_rules: int) -> str:
    kind = draw(st.sampled_from(KIND_NAMES))
    refs = draw(st.lists(st.integers(0, n_rules - 1), min_size=1, max_size=3))
    group = draw(st.lists(st.sampled_from(GROUP_FIELDS), max_size=draw(st.integers(0, 2))))
    group = list(dict.fromkeys(group))
    lines = [
        "title: c",
        "correlation:",
        f"  type: {kind}",
        f"  rules: {json.dumps([f'r{k}' for k in refs])}",
        f"  timespan: {draw(st.sampled_from(SPANS))}",
    ]
    if group and draw(st.integers(0, 3)) == 0:  # an alias: another field for the first rule
        alias_field = draw(st.sampled_from(GROUP_FIELDS))
        mapping = {f"r{refs[0]}": alias_field} | {f"r{k}": group[0] for k in refs[1:]}
        lines.append(f"  aliases: {{who: {json.dumps(mapping)}}}")
        group = ["who", *group[1:]]
    if group:
        lines.append(f"  group-by: {json.dumps(group)}")
    # the conditions that hold on some windows and not others, more often
    op = draw(st.sampled_from(["gte", "gte", "gte", "gt", "gt", "lt", "lte", "eq", "neq"]))
    count = draw(st.sampled_from([1, 2, 2, 3, 3, 0, 4]))
    if kind == "value_count":
        field = draw(st.sampled_from([*GROUP_FIELDS, "Decision"]))
        lines.append(f"  condition: {{{op}: {count}, field: {field}}}")
    elif kind == "temporal" and len(set(refs)) == len(refs) and draw(st.integers(0, 2)) == 0:
        names = [f"r{k}" for k in refs]
        expr = names[0]
        for nm in names[1:]:
            expr = f"{expr} {draw(st.sampled_from(['and', 'or', 'and not']))} {nm}"
        lines.append(f"  condition: {json.dumps(expr)}")
    elif kind in ("event_count", "value_count") or draw(st.booleans()):
        lines.append(f"  condition: {{{op}: {count}}}")
    return "\n".join(lines) + "\n"


@st.composite
def timed_outcome(draw: Any, vocab: list[str]) -> Outcome:
    TEXT = vocab_text(vocab)
    tool = draw(st.sampled_from(["Bash", "Bash", "Read", "Write", "WebFetch"]))
    ti: dict[str, Any] = {}
    if draw(st.integers(0, 3)):
        ti["command" if tool == "Bash" else "file_path"] = draw(TEXT)
    if draw(st.booleans()):
        ti["title"] = draw(st.sampled_from(["t1", "T1", "t2"]) | st.integers(0, 1) | st.booleans())
    event = draw(st.sampled_from(["PreToolUse"] * 3 + ["PostToolUse"]))
    payload: dict[str, Any] = {
        "hook_event_name": event,
        "session_id": draw(st.sampled_from(["s1", "s2"])),
        "tool_name": tool,
        "tool_input": ti,
    }
    decision = draw(st.sampled_from(["allow", "deny", "deny", None]))
    ts = T0 + timedelta(seconds=draw(st.sampled_from(OFFSETS)))
    ev = new_event(payload, host="h", user=draw(st.sampled_from(["", "Alice"])), ts=ts)
    return Outcome(event=ev, settings_id="sid", decision=decision, blocked=decision == "deny")


def python_hits(d: Path, c: Any) -> set[tuple[Any, ...]]:
    from tests.support.sigma_reference import correlate

    events = [
        (o.event.id, us(o.event.ts), event_fields(o))
        for o in iter_outcomes(d)
        if o.replay_id is None
    ]
    return {(h.anchor, h.key, h.count, h.first_us, h.events) for h in correlate(c, events)}


def sql_hits(d: Path, c: Any, **kw: Any) -> set[tuple[Any, ...]]:
    from queries.sigma_correlation_duckdb import detect_correlations

    con = open_db(d)
    try:
        found = detect_correlations(con, [c], **kw)
    finally:
        con.close()
    return {(m.id, tuple(v for _, v in m.group), m.count, us(m.first), m.events) for m in found}


@settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.data())
def test_correlations_in_sql_agree_with_the_python_matcher(data: Any) -> None:
    """Same hits (anchor, group, count, first time, window events) from both, over windows
    with events exactly `timespan` apart, ties, missing group-by fields, several rules."""
    from queries.sigma_correlation import load_rule_set

    vocab = data.draw(st.lists(TEXT.filter(bool), min_size=1, max_size=3), label="vocabulary")
    n = data.draw(st.integers(1, 3), label="rules")
    texts = [data.draw(base_rule(i, vocab), label=f"r{i}") for i in range(n)]
    texts.append(data.draw(correlation(n), label="correlation"))
    outcomes = data.draw(st.lists(timed_outcome(vocab), min_size=3, max_size=12), label="log")
    (c,) = load_rule_set([("---\n".join(texts), "c.yml")]).correlations
    with tempfile.TemporaryDirectory(prefix="detect-corr-") as tmp:
        d = Path(tmp)
        with LogWriter.open(d, "w1") as w:
            w.append_batch(outcomes)
        want = python_hits(d, c)
        event(f"{c.kind}: {'hits' if want else 'no hit'}")
        assert sql_hits(d, c) == want, (texts, [(o.event.ts, o.event.payload) for o in outcomes])


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(st.data())
def test_follow_turns_find_what_one_pass_finds(data: Any) -> None:
    """`--follow`'s second turn (anchors from the earliest new event on, windows reaching
    back a timespan) adds to the first what one pass over the whole log finds: exactly that
    when events arrive in time order, at least that when some arrive late."""
    from queries.sigma_correlation import load_rule_set

    vocab = data.draw(st.lists(TEXT.filter(bool), min_size=1, max_size=3), label="vocabulary")
    n = data.draw(st.integers(1, 2), label="rules")
    texts = [data.draw(base_rule(i, vocab), label=f"r{i}") for i in range(n)]
    texts.append(data.draw(correlation(n), label="correlation"))
    outcomes = data.draw(st.lists(timed_outcome(vocab), min_size=2, max_size=10), label="log")
    in_order = data.draw(st.booleans(), label="in time order")
    if in_order:
        outcomes.sort(key=lambda o: o.event.ts)
    cut = data.draw(st.integers(1, len(outcomes) - 1), label="cut")
    (c,) = load_rule_set([("---\n".join(texts), "c.yml")]).correlations
    with tempfile.TemporaryDirectory(prefix="detect-follow-") as tmp:
        d = Path(tmp)
        with LogWriter.open(d, "w1") as w:
            w.append_batch(outcomes[:cut])
        first = sql_hits(d, c)
        with LogWriter.open(d, "w1") as w:
            w.append_batch(outcomes[cut:])
        new_from = min(o.event.ts for o in outcomes[cut:])
        second = sql_hits(d, c, new_from=new_from)
        whole = python_hits(d, c)
        # a hit is named by (anchor, group); its count may differ between turns
        seen = {h[:2] for h in first} | {h[:2] for h in second}
        assert {h[:2] for h in whole} <= seen
        if in_order or c.op in ("gt", "gte"):
            final = {h[:2]: h for h in first} | {h[:2]: h for h in second}
            assert set(final.values()) >= whole
            if in_order:
                assert set(final.values()) == whole


STEP = (
    "title: a\nname: a\nlogsource: {product: claude_code}\n"
    "detection:\n  s: {ToolName: Bash}\n  condition: s\n---\n"
    "title: b\nname: b\nlogsource: {product: claude_code}\n"
    "detection:\n  s: {ToolName: Read}\n  condition: s\n---\n"
)
S = timedelta(seconds=1)
US1 = timedelta(microseconds=1)
# (correlation body, events as (tool, session, offset from T0)), the anchors that hit (indexes)
EDGES: list[tuple[str, list[tuple[str, str, timedelta]], list[int]]] = [
    # an event exactly `timespan` before the anchor is in its window; 1 µs more is not
    ("type: event_count\n  rules: a\n  timespan: 2s\n  condition: {gte: 2}",
     [("Bash", "s", 0 * S), ("Bash", "s", 2 * S)], [1]),
    ("type: event_count\n  rules: a\n  timespan: 2s\n  condition: {gte: 2}",
     [("Bash", "s", 0 * S), ("Bash", "s", 2 * S + US1)], []),
    # events at the same time are in each other's windows
    ("type: event_count\n  rules: a\n  timespan: 1s\n  condition: {gte: 2}",
     [("Bash", "s", S), ("Bash", "s", S)], [0, 1]),
    # grouped: another session is another window; an empty session takes no part
    ("type: event_count\n  rules: a\n  group-by: SessionId\n  timespan: 1m\n  condition: {gte: 2}",
     [("Bash", "s", 0 * S), ("Bash", "t", S), ("Bash", "", S), ("Bash", "s", 2 * S)], [3]),
    # lt: the windows with few events
    ("type: event_count\n  rules: a\n  timespan: 1s\n  condition: {lt: 2}",
     [("Bash", "s", 0 * S), ("Bash", "s", S), ("Bash", "s", 5 * S)], [0, 2]),
    # temporal: both rules in the window, either order
    ("type: temporal\n  rules: [a, b]\n  timespan: 1s",
     [("Read", "s", 0 * S), ("Bash", "s", S), ("Bash", "s", 3 * S)], [1]),
    # temporal_ordered: a strictly before b; at the same time is no order
    ("type: temporal_ordered\n  rules: [a, b]\n  timespan: 5s",
     [("Read", "s", 0 * S), ("Bash", "s", S), ("Read", "s", S), ("Read", "s", 2 * S)], [3]),
    # an expression: a without b in the window
    ("type: temporal\n  rules: [a, b]\n  timespan: 1s\n  condition: a and not b",
     [("Bash", "s", 0 * S), ("Read", "s", S), ("Bash", "s", 2 * S), ("Bash", "s", 5 * S)], [0, 3]),
]  # fmt: skip


def test_correlation_window_edges(tmp_path: Path) -> None:
    from queries.sigma_correlation import load_rule_set

    for i, (body, evs, want) in enumerate(EDGES):
        (c,) = load_rule_set([(STEP + f"title: c\ncorrelation:\n  {body}\n", "c.yml")]).correlations
        outcomes = []
        for tool, session, off in evs:
            p = {"hook_event_name": "PreToolUse", "session_id": session, "tool_name": tool}
            ev = new_event(p | {"tool_input": {}}, host="h", user="u", ts=T0 + off)
            outcomes.append(Outcome(event=ev, settings_id="sid"))
        d = tmp_path / str(i)
        with LogWriter.open(d, "w1") as w:
            w.append_batch(outcomes)
        ids = {o.event.id: k for k, o in enumerate(outcomes)}
        assert sorted(ids[h[0]] for h in python_hits(d, c)) == want, body
        assert sorted(ids[h[0]] for h in sql_hits(d, c)) == want, body
