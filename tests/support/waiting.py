"""Waiting for a condition a process or server brings about, with a generous cap.

The cap is only how long a test may hang before it fails saying what never happened; it
asserts nothing about speed (timings are measured in tests/bench/).

Example:
    >>> wait_for(lambda: True, what="nothing")
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable

__all__ = ["until", "wait_for"]


async def _truth(value: object) -> object:
    return await value if inspect.isawaitable(value) else value


def wait_for(
    cond: Callable[[], object], timeout: float = 60.0, what: str = "", *, every: float = 0.05
) -> None:
    """Return once `cond()` is true; fail naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what or cond}")
        time.sleep(every)


async def until(
    cond: Callable[[], object], timeout: float = 60.0, what: str = "", *, every: float = 0.05
) -> None:
    """`wait_for` for a test's event loop: sleeps without blocking it; `cond` may be a
    coroutine function."""
    deadline = time.monotonic() + timeout
    while not await _truth(cond()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what or cond}")
        await asyncio.sleep(every)
