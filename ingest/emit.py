"""`hookaudit emit`: one hook event from stdin to JetStream, optionally waiting for the decision.

Rules of this file:
- Cold start matters: this runs on every tool call. At module level only the stdlib,
  msgspec, `engine.records|events|errors`, `ingest.protocol` and `ingest.spool` are
  imported; nats (`ingest.nats`, `ingest.embedded`) after stdin is validated, and the
  engine's renderer only when a decision has arrived.
- Never hang: connecting, publishing, flushing the spool and waiting for the reply
  each have a bound, and the whole delivery has one more.
- Never lose an event: NATS unreachable -> the spool; bad input -> a reject file; an
  event the server can never take -> ``spool/rejects.jsonl``.
- Never block the agent by accident: only ``--fail closed`` turns a failure into a
  block; what to print is decided by pure functions (`fail_result`, `decision_result`).

Example:
    >>> raw = b'{"hook_event_name": "Stop", "session_id": "s"}'
    >>> payload, text = validate(raw)
    >>> payload["hook_event_name"], text == raw.decode()
    ('Stop', True)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Literal

import msgspec

from engine.errors import HookauditError, InvalidEvent, PublishUncertain, Unavailable
from engine.events import is_known, spec
from engine.failclosed import closed_reason, open_reason
from engine.payload import MAX_EVENT_BYTES, parse_payload
from engine.records import (
    Fallback,
    HookEvent,
    Outcome,
    Rejection,
    encode_json,
    encode_msgpack,
    new_event,
)
from ingest.natsopts import NatsArgs
from ingest.protocol import MSG_ID, REPLY_HEADER, SIG_HEADER, Reply
from ingest.spool import FlushReport, Sent, Spool, has_pending

if TYPE_CHECKING:
    from nats.aio.client import Client

    from ingest.replysig import Verifier

__all__ = [
    "MAX_EVENT_BYTES",
    "EmitOptions",
    "FailMode",
    "Publisher",
    "Result",
    "Target",
    "decision_result",
    "emit",
    "fail_result",
    "flush_spool",
    "keep_reject",
    "late_result",
    "notify",
    "quiet_nats_logs",
    "read_input",
    "reject_stub",
    "rejected_result",
    "reply_decoder",
    "reply_result",
    "too_big",
    "undelivered",
    "validate",
]

FailMode = Literal["open", "closed"]

#: The largest event accepted (as engine.run.parse_payload); bigger input is rejected.
#: JetStream's "message size exceeds maximum allowed" (a permanent, per-event failure).
_JS_MSG_TOO_BIG = 10054


# -- what to print: pure ----------------------------------------------------------------


class Result(msgspec.Struct, frozen=True):
    """What emit prints and how it exits, and what became of the event (`status`).

    `status` is one of ``published``, ``duplicate``, ``decided``, ``no-decision``,
    ``spooled``, ``rejected``, ``lost``.
    """

    status: str
    stdout: str = ""
    stderr: str = ""
    exit_code: int = 0


def fail_result(event_name: str, fail: FailMode, reason: str, *, status: str) -> Result:
    """What to do when no decision can be had, per the fail mode.

    open: proceed (exit 0), one line on stderr. closed: PreToolUse prints a deny and
    exits 0; another event that can be blocked exits 2 with the reason on stderr; an
    event that cannot be blocked proceeds (exit 2 would only add noise for the model).

    Example:
        >>> fail_result("Stop", "closed", "no decision", status="no-decision").exit_code
        2
        >>> fail_result("Stop", "open", "no decision", status="no-decision").exit_code
        0
    """
    if fail == "open":
        return Result(status, stderr=open_reason(reason))
    why = closed_reason(reason)
    if event_name == "PreToolUse":
        from engine.claude_output import blocking_object

        text = json.dumps(blocking_object(event_name, why), separators=(",", ":"))
        return Result(status, stdout=text, stderr=f"hookaudit emit: {reason}")
    if is_known(event_name) and spec(event_name).exit2 in ("block", "fail"):
        return Result(status, stderr=why, exit_code=2)
    return Result(
        status, stderr=f"hookaudit emit: {reason}; {event_name} cannot be blocked, proceeding"
    )


def decision_result(outcome: Outcome) -> Result:
    """Print and exit as `hookaudit eval --format claude` does for the same Outcome
    (`engine.claude_output.express_outcome`, as serve and eval).

    Example:
        >>> decision_result(outcome).exit_code  # doctest: +SKIP
        0
    """
    from engine.claude_output import express_outcome

    out, err, code, _ = express_outcome(outcome)
    return Result("decided", stdout=out, stderr=err, exit_code=code)


# -- input ------------------------------------------------------------------------------


def read_input(stream: BinaryIO | None, limit: int = MAX_EVENT_BYTES) -> bytes:
    """Read stdin up to `limit` + 1 bytes (one more tells "too large" from "exactly full").

    Example:
        >>> import io
        >>> read_input(io.BytesIO(b"x" * 10), limit=4)
        b'xxxxx'
    """
    if stream is None:
        return b""
    chunks: list[bytes] = []
    left = limit + 1
    while left > 0:
        chunk = stream.read(min(left, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def drain(stream: BinaryIO, head: bytes) -> Rejection:
    """Read what is left of an oversized input; its size and sha256 (of all of it, `head`
    included), for the reject record. Reads in 1 MiB chunks; keeps nothing more.

    Example:
        >>> import io
        >>> drain(io.BytesIO(b"cd"), b"ab").size
        4
    """
    import hashlib

    h = hashlib.sha256(head)
    size = len(head)
    while chunk := stream.read(1 << 20):
        h.update(chunk)
        size += len(chunk)
    return Rejection(stage="emit", reason="", size=size, sha256=h.hexdigest())


def validate(raw: bytes, where: str = "<stdin>") -> tuple[dict[str, Any], str]:
    """Check an agent's hook input (`engine.payload.parse_payload`); return (payload, text).

    `text` is the input decoded, unchanged: it becomes the event's verbatim payload.

    Example:
        >>> validate(b"[]")
        Traceback (most recent call last):
        ...
        engine.errors.InvalidEvent: <stdin>: expected a JSON object
    """
    payload = parse_payload(raw, where)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:  # msgspec checks strings; this guards the rest
        raise InvalidEvent(where, f"not UTF-8: {exc}") from exc
    return payload, text


def keep_reject(
    data_dir: Path, raw: bytes, reason: str = "", *, full: Rejection | None = None
) -> Path:
    """Keep bad input (its first MAX_EVENT_BYTES) under ``<data_dir>/rejects/``, with a note
    of its full size, its sha256 and why (`ingest.rejects.keep`); return the kept file.

    Example:
        >>> keep_reject(Path("/tmp/ha"), b"not json").name  # doctest: +SKIP
        '20250101T120000.123456Z-0194....bin'
    """
    from ingest.rejects import keep

    kept = keep(data_dir, raw, reason, stage="emit", full=full)
    return Path(kept.path)


# -- options ----------------------------------------------------------------------------


class Target(msgspec.Struct, frozen=True, kw_only=True):
    """Where events go: the data dir (spool, embedded server record) and NATS.

    Example:
        >>> Target(data_dir=Path("/tmp/ha")).publish_timeout
        2.0
    """

    data_dir: Path
    nats_url: str | None = None
    prefix: str = ""
    creds: str | None = None
    nkey_seed: str | None = None
    user: str | None = None
    password: str | None = None
    tls_ca: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    #: Public key(s) of the workers whose signed replies decide (else the data dir's).
    worker_key: str | None = None
    connect_timeout: float = 2.0
    publish_timeout: float = 2.0

    def nats_args(self) -> NatsArgs:
        return NatsArgs(
            nats_url=self.nats_url,
            creds=self.creds,
            nkey_seed=self.nkey_seed,
            user=self.user,
            password=self.password,
            tls_ca=self.tls_ca,
            tls_cert=self.tls_cert,
            tls_key=self.tls_key,
            prefix=self.prefix,
        )


class EmitOptions(msgspec.Struct, frozen=True, kw_only=True):
    """How one emit behaves (the CLI options).

    Example:
        >>> EmitOptions(target=Target(data_dir=Path("/tmp/ha")), wait=True).fail
        'open'
    """

    target: Target
    source: str = "claude-code"
    wait: bool = False
    timeout: float = 10.0
    fail: FailMode = "open"
    flush_budget: float = 2.0

    def max_bytes(self) -> int:
        """The largest event accepted (`engine.payload.MAX_EVENT_BYTES`)."""
        return MAX_EVENT_BYTES

    def budget(self) -> float:
        """A bound on the whole delivery, over the bounds of its steps."""
        t = self.target
        servers = max(1, (t.nats_url or "").count(",") + 1)
        connect = 2 * t.connect_timeout * servers + 0.5
        return (
            connect + self.flush_budget + 8 * t.publish_timeout + (self.timeout if self.wait else 0)
        )


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
    try:
        payload, text = validate(raw)
    except InvalidEvent as e:
        if full is not None:  # `raw` is only the start: name the whole input's size
            e = InvalidEvent(
                e.where, f"event of {full.size} bytes exceeds the limit of {MAX_EVENT_BYTES} bytes"
            )
        return _bad_input(raw, opts, e, full)
    event = new_event(payload, raw=text, source=opts.source)
    spool = Spool(opts.target.data_dir)
    quiet_nats_logs()
    try:
        return asyncio.run(_deliver(event, opts, spool))
    except Exception as e:  # a bug must not block the agent unless it asked for closed
        return undelivered(event, opts, spool, f"internal error: {type(e).__name__}: {e}")


def _bad_input(raw: bytes, opts: EmitOptions, err: InvalidEvent, full: Rejection | None) -> Result:
    """Refused input never vanishes: it is kept on disk and recorded in the log.

    The log gets a stub event (payload ``{}``) carrying the Rejection (size, sha256,
    reason, its start as text), published like any event, or spooled when NATS is down;
    the worker records it as ``decided_by = 'rejected'``.
    """
    stub, kept = reject_stub(raw, opts, err, full)
    try:
        quiet_nats_logs()
        asyncio.run(_record_reject(stub, opts, Spool(opts.target.data_dir)))
    except Exception as e:  # the reject is on disk already; say that the log missed it
        kept += f"; not recorded in the log: {type(e).__name__}: {e}"
    return rejected_result(opts, err, kept)


def reject_stub(
    raw: bytes, opts: EmitOptions, err: InvalidEvent, full: Rejection | None = None
) -> tuple[HookEvent, str]:
    """Keep refused input under ``rejects/``; the stub event for the log, and where it is kept.

    Example:
        >>> reject_stub(b"[]", opts, InvalidEvent("<stdin>", "expected a JSON object"))  # doctest: +SKIP
        (HookEvent(...), '; input kept in /tmp/ha/rejects/....bin')
    """
    try:
        kept = f"; input kept in {keep_reject(opts.target.data_dir, raw, str(err), full=full)}"
    except OSError as e:
        kept = f"; input NOT kept: {e}"
    from ingest.rejects import rejection

    r = rejection(raw, str(err), stage="emit")
    if full is not None:
        r = msgspec.structs.replace(r, size=full.size, sha256=full.sha256)
    return _reject_stub(raw, r, opts.source), kept


def rejected_result(opts: EmitOptions, err: InvalidEvent, kept: str) -> Result:
    """What emit answers for refused input: one line, and exit 2 when failing closed."""
    line = f"hookaudit emit: {err}{kept}"
    if opts.fail == "closed":
        return Result("rejected", stderr=line, exit_code=2)
    return Result("rejected", stderr=line)


_EVENT_NAME = re.compile(rb'"hook_event_name"\s*:\s*"([A-Za-z]{1,64})"')
_SESSION = re.compile(rb'"session_id"\s*:\s*"([\x20\x21\x23-\x5b\x5d-\x7e]{1,256})"')


def _reject_stub(raw: bytes, r: Rejection, source: str) -> HookEvent:
    """The event recorded for refused input: the event name and session when it says them
    (printable, so a session's queries find it), payload {}."""
    m = _EVENT_NAME.search(raw[: 1 << 20])
    name = m.group(1).decode() if m and is_known(m.group(1).decode()) else "unknown"
    sid = _SESSION.search(raw[: 1 << 20])
    said = {"session_id": sid.group(1).decode()} if sid else {}
    return new_event({"hook_event_name": name, **said}, raw="{}", source=source, rejected=r)


async def _record_reject(stub: HookEvent, opts: EmitOptions, spool: Spool) -> None:
    async with asyncio.timeout(opts.budget()):
        try:
            nc = await _connect(opts.target)
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
            event.event, opts.fail, f"no decision: {why}; event spooled", status="spooled"
        )
        fb = fallback(event.event, opts.fail, f"spooled: {why}", answer, notice=maybe_stored)
        event = msgspec.structs.replace(event, fallback=fb)
    try:
        spool.append(event)
    except Unavailable as e:
        return fail_result(
            event.event, opts.fail, f"event lost: {why}; and spooling failed: {e}", status="lost"
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
        >>> r = fail_result("Stop", "closed", "no decision", status="no-decision")
        >>> fallback("Stop", "closed", "timeout", r).blocked
        True
    """
    blocked = answer.exit_code == 2 or '"permissionDecision":"deny"' in answer.stdout
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
                nc = await _connect(opts.target)
            except HookauditError as e:
                return undelivered(event, opts, spool, e), nc
            publish = Publisher(nc, opts.target)
            if has_pending(opts.target.data_dir):
                # Best effort, bounded: what does not fit in the budget stays spooled,
                # and a spool we cannot flush must not stop this event.
                with contextlib.suppress(HookauditError, OSError):
                    await spool.flush(publish, budget=opts.flush_budget)
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
        why = f"delivery took longer than {opts.budget():.0f}s"
        if not acked:
            return undelivered(event, opts, spool, why, maybe_stored=sending), nc
        return fail_result(event.event, opts.fail, f"no decision: {why}", status="no-decision"), nc


def too_big(event: HookEvent, opts: EmitOptions, spool: Spool, why: str) -> Result:
    try:
        spool.reject(encode_json(event), why, source="emit")
        kept = f"kept in {spool.rejects_path}"
    except Unavailable as e:
        kept = f"NOT kept: {e}"
    reason = f"event {event.id} not delivered: {why}; {kept}"
    if opts.wait:
        return fail_result(event.event, opts.fail, reason, status="rejected")
    return Result("rejected", stderr=f"hookaudit emit: {reason}")


async def notify(
    event: HookEvent, opts: EmitOptions, spool: Spool, nc: Client, answer: Result
) -> None:
    """The event is in the stream, but the agent got a fallback answer: publish a notice
    (the event again, carrying the answer) so its record says what the agent was told.
    Bounded; spooled when it cannot be published; never changes the answer."""
    fb = fallback(event.event, opts.fail, answer.status, answer, notice=True)
    note = msgspec.structs.replace(event, fallback=fb)
    try:
        await asyncio.wait_for(Publisher(nc, opts.target)(note), opts.target.publish_timeout)
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
        if verifier is not None and not verifier.verify(
            msg.data, (msg.headers or {}).get(SIG_HEADER)
        ):
            skipped = "; ignored a reply not signed by a trusted worker"
            continue
        try:
            reply = reply_decoder().decode(msg.data)
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
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
        return fail_result(event.event, opts.fail, f"no decision: {e}", status="no-decision")
    try:
        got = await asyncio.wait_for(_next_reply(event, sub, verifier), opts.timeout)
    except TimeoutError:
        return late_result(event, opts)
    return reply_result(event, opts, got)


def late_result(event: HookEvent, opts: EmitOptions) -> Result:
    """The answer when no decision arrived within ``--timeout`` (per the fail mode)."""
    return fail_result(
        event.event,
        opts.fail,
        f"no decision arrived within {opts.timeout:g}s for {event.event} event {event.id}",
        status="no-decision",
    )


def reply_result(event: HookEvent, opts: EmitOptions, got: Reply | str) -> Result:
    """The answer for what arrived on the inbox: a trusted Reply, or why there is none.

    Example:
        >>> reply_result(event, opts, "connection closed").status  # doctest: +SKIP
        'no-decision'
    """
    if isinstance(got, str):
        return fail_result(event.event, opts.fail, got, status="no-decision")
    reply = got
    if reply.event_id != event.id or reply.error is not None or reply.outcome is None:
        why = reply.error or f"reply for event {reply.event_id!r} carries no outcome"
        return fail_result(
            event.event, opts.fail, f"no decision for event {event.id}: {why}", status="no-decision"
        )
    try:
        return decision_result(reply.outcome)
    except Exception as e:  # the renderer is the engine's; a bug there is still no decision
        why = f"cannot render the decision for event {event.id}: {type(e).__name__}: {e}"
        return fail_result(event.event, opts.fail, why, status="no-decision")


_REPLY: list[msgspec.msgpack.Decoder[Reply]] = []


def reply_decoder() -> msgspec.msgpack.Decoder[Reply]:
    # Built on first use: only --wait needs it, and it costs start-up time.
    if not _REPLY:
        _REPLY.append(msgspec.msgpack.Decoder(Reply))
    return _REPLY[0]


# -- NATS -------------------------------------------------------------------------------


def quiet_nats_logs() -> None:
    # ingest.nats logs reconnect trouble; with no handler Python would print it on
    # stderr, and observe mode promises silence. Failures are reported by Result.
    logging.getLogger("hookaudit.nats").addHandler(logging.NullHandler())
    logging.getLogger("hookaudit.nats").propagate = False


async def _connect(t: Target) -> Client:
    from ingest.natsopts import connect_options

    co = connect_options(
        t.nats_args(),
        t.data_dir,
        "emitter",
        name="hookaudit-emit",
        connect_timeout=t.connect_timeout,
        # A short-lived process: one quick reconnect, then fail over to the spool.
        max_reconnect=1,
        reconnect_wait=0.1,
    )
    return await co.connect()


class Publisher:
    """Publishes HookEvents to JetStream (a `spool.Publish`); provisions the streams once
    if no stream answers. Transient failures raise Unavailable.

    Example:
        >>> sent = await Publisher(nc, Target(data_dir=d))(event)  # doctest: +SKIP
        >>> sent.duplicate  # doctest: +SKIP
        False
    """

    def __init__(self, nc: Client, t: Target) -> None:
        from ingest.nats import names

        self.nc = nc
        self.js = nc.jetstream(timeout=t.publish_timeout)
        self.names = names(t.prefix)
        self.prefix = t.prefix
        self.timeout = t.publish_timeout
        self.provisioned = False
        self.provision_lock = asyncio.Lock()

    async def __call__(self, event: HookEvent, reply_to: str | None = None) -> Sent:
        import nats.errors
        import nats.js.errors

        from ingest.nats import event_subject, provision, publish_error

        subject = event_subject(self.names, event.event)
        # A fallback notice repeats an event already stored: its own id for dedup.
        notice = event.fallback is not None and event.fallback.notice
        headers = {MSG_ID: f"{event.id}:fallback" if notice else event.id}
        if reply_to is not None:
            headers[REPLY_HEADER] = reply_to
        data = encode_msgpack(event)
        retried = False
        while True:
            try:
                ack = await self.js.publish(subject, data, timeout=self.timeout, headers=headers)
                return Sent(duplicate=bool(ack.duplicate))
            except nats.js.errors.NoStreamResponseError as e:
                if retried:
                    raise publish_error(e, subject, self.timeout) from e
                retried = True
                async with self.provision_lock:  # a flush has many publishes in flight
                    if not self.provisioned:
                        await provision(self.js, prefix=self.prefix)
                        self.provisioned = True
            except nats.errors.MaxPayloadError:
                return Sent(
                    rejected=f"{len(data)} bytes exceed the NATS server's max_payload "
                    f"({self.nc.max_payload} bytes); raise max_payload in its config"
                )
            except nats.js.errors.APIError as e:
                if e.err_code == _JS_MSG_TOO_BIG:
                    return Sent(rejected=f"stream refused {len(data)} bytes: {e.description}")
                raise publish_error(e, subject, self.timeout) from e
            except (OSError, nats.errors.Error) as e:
                raise publish_error(e, subject, self.timeout) from e


async def _flush(
    t: Target, progress: Callable[[int, int], None] | None, wait_lock: float
) -> FlushReport:
    nc = await _connect(t)
    try:
        return await Spool(t.data_dir).flush(
            Publisher(nc, t), wait_lock=wait_lock, progress=progress
        )
    finally:
        with contextlib.suppress(Exception):
            await asyncio.wait_for(nc.close(), timeout=2.0)


def flush_spool(
    t: Target,
    *,
    progress: Callable[[int, int], None] | None = None,
    wait_lock: float = 60.0,
) -> FlushReport:
    """Publish everything spooled under `t.data_dir`; raises Unavailable if NATS is down.

    Example:
        >>> flush_spool(Target(data_dir=Path("/tmp/ha"), nats_url=url)).remaining  # doctest: +SKIP
        0
    """
    quiet_nats_logs()
    return asyncio.run(_flush(t, progress, wait_lock))
