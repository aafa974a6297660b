"""The hook JSON output object: validate it, read what an event honours.

Spec §3.2 (universal fields), §3.3 (old and new decision forms), §3.4
(hookSpecificOutput details). `engine.hook_text` parses the text into an object;
`engine.decode` applies exit codes and hook types on top of this.

Rules of this file (those of `engine.verdict`):
- Pure, and never raises on hostile input: an object of the wrong shape is a
  `SchemaError` value.
- JSON ``null`` reads as "not given" for every optional field. Claude Code's schema
  would reject it and fail open; a gate should not open on a null.
- What an event reads comes from the catalog; what it discards of the universal
  fields is the `_DISCARD_*` tables below.

Example:
    >>> from engine.events import CATALOG
    >>> from engine.hook_verdict import example_invocation
    >>> inv = example_invocation("PreToolUse", {"tool_name": "Bash"})
    >>> read = read_object({"decision": "block", "reason": "r"}, CATALOG["PreToolUse"], inv,
    ...                    "current")
    >>> read.block, read.reason
    (True, 'r')
"""

from __future__ import annotations

import json
import re
from typing import Any

import msgspec

from engine.effects import Invocation
from engine.events import EventSpec
from engine.hook_text import cap
from engine.records import Profile

__all__ = [
    "BLOCKED_BY_HOOK",
    "EXIT2_IGNORES_HSO",
    "PERMISSION_DENIED",
    "ObjectRead",
    "Profile",
    "SchemaError",
    "can_block",
    "read_object",
    "short",
]


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
