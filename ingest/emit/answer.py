"""What `hookaudit emit` prints and how it exits: pure functions of what became of the event.

Rules of this file:
- Pure: no I/O. `ingest.emit.emitter` and the relay (`ingest.relay.server`) decide what happened; this
  file says it, so the relay's answer is byte for byte the one emit prints.
- A decision is said as `hookaudit eval --format claude` says it
  (`engine.claude_output.express_outcome`); no decision is said per the fail mode, in
  `engine.failclosed`'s wording: only ``--fail closed`` turns a failure into a block.

Example:
    >>> fail_result("Stop", "closed", "no decision", status="no-decision").exit_code
    2
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Literal

import msgspec

from engine.errors import InvalidEvent
from engine.events import is_known, spec
from engine.failclosed import closed_reason, open_reason
from engine.records import HookEvent, Outcome
from ingest.protocol import Reply

if TYPE_CHECKING:
    from ingest.emit.emitter import EmitOptions

__all__ = [
    "FailMode",
    "Result",
    "decision_result",
    "fail_result",
    "late_result",
    "rejected_result",
    "reply_decoder",
    "reply_result",
]

FailMode = Literal["open", "closed"]


class Result(msgspec.Struct, frozen=True):
    """What emit prints and how it exits, and what became of the event (`status`).

    `status` is one of ``published``, ``duplicate``, ``decided``, ``no-decision``,
    ``spooled``, ``rejected``, ``lost``. `blocked`: an answer given without a decision
    (fail mode, refused input) stops what the agent does; the log records it so
    (`ingest.emit.emitter.fallback`), in every agent's form (Cline's cancel exits 0).
    """

    status: str
    stdout: str = ""
    stderr: str = ""
    exit_code: int = 0
    blocked: bool = False


def fail_result(
    event_name: str, fail: FailMode, reason: str, *, status: str, agent: str = "claude_code"
) -> Result:
    """What to do when no decision can be had, per the fail mode.

    open: proceed (exit 0), one line on stderr. closed: PreToolUse prints a deny and
    exits 0; another event that can be blocked exits 2 with the reason on stderr; an
    event that cannot be blocked proceeds (exit 2 would only add noise for the model).
    For another agent than Claude Code, closed is that agent's blocking answer
    (`engine.dialects`).

    Example:
        >>> fail_result("Stop", "closed", "no decision", status="no-decision").exit_code
        2
        >>> fail_result("Stop", "open", "no decision", status="no-decision").exit_code
        0
    """
    if fail == "open":
        return Result(status, stderr=open_reason(reason))
    if agent != "claude_code":
        from engine.dialects.registry import get

        answer = get(agent).block(event_name, reason)
        return _blocking(status, answer.stdout, answer.stderr, answer.exit_code)
    why = closed_reason(reason)
    if event_name == "PreToolUse":
        from engine.claude_output import blocking_object

        text = json.dumps(blocking_object(event_name, why), separators=(",", ":"))
        return Result(status, stdout=text, stderr=f"hookaudit emit: {reason}", blocked=True)
    if is_known(event_name) and spec(event_name).exit2 in ("block", "fail"):
        return Result(status, stderr=why, exit_code=2, blocked=True)
    return Result(
        status, stderr=f"hookaudit emit: {reason}; {event_name} cannot be blocked, proceeding"
    )


def _blocking(status: str, stdout: str, stderr: str, exit_code: int) -> Result:
    """Another agent's `Dialect.block` answer: it says something (exit 2, or JSON such as
    Cline's cancel) only where it blocks."""
    return Result(status, stdout, stderr, exit_code, blocked=exit_code == 2 or bool(stdout))


def decision_result(outcome: Outcome) -> Result:
    """Print and exit as `hookaudit eval --format claude` does for the same Outcome
    (`engine.claude_output.express_outcome`, as serve and eval).

    Example:
        >>> decision_result(outcome).exit_code  # doctest: +SKIP
        0
    """
    if outcome.event.agent != "claude_code":
        from engine.claude_output import decision_of
        from engine.dialects.registry import get

        said = get(outcome.event.agent).express(
            outcome.event.event, decision_of(outcome), outcome.event
        )
        return Result("decided", said.stdout, said.stderr, said.exit_code)
    from engine.claude_output import express_outcome

    out, err, code, _ = express_outcome(outcome)
    return Result("decided", stdout=out, stderr=err, exit_code=code)


def rejected_result(opts: EmitOptions, err: InvalidEvent, kept: str) -> Result:
    """What emit answers for refused input: one line, and exit 2 when failing closed."""
    line = f"hookaudit emit: {err}{kept}"
    if opts.fail == "closed" and opts.agent != "claude_code":
        from engine.dialects.registry import get

        said = get(opts.agent).block("PreToolUse", f"{err}{kept}")
        return _blocking("rejected", said.stdout, said.stderr or line, said.exit_code)
    if opts.fail == "closed":
        return Result("rejected", stderr=line, exit_code=2, blocked=True)
    return Result("rejected", stderr=line)


def late_result(event: HookEvent, opts: EmitOptions) -> Result:
    """The answer when no decision arrived within ``--timeout`` (per the fail mode)."""
    return fail_result(
        event.event,
        opts.fail,
        f"no decision arrived within {opts.timeout:g}s for {event.event} event {event.id}",
        status="no-decision",
        agent=event.agent,
    )


def reply_result(event: HookEvent, opts: EmitOptions, got: Reply | str) -> Result:
    """The answer for what arrived on the inbox: a trusted Reply, or why there is none.

    Example:
        >>> reply_result(event, opts, "connection closed").status  # doctest: +SKIP
        'no-decision'
    """
    if isinstance(got, str):
        return fail_result(event.event, opts.fail, got, status="no-decision", agent=event.agent)
    reply = got
    if reply.event_id != event.id or reply.error is not None or reply.outcome is None:
        why = reply.error or f"reply for event {reply.event_id!r} carries no outcome"
        return fail_result(
            event.event,
            opts.fail,
            f"no decision for event {event.id}: {why}",
            status="no-decision",
            agent=event.agent,
        )
    try:
        return decision_result(reply.outcome)
    except Exception as e:  # the renderer is the engine's; a bug there is still no decision
        why = f"cannot render the decision for event {event.id}: {type(e).__name__}: {e}"
        return fail_result(event.event, opts.fail, why, status="no-decision", agent=event.agent)


_REPLY: list[msgspec.msgpack.Decoder[Reply]] = []


def reply_decoder() -> msgspec.msgpack.Decoder[Reply]:
    # Built on first use: only --wait needs it, and it costs start-up time.
    if not _REPLY:
        _REPLY.append(msgspec.msgpack.Decoder(Reply))
    return _REPLY[0]
