"""`hookaudit emit`'s input: stdin read within bounds, checked, and kept when refused.

Rules of this file:
- Reading is bounded: at most MAX_EVENT_BYTES + 1 bytes are kept (one more tells "too
  large" from "exactly full"); the rest of an oversized input is drained for its size and
  sha256 only.
- Refused input never vanishes: its start is kept under ``<data_dir>/rejects/`` and a stub
  event carrying the Rejection (payload ``{}``) goes to the log like any event.

Example:
    >>> raw = b'{"hook_event_name": "Stop", "session_id": "s"}'
    >>> payload, text = validate(raw)
    >>> payload["hook_event_name"], text == raw.decode()
    ('Stop', True)
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import msgspec

from engine.errors import InvalidEvent
from engine.events import is_known
from engine.payload import MAX_EVENT_BYTES, check_types, parse_payload
from engine.records import HookEvent, Rejection, new_event

if TYPE_CHECKING:
    from ingest.emit.emitter import EmitOptions

__all__ = ["drain", "event_of", "keep_reject", "read_input", "reject_stub", "validate"]


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


def validate(
    raw: bytes, where: str = "<stdin>", *, agent: str = "claude_code"
) -> tuple[dict[str, Any], str]:
    """Check an agent's hook input (`engine.payload.parse_payload`); return (payload, text).

    `text` is the input decoded, unchanged: it becomes the event's verbatim payload.

    Example:
        >>> validate(b"[]")
        Traceback (most recent call last):
        ...
        engine.errors.InvalidEvent: <stdin>: expected a JSON object
    """
    payload = parse_payload(raw, where, any_event=agent != "claude_code")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:  # msgspec checks strings; this guards the rest
        raise InvalidEvent(where, f"not UTF-8: {exc}") from exc
    return payload, text


def event_of(
    payload: dict[str, Any], text: str, opts: EmitOptions, *, user: str | None = None
) -> HookEvent:
    """The HookEvent of a checked input. From Claude Code, `text` is its payload verbatim;
    from another agent (`opts.agent`), its dialect normalises the input (InvalidEvent when
    it cannot), the canonical input becomes the payload and `text` is kept verbatim.

    Example:
        >>> event_of({"hook_event_name": "Stop"}, '{"hook_event_name":"Stop"}', opts).agent  # doctest: +SKIP
        'claude_code'
    """
    if opts.agent == "claude_code":
        return new_event(
            payload, raw=text, source=opts.source, user=user, project_dir=opts.project_dir
        )
    from engine.dialects.registry import get

    said = get(opts.agent).normalise(payload)
    check_types(said.payload, "<stdin>")
    # "claude-code" is emit's default source: an event of another agent names that agent
    source = opts.source if opts.source != "claude-code" else opts.agent.replace("_", "-")
    return new_event(
        said.payload,
        source=source,
        user=user,
        agent=opts.agent,
        agent_event=said.agent_event,
        agent_tool=said.agent_tool,
        agent_payload=text,
        project_dir=opts.project_dir,
    )


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
    return _reject_stub(raw, r, opts.source, opts.agent), kept


_EVENT_NAME = re.compile(rb'"hook_event_name"\s*:\s*"([A-Za-z]{1,64})"')
_SESSION = re.compile(rb'"session_id"\s*:\s*"([\x20\x21\x23-\x5b\x5d-\x7e]{1,256})"')


def _reject_stub(raw: bytes, r: Rejection, source: str, agent: str = "claude_code") -> HookEvent:
    """The event recorded for refused input: the event name and session when it says them
    (printable, so a session's queries find it), payload {}."""
    m = _EVENT_NAME.search(raw[: 1 << 20])
    name = m.group(1).decode() if m and is_known(m.group(1).decode()) else "unknown"
    sid = _SESSION.search(raw[: 1 << 20])
    said = {"session_id": sid.group(1).decode()} if sid else {}
    return new_event(
        {"hook_event_name": name, **said}, raw="{}", source=source, rejected=r, agent=agent
    )
