"""What serve answers: the http form of a decision (Claude Code's, or another agent's), the
answer when no decision came, and which agent a request speaks for.

Example:
    >>> failure_answer("Notification", "closed", "timed out")
    b''
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any, Literal

import msgspec

from engine.claude_output import closed_body, express_outcome
from engine.records import Outcome

__all__ = ["HTTP_AGENTS", "Fail", "agent_of", "failure_answer", "render"]

Fail = Literal["open", "closed"]
_json_encoder = msgspec.json.Encoder()


def failure_answer(event: str, fail: Fail, why: str, profile: str = "current") -> bytes:
    """The body when no decision came: empty (open), or the event's blocking form (closed).

    >>> failure_answer("PreToolUse", "closed", "timed out")[:40]
    b'{"hookSpecificOutput":{"hookEventName":"'
    """
    if fail == "open":
        return b""
    return closed_body(event, f"no decision ({why})", profile)


#: Agents besides Claude Code whose http hooks serve answers (`?agent=NAME`): each takes
#: Claude Code's http answer (Qwen Code: tests/agents/test_http_hooks.py runs it).
HTTP_AGENTS = ("qwen_code",)


def render(outcome: Outcome) -> bytes:
    """The http hook body for a worker's Outcome: the http form of `express_outcome`, or of
    the agent's own dialect (what it cannot do, it is told as a block)."""
    agent = outcome.event.agent
    if agent == "claude_code":
        return express_outcome(outcome).body
    from engine.claude_output import blocking_object, decision_of
    from engine.dialects.registry import get

    said = get(agent).express(outcome.event.event, decision_of(outcome), outcome.event)
    if said.stdout:
        return said.stdout.encode()
    if said.exit_code == 2:  # the command form's block: said as the event's blocking JSON
        obj = blocking_object(outcome.event.event, said.stderr.strip() or "blocked")
        return b"" if obj is None else _json_encoder.encode(obj)
    return b""


def agent_of(scope: MutableMapping[str, Any]) -> str | None:
    """The agent a request names (`?agent=NAME`), Claude Code when none; None for an agent
    whose http hooks serve does not answer."""
    from urllib.parse import parse_qs

    query = scope.get("query_string") or b""
    given = parse_qs(query.decode("latin-1")).get("agent", ["claude_code"])[-1]
    return given if given == "claude_code" or given in HTTP_AGENTS else None
