"""Decode one hook's answer (a RawResult) into a HookVerdict: spec §3.5, §6.4, §6.6.

Rules of this file (those of `engine.verdict`, which re-exports it):
- Pure. No I/O, no clock, no randomness, no logging; the same (Invocation, RawResult,
  profile) always gives the same HookVerdict. Replay depends on it.
- Never raises on hostile hook output. Whatever a hook printed, returned or exited
  with ends as a value: a verdict with ``outcome="error"`` and an ``error_kind``, or
  plain text. Exceptions are only for bugs in the engine.
- Executors never interpret; this file (with `engine.hook_json` for the JSON object)
  is the one place that reads exit codes, stdout, HTTP bodies, model verdicts and
  python return values.
- Every string a hook hands to the agent is capped at STRING_CAP characters; a
  capped field is named in ``specific["capped"]``.

Example:
    >>> from engine.effects import RawResult
    >>> inv = _example_invocation("PreToolUse", {"tool_name": "Bash"})
    >>> v = decode(inv, RawResult(exit_code=2, stderr="no rm"))
    >>> v.outcome, v.blocking, v.permission_decision, v.message
    ('deny', True, 'deny', 'no rm')
"""

from __future__ import annotations

import posixpath
import re
from typing import Any, Literal

import msgspec

from engine.effects import Invocation, RawResult
from engine.events import CATALOG, EventSpec
from engine.hook_json import (
    BLOCKED_BY_HOOK,
    EXIT2_IGNORES_HSO,
    STRING_CAP,
    Obj,
    ObjectRead,
    Plain,
    Profile,
    SchemaError,
    can_block,
    cap,
    first_line_async,
    fix_str,
    is_async_form,
    read_object,
    read_text,
    short,
)
from engine.records import HookIdentity, HookRun, Posture

__all__ = [
    "STRING_CAP",
    "HookVerdict",
    "Posture",
    "Profile",
    "VerdictOutcome",
    "decode",
    "hook_label",
    "to_hook_run",
]

VerdictOutcome = Literal["allow", "deny", "error", "noop"]

_NO_STDERR = "No stderr output"
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-_]")


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

_NOOP = HookVerdict(outcome="noop")  # shared: a silent success (specific stays empty)


def _finish(
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
    return HookVerdict(
        outcome=outcome,
        blocking=blocking,
        message=verdict_message,
        permission_decision=permission_decision,
        reason=verdict_reason,
        updated_input=updated_input,
        additional_context=ctx,
        system_message=verdict_system,
        continue_=continue_,
        stop_reason=verdict_stop,
        specific=spec_out,
        output=output,
        error_kind=error_kind,
        pending=pending,
        block_form=block_form if blocking else None,
        nulls=nulls,
    )


def _from_read(
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
    return _finish(
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


def _error(kind: str, message: str, *, output: dict[str, Any] | None = None) -> HookVerdict:
    return _finish("error", message=message, error_kind=kind, output=output)


def _first_line(text: str) -> str:
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


# --------------------------------------------------------------------------- per hook type


def decode(inv: Invocation, raw: RawResult, *, profile: Profile = "current") -> HookVerdict:
    """Read one hook's answer the way Claude Code does under `profile`.

    Example (case 9: exit 1 without JSON is a non-blocking error):
        >>> from engine.effects import RawResult
        >>> inv = _example_invocation("PreToolUse", {"tool_name": "Bash"})
        >>> v = decode(inv, RawResult(exit_code=1, stderr="oops"))
        >>> v.outcome, v.blocking, v.message
        ('error', False, 'Failed with non-blocking status code: oops')
    """
    if raw.pending:
        return HookVerdict(outcome="noop", pending=True)
    es = CATALOG.get(inv.event)
    if es is None:
        return _error("unknown_event", f"unknown hook event {inv.event!r}")
    kind = inv.identity.type
    if raw.error_kind is not None:
        if kind == "agent" and raw.error_kind == "cancelled":
            # Turn limit or no structured output: cancelled, not an error (§6.6).
            return _finish(
                "noop", message=raw.error or "Agent hook cancelled", error_kind="cancelled"
            )
        return _error(raw.error_kind, raw.error or f"hook {raw.error_kind.replace('_', ' ')}")
    if kind == "python":  # first: replay runs python hooks inline by the million
        return _decode_python(inv, raw, es, profile)
    if kind in ("command", "mcp_tool"):
        return _decode_command(inv, raw, es, profile)
    if kind == "http":
        return _decode_http(inv, raw, es, profile)
    if kind in ("prompt", "agent"):
        return _decode_llm(inv, raw, es, profile)
    return _error("unknown_type", f"no executor for hook type {cap(kind)[0]!r}")


def _is_config_async(inv: Invocation) -> bool:
    hook = inv.hook
    return inv.identity.is_async or getattr(hook, "async_", False) is True or _is_rewake(inv)


def _is_rewake(inv: Invocation) -> bool:
    return getattr(inv.hook, "asyncRewake", False) is True


def _decode_command(
    inv: Invocation, raw: RawResult, es: EventSpec, profile: Profile
) -> HookVerdict:
    code = (
        raw.exit_code
        if raw.exit_code is not None
        else (0 if inv.identity.type == "mcp_tool" else 1)
    )
    read = read_text(raw.stdout)
    declared_async = (
        is_async_form(read.obj) if isinstance(read, Obj) else first_line_async(read.text)
    )
    if declared_async or _is_config_async(inv):
        return _decode_async_done(inv, raw, es, code)
    if es.name == "WorktreeCreate":
        return _decode_worktree(inv, raw, es, profile, code)
    stderr = raw.stderr.strip()
    if isinstance(read, Plain):
        if code == 0:
            return _plain_success(read.text, es, profile)
        if code == 2:
            blocking_message = (
                f"[{hook_label(inv.identity)}]: {stderr or _NO_STDERR}"
                if profile == "legacy"
                else stderr or _NO_STDERR
            )
            return _exit2(es, inv, profile, blocking_message, None)
        first = stderr if profile == "legacy" else _first_line(stderr)
        return _error(
            "nonzero_exit", f"Failed with non-blocking status code: {first or _NO_STDERR}"
        )
    use_hso = not (profile == "current" and code == 2 and es.name in EXIT2_IGNORES_HSO)
    parsed = read_object(read.obj, es, inv, profile, use_hso=use_hso)
    if isinstance(parsed, SchemaError):
        if profile == "current" and code == 2 and can_block(es, profile, inv.payload):
            # JSON failing the schema still blocks, with stderr (≥2.1.214).
            blocked = ObjectRead(obj=read.obj)
            return _from_read(
                blocked, es, forced_block=stderr or _NO_STDERR, error_kind=parsed.kind
            )
        return _error(parsed.kind, parsed.message, output=read.obj)
    if profile == "current" and code == 2:
        return _exit2(es, inv, profile, stderr or _NO_STDERR, parsed)
    return _from_read(parsed, es)


def _plain_success(text: str, es: EventSpec, profile: Profile) -> HookVerdict:
    if not text:
        return HookVerdict(outcome="noop")
    if es.plain_stdout_context:
        return _finish("noop", context=[text])
    if profile == "legacy" and es.name == "PreCompact":
        return _finish("noop", specific={"customInstructions": cap(text)[0]})
    return HookVerdict(outcome="noop")  # debug log only


def _exit2(
    es: EventSpec, inv: Invocation, profile: Profile, message: str, parsed: ObjectRead | None
) -> HookVerdict:
    """Exit 2 per event (§1 Exit 2 column); `parsed` is valid JSON, still read (current)."""
    kind = es.exit2_for(profile)
    read = parsed if parsed is not None else ObjectRead(obj=None)
    if es.informational or kind == "ignored":
        return _from_read(read, es)  # the exit code means nothing here; JSON still decides
    if kind == "user":  # stderr is shown to the user: a non-blocking error
        return _from_read(read, es, error_kind="nonzero_exit", error_message=message)
    if not can_block(es, profile, inv.payload):  # ConfigChange from policy_settings
        return _from_read(read, es, unhonoured_block=True, error_message=message)
    return _from_read(read, es, forced_block=message)


def _decode_worktree(
    inv: Invocation, raw: RawResult, es: EventSpec, profile: Profile, code: int
) -> HookVerdict:
    """WorktreeCreate (§3.4): any non-zero exit fails; the path is printed on stdout."""
    if code != 0:
        why = raw.stderr.strip() or f"Failed with status code {code}"
        return _finish("deny", blocking=True, message=why, reason=why, error_kind="nonzero_exit")
    if profile == "legacy":
        path = raw.stdout.strip()
    else:
        lines = [ln.strip() for ln in _ANSI.sub("", raw.stdout).splitlines() if ln.strip()]
        path = lines[-1] if lines else ""
    if not path:
        return HookVerdict(outcome="noop")
    if profile == "current":
        if not path.startswith("/"):
            path = posixpath.join(inv.cwd, path)
        elif any(part in (".", "..") for part in path.split("/")):
            why = f"WorktreeCreate hook returned a path with '.' or '..': {cap(path)[0]}"
            return _finish("deny", blocking=True, message=why, reason=why, error_kind="bad_path")
    return _finish("allow", specific={"worktreePath": cap(path)[0]})


def _decode_async_done(inv: Invocation, raw: RawResult, es: EventSpec, code: int) -> HookVerdict:
    """A backgrounded hook that has finished (§6.4): context for the next turn only."""
    if _is_rewake(inv):
        if code == 2:
            text = raw.stderr.strip() or raw.stdout.strip()
            note = f'Stop hook blocking error from command "{inv.name}": {text}'
            return _finish("deny", message=note, specific={"async": True, "rewake": cap(note)[0]})
        if code == 0:
            return _finish("noop", specific={"async": True})
        return _finish(
            "error",
            message=f"Async hook exited with status code {code}",
            error_kind="nonzero_exit",
            specific={"async": True},
        )
    for line in raw.stdout.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        read = read_text(line)
        if not isinstance(read, Obj) or is_async_form(read.obj):
            continue
        hso = read.obj.get("hookSpecificOutput")
        ctx = (
            hso.get("additionalContext")
            if isinstance(hso, dict) and hso.get("hookEventName") == es.name
            else None
        )
        msg = read.obj.get("systemMessage")
        # Fields of the wrong type are dropped, decision fields have no effect (≥2.1.202).
        return _finish(
            "noop",
            context=[ctx] if isinstance(ctx, str) and "additionalContext" in es.specific else [],
            system_message=msg if isinstance(msg, str) else None,
            specific={"async": True},
            output=read.obj,
        )
    if code not in (0, 2):
        first = _first_line(raw.stderr)
        return _finish(
            "error",
            message=f"Failed with non-blocking status code: {first or _NO_STDERR}",
            error_kind="nonzero_exit",
            specific={"async": True},
        )
    return _finish("noop", specific={"async": True})


def _decode_http(inv: Invocation, raw: RawResult, es: EventSpec, profile: Profile) -> HookVerdict:
    """HTTP hooks (§3.5): a status never blocks; a 2xx body must be empty or a JSON object."""
    status = raw.http_status
    if status is None:
        return _error("http_transport", raw.error or "HTTP hook got no response")
    if not 200 <= status < 300:
        return _error("http_status", f"HTTP hook returned status {status}")
    read = read_text(raw.stdout)
    if isinstance(read, Plain):
        if not read.text:
            return HookVerdict(outcome="noop")  # the same as {}
        return _error("http_body", "HTTP hook must return JSON")
    if is_async_form(read.obj):
        return _finish("noop", specific={"async": True}, output=read.obj)
    parsed = read_object(read.obj, es, inv, profile)
    if isinstance(parsed, SchemaError):
        return _error(parsed.kind, parsed.message, output=read.obj)
    return _from_read(parsed, es)


def _decode_python(inv: Invocation, raw: RawResult, es: EventSpec, profile: Profile) -> HookVerdict:
    """Python hooks: the returned dict is read like JSON stdout with exit code 0."""
    value: Any = raw.output
    if value is None:
        return _NOOP
    if not isinstance(value, dict):
        return _error(
            "schema", f"python hook must return a dict or None, got {type(value).__name__}"
        )
    try:  # normalise to plain JSON values (tuples, subclasses…) and prove it is loggable
        # No `sanitize` needed: msgspec refuses to encode lone surrogates (an error below).
        obj = msgspec.json.decode(msgspec.json.encode(value))
    except Exception as exc:  # a hook's return value may hold anything
        return _error(
            "schema", f"python hook returned a value that is not JSON: {type(exc).__name__}: {exc}"
        )
    if is_async_form(obj):
        return _finish("noop", specific={"async": True}, output=obj)
    parsed = read_object(obj, es, inv, profile)
    if isinstance(parsed, SchemaError):
        return _error(parsed.kind, parsed.message, output=obj)
    return _from_read(parsed, es)


# --------------------------------------------------------------------------- prompt and agent


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


def _decode_llm(inv: Invocation, raw: RawResult, es: EventSpec, profile: Profile) -> HookVerdict:
    """Prompt and agent hooks (§6.6): the model's answer is ``{ok, reason?, impossible?}``."""
    read = read_text(raw.stdout)
    if not isinstance(read, Obj):
        return _error("bad_verdict", "hook model did not answer with a JSON object {ok, reason}")
    obj = read.obj
    ok = obj.get("ok")
    reason_value = obj.get("reason")
    reason = reason_value if isinstance(reason_value, str) else None
    if ok is True:
        return _finish("allow", reason=reason, output=obj)
    if ok is not False:
        if not _block_directive(obj, es.name):
            return _error(
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
    return _finish(
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


# --------------------------------------------------------------------------- records


def to_hook_run(inv: Invocation, raw: RawResult, verdict: HookVerdict) -> HookRun:
    """The HookRun record of one hook: raw observations plus how they were read.

    >>> from engine.effects import RawResult
    >>> inv = _example_invocation("Stop", {})
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


def _example_invocation(event: str, payload: dict[str, Any], **identity: Any) -> Invocation:
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
