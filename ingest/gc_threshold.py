"""The garbage collector's first threshold while workers run in this process.

Rules of this file:
- The first worker of a process to start sets GC_GEN0 and remembers the threshold it found;
  the last one to stop restores it (two in-process workers, as in tests and the demo, must
  not leave GC_GEN0 behind).

Example:
    >>> import gc
    >>> before = gc.get_threshold()
    >>> Collector.enter(); gc.get_threshold()[0]
    10000
    >>> Collector.leave(); gc.get_threshold() == before
    True
"""

from __future__ import annotations

import gc

__all__ = ["GC_GEN0", "Collector"]

# The collector's first threshold while a worker runs (CPython's default is 700). Each
# event leaves a few thousand short-lived containers; at 700 the collector ran every ~20
# events and cost ~6 us of an event's ~50 us of CPU, at 10,000 it costs ~1 us
# (in-process worker over 20k events, gc callbacks timed).
GC_GEN0 = 10_000


class Collector:
    """GC_GEN0 while any worker of this process runs; the threshold before it after the last."""

    running = 0
    before: tuple[int, int, int] = (700, 10, 10)

    @classmethod
    def enter(cls) -> None:
        if cls.running == 0:
            cls.before = gc.get_threshold()
            gc.set_threshold(GC_GEN0, *cls.before[1:])
        cls.running += 1

    @classmethod
    def leave(cls) -> None:
        cls.running -= 1
        if cls.running == 0:
            gc.set_threshold(*cls.before)
