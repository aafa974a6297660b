"""The verdict record: how the engine read one hook's answer, and how a verdict is built.

Rules of this file (those of `engine.verdict`):
- Pure, and the one place a HookVerdict is built: `build_verdict` caps every string a
  hook hands to the agent at STRING_CAP characters and names a capped field in
  ``specific["capped"]``; `from_read` turns what a hook said (`engine.hook_json`'s
  ObjectRead) into a verdict. The decoders per hook type (`engine.decode`,
  `engine.decode_llm`) only choose which to call.
- `to_hook_run` is the HookRun record of one hook: raw observations plus the verdict.

Example:
    >>> v = build_verdict("deny", blocking=True, message="no rm", block_form="exit")
    >>> v.outcome, v.blocking, v.block_form
    ('deny', True, 'exit')
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from engine.effects import Invocation, RawResult
from engine.events import EventSpec
from engine.hook_json import BLOCKED_BY_HOOK, ObjectRead
from engine.hook_text import cap, fix_str
from engine.records import HookIdentity, HookRun

__all__ = [
    "NOOP",
    "NO_STDERR",
    "HookVerdict",
    "VerdictOutcome",
    "build_verdict",
    "error_verdict",
    "example_invocation",
    "first_line",
    "from_read",
    "hook_label",
    "to_hook_run",
]

VerdictOutcome = Literal["allow", "deny", "error", "noop"]

NO_STDERR = "No stderr output"


class HookVerdict(msgspec.Struct, frozen=True, gc=False):
    """How the engine read one hook's answer.

    ``outcome``: allow (an allow/approve decision, ``ok:true``, an accepted
    elicitation), deny (exit 2, deny, block, ``ok:false``, ``continue:false``,
    whether or not the event honours it), error (a non-blocking error, or no answer),
    noop (success with no decision). ``blocking`` says whether this event honours
    the block. ``specific`` holds the event-specific outputs the event honours, under
    their hookSpecificOutput names, plus ``permission_request`` (the PermissionRequest
    decision object), ``terminalSequence`` (allowlisted only), ``capped``,
    ``async``/``rewake`` (§6.4), ``impossible`` and legacy ``customInstructions``.

    A msgspec Struct (not a dataclass) that the garbage collector does not track: one
    is built for every hook answer that says something, and a Struct is built and
    freed several times faster.
    """

    outcome: VerdictOutcome
    blocking: bool = False
    message: str | None = None
    permission_decision: str | None = None
    reason: str | None = None
    updated_input: dict[str, Any] | None = None
    additional_context: tuple[str, ...] = ()
    system_message: str | None = None
    continue_: bool = True
    stop_reason: str | None = None
    specific: dict[str, Any] = msgspec.field(default_factory=dict)
    output: dict[str, Any] | None = None
    error_kind: str | None = None
    pending: bool = False
    #: How a blocking verdict blocked: "exit" for a blocking error (exit 2, a prompt or agent
    #: hook's ok:false), "json" for a JSON decision. Claude Code 2.1.332 tells the model the
    #: two apart on Stop (tests/conformance/claude_code stop.exit2_always_cap).
    block_form: str | None = None
    #: Fields the hook gave as JSON null beside an answer it did give: Claude Code 2.1.332
    #: discards such an answer whole, hookaudit reads the nulls as not given and keeps the
    #: rest (rule `null-read-as-absent`).
    nulls: tuple[str, ...] = ()


# --------------------------------------------------------------------------- building verdicts

#: Shared: a silent success (specific stays empty); the flow tells silence by identity.
NOOP = HookVerdict(outcome="noop")


def build_verdict(
    outcome: VerdictOutcome,
    *,
    blocking: bool = False,
    message: str | None = None,
    permission_decision: str | None = None,
    reason: str | None = None,
    updated_input: dict[str, Any] | None = None,
    context: list[str] | tuple[str, ...] = (),
    system_message: str | None = None,
    continue_: bool = True,
    stop_reason: str | None = None,
    specific: dict[str, Any] | None = None,
    output: dict[str, Any] | None = None,
    error_kind: str | None = None,
    pending: bool = False,
    block_form: str | None = None,
    nulls: tuple[str, ...] = (),
) -> HookVerdict:
    spec_out = dict(specific or {})
    capped: list[str] = []

    def capped_(name: str, text: str | None) -> str | None:
        if text is None:
            return None
        out, was = cap(text)
        out = fix_str(out)
        if was:
            capped.append(name)
        return out

    ctx = tuple(c for c in (capped_("additionalContext", c) for c in context) if c is not None)
    for key in ("sessionTitle", "initialUserMessage", "displayContent", "classifierContext"):
        if isinstance(spec_out.get(key), str):
            spec_out[key] = capped_(key, spec_out[key])
    verdict_message = capped_("message", message)
    verdict_reason = capped_("reason", reason)
    verdict_system = capped_("systemMessage", system_message)
    verdict_stop = capped_("stopReason", stop_reason)
    if capped:
        spec_out["capped"] = sorted(set(capped))
    return HookVerdict(  # positionally, in field order: several times faster than keywords
        outcome,
        blocking,
        verdict_message,
        permission_decision,
        verdict_reason,
        updated_input,
        ctx,
        verdict_system,
        continue_,
        verdict_stop,
        spec_out,
        output,
        error_kind,
        pending,
        block_form if blocking else None,
        nulls,
    )


def from_read(
    read: ObjectRead,
    es: EventSpec,
    *,
    forced_block: str | None = None,
    unhonoured_block: bool = False,
    error_kind: str | None = None,
    error_message: str | None = None,
) -> HookVerdict:
    """A verdict from what a hook said; `forced_block` is exit 2's message (current)."""
    blocking = read.block or forced_block is not None
    decision = read.decision
    message: str | None = error_message
    if blocking:
        message = read.reason if read.block else forced_block
        message = message if message is not None else BLOCKED_BY_HOOK
        if es.name == "PreToolUse":
            decision = "deny"
    elif read.unhonoured:
        message = read.reason if read.reason is not None else error_message
    specific = read.specific
    nulls = tuple(read.nulls)  # beside an answer, unless one of the branches below says none
    outcome: VerdictOutcome
    if blocking or read.unhonoured or unhonoured_block or not read.continue_ or decision == "deny":
        outcome = "deny"
    elif decision == "allow" or read.top_decision == "approve" or _accepts(specific):
        outcome = "allow"
    elif specific.get("action") in ("decline", "cancel"):
        outcome = "deny"
    elif error_kind is not None:
        outcome, nulls = "error", ()
    elif read.nulls:
        # Claude Code discards the whole answer (tests/conformance/claude_code
        # pre.json.null_hso): nothing else was said, so this hook gave no usable answer.
        outcome, error_kind = "error", "schema"
        error_message = (
            f"JSON validation failed: {read.nulls[0]}: null (Claude Code ignores the whole "
            "answer; hookaudit reads null as not given)"
        )
        message = error_message
        # No usable answer for Claude Code either; a context or message beside the null is
        # still kept here, where Claude Code drops it with the rest.
        nulls = nulls if (read.context or read.system_message) else ()
    else:
        outcome = "noop"
    return build_verdict(
        outcome,
        blocking=blocking,
        message=message,
        permission_decision=decision if es.name in ("PreToolUse", "PermissionRequest") else None,
        reason=message if blocking else read.reason,
        updated_input=read.updated_input if decision != "deny" else None,
        context=read.context,
        system_message=read.system_message,
        continue_=read.continue_,
        stop_reason=read.stop_reason,
        specific=specific,
        output=read.obj,
        error_kind=error_kind,
        block_form="json" if read.block else "exit",
        nulls=nulls,
    )


def _accepts(specific: dict[str, Any]) -> bool:
    return specific.get("action") == "accept" or "worktreePath" in specific


def error_verdict(kind: str, message: str, *, output: dict[str, Any] | None = None) -> HookVerdict:
    return build_verdict("error", message=message, error_kind=kind, output=output)


def first_line(text: str) -> str:
    return text.strip().split("\n", 1)[0].strip()


def hook_label(identity: HookIdentity) -> str:
    """A short human name for a hook: its command, url, callable, tool or prompt.

    >>> hook_label(HookIdentity(type="command", source="user", command="lint.sh"))
    'lint.sh'
    """
    for value in (identity.command, identity.url, identity.callable):
        if value:
            return value
    if identity.server or identity.tool:
        return f"{identity.server}:{identity.tool}"
    if identity.prompt:
        return identity.prompt if len(identity.prompt) <= 60 else identity.prompt[:57] + "..."
    return identity.type


# --------------------------------------------------------------------------- records


def to_hook_run(inv: Invocation, raw: RawResult, verdict: HookVerdict) -> HookRun:
    """The HookRun record of one hook: raw observations plus how they were read.

    >>> from engine.decode import decode
    >>> from engine.effects import RawResult
    >>> inv = example_invocation("Stop", {})
    >>> raw = RawResult(exit_code=0, stdout="")
    >>> to_hook_run(inv, raw, decode(inv, raw)).outcome
    'noop'
    """
    decision = verdict.permission_decision
    if decision is None and verdict.blocking:
        decision = "deny"
    return HookRun(  # positional, in HookRun's field order (see its docstring)
        inv.identity,
        inv.identity_key(),
        verdict.outcome,
        raw.exit_code,
        raw.duration_ms,
        raw.stdout,
        raw.stderr,
        raw.stdout_bytes,
        raw.stderr_bytes,
        raw.truncated,
        raw.http_status,
        verdict.error_kind,
        verdict.message,
        verdict.output,
        decision,
        verdict.pending,
        raw.llm,
    )


def example_invocation(event: str, payload: dict[str, Any], **identity: Any) -> Invocation:
    """A minimal command-hook Invocation for docstring examples."""
    ident = HookIdentity(
        type=identity.pop("type", "command"), source="user", command="hook.sh", **identity
    )
    return Invocation(
        index=0,
        event=event,
        hook=None,
        identity=ident,
        source="user",
        matcher=None,
        timeout=600.0,
        payload={"hook_event_name": event, **payload},
        input_json=b"{}",
        cwd="/",
    )
