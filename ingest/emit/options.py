"""`hookaudit emit`'s options: where events go (`Target`) and how one emit behaves
(`EmitOptions`), with the deadline of its answer.

Rules of this file:
- Stdlib, msgspec and `ingest.nats.options` only: `ingest.emit.emitter` imports it on every tool call.
- With `wait`, the answer is due `timeout` seconds after `started` (`left`, `budget`):
  Claude Code stops a hook at its own timeout and then lets the call run.

Example:
    >>> EmitOptions(target=Target(data_dir=Path("/tmp/ha"))).fail
    'open'
"""

from __future__ import annotations

import time
from pathlib import Path

import msgspec

from engine.payload import MAX_EVENT_BYTES
from ingest.emit.answer import FailMode
from ingest.nats.options import NatsArgs

__all__ = ["DEADLINE_GRACE", "EmitOptions", "Target"]

#: Past `EmitOptions.left()`, how long the steps before the wait may still run.
DEADLINE_GRACE = 0.25


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
    #: the agent whose dialect the input and the answer speak (`engine.dialects`)
    agent: str = "claude_code"
    #: ``$CLAUDE_PROJECT_DIR`` of the hook's environment, recorded on the event
    project_dir: str | None = None
    wait: bool = False
    timeout: float = 10.0
    fail: FailMode = "open"
    flush_budget: float = 2.0
    #: when this emit (or the relay's request) began: with `wait`, the answer is due by
    #: `started + timeout`, whatever the steps before the decision took (`budget`)
    started: float = msgspec.field(default_factory=time.monotonic)

    def max_bytes(self) -> int:
        """The largest event accepted (`engine.payload.MAX_EVENT_BYTES`)."""
        return MAX_EVENT_BYTES

    def budget(self) -> float:
        """A bound on the whole delivery, over the bounds of its steps. With `wait` it is
        also what is left of `timeout` since `started`: Claude Code stops a hook at its own
        timeout and then lets the call run, so the answer (the decision, or the --fail
        answer) must come by then, however slow connecting, the spool or publishing was."""
        t = self.target
        servers = max(1, (t.nats_url or "").count(",") + 1)
        connect = 2 * t.connect_timeout * servers + 0.5
        steps = connect + self.flush_budget + 8 * t.publish_timeout
        if not self.wait:
            return steps
        # a little past the deadline: the wait for the decision itself ends at it (and says
        # so); this bound is for the steps before, which nothing else cuts short
        return max(0.0, min(steps + self.timeout, self.left() + DEADLINE_GRACE))

    def left(self) -> float:
        """Seconds until the answer is due (`wait`)."""
        return self.timeout - (time.monotonic() - self.started)
