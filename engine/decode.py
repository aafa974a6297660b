"""Decode one hook's answer (a RawResult) into a HookVerdict: spec §3.5, §6.4, §6.6.

Rules of this file (those of `engine.verdict`, which re-exports it):
- Pure. No I/O, no clock, no randomness, no logging; the same (Invocation, RawResult,
  profile) always gives the same HookVerdict. Replay depends on it.
- Never raises on hostile hook output. Whatever a hook printed, returned or exited
  with ends as a value: a verdict with ``outcome="error"`` and an ``error_kind``, or
  plain text. Exceptions are only for bugs in the engine.
- Executors never interpret; this file (with `engine.hook_text` and `engine.hook_json` for the
  JSON object and
  `engine.decode_llm` for model verdicts) is the one place that reads exit codes,
  stdout, HTTP bodies, model verdicts and python return values.
- Every verdict is built by `engine.hook_verdict` (`build_verdict`, `from_read`), which
  caps every string a hook hands to the agent at STRING_CAP characters.

Example:
    >>> from engine.effects import RawResult
    >>> from engine.hook_verdict import example_invocation
    >>> inv = example_invocation("PreToolUse", {"tool_name": "Bash"})
    >>> v = decode(inv, RawResult(exit_code=2, stderr="no rm"))
    >>> v.outcome, v.blocking, v.permission_decision, v.message
    ('deny', True, 'deny', 'no rm')
"""

from __future__ import annotations

import posixpath
import re
from typing import Any

import msgspec

from engine.decode_llm import decode_llm
from engine.effects import Invocation, RawResult
from engine.events import CATALOG, EventSpec
from engine.hook_json import (
    EXIT2_IGNORES_HSO,
    ObjectRead,
    Profile,
    SchemaError,
    can_block,
    read_object,
)
from engine.hook_text import (
    STRING_CAP,
    Obj,
    Plain,
    cap,
    first_line_async,
    is_async_form,
    read_text,
)
from engine.hook_verdict import (
    NO_STDERR,
    NOOP,
    HookVerdict,
    build_verdict,
    error_verdict,
    first_line,
    from_read,
    hook_label,
)
from engine.records import Posture

__all__ = ["STRING_CAP", "Posture", "Profile", "decode"]

_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-_]")


# --------------------------------------------------------------------------- per hook type


def decode(inv: Invocation, raw: RawResult, *, profile: Profile = "current") -> HookVerdict:
    """Read one hook's answer the way Claude Code does under `profile`.

    Example (case 9: exit 1 without JSON is a non-blocking error):
        >>> from engine.effects import RawResult
        >>> from engine.hook_verdict import example_invocation
        >>> inv = example_invocation("PreToolUse", {"tool_name": "Bash"})
        >>> v = decode(inv, RawResult(exit_code=1, stderr="oops"))
        >>> v.outcome, v.blocking, v.message
        ('error', False, 'Failed with non-blocking status code: oops')
    """
    if raw.pending:
        return HookVerdict(outcome="noop", pending=True)
    es = CATALOG.get(inv.event)
    if es is None:
        return error_verdict("unknown_event", f"unknown hook event {inv.event!r}")
    kind = inv.identity.type
    if raw.error_kind is not None:
        if kind == "agent" and raw.error_kind == "cancelled":
            # Turn limit or no structured output: cancelled, not an error (§6.6).
            return build_verdict(
                "noop", message=raw.error or "Agent hook cancelled", error_kind="cancelled"
            )
        return error_verdict(
            raw.error_kind, raw.error or f"hook {raw.error_kind.replace('_', ' ')}"
        )
    if kind == "python":  # first: replay runs python hooks inline by the million
        return _decode_python(inv, raw, es, profile)
    if kind in ("command", "mcp_tool"):
        return _decode_command(inv, raw, es, profile)
    if kind == "http":
        return _decode_http(inv, raw, es, profile)
    if kind in ("prompt", "agent"):
        return decode_llm(inv, raw, es, profile)
    return error_verdict("unknown_type", f"no executor for hook type {cap(kind)[0]!r}")


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
                f"[{hook_label(inv.identity)}]: {stderr or NO_STDERR}"
                if profile == "legacy"
                else stderr or NO_STDERR
            )
            return _exit2(es, inv, profile, blocking_message, None)
        first = stderr if profile == "legacy" else first_line(stderr)
        return error_verdict(
            "nonzero_exit", f"Failed with non-blocking status code: {first or NO_STDERR}"
        )
    use_hso = not (profile == "current" and code == 2 and es.name in EXIT2_IGNORES_HSO)
    parsed = read_object(read.obj, es, inv, profile, use_hso=use_hso)
    if isinstance(parsed, SchemaError):
        if profile == "current" and code == 2 and can_block(es, profile, inv.payload):
            # JSON failing the schema still blocks, with stderr (≥2.1.214).
            blocked = ObjectRead(obj=read.obj)
            return from_read(blocked, es, forced_block=stderr or NO_STDERR, error_kind=parsed.kind)
        return error_verdict(parsed.kind, parsed.message, output=read.obj)
    if profile == "current" and code == 2:
        return _exit2(es, inv, profile, stderr or NO_STDERR, parsed)
    return from_read(parsed, es)


def _plain_success(text: str, es: EventSpec, profile: Profile) -> HookVerdict:
    if not text:
        return HookVerdict(outcome="noop")
    if es.plain_stdout_context:
        return build_verdict("noop", context=[text])
    if profile == "legacy" and es.name == "PreCompact":
        return build_verdict("noop", specific={"customInstructions": cap(text)[0]})
    return HookVerdict(outcome="noop")  # debug log only


def _exit2(
    es: EventSpec, inv: Invocation, profile: Profile, message: str, parsed: ObjectRead | None
) -> HookVerdict:
    """Exit 2 per event (§1 Exit 2 column); `parsed` is valid JSON, still read (current)."""
    kind = es.exit2_for(profile)
    read = parsed if parsed is not None else ObjectRead(obj=None)
    if es.informational or kind == "ignored":
        return from_read(read, es)  # the exit code means nothing here; JSON still decides
    if kind == "user":  # stderr is shown to the user: a non-blocking error
        return from_read(read, es, error_kind="nonzero_exit", error_message=message)
    if not can_block(es, profile, inv.payload):  # ConfigChange from policy_settings
        return from_read(read, es, unhonoured_block=True, error_message=message)
    return from_read(read, es, forced_block=message)


def _decode_worktree(
    inv: Invocation, raw: RawResult, es: EventSpec, profile: Profile, code: int
) -> HookVerdict:
    """WorktreeCreate (§3.4): any non-zero exit fails; the path is printed on stdout."""
    if code != 0:
        why = raw.stderr.strip() or f"Failed with status code {code}"
        return build_verdict(
            "deny", blocking=True, message=why, reason=why, error_kind="nonzero_exit"
        )
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
            return build_verdict(
                "deny", blocking=True, message=why, reason=why, error_kind="bad_path"
            )
    return build_verdict("allow", specific={"worktreePath": cap(path)[0]})


def _decode_async_done(inv: Invocation, raw: RawResult, es: EventSpec, code: int) -> HookVerdict:
    """A backgrounded hook that has finished (§6.4): context for the next turn only."""
    if _is_rewake(inv):
        if code == 2:
            text = raw.stderr.strip() or raw.stdout.strip()
            note = f'Stop hook blocking error from command "{inv.name}": {text}'
            return build_verdict(
                "deny", message=note, specific={"async": True, "rewake": cap(note)[0]}
            )
        if code == 0:
            return build_verdict("noop", specific={"async": True})
        return build_verdict(
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
        return build_verdict(
            "noop",
            context=[ctx] if isinstance(ctx, str) and "additionalContext" in es.specific else [],
            system_message=msg if isinstance(msg, str) else None,
            specific={"async": True},
            output=read.obj,
        )
    if code not in (0, 2):
        first = first_line(raw.stderr)
        return build_verdict(
            "error",
            message=f"Failed with non-blocking status code: {first or NO_STDERR}",
            error_kind="nonzero_exit",
            specific={"async": True},
        )
    return build_verdict("noop", specific={"async": True})


def _decode_http(inv: Invocation, raw: RawResult, es: EventSpec, profile: Profile) -> HookVerdict:
    """HTTP hooks (§3.5): a status never blocks; a 2xx body must be empty or a JSON object."""
    status = raw.http_status
    if status is None:
        return error_verdict("http_transport", raw.error or "HTTP hook got no response")
    if not 200 <= status < 300:
        return error_verdict("http_status", f"HTTP hook returned status {status}")
    read = read_text(raw.stdout)
    if isinstance(read, Plain):
        if not read.text:
            return HookVerdict(outcome="noop")  # the same as {}
        return error_verdict("http_body", "HTTP hook must return JSON")
    if is_async_form(read.obj):
        return build_verdict("noop", specific={"async": True}, output=read.obj)
    parsed = read_object(read.obj, es, inv, profile)
    if isinstance(parsed, SchemaError):
        return error_verdict(parsed.kind, parsed.message, output=read.obj)
    return from_read(parsed, es)


def _decode_python(inv: Invocation, raw: RawResult, es: EventSpec, profile: Profile) -> HookVerdict:
    """Python hooks: the returned dict is read like JSON stdout with exit code 0."""
    value: Any = raw.output
    if value is None:
        return NOOP
    if not isinstance(value, dict):
        return error_verdict(
            "schema", f"python hook must return a dict or None, got {type(value).__name__}"
        )
    try:  # normalise to plain JSON values (tuples, subclasses…) and prove it is loggable
        # No `sanitize` needed: msgspec refuses to encode lone surrogates (an error below).
        obj = msgspec.json.decode(msgspec.json.encode(value))
    except Exception as exc:  # a hook's return value may hold anything
        return error_verdict(
            "schema", f"python hook returned a value that is not JSON: {type(exc).__name__}: {exc}"
        )
    if is_async_form(obj):
        return build_verdict("noop", specific={"async": True}, output=obj)
    parsed = read_object(obj, es, inv, profile)
    if isinstance(parsed, SchemaError):
        return error_verdict(parsed.kind, parsed.message, output=obj)
    return from_read(parsed, es)
