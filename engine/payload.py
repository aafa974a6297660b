"""Checking an agent's hook input: the one parser every entry point shares.

Rules of this file:
- Every byte an agent (or anything on the wire) sent goes through `parse_payload` before
  the engine reads it: `eval`, `emit`, `serve`, the worker (`Engine.start`) and replay.
- Bounded: at most `MAX_EVENT_BYTES` bytes and `MAX_DEPTH` levels of nesting, so no
  later code path (msgspec, the engine, DuckDB's views) can meet a RecursionError. The
  usual event is read by a decoder whose type nests `_SHALLOW_LEVELS` deep: it cannot
  recurse further, and its success is the proof of the bound. Anything else is measured
  over the bytes before anything recursive runs, with C-speed bytes operations (strings
  cut out, brackets kept, innermost pairs stripped a level a round); Python loops only
  over the first 64 KiB or over malformed input.
- One reading: a duplicate object key is rejected (I-JSON, RFC 7493 §2.3), so the engine
  and every view read the same value; text must be UTF-8 (§2.1).
- Typed: each field the event catalog documents must have its documented JSON type
  (`engine.events.field_types`), checked by a msgspec Struct built per event (C speed);
  a PreToolUse whose `tool_input` is a string is rejected.
- Every failure is an `InvalidEvent` with a one-line message naming the limit or field.

Light on purpose (stdlib, msgspec, the event catalog, the error types): `hookaudit emit`
runs on every tool call and imports this without the rest of the engine.

Example:
    >>> parse_payload(b'{"hook_event_name": "Stop"}')["hook_event_name"]
    'Stop'
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import msgspec

from engine.errors import InvalidEvent
from engine.events import field_types, is_known

__all__ = ["MAX_DEPTH", "MAX_EVENT_BYTES", "nesting_depth", "parse_payload", "stored_payload"]

#: The largest hook input accepted, in bytes.
MAX_EVENT_BYTES = 8 * 1024 * 1024
#: The deepest nesting of objects and arrays accepted (the event object itself is 1).
#: Far below Python's recursion limit (1000), whatever the caller's stack depth.
MAX_DEPTH = 64

_decoder = msgspec.json.Decoder(dict[str, Any])
_encoder = msgspec.json.Encoder()
_encode = _encoder.encode
_convert = msgspec.convert
_NOT_BRACKET = bytes(b for b in range(256) if b not in b"[]{}")


def _structure(raw: bytes) -> bytes:
    """`raw` without its strings: only structure is left, at C speed.

    Escaped backslashes, then escaped quotes, can only stand inside strings; once they
    are gone every '"' opens or closes a string. (A backslash outside a string is
    malformed JSON, where the decoder stops before any nesting that follows it.)
    """
    plain = raw.replace(b"\\\\", b"").replace(b'\\"', b"")
    return b"".join(plain.split(b'"')[0::2])


def nesting_depth(raw: bytes, limit: int = MAX_DEPTH) -> int:
    """How deeply `raw`'s arrays and objects nest, counted up to `limit` + 1.

    Strings are skipped; unbalanced brackets count as far as they go (the decoder then
    reports the malformed JSON). Linear time, no recursion.

    >>> nesting_depth(b'{"a": [[1], "[[["]}')
    3
    >>> nesting_depth(b"[" * 10_000, limit=64)
    65
    """
    return _depth(_structure(raw).translate(None, _NOT_BRACKET), limit)


def _depth(brackets: bytes, limit: int) -> int:
    opens = brackets.count(b"[") + brackets.count(b"{")
    if opens <= limit:  # cannot nest deeper than it opens
        return _exact(brackets, limit) if len(brackets) <= 4 * limit else opens
    # Strip innermost pairs, one level a round (C speed): balanced input that nests d <=
    # `limit` deep is gone after exactly d rounds.
    if _exact(brackets[:65536], limit) > limit:
        return limit + 1  # the usual attack: deep at once, found in the first bytes
    rest = brackets
    for rounds in range(1, limit + 1):
        shorter = rest.replace(b"[]", b"").replace(b"{}", b"")
        if not shorter:
            return rounds
        if len(shorter) == len(rest):
            break  # unbalanced: no pair left to strip
        rest = shorter
    # Deeper than `limit`, or unbalanced (malformed: count exactly, stop past the limit).
    return _exact(brackets, limit)


def _exact(brackets: bytes, limit: int) -> int:
    depth = deepest = 0
    for b in brackets:
        if b in (0x5B, 0x7B):  # [ {
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > limit:
                    return deepest
        elif depth > 0:
            depth -= 1
    return deepest


#: Levels the shallow decoder reads (the event object is 1). Its type grows as 2**levels
#: (a list and a dict of the next level at each), so it stays small: 0.5 ms to build.
_SHALLOW_LEVELS = 6
_shallow: msgspec.json.Decoder[dict[str, Any]] | None = None
_shallow_decode: Callable[[bytes | str], dict[str, Any]] | None = None  # its bound decode


def _build_shallow() -> None:
    """Build the decoder of objects nested at most `_SHALLOW_LEVELS` deep.

    Built on the second parse of a process, not on import: `hookaudit emit` parses once.
    What it decodes equals `_decoder`'s result (the same JSON types, the same values).
    """
    global _shallow, _shallow_decode
    value: Any = str | int | float | bool | None
    for _ in range(_SHALLOW_LEVELS - 1):
        value = str | int | float | bool | None | list[value] | dict[str, value]
    _shallow = msgspec.json.Decoder(dict[str, value])
    _shallow_decode = _shallow.decode


def _counted_decode(raw: bytes, where: str) -> dict[str, Any]:
    """Decode `raw` after bounding its nesting by counting brackets; InvalidEvent says why
    it cannot be decoded."""
    # Brackets inside strings only add to the counts: when the raw counts already
    # pass, the string-free structure is never built.
    if raw.count(b"[") + raw.count(b"{") > MAX_DEPTH and nesting_depth(raw) > MAX_DEPTH:
        raise InvalidEvent(where, f"JSON nested deeper than the limit of {MAX_DEPTH} levels")
    try:
        return _decoder.decode(raw)
    except msgspec.ValidationError as exc:
        raise InvalidEvent(where, "expected a JSON object") from exc
    except RecursionError as exc:  # not reached: the nesting is bounded above
        raise InvalidEvent(where, "JSON nested too deeply") from exc
    except msgspec.DecodeError as exc:
        why = str(exc)
        if "UTF-8" in why:
            raise InvalidEvent(where, f"not UTF-8: {why}") from exc
        raise InvalidEvent(where, f"malformed JSON: {why}") from exc


def _reject_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise _Duplicate(k)
        out[k] = v
    return out


class _Duplicate(Exception):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _duplicate_key(raw: bytes) -> str:
    """The first duplicated key of `raw` (valid JSON, nesting already bounded)."""
    try:
        json.loads(raw, object_pairs_hook=_reject_duplicates)
    except _Duplicate as d:
        return d.key
    return "?"  # not reached: the counts differed, so some object repeats a key


class _Object(msgspec.Struct, gc=False):
    """Any JSON object, its members not looked at (a type test, nothing copied)."""


_TYPED: dict[str, type] = {}
_MSGSPEC_TYPE: dict[str, Any] = {"string": str, "object": _Object, "array": list, "boolean": bool}
_GOT = re.compile(r"Expected `[^`]*`, got `([^`]*)` - at `\$\.([^`\[]*)`")
_GOT_NAMES = {
    "str": "string",
    "int": "number",
    "float": "number",
    "bool": "boolean",
    "object": "object",
    "array": "array",
    "null": "null",
}


def _typed(name: str) -> type:
    """A Struct of `name`'s documented fields, each typed: `msgspec.convert` of the
    decoded payload to it checks them at C speed, other members skipped."""
    typed = _TYPED.get(name)
    if typed is None:
        fields = [
            (f, _MSGSPEC_TYPE[k], None) for f, k in field_types(name).items()
        ]  # None when absent; a JSON null is not of the type, so it is still refused
        typed = _TYPED[name] = msgspec.defstruct(f"_{name}Fields", fields, gc=False)
    return typed


def _type_error(name: str, exc: msgspec.ValidationError, where: str) -> InvalidEvent:
    """The one-line InvalidEvent of a field of the wrong JSON type."""
    m = _GOT.search(str(exc))
    field = m.group(2) if m else ""
    kind = field_types(name).get(field)
    if not m or kind is None:
        return InvalidEvent(where, f"{exc} ({name})")
    got = _GOT_NAMES.get(m.group(1), m.group(1))
    return InvalidEvent(where, f"{field}: expected a JSON {kind}, got {got} ({name})")


def parse_payload(
    raw: bytes | str, where: str = "event", *, any_event: bool = False
) -> dict[str, Any]:
    """Decode and check a hook input; InvalidEvent names what is wrong and where.

    With `any_event`, an event name Claude Code does not have is accepted (another agent's
    input, whose dialect maps its names; `check_types` then checks the canonical payload).

    >>> parse_payload(b"[]", "<stdin>")
    Traceback (most recent call last):
    ...
    engine.errors.InvalidEvent: <stdin>: expected a JSON object
    >>> parse_payload(b'{"hook_event_name": "Stop", "a": 1, "a": 2}', "<stdin>")
    Traceback (most recent call last):
    ...
    engine.errors.InvalidEvent: <stdin>: duplicate key 'a' (I-JSON, RFC 7493: one reading only)
    """
    # The fast path, for the usual event: within the size limit (text is encoded), nesting a few
    # levels (the shallow decoder reads it in one pass and its type is the proof of the
    # bound), compact (it is its own re-encoding, so no key repeats: a dict holds each key
    # once), of an event already seen (its typed Struct built). Each step that does not
    # hold hands the input to `_parse`, which checks everything and says why.
    data = raw
    if type(data) is str:  # the worker's events carry text
        try:
            data = data.encode()
        except UnicodeEncodeError:  # a lone surrogate: `_parse` says so
            return _parse(raw, where, any_event)
    if type(data) is bytes and len(data) <= MAX_EVENT_BYTES and _shallow_decode is not None:
        try:
            payload = _shallow_decode(data)
        except msgspec.MsgspecError:
            return _parse(data, where, any_event)
        again = _encode(payload)
        if again == data:
            name = payload.get("hook_event_name")
            typed = _TYPED.get(name) if type(name) is str and not any_event else None
            if typed is not None:
                try:
                    _convert(payload, typed)
                except msgspec.ValidationError as exc:
                    raise _type_error(name, exc, where) from exc  # type: ignore[arg-type]
                return payload
        return _checked(data, payload, again, where, any_event)
    return _parse(data, where, any_event)


def check_types(payload: dict[str, Any], where: str = "event") -> None:
    """InvalidEvent unless `payload` names a known event and its documented fields have
    their types (a canonical payload a dialect built)."""
    name = payload.get("hook_event_name")
    if not isinstance(name, str) or not is_known(name):
        raise InvalidEvent(where, f"hook_event_name: unknown hook event {str(name)[:100]!r}")
    try:
        _convert(payload, _TYPED.get(name) or _typed(name))
    except msgspec.ValidationError as exc:
        raise _type_error(name, exc, where) from exc


def _parse(raw: bytes | str, where: str, any_event: bool = False) -> dict[str, Any]:
    """`parse_payload` for any input: every bound and check, each failure said."""
    if isinstance(raw, str):
        try:
            raw = raw.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidEvent(where, f"not UTF-8: {exc.reason} at {exc.start}") from exc
    if len(raw) > MAX_EVENT_BYTES:
        raise InvalidEvent(
            where, f"event of {len(raw)} bytes exceeds the limit of {MAX_EVENT_BYTES} bytes"
        )
    if not raw or raw.isspace():
        raise InvalidEvent(where, "empty input: expected the hook event JSON")
    # Anything the shallow decoder refuses (deeper, not an object, malformed, a number out
    # of range) takes the counted path, which says why.
    if _shallow_decode is None:
        payload = _counted_decode(raw, where)
        _build_shallow()
    else:
        try:
            payload = _shallow_decode(raw)
        except msgspec.MsgspecError:
            payload = _counted_decode(raw, where)
    return _checked(raw, payload, _encode(payload), where, any_event)


def _checked(
    raw: bytes, payload: dict[str, Any], again: bytes, where: str, any_event: bool = False
) -> dict[str, Any]:
    """`payload` (decoded from `raw`, within the bounds; `again` its encoding) once no key
    is repeated and the documented fields have their types."""
    # Outside strings a ':' follows a key and nothing else. The decoded payload, encoded
    # again, has one per key it kept: fewer than the input's means an object repeated a key
    # (the decoder kept the last value, DuckDB's JSON functions read the first).
    # Fast paths: input that is the payload's own encoding repeats no key; without a \u
    # escape every ':' inside a decoded string was a literal ':' of the input, so equal
    # totals leave no room for a lost key.
    if (
        again != raw
        and (b"\\u" in raw or raw.count(b":") != again.count(b":"))
        and _structure(raw).count(b":") != _structure(again).count(b":")
    ):
        key = _duplicate_key(raw)
        raise InvalidEvent(where, f"duplicate key {key!r} (I-JSON, RFC 7493: one reading only)")
    name = payload.get("hook_event_name")
    if any_event:
        return payload  # another agent's input: its dialect maps it, check_types checks it
    if not isinstance(name, str) or not name:
        raise InvalidEvent(where, "hook_event_name: missing or not a string")
    typed = _TYPED.get(name)
    if typed is None:
        if not is_known(name):
            if any_event:
                return payload
            raise InvalidEvent(where, f"hook_event_name: unknown hook event {name[:100]!r}")
        typed = _typed(name)
    try:
        _convert(payload, typed)
    except msgspec.ValidationError as exc:
        raise _type_error(name, exc, where) from exc
    return payload


def stored_payload(text: str, where: str = "stored event") -> dict[str, Any]:
    """A payload read back from the log (replay): decoded at once when it cannot nest too
    deep (the usual record: read by the shallow decoder, or a few brackets), else
    through `parse_payload`.

    The worker checked it before storing it; this keeps an older or forged log from
    reaching a RecursionError.

    >>> stored_payload('{"hook_event_name": "Stop"}')["hook_event_name"]
    'Stop'
    """
    if len(text) <= MAX_EVENT_BYTES:
        if _shallow is None:
            _build_shallow()
        try:
            return _shallow.decode(text)  # type: ignore[union-attr]  # built above
        except msgspec.MsgspecError:
            pass  # deeper than the shallow decoder reads, or not decodable
        if text.count("[") + text.count("{") <= MAX_DEPTH:
            return _decoder.decode(text)
    return parse_payload(text, where)
