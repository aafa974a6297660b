"""Combine every hook's verdict for one event into one Decision: spec §3.6, §7.

Rules of this file (those of `engine.verdict`, which re-exports it):
- Pure: a function of (event, payload, verdicts, posture, profile); no I/O, no clock.
- Order-free: results may arrive in any order (hooks run in parallel). They are sorted
  by configuration order (`Invocation.index`) first, and every tie is broken by it,
  never by completion order. Claude Code's own races (the last `updatedInput` to
  finish, the first PermissionRequest decision to finish) are replaced by fixed rules.
- Never drops a signal silently: a rewrite of the tool input or tool output that
  loses to another is named in `errors`, like a non-blocking hook error.
- Posture only changes PreToolUse: `enforcing` denies when a hook reached no verdict.

Example:
    >>> from engine.hook_verdict import HookVerdict, example_invocation
    >>> a = example_invocation("PreToolUse", {"tool_name": "Bash"})
    >>> d = aggregate("PreToolUse", a.payload, [(a, HookVerdict("allow", permission_decision="allow"))])
    >>> d.blocked, d.decision
    (False, 'allow')
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from engine.effects import Invocation
from engine.hook_json import BLOCKED_BY_HOOK, Profile
from engine.hook_verdict import HookVerdict, hook_label
from engine.records import Posture

__all__ = ["NO_VERDICT_KINDS", "RULES", "Decision", "aggregate"]

_RANK: dict[str, dict[str, int]] = {
    "current": {"deny": 4, "defer": 3, "ask": 2, "allow": 1},
    "legacy": {"deny": 3, "ask": 2, "allow": 1},
}
_LAST_WINS = (
    "sessionTitle",
    "displayContent",
    "initialUserMessage",
    "terminalSequence",
    "updatedToolOutput",
    "updatedMCPToolOutput",
)
_ANY_TRUE = ("retry", "reloadSkills", "suppressOriginalPrompt", "impossible")
_JOINED = ("classifierContext", "customInstructions")
_WARN_ON_SEVERAL = ("updatedToolOutput", "updatedMCPToolOutput")
_ACTION_RANK = {"decline": 3, "cancel": 2, "accept": 1}

Result = tuple[Invocation, HookVerdict]


class Decision(msgspec.Struct, frozen=True, gc=False):
    """The engine's answer for one event, before settings rules and session state.

    ``decision``: PreToolUse, the winning permission decision (None when no hook
    decided); PermissionRequest, the winning behavior; other events, "deny" when
    blocked. ``specific`` merges the event-specific outputs (see `aggregate`).

    A msgspec Struct (not a dataclass) that the garbage collector does not track: one
    is built for every hook answer that says something, and a Struct is built and
    freed several times faster.
    """

    blocked: bool = False
    decision: str | None = None
    reason: str | None = None
    updated_input: dict[str, Any] | None = None
    additional_context: list[str] = msgspec.field(default_factory=list)
    system_messages: list[str] = msgspec.field(default_factory=list)
    continue_: bool = True
    stop_reason: str | None = None
    specific: dict[str, Any] = msgspec.field(default_factory=dict)
    errors: list[str] = msgspec.field(default_factory=list)
    #: The deliberate rules (`RULES`) that fixed this decision where Claude Code races or
    #: is laxer; recorded in the Outcome.
    rules: list[str] = msgspec.field(default_factory=list)
    #: How the blocker whose reason is kept blocked: "exit" (exit 2, a prompt or agent hook's
    #: ok:false) or "json"; Claude Code words the two differently on Stop.
    block_form: str | None = None
    #: The exact text of that blocker when it blocked by exit 2 (Claude Code shows a Stop
    #: hook's stderr untrimmed); set from the recorded runs (`claude_output.decision_of`).
    block_text: str | None = None
    #: The decision is one hook's plain stdout, read as context (UserPromptSubmit,
    #: SessionStart): Claude Code labels it "hook success", not "additional context".
    plain: str | None = None
    #: A hook's answer Claude Code could not read (schema, wrong hookEventName, null): it
    #: warns the user that the hook "gave no usable answer" (PreToolUse).
    no_verdict: bool = False
    #: A hook failed with a non-blocking exit code: Claude Code notifies "stop hook
    #: problem" on Stop and SubagentStop.
    failed: bool = False


#: The rules hookaudit applies where Claude Code 2.1.332 takes whichever hook finishes
#: first or last (README "Deviations from Claude Code"); an Outcome lists those that decided it.
RULES = {
    "first-deny-in-config-order": "several hooks denied: the reason of the first in "
    "configuration order (Claude Code: the last to finish)",
    "last-rewrite-in-config-order": "several hooks rewrote the input: the last in "
    "configuration order (Claude Code: the last to finish)",
    "deny-wins-permission-request": "PermissionRequest allow and deny: deny wins (Claude "
    "Code: the first to finish)",
    "first-block-in-config-order": "several hooks blocked: the reason of the first in "
    "configuration order (Claude Code gives each hook's reason)",
    "contexts-in-config-order": "several hooks gave context: in configuration order (Claude "
    "Code: in the order they finished)",
    "null-read-as-absent": "a hook answer held a JSON null: read as not given and the rest "
    "kept (Claude Code discards the whole answer)",
    "managed-http-url-ceiling": "an http hook's URL another scope allowed was refused: the "
    "managed allowedHttpHookUrls is a ceiling (Claude Code: a union of every scope)",
    "managed-http-env-ceiling": "a header variable another scope allowed was left empty: the "
    "managed httpHookAllowedEnvVars is a ceiling (Claude Code: a union of every scope)",
}
#: Hook failures after which Claude Code 2.1.332 warns that a PreToolUse hook "gave no usable
#: answer" (measured: pre.json.bogus_decision, pre.json.null_hso, http.non_2xx,
#: http.bad_json, http.url_not_allowed); an exit code 1 and a timeout are not among them.
NO_VERDICT_KINDS = frozenset(
    {"schema", "wrong_event_name", "http_status", "http_body", "url_not_allowed"}
)


def _who(inv: Invocation) -> str:
    return f"{inv.identity.type} hook '{hook_label(inv.identity)}'"


def _ref(inv: Invocation) -> str:
    return f"#{inv.index} ({_who(inv)})"


def _no_verdict(v: HookVerdict) -> bool:
    """A hook that reached no verdict: an error, or a cancelled agent (§7: never approval)."""
    return not v.pending and (v.outcome == "error" or v.error_kind == "cancelled")


def aggregate(
    event: str,
    payload: Mapping[str, Any],
    results: Sequence[tuple[Invocation, HookVerdict]],
    *,
    posture: Posture = "compat",
    profile: Profile = "current",
) -> Decision:
    """Combine the verdicts of every hook that ran for one event (§3.6).

    PreToolUse: deny > defer > ask > allow (legacy deny > ask > allow); `updatedInput`
    comes from the last hook in config order whose decision is the winning one (or
    that gave none, when allow or nothing wins), and is dropped with deny and defer.
    PermissionRequest: deny wins over allow. Other events: blocked when any hook's
    block is honoured; the reason is the first blocker's, in config order. Context
    and system messages are all kept, in config order; any ``continue:false`` stops.
    Specific outputs: last wins for sessionTitle and the like, any-true for retry,
    the union for watchPaths, the most restrictive Elicitation action.

    Example (case 16: one hook allows, another exits 2):
        >>> from engine.hook_verdict import HookVerdict, example_invocation
        >>> a = example_invocation("PreToolUse", {"tool_name": "Bash"})
        >>> b = Invocation(**{**{s: getattr(a, s) for s in a.__slots__}, "index": 1})
        >>> d = aggregate("PreToolUse", a.payload, [
        ...     (b, HookVerdict("deny", blocking=True, permission_decision="deny", message="no")),
        ...     (a, HookVerdict("allow", permission_decision="allow")),
        ... ])
        >>> d.blocked, d.decision, d.reason
        (True, 'deny', 'no')
    """
    ordered = sorted(results, key=lambda r: (r[0].index, r[0].identity_key()))
    errors: list[str] = []
    context: list[str] = []
    system_messages: list[str] = []
    for inv, v in ordered:
        context.extend(v.additional_context)
        if v.system_message is not None:
            system_messages.append(v.system_message)
        if v.outcome == "error" and v.message is not None:
            errors.append(f"{inv.name} hook error in {_who(inv)}: {v.message}")
    stoppers = [v for _, v in ordered if not v.continue_]
    stop_reason = next((v.stop_reason for v in stoppers if v.stop_reason is not None), None)
    specific = _merge_specific(event, ordered, errors)

    updated: dict[str, Any] | None = None
    if event == "PreToolUse":
        blocked, decision, reason, updated = _pretool(ordered, profile, errors)
    elif event == "PermissionRequest":
        blocked, decision, reason, updated = _permission_request(ordered, specific, errors)
    else:
        blockers = [v for _, v in ordered if v.blocking]
        if event == "ConfigChange" and payload.get("source") == "policy_settings":
            blockers = []  # policy changes always apply (§1)
        blocked = bool(blockers)
        reason = blockers[0].message if blockers else None
        if event == "WorktreeCreate":
            ran = [v for _, v in ordered if not v.pending]
            if not blocked and ran and "worktreePath" not in specific:
                blocked, reason = True, "WorktreeCreate: no hook returned a worktree path"
            if blocked:
                specific.pop("worktreePath", None)  # any failure fails creation (§1)
        if blocked and event in ("Elicitation", "ElicitationResult"):
            specific["action"] = "decline"
            specific.pop("content", None)
        decision = "deny" if blocked else None

    if posture == "enforcing" and event == "PreToolUse":
        blocked, decision, reason, updated = _enforce(ordered, blocked, decision, reason, updated)

    rules = _rules(event, ordered)
    blocker = next((v for _, v in ordered if v.blocking), None)
    return Decision(  # positionally, in field order: several times faster than keywords
        blocked,
        decision,
        reason if reason is not None or not blocked else BLOCKED_BY_HOOK,
        updated,
        context,
        system_messages,
        not stoppers,
        stop_reason,
        specific,
        errors,
        rules,
        blocker.block_form if blocker is not None and blocked else None,
        None,  # block_text: set from the recorded runs, not here
        None,  # plain
        any(v.outcome == "error" and v.error_kind in NO_VERDICT_KINDS for _, v in ordered),
        any(v.outcome == "error" and v.error_kind == "nonzero_exit" for _, v in ordered),
    )


def _rules(event: str, ordered: list[Result]) -> list[str]:
    """Which of `RULES` decided this event: where several hooks compete, or where a null in
    an answer was read as not given."""
    if len(ordered) < 2:  # one hook competes with no other
        return ["null-read-as-absent"] if ordered and ordered[0][1].nulls else []
    out: list[str] = []
    if event == "PreToolUse":
        if sum(v.permission_decision == "deny" for _, v in ordered) > 1:
            out.append("first-deny-in-config-order")
    elif event == "PermissionRequest":
        kinds = {v.permission_decision for _, v in ordered}
        if {"allow", "deny"} <= kinds:
            out.append("deny-wins-permission-request")
    elif sum(v.blocking for _, v in ordered) > 1:
        out.append("first-block-in-config-order")
    if sum(v.updated_input is not None for _, v in ordered) > 1:
        out.append("last-rewrite-in-config-order")
    if sum(bool(v.additional_context) for _, v in ordered) > 1:
        out.append("contexts-in-config-order")
    if any(v.nulls for _, v in ordered):
        out.append("null-read-as-absent")
    return out


def _pretool(
    ordered: list[Result], profile: Profile, errors: list[str]
) -> tuple[bool, str | None, str | None, dict[str, Any] | None]:
    rank = _RANK[profile]
    decided = [(inv, v) for inv, v in ordered if v.permission_decision in rank]
    winner = max(
        (v.permission_decision or "" for _, v in decided), key=rank.__getitem__, default=None
    )
    reason: str | None = None
    if winner is not None:
        # Claude Code 2.1.332 tells the model the reason of the winning hook that finished
        # last, a race (tests/conformance/claude_code multi.two_denies*); hookaudit takes the
        # first in configuration order, deterministically.
        first = next(v for _, v in decided if v.permission_decision == winner)
        reason = first.message if winner == "deny" else first.reason
    if winner in (None, "allow"):
        candidates = [r for r in ordered if r[1].permission_decision in (winner, None)]
    elif winner == "ask":
        candidates = [r for r in ordered if r[1].permission_decision == "ask"]
    else:
        candidates = []  # deny and defer ignore updatedInput (§3.4)
    updated = _pick_rewrite("updatedInput", ordered, candidates, winner, errors)
    return winner == "deny", winner, reason, updated


def _pick_rewrite(
    name: str,
    ordered: list[Result],
    candidates: list[Result],
    winner: str | None,
    errors: list[str],
) -> dict[str, Any] | None:
    """Last candidate in config order wins; a dropped rewrite is reported (§9)."""
    rewriters = [(inv, v) for inv, v in ordered if v.updated_input is not None]
    chosen = next((r for r in reversed(candidates) if r[1].updated_input is not None), None)
    dropped = [inv for inv, v in rewriters if chosen is None or inv is not chosen[0]]
    if dropped and winner != "deny":
        kept = f"kept the rewrite of hook {_ref(chosen[0])}" if chosen else "kept none"
        why = f" ({winner} wins)" if chosen is None and winner else ""
        lost = ", ".join(_ref(inv) for inv in dropped)
        errors.append(
            f"{name}: {len(rewriters)} hook(s) rewrote the input; {kept}{why}; dropped {lost}"
        )
    return chosen[1].updated_input if chosen else None


def _permission_request(
    ordered: list[Result], specific: dict[str, Any], errors: list[str]
) -> tuple[bool, str | None, str | None, dict[str, Any] | None]:
    # Deny wins, whoever finished first (§3.6 analysis; Claude Code races here).
    denies = [(inv, v) for inv, v in ordered if v.permission_decision == "deny"]
    allows = [(inv, v) for inv, v in ordered if v.permission_decision == "allow"]
    if denies:
        first = denies[0][1]
        obj = dict(first.specific.get("permission_request") or {"behavior": "deny"})
        if any(
            v.specific.get("permission_request", {}).get("interrupt") is True for _, v in denies
        ):
            obj["interrupt"] = True
        specific["permission_request"] = obj
        return True, "deny", first.message, None
    if allows:
        updated = _pick_rewrite("updatedInput", ordered, allows, "allow", errors)
        source = next((v for _, v in reversed(allows) if v.updated_input is not None), allows[0][1])
        specific["permission_request"] = dict(
            source.specific.get("permission_request") or {"behavior": "allow"}
        )
        return False, "allow", None, updated
    return False, None, None, None


def _enforce(
    ordered: list[Result],
    blocked: bool,
    decision: str | None,
    reason: str | None,
    updated: dict[str, Any] | None,
) -> tuple[bool, str | None, str | None, dict[str, Any] | None]:
    """agent-core's fail-closed PreToolUse (§7, case 51): no verdict is never approval."""
    for inv, v in ordered:
        if v.blocking:
            return True, "deny", v.message or BLOCKED_BY_HOOK, None
        if _no_verdict(v):
            kind = v.error_kind or "error"
            why = f"hook error ({kind}) in {_who(inv)} — denied by enforcing posture"
            return True, "deny", why, None
        if not v.continue_:
            why = v.stop_reason or f"continue:false from {_who(inv)} — denied by enforcing posture"
            return True, "deny", why, None
    return blocked, decision, reason, updated


def _merge_specific(event: str, ordered: list[Result], errors: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if not any(v.specific for _, v in ordered):
        return out
    for key in _LAST_WINS:
        givers = [(inv, v) for inv, v in ordered if key in v.specific]
        if givers:
            out[key] = givers[-1][1].specific[key]
        if key in _WARN_ON_SEVERAL and len(givers) > 1:
            lost = ", ".join(_ref(inv) for inv, _ in givers[:-1])
            errors.append(f"{key}: kept hook {_ref(givers[-1][0])}; dropped {lost}")
    for key in _ANY_TRUE:
        if any(v.specific.get(key) is True for _, v in ordered):
            out[key] = True
    for key in _JOINED:
        parts = [v.specific[key] for _, v in ordered if isinstance(v.specific.get(key), str)]
        if parts:
            out[key] = "\n\n".join(parts)
    paths = [v.specific["watchPaths"] for _, v in ordered if "watchPaths" in v.specific]
    if paths:
        # Each answer replaces the dynamic list in Claude Code, so the last to finish
        # wins; the union is the deterministic superset (watching more is harmless).
        out["watchPaths"] = list(dict.fromkeys(p for group in paths for p in group))
    rewake = [v.specific["rewake"] for _, v in ordered if "rewake" in v.specific]
    if rewake:
        out["rewake"] = rewake
    capped = sorted({name for _, v in ordered for name in v.specific.get("capped", ())})
    if capped:
        out["capped"] = capped
    worktree = next(
        (
            v.specific["worktreePath"]
            for _, v in ordered
            if "worktreePath" in v.specific and not v.blocking
        ),
        None,
    )
    if worktree is not None:
        out["worktreePath"] = worktree  # the first in config order, as legacy's first success
    actions = [v for _, v in ordered if v.specific.get("action") in _ACTION_RANK]
    if actions:
        action = max((v.specific["action"] for v in actions), key=_ACTION_RANK.__getitem__)
        out["action"] = action
        content = [
            v.specific["content"]
            for v in actions
            if v.specific["action"] == "accept" and "content" in v.specific
        ]
        if action == "accept" and content:
            out["content"] = content[-1]
    return out
