"""`hookaudit emit`: one hook event from stdin to JetStream, optionally waiting for the decision.

Rules of this file:
- Cold start matters: this runs on every tool call without a relay. At module level
  only the stdlib, msgspec, `engine.records|events|errors|payload|failclosed`,
  `ingest.protocol`, `ingest.nats.options`, `ingest.spool.store` and emit's three helpers are
  imported; nats (`ingest.nats.streams`, `ingest.nats.embedded`) after stdin is validated, and the
  engine's renderer only when a decision has arrived.
- Never hang: connecting, publishing, flushing the spool and waiting for the reply
  each have a bound, and the whole delivery has one more.
- Never lose an event: NATS unreachable -> the spool; bad input -> a reject file; an
  event the server can never take -> ``spool/rejects.jsonl``.
- Never block the agent by accident: only ``--fail closed`` turns a failure into a
  block; what to print is decided by pure functions (`ingest.emit.answer`).
- Four helpers: `ingest.emit.options` (where events go, how emit behaves, its deadline),
  `ingest.emit.stdin` (reading and checking stdin, keeping refused input),
  `ingest.emit.publish` (the NATS side) and `ingest.emit.answer` (what to print); this
  file is the delivery between them: publish, wait, or fall back to the spool.

Example:
    >>> EmitOptions(target=Target(data_dir=Path("/tmp/ha"))).fail
    'open'
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

import msgspec

from engine.errors import HookauditError, InvalidEvent, PublishUncertain, Unavailable
from engine.payload import MAX_EVENT_BYTES
from engine.records import Fallback, HookEvent, Rejection, encode_json
from ingest.emit.answer import (
    FailMode,
    Result,
    fail_result,
    late_result,
    rejected_result,
    reply_decoder,
    reply_result,
)
from ingest.emit.options import EmitOptions, Target
from ingest.emit.publish import Publisher, connect, quiet_nats_logs
from ingest.emit.stdin import event_of, reject_stub, validate
from ingest.protocol import Reply
from ingest.spool.store import Spool, has_pending

if TYPE_CHECKING:
    from nats.aio.client import Client

    from ingest.replysig import Verifier

__all__ = [
    "EmitOptions",
    "Target",
    "emit",
    "fallback",
    "notify",
    "too_big",
    "undelivered",
]


# -- input ------------------------------------------------------------------------------


# -- emitting ---------------------------------------------------------------------------


def emit(raw: bytes, opts: EmitOptions, *, full: Rejection | None = None) -> Result:
    """Validate `raw`, publish it as a HookEvent and (with `wait`) render the decision.

    `full` describes the whole input when `raw` is only its start (stdin was larger
    than any event may be): its size and sha256 then go into the reject record.

    Example:
        >>> r = emit(b'{"hook_event_name": "Stop"}', EmitOptions(target=Target(data_dir=d)))  # doctest: +SKIP
        >>> r.status, r.exit_code  # doctest: +SKIP
        ('published', 0)
    """
    from ingest.private import UnsafeDataDir, check_data_dir

    try:
        check_data_dir(opts.target.data_dir)
    except UnsafeDataDir as unsafe:
        # Nothing is spooled, kept or trusted there: the events and keys would be another
        # user's to read or forge. The agent gets the fail mode's answer and the reason.
        return _refused_data_dir(raw, opts, unsafe)
    try:
        payload, text = validate(raw, agent=opts.agent)
    except InvalidEvent as e:
        if full is not None:  # `raw` is only the start: name the whole input's size
            e = InvalidEvent(
                e.where, f"event of {full.size} bytes exceeds the limit of {MAX_EVENT_BYTES} bytes"
            )
        return _bad_input(raw, opts, e, full)
    try:
        event = event_of(payload, text, opts)
    except InvalidEvent as e:
        return _bad_input(raw, opts, e, full)
    spool = Spool(opts.target.data_dir)
    quiet_nats_logs()
    try:
        return asyncio.run(_deliver(event, opts, spool))
    except Exception as e:  # a bug must not block the agent unless it asked for closed
        return undelivered(event, opts, spool, f"internal error: {type(e).__name__}: {e}")


def _refused_data_dir(raw: bytes, opts: EmitOptions, why: HookauditError) -> Result:
    """The answer when the data dir is not private: the fail mode's, naming why."""
    try:
        payload, _ = validate(raw, agent=opts.agent)
        name = str(payload.get("hook_event_name", ""))
    except InvalidEvent as e:
        return rejected_result(opts, e, f"; input NOT kept: {why}")
    return fail_result(
        name, opts.fail, f"no decision: {why}", status="no-decision", agent=opts.agent
    )


def _bad_input(raw: bytes, opts: EmitOptions, err: InvalidEvent, full: Rejection | None) -> Result:
    """Refused input never vanishes: it is kept on disk and recorded in the log.

    The log gets a stub event (payload ``{}``) carrying the Rejection (size, sha256,
    reason, its start as text), published like any event, or spooled when NATS is down;
    the worker records it as ``decided_by = 'rejected'``.
    """
    stub, kept = reject_stub(raw, opts, err, full)
    said = rejected_result(opts, err, kept)  # what the agent gets, recorded with the stub
    stub = msgspec.structs.replace(stub, fallback=fallback(stub.event, opts.fail, str(err), said))
    try:
        quiet_nats_logs()
        asyncio.run(_record_reject(stub, opts, Spool(opts.target.data_dir)))
    except Exception as e:  # the reject is on disk already; say that the log missed it
        kept += f"; not recorded in the log: {type(e).__name__}: {e}"
    return rejected_result(opts, err, kept)


async def _record_reject(stub: HookEvent, opts: EmitOptions, spool: Spool) -> None:
    async with asyncio.timeout(opts.budget()):
        try:
            nc = await connect(opts.target)
        except HookauditError:
            spool.append(stub)
            return
        try:
            sent = await Publisher(nc, opts.target)(stub)
            if sent.rejected is not None:
                raise Unavailable(sent.rejected)
        except HookauditError:
            spool.append(stub)
        finally:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(nc.close(), timeout=1.0)


def undelivered(
    event: HookEvent,
    opts: EmitOptions,
    spool: Spool,
    why: str | HookauditError,
    *,
    maybe_stored: bool = False,
) -> Result:
    """NATS could not take the event: spool it, then act per the fail mode.

    Observe mode stays silent when NATS is merely unavailable, but an operator's
    mistake (credentials, TLS, a conflicting stream) is reported on stderr. A waiting
    emitter answers by itself, so the spooled event carries that answer (`Fallback`):
    its record will say what the agent was told. When the publish may have been stored
    after all (no PubAck: `PublishUncertain`, or the budget ran out mid-publish), the
    spooled copy is a notice with its own message id: sent again under the event's id,
    JetStream would drop it as a duplicate and the log would keep only the policy's
    decision, which the agent never got.
    """
    maybe_stored = maybe_stored or isinstance(why, PublishUncertain)
    answer = None
    if opts.wait:
        answer = fail_result(
            event.event,
            opts.fail,
            f"no decision: {why}; event spooled",
            status="spooled",
            agent=opts.agent,
        )
        fb = fallback(event.event, opts.fail, f"spooled: {why}", answer, notice=maybe_stored)
        event = msgspec.structs.replace(event, fallback=fb)
    try:
        spool.append(event)
    except Unavailable as e:
        return fail_result(
            event.event,
            opts.fail,
            f"event lost: {why}; and spooling failed: {e}",
            status="lost",
            agent=opts.agent,
        )
    if answer is not None:
        return answer
    if isinstance(why, HookauditError) and not isinstance(why, Unavailable):
        return Result("spooled", stderr=f"hookaudit emit: {why}; event spooled")
    return Result("spooled")


def fallback(
    event: str, fail: FailMode, why: str, answer: Result, *, notice: bool = False
) -> Fallback:
    """What the agent was told without a decision (`answer`), as the log records it.

    Example:
        >>> r = fail_result("Stop", "closed", "no decision", status="no-decision", agent=opts.agent)
        >>> fallback("Stop", "closed", "timeout", r).blocked
        True
    """
    blocked = answer.blocked
    decision = ("deny" if event == "PreToolUse" else "block") if blocked else None
    reason = answer.stderr.removeprefix("hookaudit emit: ") or None
    return Fallback(
        by="emit",
        why=why,
        fail=fail,
        blocked=blocked,
        decision=decision,
        reason=reason,
        notice=notice,
    )


async def _deliver(event: HookEvent, opts: EmitOptions, spool: Spool) -> Result:
    nc: Client | None = None
    try:
        result, nc = await _deliver_on(event, opts, spool)
        if result.status in ("no-decision",) and nc is not None:
            await notify(event, opts, spool, nc, result)
        return result
    finally:
        if nc is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(nc.close(), timeout=1.0)


async def _deliver_on(
    event: HookEvent, opts: EmitOptions, spool: Spool
) -> tuple[Result, Client | None]:
    nc: Client | None = None
    acked = sending = False
    try:
        async with asyncio.timeout(opts.budget()):
            try:
                nc = await connect(opts.target)
            except HookauditError as e:
                return undelivered(event, opts, spool, e), nc
            publish = Publisher(nc, opts.target)
            if has_pending(opts.target.data_dir):
                # Best effort, bounded: what does not fit in the budget stays spooled,
                # and a spool we cannot flush must not stop this event.
                # This event goes first: the spool gets at most a quarter of what is left.
                with contextlib.suppress(HookauditError, OSError):
                    await spool.flush(publish, budget=_flush_budget(opts))
            sub = None
            reply_to = None
            if opts.wait:
                reply_to = nc.new_inbox()
                sub = await nc.subscribe(reply_to)  # before publishing
            sending = True
            try:
                sent = await publish(event, reply_to=reply_to)
            except HookauditError as e:
                return undelivered(event, opts, spool, e), nc
            acked = True
            if sent.rejected is not None:
                return too_big(event, opts, spool, sent.rejected), nc
            if sub is None:
                return Result("duplicate" if sent.duplicate else "published"), nc
            return await _await_decision(event, opts, sub), nc
    except TimeoutError:
        why = (
            f"no answer within {opts.timeout:g}s"
            if opts.wait
            else f"delivery took longer than {opts.budget():.0f}s"
        )
        if not acked:
            return undelivered(event, opts, spool, why, maybe_stored=sending), nc
        return fail_result(
            event.event, opts.fail, f"no decision: {why}", status="no-decision", agent=opts.agent
        ), nc


#: How long a fallback notice may hold the answer back before it goes to the spool.
NOTICE_TIMEOUT = 0.5


def _flush_budget(opts: EmitOptions) -> float:
    return min(opts.flush_budget, opts.left() / 4) if opts.wait else opts.flush_budget


def too_big(event: HookEvent, opts: EmitOptions, spool: Spool, why: str) -> Result:
    try:
        spool.reject(encode_json(event), why, source="emit")
        kept = f"kept in {spool.rejects_path}"
    except Unavailable as e:
        kept = f"NOT kept: {e}"
    reason = f"event {event.id} not delivered: {why}; {kept}"
    if opts.wait:
        return fail_result(event.event, opts.fail, reason, status="rejected", agent=opts.agent)
    return Result("rejected", stderr=f"hookaudit emit: {reason}")


async def notify(
    event: HookEvent, opts: EmitOptions, spool: Spool, nc: Client, answer: Result
) -> None:
    """The event is in the stream, but the agent got a fallback answer: publish a notice
    (the event again, carrying the answer) so its record says what the agent was told.
    Bounded; spooled when it cannot be published; never changes the answer."""
    fb = fallback(event.event, opts.fail, answer.status, answer, notice=True)
    note = msgspec.structs.replace(event, fallback=fb)
    try:  # the answer is due: a short try, then the spool (the next flush publishes it)
        await asyncio.wait_for(Publisher(nc, opts.target)(note), NOTICE_TIMEOUT)
    except Exception:
        with contextlib.suppress(Unavailable):
            spool.append(note)


async def _next_reply(event: HookEvent, sub: Any, verifier: Verifier | None) -> Reply | str:
    """The first reply on the inbox that a trusted worker signed for this event.

    With a trusted key, anything else (unsigned, forged, a PubAck sent here by another
    publisher, a reply for another event) is skipped: only the deadline ends the wait.
    Without one, the first message is the answer, as before replies were signed.
    """
    import nats.errors

    skipped = ""
    while True:
        try:
            msg = await sub.next_msg(timeout=None)
        except nats.errors.ConnectionClosedError:
            return f"connection closed while waiting for event {event.id}{skipped}"
        if verifier is not None and not verifier.verify_reply(msg.data, msg.headers):
            skipped = "; ignored a reply not signed by a trusted worker"
            continue
        try:
            reply = reply_decoder().decode(msg.data)
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as e:
            if verifier is not None:
                skipped = f"; ignored an undecodable signed reply: {e}"
                continue
            return f"undecodable reply for event {event.id}: {e}"
        if verifier is not None and reply.event_id != event.id:
            skipped = f"; ignored a signed reply for event {reply.event_id}"
            continue
        return reply


async def _await_decision(event: HookEvent, opts: EmitOptions, sub: Any) -> Result:
    from ingest.replysig import trusted_verifier

    try:
        verifier = trusted_verifier(opts.target.worker_key, opts.target.data_dir)
    except HookauditError as e:
        return fail_result(
            event.event, opts.fail, f"no decision: {e}", status="no-decision", agent=opts.agent
        )
    try:
        got = await asyncio.wait_for(_next_reply(event, sub, verifier), max(0.0, opts.left()))
    except TimeoutError:
        return late_result(event, opts)
    return reply_result(event, opts, got)


# -- NATS -------------------------------------------------------------------------------
