"""The spool's files: durable appends, files written aside, lines, and batch checkpoints.

Rules of this file:
- Durable means fsynced, and a new file's directory fsynced too, so its name survives a
  crash; a file written aside is written as ``.part``, fsynced and renamed, so a reader
  never sees half of it.
- A batch's checkpoint (``<batch>.offset``: bytes already acked) is replaced atomically;
  an unreadable one reads as 0 (re-sending is safe: JetStream drops duplicates by id).
- Nothing here knows what a line holds; `ingest.spool.store` does.

Example:
    >>> import io
    >>> list(lines(io.BytesIO(b"a\\nb")))
    [b'a\\n', b'b']
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import IO

__all__ = [
    "OFFSET_SUFFIX",
    "append_durably",
    "count_lines",
    "fsync_dir",
    "lines",
    "offset_path",
    "read_offset",
    "read_rejects",
    "write_aside",
    "write_offset",
]

OFFSET_SUFFIX = ".offset"


def append_durably(path: Path, data: bytes, directory: Path) -> None:
    """Append `data` as whole lines, then fsync; the caller holds the append lock."""
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        size = os.fstat(fd).st_size
        if size > 0 and os.pread(fd, 1, size - 1) != b"\n":
            # A writer died mid-line: end its fragment so our line stays whole.
            data = b"\n" + data
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    if size == 0:
        fsync_dir(directory)  # the file may be new: make its name durable too


def read_rejects(path: Path) -> list[dict[str, object]]:
    import hashlib
    import json

    out: list[dict[str, object]] = []
    try:
        with open(path, "rb") as f:
            for line in lines(f):
                try:
                    rec = json.loads(line)
                except (ValueError, RecursionError):
                    rec = {"reason": "unreadable reject line"}
                if not isinstance(rec, dict):
                    rec = {"reason": "unreadable reject line"}
                body = str(rec.get("line", "")).encode()
                out.append(
                    {
                        "ts": rec.get("ts", ""),
                        "stage": "spool",
                        "reason": rec.get("reason", ""),
                        "size": len(body),
                        "sha256": hashlib.sha256(body).hexdigest(),
                        "path": f"{path}:{rec.get('offset', '')}",
                    }
                )
    except FileNotFoundError:
        return []
    return out


def write_aside(directory: Path, name: str, data: bytes) -> None:
    """Write `data` as a new file `name`, whole or not at all, without the append lock.

    The data goes to a ``.part`` file first (a flush's cleanup leaves those alone), is
    fsynced, then renamed: a flush sees the file complete or not at all.
    """
    from ingest.log.files import write_durably  # only when the lock was busy: not at start-up

    part = directory / f".{name}.part"
    write_durably(part, data)
    os.rename(part, directory / name)
    fsync_dir(directory)


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def lines(f: IO[bytes]) -> Iterator[bytes]:
    while True:
        line = f.readline()
        if not line:
            return
        yield line


def count_lines(path: Path, start: int) -> tuple[int, int]:
    """(lines, bytes) of `path` from `start`; an unterminated tail counts as a line."""
    n = size = 0
    last = b"\n"
    with open(path, "rb") as f:
        f.seek(start)
        while chunk := f.read(1 << 20):
            n += chunk.count(b"\n")
            size += len(chunk)
            last = chunk[-1:]
    return n + (last != b"\n"), size


def offset_path(batch: Path) -> Path:
    return Path(f"{batch}{OFFSET_SUFFIX}")


def read_offset(batch: Path) -> int:
    """The acked offset of `batch`; 0 when missing or unreadable (a re-send is harmless)."""
    try:
        text = offset_path(batch).read_text().strip()
        offset = int(text)
        return offset if 0 <= offset <= batch.stat().st_size else 0
    except (OSError, ValueError):
        return 0


def write_offset(batch: Path, offset: int) -> None:
    # Not fsynced: a lost checkpoint only means re-sending acked lines, which JetStream
    # drops as duplicates; os.replace never leaves a value larger than one we acked.
    tmp = Path(f"{batch}{OFFSET_SUFFIX}.tmp")
    tmp.write_text(str(offset))
    os.replace(tmp, offset_path(batch))
