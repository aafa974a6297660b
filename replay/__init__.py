"""Replay: re-evaluate history with other settings through the engine's driver, and report every difference.

The public surface is `__all__`; each name is loaded from its module on first use (PEP
562), so importing one module of the package (a replay job process loads only what it runs) loads nothing else.

Example:
    >>> import replay
    >>> replay.replay.__name__
    'replay'
"""

from __future__ import annotations

TYPE_CHECKING = False  # mypy takes it as True; importing `typing` costs start-up time

if TYPE_CHECKING:
    from replay.answers import Answers, Policy
    from replay.jobs import replay
    from replay.request import JobResult, Request
    from replay.runner import Job
    from replay.select import Selection

__all__ = [
    "Answers",
    "Job",
    "JobResult",
    "Policy",
    "Request",
    "Selection",
    "replay",
]

_WHERE = {
    "Answers": "replay.answers",
    "Job": "replay.runner",
    "JobResult": "replay.request",
    "Policy": "replay.answers",
    "Request": "replay.request",
    "Selection": "replay.select",
    "replay": "replay.jobs",
}


def __getattr__(name: str) -> object:  # PEP 562; engine.lazy is imported on first use
    from engine.lazy import load

    return load(__name__, _WHERE, globals(), name)
