"""The hook engine: settings in, a decision out, executors at the edge (imports nothing of ours).

The public surface is `__all__`; each name is loaded from its module on first use (PEP
562), so importing one module of the package (`hookaudit emit` imports `engine.records` on every tool call) loads nothing else.

Example:
    >>> import engine
    >>> engine.Engine.__name__
    'Engine'
"""

from __future__ import annotations

TYPE_CHECKING = False  # mypy takes it as True; importing `typing` costs start-up time

if TYPE_CHECKING:
    from engine.aggregate import Decision
    from engine.claude_output import (
        Expression,
        decision_of,
        express,
        express_outcome,
        render_claude,
    )
    from engine.effects import Executor, Invocation, RawResult
    from engine.errors import HookauditError, InvalidEvent, SettingsError, Unavailable
    from engine.events import CATALOG
    from engine.flow import Evaluation
    from engine.outcome import to_outcome
    from engine.records import (
        ENGINE_VERSION,
        HookEvent,
        HookRun,
        Outcome,
        Posture,
        Profile,
        new_event,
    )
    from engine.run import Answerer, Engine, NotEvaluated
    from engine.sources import Effective, discover, load_sources, merge, parse_scoped

__all__ = [
    "CATALOG",
    "ENGINE_VERSION",
    "Answerer",
    "Decision",
    "Effective",
    "Engine",
    "Evaluation",
    "Executor",
    "Expression",
    "HookEvent",
    "HookRun",
    "HookauditError",
    "InvalidEvent",
    "Invocation",
    "NotEvaluated",
    "Outcome",
    "Posture",
    "Profile",
    "RawResult",
    "SettingsError",
    "Unavailable",
    "decision_of",
    "discover",
    "express",
    "express_outcome",
    "load_sources",
    "merge",
    "new_event",
    "parse_scoped",
    "render_claude",
    "to_outcome",
]

_WHERE = {
    "Answerer": "engine.run",
    "CATALOG": "engine.events",
    "Decision": "engine.aggregate",
    "ENGINE_VERSION": "engine.records",
    "Effective": "engine.sources",
    "Engine": "engine.run",
    "Evaluation": "engine.flow",
    "Executor": "engine.effects",
    "Expression": "engine.claude_output",
    "HookEvent": "engine.records",
    "HookRun": "engine.records",
    "HookauditError": "engine.errors",
    "InvalidEvent": "engine.errors",
    "Invocation": "engine.effects",
    "NotEvaluated": "engine.run",
    "Outcome": "engine.records",
    "Posture": "engine.records",
    "Profile": "engine.records",
    "RawResult": "engine.effects",
    "SettingsError": "engine.errors",
    "Unavailable": "engine.errors",
    "decision_of": "engine.claude_output",
    "discover": "engine.sources",
    "express": "engine.claude_output",
    "express_outcome": "engine.claude_output",
    "load_sources": "engine.sources",
    "merge": "engine.sources",
    "new_event": "engine.records",
    "parse_scoped": "engine.sources",
    "render_claude": "engine.claude_output",
    "to_outcome": "engine.outcome",
}


def __getattr__(name: str) -> object:  # PEP 562; engine.lazy is imported on first use
    from engine.lazy import load

    return load(__name__, _WHERE, globals(), name)
