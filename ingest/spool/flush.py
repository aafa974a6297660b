"""One flush of the spool in progress: a window of in-flight publishes, acked in order.

Rules of this file:
- At most `WINDOW` publishes in flight on one connection; the first goes alone, so that if
  it provisions the streams nothing overtakes it and the stream keeps the spool's order.
- The acked offset only moves past lines whose publish was acknowledged (or that were
  rejected, with why); it is checkpointed every `CHECKPOINT_EVERY` seconds or
  `CHECKPOINT_EVENTS` events, and a batch is deleted only once all of it is acked.
- A failed publish (`HookauditError`) or a spent budget stops the flush; the rest stays.

Example:
    >>> WINDOW
    256
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from engine.errors import HookauditError
from engine.records import HookEvent, decode_event_json
from ingest.spool.files import fsync_dir, lines, offset_path, read_offset, write_offset

if TYPE_CHECKING:
    from ingest.spool.store import Publish, Sent, Spool

__all__ = ["CHECKPOINT_EVENTS", "CHECKPOINT_EVERY", "WINDOW", "FlushRun"]

#: How many publishes a flush keeps in flight; acks come back in order on one connection.
WINDOW = 256
#: How often a long flush records its progress (seconds, acked events), so a crash
#: re-sends little; a checkpoint costs one small file write and a rename.
CHECKPOINT_EVERY = 1.0
CHECKPOINT_EVENTS = 2048


class FlushRun:
    """One flush in progress: a window of in-flight publishes, acked in order."""

    def __init__(
        self,
        spool: Spool,
        publish: Publish,
        deadline: float | None,
        progress: Callable[[int, int], None] | None,
        total: int,
    ) -> None:
        self.spool = spool
        self.publish = publish
        self.deadline = deadline
        self.progress = progress
        self.total = total
        self.published = self.duplicates = self.rejected = self.done = 0
        self.error: str | None = None
        self.stopped = False
        self.last_report = time.monotonic()

    def out_of_time(self) -> bool:
        return self.deadline is not None and time.monotonic() >= self.deadline

    async def batch(self, path: Path) -> bool:
        """Flush one batch; False if the flush must stop (error or budget spent)."""
        offset = read_offset(path)
        acked = offset
        last_checkpoint, done_at_checkpoint = time.monotonic(), self.done
        inflight: deque[tuple[int, asyncio.Task[Sent] | None]] = deque()
        try:
            with open(path, "rb") as f:
                f.seek(offset)
                pos = offset
                for line in lines(f):
                    start, pos = pos, pos + len(line)
                    if self.out_of_time():
                        self.stopped = True
                        break
                    task = self._start(path, line, start)
                    inflight.append((pos, task))
                    # The first publish goes alone: if it has to provision the streams,
                    # nothing overtakes it and the stream keeps the spool's order.
                    window = WINDOW if self.done else 1
                    while len(inflight) >= window or (inflight and inflight[0][1] is None):
                        acked = await self._settle(inflight)
                    if (
                        self.done - done_at_checkpoint >= CHECKPOINT_EVENTS
                        or time.monotonic() - last_checkpoint >= CHECKPOINT_EVERY
                    ):
                        write_offset(path, acked)
                        last_checkpoint, done_at_checkpoint = time.monotonic(), self.done
                        self._report()
                while inflight:
                    acked = await self._settle(inflight)
        except HookauditError as e:
            self.error = str(e)
        finally:
            for _, task in inflight:
                if task is not None:
                    task.cancel()
            if inflight:
                await asyncio.gather(
                    *(t for _, t in inflight if t is not None), return_exceptions=True
                )
        if self.error is not None or self.stopped:
            write_offset(path, acked)
            return False
        path.unlink()
        offset_path(path).unlink(missing_ok=True)
        fsync_dir(path.parent)
        return True

    def _start(self, path: Path, line: bytes, start: int) -> asyncio.Task[Sent] | None:
        """Start publishing `line`; None when it was rejected instead."""
        if not line.strip():
            return None
        why = None
        if not line.endswith(b"\n"):
            why = "torn line: no newline at the end of the spool (a writer crashed mid-write)"
        else:
            try:
                event = decode_event_json(line)
            except (msgspec.DecodeError, msgspec.ValidationError) as e:
                why = f"not a HookEvent: {e}"
        if why is not None:
            self.spool.reject(line, why, source=path.name, offset=start)
            self.rejected += 1
            return None
        return asyncio.ensure_future(self._publish(event, path, line, start))

    async def _publish(self, event: HookEvent, path: Path, line: bytes, start: int) -> Sent:
        sent = await self.publish(event)
        if sent.rejected is not None:
            self.spool.reject(line, sent.rejected, source=path.name, offset=start)
        return sent

    async def _settle(self, inflight: deque[tuple[int, asyncio.Task[Sent] | None]]) -> int:
        """Wait for the oldest publish; return the offset acked up to. Raises on failure."""
        end, task = inflight[0]
        if task is not None:
            sent = await task  # Unavailable propagates: stop, keep the unacked rest
            if sent.rejected is not None:
                self.rejected += 1
            elif sent.duplicate:
                self.duplicates += 1
            else:
                self.published += 1
        inflight.popleft()
        self.done += 1
        return end

    def _report(self) -> None:
        if self.progress is not None and time.monotonic() - self.last_report >= 1.0:
            self.last_report = time.monotonic()
            self.progress(self.done, self.total)
