"""What the pure decision flow asks for, and what executors answer.

Rules of this file:
- Data only. An `Invocation` is everything an executor needs to run one hook; a
  `RawResult` is everything it observed. Neither holds a live resource.
- Executors never interpret an answer: exit codes, bodies and model replies are
  decoded by `engine.verdict`, so the same RawResult replays identically.

Example:
    >>> RawResult(exit_code=2, stderr="no rm").exit_code
    2
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import msgspec

from engine.records import HookIdentity

__all__ = ["Executor", "Invocation", "RawResult", "RunHooks"]


class RawResult(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """What an executor observed while running one hook.

    `error_kind` is set when the hook produced no answer at all: ``timeout``,
    ``spawn_failed``, ``plugin_root_missing``, ``url_not_allowed``,
    ``ssrf_blocked_address``, ``http_transport``, ``llm_transport``,
    ``python_exception``, ``unknown_type``, ``cancelled`` …

    Untracked by the garbage collector (``gc=False``): one is made per event, and it
    can never be part of a reference cycle (it holds values and decoded JSON only).
    """

    exit_code: int | None = None
    stdout: str = ""
    stderr: str = ""
    stdout_bytes: int = 0
    stderr_bytes: int = 0
    truncated: bool = False
    http_status: int | None = None
    error_kind: str | None = None
    error: str | None = None
    duration_ms: float = 0.0
    output: dict[str, Any] | None = None
    llm: list[dict[str, Any]] | None = None
    pending: bool = False


class Invocation(msgspec.Struct, frozen=True, gc=False):
    """One planned hook, ready to run.

    `index` is the hook's position in configuration order; aggregation breaks
    ties by it, never by completion order. A Struct (one is built per matched hook per
    event: a frozen dataclass takes 2 µs, this 0.3 µs); copy one with
    `msgspec.structs.replace`.

    Untracked by the garbage collector (``gc=False``): one is made per event, and it
    can never be part of a reference cycle (it holds values, settings and decoded JSON only).
    """

    index: int
    event: str
    hook: Any  # engine.settings.Hook (a pydantic model); typed loosely to keep this a leaf
    identity: HookIdentity
    source: str
    matcher: str | None
    timeout: float
    payload: dict[str, Any]
    input_json: bytes
    cwd: str
    env: dict[str, str] = msgspec.field(default_factory=dict)
    plugin_root: str | None = None
    plugin_data: str | None = None
    allowed_http_urls: tuple[str, ...] | None = None  # Effective.allowed_http_urls
    http_env_allowlist: tuple[str, ...] | None = None  # Effective.http_env_allowlist
    hook_id: str = ""  # identity.key(), computed once per settings by the planner

    def identity_key(self) -> str:
        """The hook's stable id (`HookIdentity.key()`), cached by the planner."""
        return self.hook_id or self.identity.key()

    @property
    def name(self) -> str:
        """The hook name as Claude Code prints it: ``PreToolUse:Bash`` or ``Stop``."""
        query = self.payload.get("tool_name") if isinstance(self.payload, dict) else None
        return f"{self.event}:{query}" if isinstance(query, str) and query else self.event


@dataclass(frozen=True, slots=True)
class RunHooks:
    """Effect: run these hooks in parallel; answer with one RawResult each, same order."""

    invocations: tuple[Invocation, ...]


class Executor(Protocol):
    """Runs one hook and reports what it saw. Never raises for a hook's own failure."""

    async def run(self, inv: Invocation) -> RawResult: ...
