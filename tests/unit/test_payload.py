"""The one hook-input parser (`engine.payload.parse_payload`): bounded, one reading, typed.

Property tests: whatever bytes arrive, the parser returns a valid event or raises
InvalidEvent, never anything else (RecursionError, UnicodeError, a traceback).
"""

from __future__ import annotations

import json
import sys
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.errors import InvalidEvent
from engine.events import CATALOG, field_types
from engine.payload import (
    MAX_DEPTH,
    MAX_EVENT_BYTES,
    nesting_depth,
    parse_payload,
    stored_payload,
)

BASE = {"hook_event_name": "PostToolUse", "tool_name": "mcp__x__y", "session_id": "s", "cwd": "/p"}


def deep(n: int, open_: str = "[", close: str = "]") -> bytes:
    inner = open_ * n + close * n
    return (
        '{"hook_event_name":"PostToolUse","tool_name":"T","tool_input":{"r":' + inner + "}}"
    ).encode()


def outcome(raw: bytes) -> str:
    """'ok' or the InvalidEvent message; any other exception fails the test."""
    try:
        parse_payload(raw, "t")
    except InvalidEvent as e:
        assert "\n" not in str(e)
        return str(e)
    return "ok"


@pytest.mark.parametrize("depth", [1, MAX_DEPTH - 2])
def test_depth_within_the_limit_is_accepted(depth: int) -> None:
    # the event object and tool_input are two levels; `depth` arrays inside: 64 in all
    assert outcome(deep(depth)) == "ok"


@pytest.mark.parametrize("depth", [MAX_DEPTH - 1, 985, 988, 100_000, 1_000_000])
def test_deeper_than_the_limit_is_refused_at_any_stack_depth(depth: int) -> None:
    def nested(n: int) -> str:  # call the parser from deep in the stack, as a worker does
        return nested(n - 1) if n else outcome(deep(depth))

    why = nested(sys.getrecursionlimit() - 200)
    assert why == f"t: JSON nested deeper than the limit of {MAX_DEPTH} levels"
    print(f"depth {depth}: refused ({why})")


def test_brackets_inside_strings_do_not_count() -> None:
    raw = json.dumps({**BASE, "tool_input": {"command": "[" * 10_000 + '\\"{' * 500}}).encode()
    assert outcome(raw) == "ok"
    assert nesting_depth(raw) == 2


def test_duplicate_keys_are_refused_at_every_level() -> None:
    top = b'{"hook_event_name":"Stop","session_id":"a","session_id":"b"}'
    nested = (
        b'{"hook_event_name":"PreToolUse","tool_name":"Bash",'
        b'"tool_input":{"command":"rm -rf /","command":"ls"}}'
    )
    in_array = b'{"hook_event_name":"Stop","x":[{"k":1,"k":1}]}'
    for raw, key in ((top, "session_id"), (nested, "command"), (in_array, "k")):
        assert outcome(raw) == f"t: duplicate key {key!r} (I-JSON, RFC 7493: one reading only)"
    # the same key in two objects, and colons inside strings, are not duplicates
    ok = b'{"hook_event_name":"Stop","a":{"k":"x:y"},"b":{"k":"\\":"}}'
    assert outcome(ok) == "ok"


def test_invalid_utf8_is_refused() -> None:
    assert outcome(b'{"hook_event_name":"Stop","tool_input":{"command":"\xff\xfe"}}').startswith(
        "t: not UTF-8"
    )
    assert (
        outcome('{"hook_event_name":"Stop","x":"\ud800"}'.encode("utf-8", "surrogatepass"))[:12]
        == "t: not UTF-8"
    )
    assert outcome('{"hook_event_name":"Stop","x":"\ud800"}'.encode("utf-8", "surrogatepass"))


def test_size_limit() -> None:
    raw = b'{"hook_event_name":"Stop","x":"' + b"a" * MAX_EVENT_BYTES + b'"}'
    assert outcome(raw) == (
        f"t: event of {len(raw)} bytes exceeds the limit of {MAX_EVENT_BYTES} bytes"
    )


@pytest.mark.parametrize(
    ("event", "field", "value", "kind"),
    [
        ("PreToolUse", "tool_input", "rm -rf /", "object"),
        ("PreToolUse", "tool_input", None, "object"),
        ("PreToolUse", "tool_name", ["Bash"], "string"),
        ("Stop", "session_id", 1, "string"),
        ("Stop", "cwd", {"a": 1}, "string"),
        ("Stop", "stop_hook_active", "yes", "boolean"),
        ("UserPromptSubmit", "prompt", 5, "string"),
        ("FileChanged", "file_path", False, "string"),
    ],
)
def test_documented_field_types_are_enforced(event: str, field: str, value: Any, kind: str) -> None:
    raw = json.dumps({"hook_event_name": event, field: value}).encode()
    why = outcome(raw)
    assert why.startswith(f"t: {field}: expected a JSON {kind}, got "), why


def test_every_event_has_field_types() -> None:
    for name, es in CATALOG.items():
        fields = field_types(name)
        assert fields["session_id"] == "string"
        if es.tool_event:
            assert fields["tool_input"] == "object"


# -- properties ------------------------------------------------------------------------------

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda kids: (
        st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=5), kids, max_size=4)
    ),
    max_leaves=40,
)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.binary(max_size=2048))
def test_random_bytes_give_an_event_or_invalid_event(raw: bytes) -> None:
    outcome(raw)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(json_values, st.sampled_from(sorted(CATALOG)))
def test_random_json_gives_an_event_or_invalid_event(value: Any, name: str) -> None:
    doc = {"hook_event_name": name, "x": value}
    raw = msgspec.json.encode(doc)
    result = outcome(raw)
    if result == "ok":
        assert parse_payload(raw) == doc  # what the engine reads is what was sent


@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.integers(min_value=1, max_value=3000),
    st.sampled_from(["[", '{"a":']),
    st.booleans(),
)
def test_random_deep_nesting_never_recurses(depth: int, opener: str, balanced: bool) -> None:
    close = "]" if opener == "[" else "}"
    body = opener * depth + ("1" if opener != "[" else "") + (close * depth if balanced else "")
    raw = ('{"hook_event_name":"Stop","x":' + body + "}").encode()
    result = outcome(raw)
    levels = depth + 1
    if levels > MAX_DEPTH:
        assert "nested deeper" in result
    elif balanced:
        assert result == "ok"


@settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.text(max_size=4), json_values, min_size=1, max_size=5), st.data())
def test_any_duplicated_key_is_refused(obj: dict[str, Any], data: st.DataObject) -> None:
    key = data.draw(st.sampled_from(sorted(obj)))
    members = [f"{json.dumps(k)}:{json.dumps(v)}" for k, v in obj.items()]
    members.append(f"{json.dumps(key)}:{json.dumps(obj[key])}")
    raw = ('{"hook_event_name":"Stop","x":{' + ",".join(members) + "}}").encode()
    assert outcome(raw) == f"t: duplicate key {key!r} (I-JSON, RFC 7493: one reading only)"


@settings(max_examples=30, deadline=None)
@given(st.integers(min_value=0, max_value=2_000_000), st.sampled_from(['"', "\\", "[", "x"]))
def test_huge_strings(n: int, ch: str) -> None:
    s = ch * n
    raw = ('{"hook_event_name":"Stop","x":"' + s + '"}').encode()
    outcome(raw)


def nested(levels: int, leaf: Any) -> Any:
    """`leaf` inside `levels` containers, arrays and objects in turn."""
    for i in range(levels):
        leaf = [leaf] if i % 2 else {"k": leaf}
    return leaf


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(json_values, st.integers(min_value=0, max_value=MAX_DEPTH - 2), st.data())
def test_every_path_reads_what_the_plain_decoder_reads(
    value: Any, levels: int, data: st.DataObject
) -> None:
    # The usual event goes through a decoder typed a few levels deep, anything deeper
    # through the counted path: both must give the plain decoder's values, JSON types
    # included (1 stays an int, 1.0 a float), for the live and the stored parse.
    value = nested(levels, data.draw(st.sampled_from([value, 1, 1.0, -0.0, 2**70, None])))
    raw = msgspec.json.encode({"hook_event_name": "Stop", "x": value})
    if nesting_depth(raw) > MAX_DEPTH:
        return
    plain = msgspec.json.encode(msgspec.json.decode(raw))
    for _ in range(2):  # the first parse of a process takes the counted path
        assert msgspec.json.encode(parse_payload(raw)) == plain
        assert msgspec.json.encode(stored_payload(raw.decode())) == plain


@pytest.mark.parametrize("levels", [5, 6, 7, MAX_DEPTH - 1])
def test_nesting_around_the_shallow_decoder_is_read_and_bounded(levels: int) -> None:
    ok = msgspec.json.encode({"hook_event_name": "Stop", "x": nested(levels, 1)})
    too_deep = msgspec.json.encode({"hook_event_name": "Stop", "x": nested(MAX_DEPTH, 1)})
    for _ in range(2):
        assert parse_payload(ok)["x"] == nested(levels, 1)
        assert stored_payload(ok.decode())["x"] == nested(levels, 1)
        assert outcome(too_deep) == f"t: JSON nested deeper than the limit of {MAX_DEPTH} levels"
        with pytest.raises(InvalidEvent, match="nested deeper"):
            stored_payload(too_deep.decode())


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.one_of(
        json_values.map(lambda v: msgspec.json.encode({"hook_event_name": "Stop", "x": v})),
        json_values.map(lambda v: json.dumps({"hook_event_name": "Stop", "x": v}).encode()),
        st.binary(max_size=512),
    )
)
def test_text_and_bytes_are_read_alike(raw: bytes) -> None:
    # The worker hands the parser text, emit and serve bytes: the same reading or the same
    # one-line error, compact or not.
    try:
        text = raw.decode()
    except UnicodeDecodeError:
        return
    for _ in range(2):
        assert outcome(text) == outcome(raw)  # type: ignore[arg-type]
        if outcome(raw) == "ok":
            assert parse_payload(text) == parse_payload(raw)


def test_text_with_a_lone_surrogate_is_refused() -> None:
    text = '{"hook_event_name": "Stop", "x": "' + chr(0xD800) + '"}'
    for _ in range(2):
        assert outcome(text).startswith("t: not UTF-8")  # type: ignore[arg-type]
