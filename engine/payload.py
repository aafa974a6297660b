"""Checking an agent's hook input: the one validator `eval`, `emit` and `serve` share.

Light on purpose (msgspec, the event catalog, the error types): `hookaudit emit` runs on
every tool call and imports this without the rest of the engine.

Example:
    >>> parse_payload(b'{"hook_event_name": "Stop"}')["hook_event_name"]
    'Stop'
"""

from __future__ import annotations

from typing import Any

import msgspec

from engine.errors import InvalidEvent
from engine.events import is_known

__all__ = ["MAX_EVENT_BYTES", "parse_payload"]

MAX_EVENT_BYTES = 8 * 1024 * 1024
_decoder = msgspec.json.Decoder(dict[str, Any])


def parse_payload(raw: bytes | str, where: str = "event") -> dict[str, Any]:
    """Decode and check a hook input; InvalidEvent names what is wrong and where.

    >>> parse_payload(b"[]", "<stdin>")
    Traceback (most recent call last):
    ...
    engine.errors.InvalidEvent: <stdin>: expected a JSON object
    """
    if len(raw) > MAX_EVENT_BYTES:
        raise InvalidEvent(where, f"event larger than {MAX_EVENT_BYTES} bytes")
    if not raw.strip():
        raise InvalidEvent(where, "empty input: expected the hook event JSON")
    try:
        payload = _decoder.decode(raw)
    except msgspec.ValidationError as exc:
        raise InvalidEvent(where, "expected a JSON object") from exc
    except msgspec.DecodeError as exc:
        raise InvalidEvent(where, f"malformed JSON: {exc}") from exc
    name = payload.get("hook_event_name")
    if not isinstance(name, str) or not name:
        raise InvalidEvent(where, "hook_event_name: missing or not a string")
    if not is_known(name):
        raise InvalidEvent(where, f"hook_event_name: unknown hook event {name!r}")
    return payload
