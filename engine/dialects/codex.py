"""OpenAI Codex CLI (`@openai/codex` 0.171.0).

What the binary does (tests/conformance/agents runs it):
- Its hook input is Claude Code's shape: the same event names, `Bash` for the shell,
  `tool_use_id`; `apply_patch` carries a patch text (`tool_input.command`), normalised
  here to the file operation it performs (`Write` for a new file, `Edit` otherwise; every
  file it touches listed in `tool_input.file_paths`).
- Its schema lets `transcript_path` be null (a session with no rollout file): the canonical
  event then has none, as Claude Code's type for it is a string.
- Its output parser is strict: an unknown field, a deny without a reason or a `defer`
  fails the hook, and then the call runs. So a block is always exit 2 with a non-empty
  reason on stderr, which needs no JSON at all; an allow prints nothing.
- A rewritten input is Codex's `updatedInput`, for its shell: with `permissionDecision:
  allow` (the real binary ran the original call without it). What Codex cannot do is not
  pretended: `ask` (no prompt in a hook) and a rewrite of `apply_patch` are blocked, with a
  reason that says why.

Example:
    >>> from engine.aggregate import Decision
    >>> Codex().express("PreToolUse", Decision(blocked=True, decision="deny", reason="no"))
    Answer(stdout='', stderr='no', exit_code=2)
"""

from __future__ import annotations

import json
import re
from typing import Any

from engine.dialects.base import Answer, Dialect, Normalised

__all__ = ["Codex", "patch_files"]

_BLOCKING = frozenset(
    {"PreToolUse", "PermissionRequest", "UserPromptSubmit", "Stop", "PostToolUse"}
)
_PATCH_OP = re.compile(r"^\*\*\* (Add|Update|Delete) File: (.+?)\s*$", re.MULTILINE)
_MOVE = re.compile(r"^\*\*\* Move to: (.+?)\s*$", re.MULTILINE)


def patch_files(patch: str) -> list[tuple[str, str]]:
    """(operation, path) of each file an apply_patch text touches, in order.

    >>> patch_files("*** Begin Patch\\n*** Add File: a.py\\n+x\\n*** Update File: b.py\\n*** End Patch")
    [('Add', 'a.py'), ('Update', 'b.py')]
    """
    ops = [(m.group(1), m.group(2)) for m in _PATCH_OP.finditer(patch)]
    ops += [("Move", m.group(1)) for m in _MOVE.finditer(patch)]
    return ops


def _rewrite(updated: dict[str, Any]) -> str:
    """Codex's answer that replaces the call's input: exactly its schema's fields (an
    extra one fails the hook, and then the original call runs)."""
    out = {"hookEventName": "PreToolUse", "permissionDecision": "allow", "updatedInput": updated}
    return json.dumps({"hookSpecificOutput": out}, separators=(",", ":"))


class Codex(Dialect):
    name = "codex"
    blocking_events = _BLOCKING

    def normalise(self, payload: dict[str, Any]) -> Normalised:
        event = str(payload.get("hook_event_name", ""))
        tool = payload.get("tool_name")
        out = dict(payload)
        if out.get("transcript_path", "") is None:  # Codex's schema allows null (no rollout)
            del out["transcript_path"]
        if tool == "apply_patch" and isinstance(payload.get("tool_input"), dict):
            patch = payload["tool_input"].get("command")
            ops = patch_files(patch) if isinstance(patch, str) else []
            paths = [p for _, p in ops]
            only_adds = bool(ops) and all(op == "Add" for op, _ in ops)
            out["tool_name"] = "Write" if only_adds else "Edit"
            out["tool_input"] = {
                **payload["tool_input"],
                "file_path": paths[0] if paths else "",
                "file_paths": paths,
            }
        return Normalised(out, event, tool if isinstance(tool, str) else None)

    def express(self, event: str, decision: Any, call: Any = None) -> Answer:
        reason = decision.reason or "blocked by the hookaudit policy"
        if event == "PreToolUse":
            if decision.decision == "deny" or decision.blocked:
                return Answer("", reason, 2)
            if decision.decision == "ask":
                return Answer(
                    "",
                    f"{reason} (the policy asks for a confirmation, which a Codex hook cannot ask: blocked)",
                    2,
                )
            if decision.updated_input is not None:
                if getattr(call, "agent_tool", None) == "Bash":
                    return Answer(_rewrite(decision.updated_input))
                return Answer(
                    "",
                    "the policy rewrites this call's input, which hookaudit does only for "
                    "Codex's shell: blocked",
                    2,
                )
            return Answer()
        if decision.blocked and event in _BLOCKING:
            return Answer("", reason, 2)
        if event == "PermissionRequest" and decision.decision == "allow":
            # approved without asking; only `behavior`: Codex fails closed on the fields it
            # reserves (updatedInput, updatedPermissions, interrupt)
            said = {"hookEventName": event, "decision": {"behavior": "allow"}}
            return Answer(json.dumps({"hookSpecificOutput": said}, separators=(",", ":")))
        return Answer()

    def block(self, event: str, reason: str) -> Answer:
        from engine.failclosed import closed_reason

        if event in _BLOCKING:
            return Answer("", closed_reason(reason), 2)
        return Answer("", f"hookaudit: {reason}; {event} cannot be blocked, proceeding", 0)
