"""Reading a file an operator or a tool named: regular files only, bounded, never blocking.

Rules of this file:
- A path a user gives (a settings file, a transcript, a Sigma rule) may be a FIFO that never
  ends, a device (`/dev/zero` grows forever), a directory, or a symlink to any of those. It
  is opened with ``O_NONBLOCK`` (opening a FIFO does not wait for a writer), checked with
  ``fstat`` on the descriptor actually opened (no check-then-open race), and refused unless
  it is a regular file. Reads are bounded by the caller's limit.
- Errors are `OSError` with a reason a person can act on; the caller names the file.

Example:
    >>> try:
    ...     read_regular("/dev/zero", 10)
    ... except NotRegular as e:
    ...     print(e.strerror)
    not a regular file (a character device)
"""

from __future__ import annotations

import errno
import io
import os
import stat
from typing import BinaryIO

__all__ = ["NotRegular", "TooLarge", "open_regular", "read_regular"]


class NotRegular(OSError):
    """The path is a FIFO, a device, a socket or a directory."""


class TooLarge(OSError):
    """The file is larger than the caller allows."""


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "not a file"


def open_regular(path: str | os.PathLike[str], max_bytes: int | None = None) -> BinaryIO:
    """Open `path` for reading in binary, or raise `NotRegular` / `TooLarge` / `OSError`.

    A symlink is followed (a settings file may be one); what it points at must be regular.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | getattr(os, "O_NOCTTY", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegular(errno.EINVAL, f"not a regular file ({_kind(st.st_mode)})")
        if max_bytes is not None and st.st_size > max_bytes:
            raise TooLarge(
                errno.EFBIG, f"{st.st_size} bytes, larger than the limit of {max_bytes} bytes"
            )
        os.set_blocking(fd, True)
        return io.open(fd, "rb", closefd=True)  # noqa: UP020  # a descriptor, not a path
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: str | os.PathLike[str], max_bytes: int) -> bytes:
    """The whole of a regular file of at most `max_bytes` (it may grow while read: the read
    stops one byte past the limit and refuses)."""
    with open_regular(path, max_bytes) as f:
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise TooLarge(errno.EFBIG, f"larger than the limit of {max_bytes} bytes")
    return data
