"""Progress of long work on a terminal: a bar with the count, the rate and the time left.

On stderr, and only when stderr is a terminal: piped or logged output gets no bar (the
command's own summary line says what was done). NO_COLOR drops the bar's colours.

Example:
    >>> with Bar("publishing", total=3, unit="events") as bar:
    ...     for _ in range(3):
    ...         bar.advance()
"""

from __future__ import annotations

import os
import sys
from types import TracebackType
from typing import Any

__all__ = ["Bar"]


class Bar:
    """`advance` as work is done; the bar shows done/total, the rate and the ETA."""

    def __init__(self, label: str, *, total: int, unit: str) -> None:
        self.label, self.total, self.unit = label, total, unit
        self._progress: Any = None
        self._task: Any = None

    def __enter__(self) -> Bar:
        if sys.stderr.isatty() and self.total > 0:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeRemainingColumn,
            )

            console = Console(stderr=True, no_color=bool(os.environ.get("NO_COLOR")))
            self._progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn(self.unit),
                TextColumn("{task.fields[rate]}"),
                TimeRemainingColumn(),
                console=console,
                transient=True,
            )
            self._progress.start()
            self._task = self._progress.add_task(self.label, total=self.total, rate="")
        return self

    @property
    def shown(self) -> bool:
        """Whether the bar is on the terminal (else the caller reports progress its way)."""
        return self._progress is not None

    def advance(self, n: int = 1) -> None:
        if self._progress is None:
            return
        self._progress.advance(self._task, n)
        speed = self._progress.tasks[0].speed
        self._progress.update(self._task, rate=f"{speed:,.0f}/s" if speed else "")

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._progress is not None:
            self._progress.stop()
