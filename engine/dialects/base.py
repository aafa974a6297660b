"""What every dialect is: the normalised event, the answer, and the helpers they share.

Rules of this file:
- Pure: no I/O. Stdlib and msgspec only.
- A normalised payload is what Claude Code would have sent for the same call: its event
  name, its tool names and input keys where they mean the same, the agent's other
  fields kept. `agent_event` and `agent_tool` keep the agent's own names; the agent's
  verbatim input is kept by the caller (`HookEvent.agent_payload`).
- An agent that gives no tool-call id gets a derived one (`derived_id`): the same for a
  call's Pre and Post events, so queries pair them.

Example:
    >>> derived_id("s1", "Bash", {"command": "ls"})
    'ha-481f6296fbce6cb2'
"""

from __future__ import annotations

import abc
import hashlib
from typing import Any

import msgspec

__all__ = [
    "Answer",
    "Dialect",
    "Normalised",
    "UnknownAgent",
    "canonical_input",
    "derived_id",
    "rename",
    "unrename",
]

_canonical = msgspec.json.Encoder(order="sorted")


class UnknownAgent(ValueError):
    """An agent name hookaudit has no dialect for."""


class Normalised(msgspec.Struct, frozen=True):
    """An agent's hook input as a canonical event."""

    payload: dict[str, Any]  # Claude Code shaped: hook_event_name, tool_name, tool_input, ...
    agent_event: str  # the agent's own event name
    agent_tool: str | None = None  # the agent's own tool name


class Answer(msgspec.Struct, frozen=True):
    """What a hook process prints and how it exits, for one agent."""

    stdout: str = ""
    stderr: str = ""
    exit_code: int = 0


class Dialect(abc.ABC):
    """One agent's hook protocol. Each agent's subclass sets the names and gives the three
    methods (abstract here: a dialect that lacks one cannot be made)."""

    #: The agent as recorded (`HookEvent.agent`).
    name: str = ""
    #: Events that can stop what the agent does (a tool call, a prompt, a stop).
    blocking_events: frozenset[str] = frozenset()

    @abc.abstractmethod
    def normalise(self, payload: dict[str, Any]) -> Normalised:
        """The agent's hook input as a canonical event (InvalidEvent when it cannot be)."""

    @abc.abstractmethod
    def express(self, event: str, decision: Any, call: Any = None) -> Answer:
        """`decision` (an `engine.aggregate.Decision`) for canonical `event`; `call` is the
        `HookEvent` decided (its agent's tool name and canonical input, which a rewritten
        input is expressed against), None when not known."""

    @abc.abstractmethod
    def block(self, event: str, reason: str) -> Answer:
        """The blocking answer for canonical `event` when there is no decision."""


def derived_id(session_id: str, tool_name: str, tool_input: object) -> str:
    """A stable tool-call id for an agent that gives none: the same for a call's Pre and
    Post (session, canonical tool name, input). Two identical calls in one session share
    it; queries pair them in order.
    """
    h = hashlib.sha256()
    h.update(session_id.encode("utf-8", "surrogatepass"))
    h.update(b"\0")
    h.update(tool_name.encode("utf-8", "surrogatepass"))
    h.update(b"\0")
    try:
        h.update(_canonical.encode(tool_input))
    except (TypeError, msgspec.EncodeError):
        h.update(repr(tool_input).encode("utf-8", "surrogatepass"))
    return "ha-" + h.hexdigest()[:16]


def canonical_input(call: Any) -> dict[str, Any] | None:
    """The canonical `tool_input` of the decided call (`HookEvent.payload`), None if none."""
    payload = getattr(call, "payload", None)
    if not isinstance(payload, str):
        return None
    try:
        doc = msgspec.json.decode(payload)
    except (msgspec.DecodeError, RecursionError):
        return None
    ti = doc.get("tool_input") if isinstance(doc, dict) else None
    return ti if isinstance(ti, dict) else None


def unrename(d: dict[str, Any], names: dict[str, str]) -> dict[str, Any]:
    """`d` (canonical keys) back in the agent's keys: the inverse of `rename` with `names`.

    >>> unrename({"file_path": "/a", "content": "x"}, {"absolute_path": "file_path"})
    {'content': 'x', 'absolute_path': '/a'}
    """
    return rename(d, {new: old for old, new in names.items()})


def rename(d: dict[str, Any], names: dict[str, str]) -> dict[str, Any]:
    """`d` with keys renamed per `names` (a key already present under the new name wins)."""
    out = dict(d)
    for old, new in names.items():
        if old in out and new not in out:
            out[new] = out.pop(old)
    return out
