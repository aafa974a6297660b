"""The seam between the forwarder and a transport: `Sink`, `Delivery`, `SinkDown`.

Rules of this file:
- A sink says, for each batch, which records it could not take yet (`retry`) and which it
  will never take (`parked`, with the receiver's reason); every other record was accepted
  (for HEC: indexer-acknowledged; for TCP syslog: written and drained to the socket).
- A sink that cannot take anything now (connection refused, 5xx, timeout, no indexer ack)
  raises `SinkDown`; the forwarder backs off and sends the same batch again.
- `keepalive` is called while a sink waits long (HEC acks), so JetStream does not hand the
  batch's messages to anyone else meanwhile.

Example:
    >>> Delivery().accepted_all
    True
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol
from urllib.parse import urlsplit

from ingest.logsetup import CONTROL, escape_controls
from ingest.siem.formats import Formatted

__all__ = ["Delivery", "Keepalive", "Sink", "SinkDown", "printable", "redact_url"]

Keepalive = Callable[[], Awaitable[None]]


_CONTROL_RUN = re.compile(f"(?:{CONTROL.pattern})+")  # a run of them: one space


def printable(text: str, limit: int = 500) -> str:
    """`text` (often a receiver's answer) as one line for logs and status: a hostile
    receiver must not forge log lines with CR/LF or move a terminal with escapes.

    Example:
        >>> printable("HTTP 500: no\\r\\n2026 INFO forged\\x1b[2J")
        'HTTP 500: no 2026 INFO forged [2J'
    """
    return _CONTROL_RUN.sub(" ", text)[:limit]


def redact_url(url: str) -> str:
    """`url` as status, logs and errors may show it: no password, no query (a webhook's
    token often rides there), nothing past the scheme when it does not parse and may hold
    credentials, control characters escaped (an error naming it stays one line).

    Example:
        >>> redact_url("elastic+https://u:pw@h:9200/i")
        'elastic+https://u:***@h:9200/i'
        >>> redact_url("https://h/hook?token=s3cret")
        'https://h/hook?…'
    """
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        if "@" not in url and "?" not in url:
            return escape_controls(url)
        return escape_controls(url.split("://", 1)[0]) + "://…" if "://" in url else "…"
    out = url.split("#", 1)[0]
    if parts.query:
        out = out.split("?", 1)[0] + "?…"
    if password is not None:
        out = out.replace(f":{password}@", ":***@", 1)
    return escape_controls(out)


class SinkDown(Exception):
    """The receiver cannot take the batch now; the same batch is sent again later."""


@dataclass
class Delivery:
    """What a sink did with a batch: indices to retry, indices parked with a reason."""

    retry: list[int] = field(default_factory=list)
    parked: list[tuple[int, str]] = field(default_factory=list)

    @property
    def accepted_all(self) -> bool:
        return not self.retry and not self.parked


class Sink(Protocol):
    """A transport to one receiver."""

    name: str

    async def send(self, batch: list[Formatted], keepalive: Keepalive) -> Delivery: ...

    async def close(self) -> None: ...
