"""A hook's stdout as text: plain or one JSON object, parsed as JS ``JSON.parse`` would.

Spec §3.1 (reading stdout), §3.1.3 (the async form), §3.1.5 (string caps). What the object
says is `engine.hook_json`'s job.

Rules of this file (those of `engine.verdict`):
- Pure, and never raises on hostile input: an unparseable text is `Plain`.
- Parsing follows JS ``JSON.parse``: NaN and Infinity are invalid, huge numbers become
  floats, duplicate keys keep the last value, ``"\\ud800"`` escapes are accepted. The
  result is always encodable by msgspec (lone surrogates become U+FFFD, `sanitize`).
- A string a hook hands to the agent is capped at STRING_CAP characters (`cap`).

Example:
    >>> read_text('Shell ready {"decision": "block"}')
    Plain(text='Shell ready {"decision": "block"}')
    >>> read_text('{"continue": false}')
    Obj(obj={'continue': False})
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

import msgspec

__all__ = [
    "STRING_CAP",
    "Obj",
    "Plain",
    "cap",
    "first_line_async",
    "fix_str",
    "is_async_form",
    "read_text",
    "sanitize",
]

# A bound on memory, not Claude Code's limit: Claude Code 2.1.332 hands a deny reason of
# any length to the model whole, and saves an over-long additionalContext (~30 KB seen) to a
# file, showing the model a 2 KB preview and the path (tests/conformance/claude_code:
# limits.*). hookaudit passes the text on as the hook gave it, so Claude Code does what it
# does with it; only past 1 MiB (what the command executor reads of stdout) is it cut.
STRING_CAP = 1 << 20


@dataclass(frozen=True, slots=True)
class Plain:
    text: str


@dataclass(frozen=True, slots=True)
class Obj:
    obj: dict[str, Any]


def _reject_constant(name: str) -> Any:
    raise ValueError(f"invalid JSON constant {name}")  # JS JSON.parse has no NaN/Infinity


def _js_int(text: str) -> int | float:
    # JS reads every number as a double; Python refuses ints over 4300 digits.
    return int(text) if len(text) <= 4000 else float(text)


_SURROGATE = re.compile("[\ud800-\udfff]")


def fix_str(s: str) -> str:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", s)  # same length, so caps stay exact
    return s


def sanitize(root: Any) -> Any:
    """Replace lone surrogates (legal in JS strings, not in UTF-8); iterative, any depth."""
    top: list[Any] = [root]
    stack: list[tuple[Any, Any, Any]] = [(top, 0, root)]
    while stack:
        parent, key, value = stack.pop()
        if isinstance(value, str):
            parent[key] = fix_str(value)
        elif isinstance(value, dict):
            fixed = {fix_str(k): v for k, v in value.items()}
            parent[key] = fixed
            stack.extend((fixed, k, v) for k, v in fixed.items())
        elif isinstance(value, list):
            stack.extend((value, i, v) for i, v in enumerate(value))
    return top[0]


def _parse_json(text: str) -> Any:
    """Parse like JS ``JSON.parse``; raises ValueError when it would throw."""
    try:
        return msgspec.json.decode(text)
    except (msgspec.DecodeError, msgspec.ValidationError, UnicodeError, RecursionError):
        pass  # out-of-range numbers, surrogate escapes: retry with the lenient reader
    try:
        value = json.loads(text, parse_constant=_reject_constant, parse_int=_js_int)
        return sanitize(value)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError is a ValueError
        raise ValueError(str(exc)) from None


def read_text(text: str) -> Plain | Obj:
    """Spec §3.1: trimmed text not starting with ``{``, or invalid JSON, is plain text."""
    trimmed = text.strip()
    if not trimmed.startswith("{"):
        return Plain(trimmed)
    try:
        value = _parse_json(trimmed)
    except ValueError:
        return Plain(trimmed)
    return Obj(value) if isinstance(value, dict) else Plain(trimmed)


def is_async_form(obj: dict[str, Any]) -> bool:
    """The async form of the output union (§3.1.3); it wins over every other field."""
    return obj.get("async") is True


def first_line_async(stdout: str) -> bool:
    """Self-declared async (§6.4): the first line alone is ``{"async": true, …}``.

    >>> first_line_async('{"async": true}' + chr(10) + '{"systemMessage": "later"}')
    True
    """
    text = stdout.lstrip()
    end = text.find("\n")
    first = (text if end < 0 else text[:end]).strip()
    if not first.startswith("{") or "}" not in first:
        return False
    read = read_text(first)
    return isinstance(read, Obj) and is_async_form(read.obj)


def cap(text: str) -> tuple[str, bool]:
    """A string over STRING_CAP characters becomes a marked preview (a bound, see STRING_CAP)."""
    if len(text) <= STRING_CAP:
        return text, False
    marker = f"\n[hookaudit: truncated {len(text)} characters to {STRING_CAP}]"
    return text[: STRING_CAP - len(marker)] + marker, True
