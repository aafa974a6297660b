"""Durable, private file operations for the log: fsync discipline and modes.

Rules of this file:
- A file is durable after one `os.fsync`; creating or renaming a file also fsyncs its
  directory (`fsync_dir`), so a crash never loses a name the log relied on.
- Private by default, whatever the umask: folders the log creates are 0700 (`DIR_MODE`),
  files 0600 (`FILE_MODE`); a file opened for appending is set to 0600 again (a log
  written by an older version, or under another umask, is tightened the first time).
- The writer's lock (`lock`) is an flock on `active/<worker>/.lock` holding the writer's
  pid: the pid is believed only while the flock is held, so a dead worker's stale pid is
  never reported (`holder`).

Example:
    >>> import tempfile
    >>> from pathlib import Path
    >>> p = Path(tempfile.mkdtemp()) / "a" / "b"
    >>> make_dirs(p); oct(p.stat().st_mode & 0o777)
    '0o700'
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Callable
from pathlib import Path

from engine.errors import Unavailable
from ingest.log.layout import stamp_name

__all__ = [
    "DIR_MODE",
    "FILE_MODE",
    "Held",
    "fsync_dir",
    "holder",
    "lock",
    "make_dirs",
    "open_append",
    "replace_durably",
    "set_aside",
    "take_lock",
    "write_durably",
]

DIR_MODE = 0o700
FILE_MODE = 0o600


def fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_dirs(path: Path) -> None:
    """mkdir -p with mode 0700, fsyncing each parent that gained an entry (new dirs survive)."""
    if path.is_dir():
        return
    make_dirs(path.parent)
    with contextlib.suppress(FileExistsError):
        path.mkdir(mode=DIR_MODE)
        os.chmod(path, DIR_MODE)  # mkdir's mode passes through the umask; this does not
        fsync_dir(path.parent)


def open_append(path: Path) -> tuple[int, bool]:
    """An O_APPEND descriptor on `path` (created 0600), and whether it was created now."""
    created = not path.exists()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)
    except OSError:
        os.close(fd)
        raise
    if created:
        fsync_dir(path.parent)
    return fd, created


def write_durably(
    path: Path, data: bytes | memoryview, *, mode: int = os.O_WRONLY | os.O_CREAT | os.O_EXCL
) -> None:
    """Write, fsync and close `path`, 0600 (the caller fsyncs the directory after a rename)."""
    fd = os.open(path, mode | os.O_CLOEXEC, FILE_MODE)
    try:
        os.fchmod(fd, FILE_MODE)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_durably(path: Path, data: bytes) -> None:
    """Atomically replace `path` with `data`: temp name, fsync, rename, fsync the directory."""
    tmp = path.with_name(path.name + ".tmp")
    write_durably(tmp, data, mode=os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.replace(tmp, path)
    fsync_dir(path.parent)


def set_aside(path: Path, keep: int, suffix: str, clock: Callable[[], float]) -> Path:
    """Move bytes after offset `keep` to `<path>.<suffix>-<ts>`, then truncate `path` to `keep`."""
    with open(path, "rb") as f:
        f.seek(keep)
        tail = f.read()
    aside = path.with_name(f"{path.name}.{suffix}-{stamp_name(clock)}")
    write_durably(aside, tail)
    os.truncate(path, keep)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync_dir(path.parent)
    return aside


class Held(Exception):
    """`take_lock` found the lock held; `pid` is what its file says (``?`` when empty)."""

    def __init__(self, path: Path, pid: str) -> None:
        super().__init__(f"{path}: held by pid {pid}")
        self.pid = pid


def take_lock(path: Path) -> int:
    """Take an exclusive flock on `path` and write this pid into it; the fd holds it until
    closed (a process that dies lets go). Raises `Held` when another process has it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, FILE_MODE)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        pid = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
        os.close(fd)
        raise Held(path, pid) from None
    except OSError:
        os.close(fd)
        raise
    with contextlib.suppress(OSError):
        os.fchmod(fd, FILE_MODE)
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd


def lock(path: Path, worker: str) -> int:
    """Take the writer's flock on `path` and write this pid into it; Unavailable when held."""
    try:
        return take_lock(path)
    except Held as h:
        raise Unavailable(
            f"{path}: the log of worker {worker!r} is already open by another writer "
            f"(pid {h.pid}): stop worker pid {h.pid} first, or give each worker process its "
            "own worker name"
        ) from None


def holder(path: Path) -> int | None:
    """The pid of the live writer holding the lock at `path`, or None (no lock, or stale).

    The pid in the file is believed only if the flock is held: a worker that died left
    its pid behind but not its lock.

    Example:
        >>> holder(Path(tempfile.mkdtemp()) / ".lock") is None
        True
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.pread(fd, 32, 0).decode(errors="replace").strip()
            return int(text) if text.isdigit() else -1
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)
