"""Background (async) command hooks: kept running under their limit, results handed out
by `drain` (the rules of async hooks are in `engine.executors.command`).

Example:
    >>> AsyncRegistry().pending()
    0
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

from engine.effects import Invocation, RawResult
from engine.executors.process import Fut, Running, resolve

__all__ = ["AsyncRegistry"]

_ASYNC_TIMEOUT_MS = 15_000


def async_limit(line: Mapping[str, Any]) -> float:
    value = line.get("asyncTimeout")
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return float(value) / 1000.0
    return _ASYNC_TIMEOUT_MS / 1000.0


class AsyncRegistry:
    """Background hooks: keeps them running, enforces their limit, collects their results.

    Example:
        >>> reg = AsyncRegistry()
        >>> reg.pending()
        0
    """

    def __init__(self) -> None:
        self._live: dict[asyncio.Task[None], Running] = {}
        self._done: list[tuple[Invocation, RawResult]] = []
        self._stop: Fut | None = None

    def pending(self) -> int:
        """How many background hooks are still running.

        >>> AsyncRegistry().pending()
        0
        """
        return len(self._live)

    async def drain(self, timeout: float | None = 0.0) -> list[tuple[Invocation, RawResult]]:
        """The finished results not handed out yet, each once, in completion order.

        ``timeout=0`` does not wait; ``None`` waits for every pending hook; a number
        waits at most that long for all of them.

        >>> import asyncio
        >>> asyncio.run(AsyncRegistry().drain())
        []
        """
        if self._live and (timeout is None or timeout > 0):
            await asyncio.wait(tuple(self._live), timeout=timeout)
        done, self._done = self._done, []
        return done

    async def aclose(self) -> None:
        """Stop every background hook (SIGTERM, grace, SIGKILL); results stay drainable
        with ``error_kind="cancelled"``.

        >>> import asyncio
        >>> asyncio.run(AsyncRegistry().aclose())
        """
        if self._stop is not None:
            resolve(self._stop)
        if self._live:
            await asyncio.wait(tuple(self._live))
        self._stop = None

    def _adopt(self, hook: Running, limit: float, skip: int) -> None:
        loop = asyncio.get_running_loop()
        if self._stop is None or self._stop.get_loop() is not loop:
            self._stop = loop.create_future()
        task = loop.create_task(self._finish(hook, limit, skip, self._stop))
        self._live[task] = hook
        task.add_done_callback(self._forget)

    def _forget(self, task: asyncio.Task[None]) -> None:
        self._live.pop(task, None)

    async def _finish(self, h: Running, limit: float, skip: int, stop: Fut) -> None:
        try:
            await asyncio.wait(
                (h.proto.exited, stop), timeout=limit, return_when=asyncio.FIRST_COMPLETED
            )
            if h.proto.exited.done():
                await h.drain()
                res = h.result(skip=skip)
            elif stop.done():
                how = await h.stop()
                res = h.result(
                    error_kind="cancelled", error=f"stopped at registry close; {how}", skip=skip
                )
            else:
                how = await h.stop()
                res = h.result(
                    error_kind="timeout", error=f"async hook ran past {limit:g} s; {how}", skip=skip
                )
        except asyncio.CancelledError:
            await h.kill()
            self._done.append(
                (
                    h.inv,
                    h.result(
                        error_kind="cancelled", error="killed (SIGKILL) on cancellation", skip=skip
                    ),
                )
            )
            raise
        self._done.append((h.inv, res))
