"""Express an aggregated Decision as what ONE Claude Code command hook would print.

`hookaudit eval --format claude` uses this so that hookaudit can stand in a
settings file as a single hook: Claude Code reads its stdout, stderr and exit code
and reaches the decision hookaudit reached from many hooks.

Rules of this file:
- Pure: a Decision in, ``(stdout, stderr, exit_code)`` out.
- Prefer exit 0 with one JSON object on stdout that carries everything: the
  hookSpecificOutput of the event, ``decision``/``reason`` on events that read a
  top-level decision, ``continue``/``stopReason``, ``systemMessage``.
- Events that honour no JSON block but do block on exit 2 (TeammateIdle,
  TaskCompleted, Elicitation, ElicitationResult; PreCompact too, whose JSON carries
  nothing else) block with exit 2 and the reason on stderr. Under ``current`` the
  JSON is still printed, since Claude Code reads it on exit 2; under ``legacy`` valid
  JSON would cancel the exit code, so stdout stays empty.
- WorktreeCreate prints the path, or exits 1 with the reason on stderr. A Decision
  from no hooks at all cannot be expressed there: any WorktreeCreate hook replaces
  git's default, so an empty answer fails creation.
- What cannot be expressed (non-blocking errors, warnings) goes to stderr on exit 0,
  which Claude Code sends to its debug log. Several contexts are joined with a blank
  line, since one hook gives one of each; several system messages with a newline, since
  Claude Code shows each line of one as its own "says:" line (a blank line would show an
  empty one).
- Round trip: decoding the output as one command hook and aggregating gives back the
  same blocked, decision, reason, updated input, context and continue.

Example:
    >>> from engine.aggregate import Decision
    >>> render_claude("TeammateIdle", Decision(blocked=True, decision="deny", reason="keep going"))
    ('', 'keep going', 2)
"""

from __future__ import annotations

from typing import Any

import msgspec

from engine.aggregate import Decision
from engine.decode import Profile
from engine.events import CATALOG
from engine.hook_json import PERMISSION_DENIED

__all__ = ["render_claude"]

# Blocking on these is exit 2 (no JSON decision honoured, or none worth printing).
_EXIT2_BLOCK = frozenset(
    {"TeammateIdle", "TaskCompleted", "Elicitation", "ElicitationResult", "PreCompact"}
)
_HSO_IGNORED_ON_EXIT2 = frozenset({"Elicitation", "ElicitationResult"})
_SPECIFIC = (
    "sessionTitle",
    "suppressOriginalPrompt",
    "initialUserMessage",
    "watchPaths",
    "reloadSkills",
    "retry",
    "action",
    "content",
    "updatedToolOutput",
    "updatedMCPToolOutput",
    "classifierContext",
    "displayContent",
)
_CURRENT_ONLY = frozenset({"updatedToolOutput", "classifierContext"})
_encode = msgspec.json.Encoder()


def render_claude(
    event: str, decision: Decision, *, profile: Profile = "current"
) -> tuple[str, str, int]:
    """The (stdout, stderr, exit_code) of one command hook expressing `decision`.

    >>> from engine.aggregate import Decision
    >>> out, err, code = render_claude(
    ...     "PreToolUse", Decision(blocked=True, decision="deny", reason="no rm")
    ... )
    >>> out, code
    ('{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"no rm"}}', 0)
    """
    es = CATALOG.get(event)
    notes = "\n".join(decision.errors)
    if es is None:
        return "", notes, 0
    if event == "WorktreeCreate":
        if decision.blocked:
            return "", decision.reason or "WorktreeCreate failed", 1
        path = decision.specific.get("worktreePath")
        return (f"{path}\n" if isinstance(path, str) else ""), notes, 0
    if profile == "legacy" and event == "PreCompact":
        text = decision.specific.get("customInstructions")
        return (text if isinstance(text, str) else ""), notes, 0

    top: dict[str, Any] = {}
    hso: dict[str, Any] = {"hookEventName": event}
    if not decision.continue_:
        top["continue"] = False
        if decision.stop_reason is not None:
            top["stopReason"] = decision.stop_reason
    if decision.system_messages:
        top["systemMessage"] = "\n".join(decision.system_messages)
    sequence = decision.specific.get("terminalSequence")
    if isinstance(sequence, str):
        top["terminalSequence"] = sequence
    if decision.additional_context and "additionalContext" in es.specific:
        hso["additionalContext"] = "\n\n".join(decision.additional_context)
    for key in _SPECIFIC:
        if key in decision.specific and key in es.specific:
            if profile == "legacy" and key in _CURRENT_ONLY:
                continue
            hso[key] = decision.specific[key]

    if event == "PreToolUse":
        _pretool(decision, hso, profile)
    elif event == "PermissionRequest":
        _permission_request(decision, hso)
    elif decision.blocked and event in _EXIT2_BLOCK:
        reason = decision.reason or "Blocked by hook"
        if profile == "legacy":
            return "", reason, 2
        if event in _HSO_IGNORED_ON_EXIT2:
            hso = {"hookEventName": event}
        return _json(top, hso), reason, 2
    elif decision.blocked and es.top_decision:
        top["decision"] = "block"
        if decision.reason is not None:
            top["reason"] = decision.reason
    return _json(top, hso), notes, 0


def _pretool(decision: Decision, hso: dict[str, Any], profile: Profile) -> None:
    verdict = "deny" if decision.blocked else decision.decision
    if verdict == "defer" and profile == "legacy":
        verdict = None  # legacy has no defer; saying nothing keeps the normal flow
    if verdict is not None:
        hso["permissionDecision"] = verdict
        if decision.reason is not None:
            hso["permissionDecisionReason"] = decision.reason
    if decision.updated_input is not None and verdict not in ("deny", "defer"):
        hso["updatedInput"] = decision.updated_input


def _permission_request(decision: Decision, hso: dict[str, Any]) -> None:
    if decision.decision not in ("allow", "deny"):
        return
    base = decision.specific.get("permission_request")
    obj: dict[str, Any] = dict(base) if isinstance(base, dict) else {}
    obj["behavior"] = decision.decision
    if decision.decision == "allow":
        for key in ("message", "interrupt"):
            obj.pop(key, None)
        if decision.updated_input is not None:
            obj["updatedInput"] = decision.updated_input
        else:
            obj.pop("updatedInput", None)
    else:
        for key in ("updatedInput", "updatedPermissions"):
            obj.pop(key, None)
        if decision.reason is not None and (
            "message" in obj or decision.reason != PERMISSION_DENIED
        ):
            obj["message"] = decision.reason
    hso["decision"] = obj


def _json(top: dict[str, Any], hso: dict[str, Any]) -> str:
    obj = dict(top)
    if len(hso) > 1:
        obj["hookSpecificOutput"] = hso
    return _encode.encode(obj).decode() if obj else ""
