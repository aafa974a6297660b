"""The NATS adapter: connecting, stream names and subjects, idempotent provisioning.

This module and `ingest/nats/conn.py` (connecting; re-exported here) are the ones (with
`ingest/nats/embedded.py`, which runs a local server) that talk to nats-py. Its errors are
translated there and here, once, with ``raise ... from``:

- a server that cannot be reached, or JetStream that does not answer -> `Unavailable`
- a stream or consumer that exists with settings we cannot use    -> `ProvisionError`
- a credentials or TLS file that is missing or unreadable          -> `SettingsError`

Every other module takes a `Names` instead of hard-coding stream names and subjects, so
tests can run side by side on one server with a unique prefix each.

Example:
    >>> n = names("t1")
    >>> n.events_stream, event_subject(n, "PreToolUse")
    ('T1_HOOK_EVENTS', 't1.hooks.events.PreToolUse')
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum
from typing import Any

import nats.errors
from nats.js import JetStreamContext
from nats.js import api as js_api
from nats.js import errors as js_errors

from engine.errors import ProvisionError, Unavailable
from ingest.nats.conn import ConnectOptions, connect, denied, describe, publish_error, split_urls

__all__ = [
    "ANCHORS_STREAM",
    "EVENTS_STREAM",
    "EVENTS_SUBJECTS",
    "OUTCOMES_STREAM",
    "OUTCOMES_SUBJECTS",
    "WORKER_CONSUMER",
    "ConnectOptions",
    "Names",
    "ProvisionError",
    "Unavailable",
    "anchor_subject",
    "connect",
    "describe",
    "event_subject",
    "fetch_anchors",
    "names",
    "outcome_subject",
    "provision",
    "publish_error",
    "split_urls",
    "subject_token",
]

_log = logging.getLogger("hookaudit.nats")

EVENTS_STREAM = "HOOK_EVENTS"
EVENTS_SUBJECTS = "hooks.events.>"
OUTCOMES_STREAM = "HOOK_OUTCOMES"
# one message per appended batch: (worker, last seq, chain head), kept off the host
ANCHORS_STREAM = "HOOK_ANCHORS"
OUTCOMES_SUBJECTS = "hooks.outcomes.>"
WORKER_CONSUMER = "workers"

ACK_WAIT = 30.0
MAX_ACK_PENDING = 10_000

# JetStream API error codes we act on (nats-server's jetstream_errors_generated.go).
_STREAM_NAME_IN_USE = 10058
_STREAM_SUBJECT_OVERLAP = 10065

_PREFIX_OK = re.compile(r"[A-Za-z0-9_-]+")
_TOKEN_BAD = re.compile(r"[^A-Za-z0-9_-]")


# -- names and subjects ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Names:
    """Stream, subject and consumer names of one hookaudit deployment.

    Example:
        >>> Names().events_subjects
        'hooks.events.>'
    """

    prefix: str = ""
    events_stream: str = EVENTS_STREAM
    outcomes_stream: str = OUTCOMES_STREAM
    events_prefix: str = "hooks.events"
    outcomes_prefix: str = "hooks.outcomes"
    worker_consumer: str = WORKER_CONSUMER
    anchors_stream: str = ANCHORS_STREAM
    anchors_prefix: str = "hooks.anchors"

    @property
    def events_subjects(self) -> str:
        return f"{self.events_prefix}.>"

    @property
    def outcomes_subjects(self) -> str:
        return f"{self.outcomes_prefix}.>"


def names(prefix: str = "") -> Names:
    """The names for `prefix`; the empty prefix gives the production names.

    Example:
        >>> names("t1").outcomes_subjects
        't1.hooks.outcomes.>'
    """
    if not prefix:
        return Names()
    if not _PREFIX_OK.fullmatch(prefix):
        raise ValueError(f"NATS name prefix {prefix!r}: expected letters, digits, '_' or '-'")
    up, low = prefix.upper(), prefix.lower()
    return Names(
        prefix=prefix,
        events_stream=f"{up}_{EVENTS_STREAM}",
        outcomes_stream=f"{up}_{OUTCOMES_STREAM}",
        events_prefix=f"{low}.hooks.events",
        outcomes_prefix=f"{low}.hooks.outcomes",
        anchors_stream=f"{up}_{ANCHORS_STREAM}",
        anchors_prefix=f"{low}.hooks.anchors",
    )


def subject_token(text: str) -> str:
    """`text` made safe as one subject token: anything but [A-Za-z0-9_-] becomes '_'.

    An event name comes from the agent; a '.', '*' or '>' in it must not change which
    subjects a message lands on or which consumers see it.

    Example:
        >>> subject_token("a.b*>c d")
        'a_b__c_d'
    """
    return _TOKEN_BAD.sub("_", text) or "_"


def event_subject(names: Names, event_name: str) -> str:
    """The subject an event is published on.

    Example:
        >>> event_subject(Names(), "Stop")
        'hooks.events.Stop'
    """
    return f"{names.events_prefix}.{subject_token(event_name)}"


def anchor_subject(names: Names, worker: str) -> str:
    """The subject a worker publishes its chain heads on.

    Example:
        >>> anchor_subject(Names(), "host-1")
        'hooks.anchors.host-1'
    """
    return f"{names.anchors_prefix}.{subject_token(worker)}"


def outcome_subject(names: Names, event_name: str, decision: str) -> str:
    """The subject an outcome is published on, by event and decision.

    Example:
        >>> outcome_subject(Names(), "PreToolUse", "deny")
        'hooks.outcomes.PreToolUse.deny'
    """
    return f"{names.outcomes_prefix}.{subject_token(event_name)}.{subject_token(decision)}"


# -- provisioning ----------------------------------------------------------------------


def _stream_configs(
    n: Names, replicas: int, duplicate_window: float, max_age: float | None = None
) -> tuple[js_api.StreamConfig, ...]:
    common: dict[str, Any] = {
        "storage": js_api.StorageType.FILE,
        "num_replicas": replicas,
        "duplicate_window": duplicate_window,
        "discard": js_api.DiscardPolicy.OLD,
        # Limits, not workqueue: a workqueue stream deletes each event once a worker
        # acks it and allows only one consumer per subject, so replay, a second worker
        # pool or an audit tap could never read it again. Events must outlive the ack.
        "retention": js_api.RetentionPolicy.LIMITS,
    }
    return (
        js_api.StreamConfig(
            name=n.events_stream,
            description="hookaudit: hook events, verbatim; Nats-Msg-Id is the event id",
            subjects=[n.events_subjects],
            max_age=max_age,
            **common,
        ),
        js_api.StreamConfig(
            name=n.outcomes_stream,
            description="hookaudit: decisions, after they are appended to the log",
            subjects=[n.outcomes_subjects],
            max_age=max_age,
            **common,
        ),
        # The log's chain heads, outside the host that writes the log: nobody may delete
        # or purge them (not even the worker role), so `verify --anchors` can tell a
        # rewritten or cut history from the one that was anchored.
        js_api.StreamConfig(
            name=n.anchors_stream,
            description="hookaudit: chain heads of the log, one per appended batch",
            subjects=[f"{n.anchors_prefix}.>"],
            deny_delete=True,
            deny_purge=True,
            **common,
        ),
    )


def _worker_config(n: Names, ack_wait: float = ACK_WAIT) -> js_api.ConsumerConfig:
    return js_api.ConsumerConfig(
        name=n.worker_consumer,
        durable_name=n.worker_consumer,
        description="hookaudit workers: ack after the outcome is durably appended",
        deliver_policy=js_api.DeliverPolicy.ALL,
        ack_policy=js_api.AckPolicy.EXPLICIT,
        ack_wait=ack_wait,
        max_ack_pending=MAX_ACK_PENDING,
        filter_subject=n.events_subjects,
    )


@contextlib.contextmanager
def _jetstream_errors(what: str, js: JetStreamContext) -> Iterator[None]:
    """Translate nats-py errors raised while provisioning `what`."""
    try:
        yield
    except (
        js_errors.ServiceUnavailableError,  # 503: no JetStream behind the API subject
        nats.errors.NoRespondersError,
        nats.errors.TimeoutError,
    ) as e:
        refused = denied(getattr(js, "_nc", None))
        if refused is not None:  # the server refused the request: it never answers
            raise ProvisionError(
                f"{what}: {refused}; this key's role may not manage streams "
                "(provision with the worker key: hookaudit nats provision)"
            ) from e
        raise Unavailable(
            f"{what}: JetStream did not answer; is it enabled (nats-server -js)?"
        ) from e
    except js_errors.APIError as e:
        raise ProvisionError(f"{what}: {e.description} (err_code {e.err_code})") from e
    except (OSError, nats.errors.Error) as e:
        raise Unavailable(f"{what}: {describe(e)}") from e


def _value(x: object) -> object:
    return x.value if isinstance(x, Enum) else x


def _stream_conflicts(want: js_api.StreamConfig, have: js_api.StreamConfig) -> list[str]:
    diffs = []
    if sorted(have.subjects or []) != sorted(want.subjects or []):
        diffs.append(f"subjects {have.subjects} (want {want.subjects})")
    for field in ("storage", "retention"):
        h, w = _value(getattr(have, field)), _value(getattr(want, field))
        if h != w:
            diffs.append(f"{field} {h} (want {w})")
    return diffs


def _consumer_conflicts(want: js_api.ConsumerConfig, have: js_api.ConsumerConfig) -> list[str]:
    diffs = []
    if have.filter_subject != want.filter_subject or have.filter_subjects:
        shown = have.filter_subjects or have.filter_subject
        diffs.append(f"filter {shown!r} (want {want.filter_subject!r})")
    if _value(have.ack_policy) != _value(want.ack_policy):
        diffs.append(f"ack_policy {_value(have.ack_policy)} (want explicit)")
    if have.deliver_subject:
        diffs.append(f"push consumer delivering to {have.deliver_subject} (want pull)")
    return diffs


async def _ensure_stream(js: JetStreamContext, want: js_api.StreamConfig) -> None:
    name = want.name or ""
    what = f"stream {name}"
    with _jetstream_errors(what, js):
        try:
            info = await js.stream_info(name)
        except js_errors.NotFoundError:
            try:
                await js.add_stream(want)
                return
            except js_errors.BadRequestError as e:
                if e.err_code == _STREAM_SUBJECT_OVERLAP:
                    raise ProvisionError(
                        f"{what}: subjects {want.subjects} overlap another stream's; "
                        "remove that stream or provision with another prefix"
                    ) from e
                if e.err_code != _STREAM_NAME_IN_USE:
                    raise
                # Someone created it between our lookup and our create: check theirs.
                info = await js.stream_info(name)
    diffs = _stream_conflicts(want, info.config)
    if diffs:
        raise ProvisionError(
            f"{what} exists with incompatible settings: {'; '.join(diffs)}. "
            f"Remove it (nats stream rm {name}) or provision with another prefix"
        )


async def _ensure_consumer(js: JetStreamContext, stream: str, want: js_api.ConsumerConfig) -> None:
    name = want.durable_name or ""
    what = f"consumer {name} on stream {stream}"
    with _jetstream_errors(what, js):
        try:
            info = await js.consumer_info(stream, name)
        except js_errors.NotFoundError:
            # Creating with an identical config is idempotent on the server, so a
            # concurrent provision racing us here is harmless.
            info = await js.add_consumer(stream, want)
    diffs = _consumer_conflicts(want, info.config)
    if diffs:
        raise ProvisionError(
            f"{what} exists with incompatible settings: {'; '.join(diffs)}. "
            f"Remove it (nats consumer rm {stream} {name})"
        )


async def provision(
    js: JetStreamContext,
    *,
    replicas: int = 1,
    duplicate_window: float = 120.0,
    prefix: str = "",
    ack_wait: float = ACK_WAIT,
    max_age: float | None = None,
) -> None:
    """Create the streams and the worker consumer, or check the ones that exist.

    `max_age` (seconds; None: no limit, only the server's store bounds them) is how long
    the events and outcomes streams keep a message; the log is the record, the streams
    are transit and a replay buffer. The anchors stream keeps every head.

    `ack_wait` is how long a worker may hold an event before JetStream redelivers it
    (it bounds how long a crashed worker's batch waits); it applies when the consumer
    is created.

    Existing streams whose subjects, storage and retention match are left as they are
    (an operator may have tuned limits or replicas); others raise `ProvisionError`.

    Example:
        >>> await provision(nc.jetstream(), prefix="t1")  # doctest: +SKIP
    """
    n = names(prefix)
    for config in _stream_configs(n, replicas, duplicate_window, max_age):
        await _ensure_stream(js, config)
    await _ensure_consumer(js, n.events_stream, _worker_config(n, ack_wait))


async def fetch_anchors(js: JetStreamContext, n: Names, *, limit: int = 10_000_000) -> list[bytes]:
    """Every anchor message's data, oldest first (one message get each: analyst role).

    Example:
        >>> len(await fetch_anchors(nc.jetstream(), names()))  # doctest: +SKIP
        12
    """
    try:
        info = await js.stream_info(n.anchors_stream)
    except js_errors.NotFoundError as exc:
        raise Unavailable(f"stream {n.anchors_stream} does not exist: nothing anchored") from exc
    out: list[bytes] = []
    first, last = info.state.first_seq, info.state.last_seq
    for seq in range(max(1, first), min(last, first + limit - 1) + 1):
        try:
            msg = await js.get_msg(n.anchors_stream, seq)
        except js_errors.NotFoundError:
            continue
        if msg.data:
            out.append(msg.data)
    return out
