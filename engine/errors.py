"""Exceptions, split by who is to blame.

Hook failures (exit codes, timeouts, HTTP 500, bad JSON, refusals) are *outcomes*,
recorded in a HookRun, never exceptions. Exceptions are for bad input and bugs:

    HookauditError
    ├── InvalidEvent      what an agent sent is not a hook event (bad JSON, no name)
    ├── SettingsError     what an operator wrote is wrong (file, JSON path, why)
    ├── Unavailable       NATS, disk or another service cannot be reached
    │   └── PublishUncertain  a publish that got no acknowledgement: it may be stored
    ├── ProvisionError    an existing stream or consumer has incompatible settings
    └── LogCorrupt        the append-only log fails verification (file, line, why)

Third-party errors are translated once, at the adapter, with ``raise ... from``.

Example:
    >>> str(SettingsError("settings.json", "hooks.PreToolUse[0].matcher", "invalid regex"))
    'settings.json: hooks.PreToolUse[0].matcher: invalid regex'
"""

from __future__ import annotations

__all__ = [
    "HookauditError",
    "InvalidEvent",
    "LogCorrupt",
    "ProvisionError",
    "PublishUncertain",
    "SettingsError",
    "Unavailable",
]


class HookauditError(Exception):
    """Base of every error hookaudit raises on purpose."""


class InvalidEvent(HookauditError):
    """An agent's hook input cannot be used: malformed JSON, missing or unknown event."""

    def __init__(self, where: str, why: str) -> None:
        super().__init__(f"{where}: {why}" if where else why)
        self.where = where
        self.why = why


class SettingsError(HookauditError):
    """An operator's settings file is unreadable or invalid."""

    def __init__(self, file: str, path: str, why: str) -> None:
        parts = [p for p in (file, path, why) if p]
        super().__init__(": ".join(parts))
        self.file = file
        self.path = path
        self.why = why


class Unavailable(HookauditError):
    """A service hookaudit needs (NATS, the disk) cannot be reached."""


class PublishUncertain(Unavailable):
    """A publish whose acknowledgement never came (a timeout, a connection lost while
    waiting): the stream may hold the event all the same, so a copy sent again under the
    same id can be dropped as a duplicate."""


class ProvisionError(HookauditError):
    """An existing NATS stream or consumer conflicts with what hookaudit needs."""


class LogCorrupt(HookauditError):
    """The append-only log fails verification."""

    def __init__(self, file: str, line: int | None, why: str) -> None:
        where = f"{file}:{line}" if line is not None else file
        super().__init__(f"{where}: {why}")
        self.file = file
        self.line = line
        self.why = why
