"""Every agent hookaudit speaks, by its recorded name.

Example:
    >>> get("codex").name
    'codex'
    >>> get("cursor")
    Traceback (most recent call last):
    ...
    engine.dialects.base.UnknownAgent: unknown agent 'cursor' (known: claude_code, codex, gemini_cli, copilot_cli, qwen_code, opencode, cline)
"""

from __future__ import annotations

from engine.dialects.base import Dialect, UnknownAgent

__all__ = ["AGENTS", "get"]

#: agent name -> "module:class" (loaded on first use: emit imports one dialect only).
_WHERE = {
    "claude_code": "engine.dialects.claude_code:ClaudeCode",
    "codex": "engine.dialects.codex:Codex",
    "gemini_cli": "engine.dialects.gemini_cli:GeminiCli",
    "copilot_cli": "engine.dialects.copilot_cli:CopilotCli",
    "qwen_code": "engine.dialects.qwen_code:QwenCode",
    "opencode": "engine.dialects.opencode:OpenCode",
    "cline": "engine.dialects.cline:Cline",
}
AGENTS = tuple(_WHERE)
_LOADED: dict[str, Dialect] = {}


def get(name: str) -> Dialect:
    """The dialect of agent `name` (`AGENTS`); UnknownAgent names the known ones."""
    found = _LOADED.get(name)
    if found is not None:
        return found
    where = _WHERE.get(name.replace("-", "_"))
    if where is None:
        raise UnknownAgent(f"unknown agent {name!r} (known: {', '.join(AGENTS)})")
    import importlib

    module, _, cls = where.partition(":")
    made: Dialect = getattr(importlib.import_module(module), cls)()
    found = made
    _LOADED[name] = found
    return found
