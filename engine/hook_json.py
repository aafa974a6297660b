"""The hook JSON output object: parse it as JS would, validate it, read what an event honours.

Spec §3.1 (reading stdout), §3.2 (universal fields), §3.3 (old and new decision
forms), §3.4 (hookSpecificOutput details). `engine.decode` applies exit codes and hook
types on top of this.

Rules of this file (those of `engine.verdict`):
- Pure, and never raises on hostile input: an unparseable text is `Plain`, an object
  of the wrong shape is a `SchemaError` value.
- Parsing follows JS ``JSON.parse``: NaN and Infinity are invalid, huge numbers become
  floats, duplicate keys keep the last value, ``"\\ud800"`` escapes are accepted. The
  result is always encodable by msgspec (lone surrogates become U+FFFD).
- JSON ``null`` reads as "not given" for every optional field. Claude Code's schema
  would reject it and fail open; a gate should not open on a null.
- What an event reads comes from the catalog; what it discards of the universal
  fields is the `_DISCARD_*` tables below.

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

from engine.effects import Invocation
from engine.events import EventSpec
from engine.records import Profile

__all__ = [
    "BLOCKED_BY_HOOK",
    "EXIT2_IGNORES_HSO",
    "PERMISSION_DENIED",
    "STRING_CAP",
    "Obj",
    "ObjectRead",
    "Plain",
    "Profile",
    "SchemaError",
    "can_block",
    "cap",
    "first_line_async",
    "fix_str",
    "is_async_form",
    "read_object",
    "read_text",
    "sanitize",
    "short",
]


STRING_CAP = 10_000
BLOCKED_BY_HOOK = "Blocked by hook"
PERMISSION_DENIED = "Permission denied by hook"  # a PermissionRequest deny without `message`

# Universal fields some events throw away (spec §1 "JSON honoured"). The catalog
# says what an event *reads*; these say what it *discards* of the universal set.
_DISCARD_ALL = frozenset({"SessionEnd", "StopFailure", "WorktreeRemove", "InstructionsLoaded"})
_DISCARD_CONTINUE = _DISCARD_ALL | {"Notification", "PreCompact", "TaskCreated"}
_DISCARD_SYSTEM_MESSAGE = _DISCARD_ALL | {"Notification", "PreCompact"}
# hookSpecificOutput is ignored with exit 2 on these (spec §3.5, case 52).
EXIT2_IGNORES_HSO = frozenset({"Elicitation", "ElicitationResult"})
# Fields a profile does not know (spec §0): legacy has no `defer`, and no
# updatedToolOutput for built-in tools or classifierContext.
_CURRENT_ONLY_FIELDS = frozenset({"updatedToolOutput", "classifierContext"})

_PERMISSION_DECISIONS: dict[str, frozenset[str]] = {
    "current": frozenset({"allow", "deny", "ask", "defer"}),
    "legacy": frozenset({"allow", "deny", "ask"}),
}
_ELICIT_ACTIONS = frozenset({"accept", "decline", "cancel"})
_PASSTHROUGH = (
    "updatedToolOutput",
    "updatedMCPToolOutput",
    "classifierContext",
    "sessionTitle",
    "suppressOriginalPrompt",
    "initialUserMessage",
    "watchPaths",
    "reloadSkills",
    "retry",
    "action",
    "content",
    "worktreePath",
    "displayContent",
)
# Expected JSON type of each hookSpecificOutput field an event may honour.
_HSO_TYPES: dict[str, tuple[type, ...]] = {
    "permissionDecision": (str,),
    "permissionDecisionReason": (str,),
    "updatedInput": (dict,),
    "additionalContext": (str,),
    "classifierContext": (str,),
    "sessionTitle": (str,),
    "suppressOriginalPrompt": (bool,),
    "initialUserMessage": (str,),
    "watchPaths": (list,),
    "reloadSkills": (bool,),
    "decision": (dict,),
    "retry": (bool,),
    "action": (str,),
    "content": (dict,),
    "worktreePath": (str,),
    "displayContent": (str,),
}
_TOP_TYPES: dict[str, tuple[type, ...]] = {
    "continue": (bool,),
    "stopReason": (str,),
    "suppressOutput": (bool,),
    "systemMessage": (str,),
    "reason": (str,),
    "terminalSequence": (str,),
    "decision": (str,),
    "hookSpecificOutput": (dict,),
}
# OSC 0/1/2/9/99/777 ended by BEL or ST, or a bare BEL (spec §3.2).
_TERMINAL_SEQ = re.compile(r"(?:\x1b\](?:0|1|2|9|99|777);[^\x07\x1b]*(?:\x07|\x1b\\)|\x07)+")


# --------------------------------------------------------------------------- parsing


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


# --------------------------------------------------------------------------- the sync object


class ObjectRead(msgspec.Struct, gc=False):
    """What a schema-valid sync object says, for one event (mutable while decoding).

    A msgspec Struct (not a dataclass) that the garbage collector does not track: one
    is built for every hook answer that says something, and a Struct is built and
    freed several times faster.
    """

    obj: dict[str, Any] | None
    decision: str | None = None  # PreToolUse: mapped permission decision; PR: behavior
    top_decision: str | None = None  # "block" | "approve", as written
    block: bool = False  # the JSON itself makes a blocking decision honoured here
    unhonoured: bool = False  # it asks to block, but this event (or source) cannot block
    reason: str | None = None
    updated_input: dict[str, Any] | None = None
    context: list[str] = msgspec.field(default_factory=list)
    system_message: str | None = None
    continue_: bool = True
    stop_reason: str | None = None
    specific: dict[str, Any] = msgspec.field(default_factory=dict)
    #: Fields given as JSON null. Claude Code's schema rejects the whole answer for them
    #: ("a hook gave no usable answer"); hookaudit reads them as not given, so a null
    #: never opens a gate the rest of the answer closes.
    nulls: list[str] = msgspec.field(default_factory=list)


class SchemaError(msgspec.Struct, frozen=True, gc=False):
    kind: str
    message: str


def _get(obj: dict[str, Any] | None, key: str) -> Any:
    # JSON null reads as "not given" (a deliberate leniency, see verdict.py).
    return obj.get(key) if obj is not None else None


def _type_error(where: str, key: str, value: Any, types: tuple[type, ...]) -> SchemaError | None:
    if value is None or isinstance(value, types):
        return None
    want = " or ".join(_JSON_NAMES.get(t, t.__name__) for t in types)
    return SchemaError(
        "schema", f"JSON validation failed: {where}{key}: expected {want}, got {_json_type(value)}"
    )


_JSON_NAMES = {str: "a string", bool: "a boolean", dict: "an object", list: "an array"}


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    return type(value).__name__


def can_block(es: EventSpec, profile: Profile, payload: dict[str, Any]) -> bool:
    """Whether this event honours a block (exit 2 or a block decision) under a profile.

    >>> from engine.events import CATALOG
    >>> can_block(CATALOG["PreToolUse"], "current", {})
    True
    """
    if es.informational or es.exit2_for(profile) not in ("block", "feedback", "fail"):
        return False
    return not (es.name == "ConfigChange" and payload.get("source") == "policy_settings")


def read_object(
    obj: dict[str, Any],
    es: EventSpec,
    inv: Invocation,
    profile: Profile,
    *,
    use_hso: bool = True,
) -> ObjectRead | SchemaError:
    """Validate a sync object (§3.2) and read what this event honours (§1, §3.3, §3.4)."""
    for key, types in _TOP_TYPES.items():
        bad = _type_error("", key, obj.get(key), types)
        if bad is not None:
            return bad
    top = obj.get("decision")
    if top is not None and top not in ("block", "approve"):
        return SchemaError(
            "schema",
            f'JSON validation failed: decision: expected "block" or "approve", got {short(top)}',
        )
    hso = _get(obj, "hookSpecificOutput")
    if hso is not None:
        name = _get(hso, "hookEventName")
        if not isinstance(name, str):
            return SchemaError(
                "schema",
                "JSON validation failed: hookSpecificOutput.hookEventName: expected a string",
            )
        if name != es.name:
            return SchemaError(
                "wrong_event_name",
                f"Hook returned incorrect event name: expected '{es.name}' but got '{cap(name)[0]}'",
            )
    read = ObjectRead(obj=obj, top_decision=top)
    read.nulls = [k for k, v in obj.items() if v is None and k in _TOP_TYPES]
    if isinstance(hso, dict):
        read.nulls += [f"hookSpecificOutput.{k}" for k, v in hso.items() if v is None]
    if es.name in _DISCARD_ALL:
        if es.name == "StopFailure":
            _read_terminal(obj, read)
        return read
    honoured = es.specific if hso is not None and use_hso else frozenset()
    if profile == "legacy":
        honoured = honoured - _CURRENT_ONLY_FIELDS
    for key in honoured:
        bad = _type_error(
            "hookSpecificOutput.", key, _get(hso, key), _HSO_TYPES.get(key, (object,))
        )
        if bad is not None:
            return bad
    blockable = can_block(es, profile, inv.payload)
    read.reason = obj.get("reason")
    if es.name == "PreToolUse":
        bad = _read_pretool(hso if "permissionDecision" in honoured else None, top, read, profile)
        if bad is not None:
            return bad
    elif es.name == "PermissionRequest" and "decision" in honoured:
        bad = _read_permission_request(_get(hso, "decision"), read)
        if bad is not None:
            return bad
    elif top == "block" and es.top_decision:
        read.block = blockable
        read.unhonoured = not blockable
    if "additionalContext" in honoured and isinstance(_get(hso, "additionalContext"), str):
        read.context.append(hso["additionalContext"])
    for key in _PASSTHROUGH:
        if key in honoured and _get(hso, key) is not None:
            read.specific[key] = hso[key]
    bad = _check_specific(read.specific, es, inv)
    if bad is not None:
        return bad
    if (
        profile == "legacy"
        and es.name in EXIT2_IGNORES_HSO
        and read.specific.get("action") == "decline"
    ):
        read.block = blockable  # legacy: a declining hook also sets a blocking error (§3.4)
        read.reason = read.reason if read.reason is not None else "Elicitation declined by hook"
    if es.name not in _DISCARD_SYSTEM_MESSAGE:
        read.system_message = obj.get("systemMessage")
    if es.name not in _DISCARD_CONTINUE and not es.informational and obj.get("continue") is False:
        read.continue_ = False
        read.stop_reason = obj.get("stopReason")
    _read_terminal(obj, read)
    return read


def _read_pretool(
    hso: dict[str, Any] | None, top: str | None, read: ObjectRead, profile: Profile
) -> SchemaError | None:
    decision = {"approve": "allow", "block": "deny"}.get(top or "")
    reason = read.reason
    if hso is not None:
        pd = _get(hso, "permissionDecision")
        if pd is not None:
            if pd not in _PERMISSION_DECISIONS[profile]:
                allowed = ", ".join(sorted(_PERMISSION_DECISIONS[profile]))
                return SchemaError(
                    "schema",
                    f"JSON validation failed: hookSpecificOutput.permissionDecision: expected one of {allowed}, got {short(pd)}",
                )
            # The new form overrides the old one (§3.3), except that Claude Code 2.1.332
            # blocks on a top-level "block" whatever permissionDecision says (measured:
            # tests/conformance/claude_code pre.json.top_decision_beside_hso).
            if not (profile == "current" and top == "block"):
                decision = pd
        pdr = _get(hso, "permissionDecisionReason")
        if not (profile == "current" and top == "block"):
            reason = pdr if pdr is not None else reason
        read.updated_input = _get(hso, "updatedInput")
    read.decision = decision
    read.reason = reason
    if decision == "deny":
        read.block = True
        read.reason = reason if reason is not None else BLOCKED_BY_HOOK
    return None


def _read_permission_request(obj: dict[str, Any] | None, read: ObjectRead) -> SchemaError | None:
    if obj is None:
        return None
    where = "hookSpecificOutput.decision."
    behavior = _get(obj, "behavior")
    if behavior not in ("allow", "deny"):
        return SchemaError(
            "schema",
            f'JSON validation failed: {where}behavior: expected "allow" or "deny", got {short(behavior)}',
        )
    for key, types in (
        ("updatedInput", (dict,)),
        ("updatedPermissions", (list,)),
        ("message", (str,)),
        ("interrupt", (bool,)),
    ):
        bad = _type_error(where, key, _get(obj, key), types)
        if bad is not None:
            return bad
    read.decision = behavior
    read.specific["permission_request"] = obj
    if behavior == "allow":
        read.updated_input = _get(obj, "updatedInput")
    else:
        read.block = True
        read.reason = _get(obj, "message") or read.reason or PERMISSION_DENIED
    return None


def _check_specific(specific: dict[str, Any], es: EventSpec, inv: Invocation) -> SchemaError | None:
    paths = specific.get("watchPaths")
    if paths is not None and not all(isinstance(p, str) for p in paths):
        return SchemaError(
            "schema",
            "JSON validation failed: hookSpecificOutput.watchPaths: expected an array of strings",
        )
    action = specific.get("action")
    if action is not None and action not in _ELICIT_ACTIONS:
        return SchemaError(
            "schema",
            f'JSON validation failed: hookSpecificOutput.action: expected "accept", "decline" or "cancel", got {short(action)}',
        )
    if es.name == "SessionStart" and inv.payload.get("source") in ("clear", "compact"):
        specific.pop("sessionTitle", None)  # ignored on clear/compact (§3.4)
    return None


def _read_terminal(obj: dict[str, Any], read: ObjectRead) -> None:
    seq = _get(obj, "terminalSequence")
    if isinstance(seq, str) and _TERMINAL_SEQ.fullmatch(seq):
        read.specific["terminalSequence"] = seq


def short(value: Any) -> str:
    text = (
        json.dumps(value, ensure_ascii=False, default=repr)
        if not isinstance(value, dict | list)
        else _json_type(value)
    )
    return text if len(text) <= 80 else text[:77] + "..."


def cap(text: str) -> tuple[str, bool]:
    """Spec §3.1.5: a string over STRING_CAP characters becomes a marked preview."""
    if len(text) <= STRING_CAP:
        return text, False
    marker = f"\n[hookaudit: truncated {len(text)} characters to {STRING_CAP}]"
    return text[: STRING_CAP - len(marker)] + marker, True
