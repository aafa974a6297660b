"""Executors: run one hook and report what was observed (`engine.effects.Executor`).

The public surface is `__all__`; each name is loaded from its module on first use (PEP
562), so importing one module of the package (the engine creates only the executors a process needs) loads nothing else.

Example:
    >>> import engine.executors
    >>> engine.executors.FakeExecutor.__name__
    'FakeExecutor'
"""

from __future__ import annotations

TYPE_CHECKING = False  # mypy takes it as True; importing `typing` costs start-up time

if TYPE_CHECKING:
    from engine.executors.command import CommandExecutor
    from engine.executors.fake import FakeExecutor
    from engine.executors.http import HttpExecutor
    from engine.executors.llm import LlmExecutor
    from engine.executors.mcp import McpExecutor, load_mcp_config
    from engine.executors.python import PythonExecutor

__all__ = [
    "CommandExecutor",
    "FakeExecutor",
    "HttpExecutor",
    "LlmExecutor",
    "McpExecutor",
    "PythonExecutor",
    "load_mcp_config",
]

_WHERE = {
    "CommandExecutor": "engine.executors.command",
    "FakeExecutor": "engine.executors.fake",
    "HttpExecutor": "engine.executors.http",
    "LlmExecutor": "engine.executors.llm",
    "McpExecutor": "engine.executors.mcp",
    "PythonExecutor": "engine.executors.python",
    "load_mcp_config": "engine.executors.mcp",
}


def __getattr__(name: str) -> object:  # PEP 562; engine.lazy is imported on first use
    from engine.lazy import load

    return load(__name__, _WHERE, globals(), name)
