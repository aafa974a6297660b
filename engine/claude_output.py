"""Express an aggregated Decision as ONE Claude Code hook: a command hook's output and an
http hook's body, from one function (`express`).

`hookaudit eval --format claude` and `hookaudit emit` print the command form, so that
hookaudit can stand in a settings file as a single hook: Claude Code reads its stdout,
stderr and exit code and reaches the decision hookaudit reached from many hooks.
`hookaudit serve` answers with the http form of the same expression: what the command
form says with exit code 2 or plain text, neither of which an http hook has, is said
with the JSON that blocks the event (`blocking_object`).

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
- An Outcome becomes a Decision by `msgspec.convert` (`decision_of`), never field by
  field: a field added to both cannot be forgotten on the way.
- Claude Code 2.1.332 shows some things only for some forms of answer
  (tests/conformance/claude_code): an exit-2 (or prompt hook) block on Stop, SubagentStop
  and PostToolUse(Failure) reaches the model worded apart from a JSON block, so the form of
  the blocker is kept; a PreToolUse hook whose answer it cannot read warns the user that it
  "gave no usable answer", so when nothing else is said that is `{"hookSpecificOutput":
  null}`; a failing Stop hook makes it notify "stop hook problem", so with nothing else to
  say that is exit 1; one hook's plain stdout stays plain stdout. `decision_of` reads these
  forms from the outcome's runs.

Example:
    >>> from engine.aggregate import Decision
    >>> render_claude("TeammateIdle", Decision(blocked=True, decision="deny", reason="keep going"))
    ('', 'keep going', 2)
"""

from __future__ import annotations

from typing import Any, NamedTuple

import msgspec

from engine.aggregate import NO_VERDICT_KINDS, Decision
from engine.events import CATALOG
from engine.failclosed import closed_reason
from engine.hook_json import PERMISSION_DENIED
from engine.records import Outcome, Profile

__all__ = [
    "BLOCKED",
    "Expression",
    "blocking_object",
    "closed_body",
    "decision_of",
    "express",
    "express_outcome",
    "render_claude",
]

BLOCKED = "Blocked by hook"


class Expression(NamedTuple):
    """One decision as one hook: a command hook's (stdout, stderr, exit code), and the
    body of an http hook's 200 answer (empty: no decision)."""

    stdout: str
    stderr: str
    exit_code: int
    body: bytes


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
_STOP_EVENTS = frozenset({"Stop", "SubagentStop"})
# Where Claude Code words an exit-2 block apart from a JSON one.
_EXIT_FORM = _STOP_EVENTS | {"PostToolUse", "PostToolUseFailure"}
_encode = msgspec.json.Encoder()


def decision_of(outcome: Outcome) -> Decision:
    """The Decision an Outcome records (`msgspec.convert`: the fields they share).

    >>> from engine.records import new_event
    >>> ev = new_event({"hook_event_name": "Stop", "session_id": "s"})
    >>> decision_of(Outcome(event=ev, settings_id="x", blocked=True, reason="r")).reason
    'r'
    """
    d = msgspec.convert(outcome, Decision, from_attributes=True)
    runs = outcome.runs
    blocker = next((r for r in runs if r.decision == "deny"), None) if outcome.blocked else None
    form = text = plain = None
    if blocker is not None:
        exit_like = blocker.exit_code == 2 or blocker.hook.type in ("prompt", "agent")
        form = "exit" if exit_like else "json"
        if blocker.exit_code == 2 and blocker.stderr.strip() == outcome.reason:
            text = blocker.stderr  # Claude Code shows a Stop hook's stderr untrimmed
    said = [r for r in runs if r.outcome != "noop" or r.stdout.strip()]
    if (
        len(said) == 1
        and said[0].output is None
        and said[0].exit_code == 0
        and list(outcome.additional_context) == [said[0].stdout.strip()]
    ):
        plain = said[0].stdout.strip()
    return msgspec.structs.replace(
        d,
        block_form=form,
        block_text=text,
        plain=plain,
        no_verdict=any(r.outcome == "error" and r.error_kind in NO_VERDICT_KINDS for r in runs),
        failed=any(r.outcome == "error" and r.error_kind == "nonzero_exit" for r in runs),
    )


def express_outcome(outcome: Outcome) -> Expression:
    """`express` for the decision an Outcome records, with its profile."""
    profile: Profile = "legacy" if outcome.profile == "legacy" else "current"
    return express(outcome.event.event, decision_of(outcome), profile=profile)


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
    out, err, code, _ = express(event, decision, profile=profile)
    return out, err, code


def express(event: str, decision: Decision, *, profile: Profile = "current") -> Expression:
    """`decision` as one command hook's output and as one http hook's body.

    >>> from engine.aggregate import Decision
    >>> express("Stop", Decision(blocked=True, reason="tests fail"))
    Expression(stdout='{"decision":"block","reason":"tests fail"}', stderr='', exit_code=0, body=b'{"decision":"block","reason":"tests fail"}')
    >>> express("TeammateIdle", Decision(blocked=True, reason="go on")).body
    b'{"continue":false,"stopReason":"go on"}'
    """
    es = CATALOG.get(event)
    notes = "\n".join(decision.errors)
    if es is None:
        return Expression("", notes, 0, b"")
    if event == "WorktreeCreate":
        if decision.blocked:  # an http hook fails creation by giving no path
            return Expression("", decision.reason or "WorktreeCreate failed", 1, b"")
        path = decision.specific.get("worktreePath")
        if not isinstance(path, str):
            return Expression("", notes, 0, b"")
        lines = [ln.strip() for ln in path.splitlines() if ln.strip()]
        body = b""
        if lines:
            where = {"hookEventName": event, "worktreePath": lines[-1]}
            body = _encode.encode({"hookSpecificOutput": where})
        return Expression(f"{path}\n", notes, 0, body)
    if profile == "legacy" and event == "PreCompact":
        text = decision.specific.get("customInstructions")
        text = text if isinstance(text, str) else ""
        body = b""
        if text.strip() and es.plain_stdout_context:
            ctx = {"hookEventName": event, "additionalContext": text.strip()}
            body = _encode.encode({"hookSpecificOutput": ctx})
        return Expression(text, notes, 0, body)

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
        # Claude Code 2.1.332 puts several PreToolUse contexts in one note, a line each
        # (multi.two_contexts); elsewhere one hook gives one context, so a blank line.
        sep = "\n" if event == "PreToolUse" and profile == "current" else "\n\n"
        hso["additionalContext"] = sep.join(decision.additional_context)
    for key in _SPECIFIC:
        if key in decision.specific and key in es.specific:
            if profile == "legacy" and key in _CURRENT_ONLY:
                continue
            hso[key] = decision.specific[key]

    current = profile == "current"
    only_plain = {"hookEventName": event, "additionalContext": decision.plain}
    if current and decision.plain is not None and not top and hso == only_plain:
        return Expression(decision.plain, notes, 0, _encode.encode({"hookSpecificOutput": hso}))
    if event == "PreToolUse":
        _pretool(decision, hso, profile)
        if current and decision.no_verdict and not top and len(hso) == 1:
            return Expression('{"hookSpecificOutput":null}', notes, 0, b"")
    elif event == "PermissionRequest":
        _permission_request(decision, hso)
    elif current and decision.blocked and event in _EXIT_FORM and decision.block_form == "exit":
        reason = decision.block_text or decision.reason or BLOCKED
        obj = _object(top, hso)
        return Expression(_text(obj), reason, 2, _exit2_body(event, obj, reason, profile))
    elif (
        current
        and decision.failed
        and not decision.blocked
        and event in _STOP_EVENTS
        and not top
        and len(hso) == 1
    ):
        return Expression("", notes, 1, b"")
    elif decision.blocked and event in _EXIT2_BLOCK:
        reason = decision.reason or BLOCKED
        if profile == "legacy":
            return Expression("", reason, 2, _exit2_body(event, None, reason, profile))
        if event in _HSO_IGNORED_ON_EXIT2:
            hso = {"hookEventName": event}
        obj = _object(top, hso)
        return Expression(_text(obj), reason, 2, _exit2_body(event, obj, reason, profile))
    elif decision.blocked and es.top_decision:
        top["decision"] = "block"
        if decision.reason is not None:
            top["reason"] = decision.reason
    obj = _object(top, hso)
    text = _text(obj)
    return Expression(text, notes, 0, text.encode())


def closed_body(event: str, reason: str, profile: str = "current") -> bytes:
    """The http form of a hook that fails closed: the event's blocking JSON with
    `engine.failclosed.closed_reason`'s wording (b"" where an http hook cannot block); the
    command form is `engine.failclosed.closed_answer`.

    >>> closed_body("Stop", "timed out")
    b'{"decision":"block","reason":"hookaudit: timed out; blocked because the hook fails closed"}'
    """
    obj = blocking_object(event, closed_reason(reason), profile)
    return b"" if obj is None else _encode.encode(obj)


def blocking_object(event: str, reason: str, profile: str = "current") -> dict[str, Any] | None:
    """The JSON with which an http hook blocks `event`, or None when it cannot block it.

    >>> blocking_object("UserPromptSubmit", "no secrets")
    {'decision': 'block', 'reason': 'no secrets'}
    >>> blocking_object("Notification", "x") is None
    True
    """
    if event == "PreToolUse":
        return {
            "hookSpecificOutput": {
                "hookEventName": event,
                "permissionDecision": "deny",
                "permissionDecisionReason": reason,
            }
        }
    if event == "PermissionRequest":
        return {
            "hookSpecificOutput": {
                "hookEventName": event,
                "decision": {"behavior": "deny", "message": reason},
            }
        }
    es = CATALOG.get(event)
    if es is None or es.informational or es.exit2_for(profile) not in ("block", "feedback", "fail"):
        return None
    if event in ("Elicitation", "ElicitationResult"):
        return {"hookSpecificOutput": {"hookEventName": event, "action": "decline"}}
    if es.top_decision:
        return {"decision": "block", "reason": reason}
    return {"continue": False, "stopReason": reason}


def _blocks(obj: dict[str, Any]) -> bool:
    """True when the object already makes a blocking decision of its own."""
    hso = obj.get("hookSpecificOutput")
    hso = hso if isinstance(hso, dict) else {}
    decision = hso.get("decision")
    return (
        obj.get("decision") == "block"
        or obj.get("continue") is False
        or hso.get("permissionDecision") == "deny"
        or (isinstance(decision, dict) and decision.get("behavior") == "deny")
        or hso.get("action") in ("decline", "cancel")
    )


def _exit2_body(event: str, obj: dict[str, Any] | None, reason: str, profile: str) -> bytes:
    """The http body saying what (stdout `obj`, exit 2, stderr `reason`) says."""
    es = CATALOG.get(event)
    effect = es.exit2_for(profile) if es is not None else "ignored"
    reason = reason.strip() or BLOCKED
    if es is None or es.informational or effect == "ignored":
        return _encode.encode(obj) if obj else b""
    out = dict(obj or {})
    if effect == "user":  # exit 2 only shows stderr to the user: systemMessage does that
        out.setdefault("systemMessage", reason)
        return _encode.encode(out)
    block = blocking_object(event, reason, profile)
    if block is None or _blocks(out):
        return _encode.encode(out) if out else b""
    if out.get("decision") == "approve":
        del out["decision"]
    hso = out.get("hookSpecificOutput")
    for key, value in block.items():
        if key == "hookSpecificOutput" and isinstance(hso, dict):
            merged = {**hso, **value}
            merged.pop("updatedInput", None)  # exit 2 wins over allow; nothing to rewrite
            out[key] = merged
        else:
            out[key] = value
    return _encode.encode(out)


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


def _object(top: dict[str, Any], hso: dict[str, Any]) -> dict[str, Any]:
    obj = dict(top)
    if len(hso) > 1:
        obj["hookSpecificOutput"] = hso
    return obj


def _text(obj: dict[str, Any]) -> str:
    return _encode.encode(obj).decode() if obj else ""
