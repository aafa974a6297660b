"""Prompt and agent hooks' answers (spec §6.6): the model's ``{ok, reason?, impossible?}``.

Rules of this file (those of `engine.verdict`): pure; an answer that is not a JSON object
or whose ``ok`` is not a boolean is a ``bad_verdict`` error, unless it is one of
agent-core's scoped block directives; what ``ok:false`` does depends on the event
(`_OK_FALSE`) and the profile.

Example:
    >>> from engine.effects import RawResult
    >>> from engine.events import CATALOG
    >>> from engine.hook_verdict import example_invocation
    >>> inv = example_invocation("Stop", {}, type="prompt")
    >>> v = decode_llm(inv, RawResult(stdout='{"ok": false, "reason": "tests fail"}'),
    ...                CATALOG["Stop"], "current")
    >>> v.outcome, v.blocking, v.message
    ('deny', True, 'tests fail')
"""

from __future__ import annotations

from typing import Any

from engine.effects import Invocation, RawResult
from engine.events import EventSpec
from engine.hook_json import BLOCKED_BY_HOOK, Profile, can_block, short
from engine.hook_text import Obj, read_text
from engine.hook_verdict import HookVerdict, build_verdict, error_verdict

__all__ = ["decode_llm"]


def _block_directive(obj: dict[str, Any], event: str) -> bool:
    """agent-core's scoped block directives, read when `ok` is not a boolean (§7)."""
    if obj.get("continue") is False:
        return True
    if event == "UserPromptSubmit" and obj.get("decision") == "block":
        return True
    hso = obj.get("hookSpecificOutput")
    return (
        event == "PreToolUse" and isinstance(hso, dict) and hso.get("permissionDecision") == "deny"
    )


def _directive_reason(obj: dict[str, Any]) -> str | None:
    hso = obj.get("hookSpecificOutput")
    for value in (
        hso.get("permissionDecisionReason") if isinstance(hso, dict) else None,
        obj.get("reason"),
        obj.get("stopReason"),
    ):
        if isinstance(value, str):
            return value
    return None


def decode_llm(inv: Invocation, raw: RawResult, es: EventSpec, profile: Profile) -> HookVerdict:
    """Prompt and agent hooks (§6.6): the model's answer is ``{ok, reason?, impossible?}``."""
    read = read_text(raw.stdout)
    if not isinstance(read, Obj):
        return error_verdict(
            "bad_verdict", "hook model did not answer with a JSON object {ok, reason}"
        )
    obj = read.obj
    ok = obj.get("ok")
    reason_value = obj.get("reason")
    reason = reason_value if isinstance(reason_value, str) else None
    if ok is True:
        return build_verdict("allow", reason=reason, output=obj)
    if ok is not False:
        if not _block_directive(obj, es.name):
            return error_verdict(
                "bad_verdict",
                f"hook verdict 'ok' must be true or false, got {short(ok)}",
                output=obj,
            )
        reason = _directive_reason(obj)
    return _ok_false(inv, es, profile, obj, reason)


# Current effect of ok:false per event (§6.6): (blocks, ends the turn, continueOnBlock applies).
_OK_FALSE: dict[str, tuple[bool, bool, bool]] = {
    "Stop": (True, False, False),
    "SubagentStop": (True, False, False),
    "PreToolUse": (True, True, True),
    "PostToolUse": (True, True, True),
    "TeammateIdle": (True, True, True),
    "PostToolBatch": (True, True, False),
    "UserPromptSubmit": (True, True, False),
    "UserPromptExpansion": (True, True, False),
    "PostToolUseFailure": (True, False, False),
    "TaskCreated": (True, False, False),
    "PermissionRequest": (False, False, False),
    "PermissionDenied": (False, False, False),
}


def _ok_false(
    inv: Invocation, es: EventSpec, profile: Profile, obj: dict[str, Any], reason: str | None
) -> HookVerdict:
    kind = inv.identity.type
    blockable = can_block(es, profile, inv.payload)
    specific: dict[str, Any] = {}
    if profile == "legacy":
        label = "Prompt" if kind == "prompt" else "Agent"
        message = f"{label} hook condition was not met: {reason or ''}".rstrip()
        blocks, ends = blockable, kind == "prompt"
    else:
        if kind == "agent":
            # Claude Code 2.1.332 keeps the old wording for agent hooks and prints a missing
            # reason as JS does (tests/conformance/claude_code type.agent_deny).
            said = reason if reason is not None else "undefined"
            message = f"Agent hook condition was not met: {said}"
        else:
            message = reason or BLOCKED_BY_HOOK
        blocks, ends, cob_applies = _OK_FALSE.get(es.name, (blockable, False, False))
        cob = kind == "agent" or getattr(inv.hook, "continueOnBlock", False) is True
        if cob_applies and cob:
            ends = False
        if (
            es.name in ("Stop", "SubagentStop")
            and kind == "prompt"
            and obj.get("impossible") is True
        ):
            blocks = False  # the condition cannot be met: let the turn end
            specific["impossible"] = True
        blocks = blocks and blockable
    if obj.get("continue") is False:
        ends = True
    return build_verdict(
        "deny",
        blocking=blocks,
        message=message,
        permission_decision="deny" if es.name == "PreToolUse" and blocks else None,
        reason=message if blocks else reason,
        continue_=not ends,
        stop_reason=message if ends else None,
        specific=specific,
        output=obj,
        block_form="exit",
    )
