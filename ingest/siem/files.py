"""Local transports: ``file://PATH`` rotating NDJSON, ``-`` standard output.

Rules of this file:
- A batch counts once it is written and fsynced (file) or flushed (stdout).
- The file rotates past `max_bytes`: ``F`` becomes ``F.1`` (``F.1`` becomes ``F.2``, …;
  `keep` files are kept), and a new ``F`` is started.

Example:
    >>> FileSink("/tmp/x.ndjson").name
    'file:///tmp/x.ndjson'
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ingest.siem.formats import Formatted
from ingest.siem.sink import Delivery, Keepalive, SinkDown

__all__ = ["FileSink", "StdoutSink"]


class FileSink:
    """Append NDJSON to a file, fsync per batch, rotate by size."""

    def __init__(self, path: str, *, max_bytes: int = 100 << 20, keep: int = 5) -> None:
        self.path = Path(path)
        self.name = f"file://{path}"
        self.max_bytes = max_bytes
        self.keep = keep

    def _rotate(self) -> None:
        for i in range(self.keep - 1, 0, -1):
            older = self.path.with_name(f"{self.path.name}.{i}")
            if older.exists():
                older.replace(self.path.with_name(f"{self.path.name}.{i + 1}"))
        self.path.replace(self.path.with_name(f"{self.path.name}.1"))

    async def send(self, batch: list[Formatted], keepalive: Keepalive) -> Delivery:
        data = b"".join(r.text.encode("utf-8", "replace") + b"\n" for r in batch)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if self.path.exists() and self.path.stat().st_size + len(data) > self.max_bytes:
                self._rotate()
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as e:
            raise SinkDown(f"{self.name}: {e.strerror or e}") from e
        return Delivery()

    async def close(self) -> None:
        return None


class StdoutSink:
    """Write NDJSON (or CEF lines) to standard output."""

    name = "-"

    async def send(self, batch: list[Formatted], keepalive: Keepalive) -> Delivery:
        try:
            out = sys.stdout.buffer
            out.write(b"".join(r.text.encode("utf-8", "replace") + b"\n" for r in batch))
            out.flush()
        except OSError as e:
            raise SinkDown(f"stdout: {e.strerror or e}") from e
        return Delivery()

    async def close(self) -> None:
        return None
