"""Claude Code: the canonical dialect. Its input is the canonical event; its answers are
`engine.claude_output`'s (the emit path renders them there, with the Outcome's profile).

Example:
    >>> ClaudeCode().normalise({"hook_event_name": "Stop", "session_id": "s"}).agent_event
    'Stop'
"""

from __future__ import annotations

from typing import Any

from engine.dialects.base import Answer, Dialect, Normalised
from engine.failclosed import closed_answer

__all__ = ["ClaudeCode"]


class ClaudeCode(Dialect):
    name = "claude_code"

    def normalise(self, payload: dict[str, Any]) -> Normalised:
        tool = payload.get("tool_name")
        return Normalised(
            payload,
            str(payload.get("hook_event_name", "")),
            tool if isinstance(tool, str) else None,
        )

    def express(self, event: str, decision: Any, call: Any = None) -> Answer:
        from engine.claude_output import express

        out, err, code, _ = express(event, decision)
        return Answer(out, err, code)

    def block(self, event: str, reason: str) -> Answer:
        out, err, code = closed_answer(reason)
        return Answer(out, err, code)
