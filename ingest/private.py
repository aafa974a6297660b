"""A data dir belongs to one user: the check before hookaudit writes secrets there or trusts it.

hookaudit keeps role keys, the worker's reply key, the record of the embedded server (which
port emitters connect to), spooled events and the log under one data dir, created 0700. A
data dir that already existed is only as private as whoever made it: one that another local
user owns or can write (a `/tmp/hookaudit` made first by a neighbour, a group-writable share)
lets that user read the keys and events hookaudit puts there, or plant a `reply.pub` and a
`server.json` of their own, so that `emit` trusts their server's decisions. The same goes for
a subdirectory hookaudit uses that is a symlink, which can point anywhere that user chose.

Rules of this file:
- `check_data_dir(d)` refuses, in one line naming the path and the fix, a data dir (followed
  through a symlink: the operator may link it elsewhere) that is writable by group or others,
  or owned by a user other than the effective one or root (ssh's rule for ~/.ssh: root too
  is refused another user's, as the files it would trust are that user's to forge), and any of hookaudit's subdirectories (`SUBDIRS`) that exists
  and is a symlink, not a directory, writable by group or others, or owned by another user.
- A data dir that does not exist yet passes: whoever creates it creates it 0700
  (`make_private`, which every directory hookaudit makes under a data dir goes through, so a
  umask of 002 cannot make hookaudit refuse its own directories).
- Stat calls only (about 10 µs for the whole check): no reading, no NATS.
- Called where hookaudit starts the embedded server, where `nats keys` writes (or reuses)
  seeds in its `--dir`, connects to NATS (every role: keys,
  reply.pub and the server's record are read there, the spool written) and trusts a reply
  key; the commands that only read the log (sql, query, verify, replay) do not refuse, as
  the keyed chain, not the directory, is what makes the log trustworthy.

Example:
    >>> import tempfile
    >>> check_data_dir(tempfile.mkdtemp())  # 0700, ours
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from engine.errors import HookauditError
from ingest.logsetup import escape_controls

__all__ = ["SUBDIRS", "UnsafeDataDir", "check_data_dir", "make_private"]

#: The directories under a data dir that hold keys, the server's record, events or the log.
SUBDIRS = ("nats", "nats/auth", "log", "spool", "rejects", "siem")


class UnsafeDataDir(HookauditError):
    """A data dir (or a directory in it) another user can write or did not leave to us."""


def _why(st: os.stat_result, euid: int) -> str | None:
    if not stat.S_ISDIR(st.st_mode):
        return "not a directory"
    if st.st_mode & 0o022:
        mode = stat.S_IMODE(st.st_mode)
        return f"writable by group or others (mode {mode:04o}; chmod go-w it)"
    if st.st_uid not in (euid, 0):
        return f"owned by uid {st.st_uid}, not by this user (uid {euid})"
    return None


def _shown(p: Path) -> str:
    """`p` for a message: a path with a line break or escape still makes one line."""
    return escape_controls(str(p))


def check_data_dir(data_dir: str | os.PathLike[str], *, label: str = "data dir") -> None:
    """Raise UnsafeDataDir unless `data_dir` and its hookaudit subdirectories are private
    (`label` names it in the message: `--dir` for `nats keys`, whose seeds go there)."""
    d = Path(data_dir)
    euid = os.geteuid()
    try:
        st = os.stat(d)
    except FileNotFoundError:
        return
    except OSError as e:
        raise UnsafeDataDir(f"{label} {_shown(d)}: cannot stat: {e.strerror}") from e
    why = _why(st, euid)
    if why:
        raise UnsafeDataDir(f"{label} {_shown(d)}: {why}: refusing to keep keys or events there")
    for sub in SUBDIRS:
        p = d / sub
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            continue
        except OSError as e:
            raise UnsafeDataDir(f"{label} {_shown(d)}: {sub}: cannot stat: {e.strerror}") from e
        why = "a symlink" if stat.S_ISLNK(st.st_mode) else _why(st, euid)
        if why:
            raise UnsafeDataDir(f"{label} {_shown(d)}: {_shown(p)}: {why}: refusing to use it")


def make_private(path: str | os.PathLike[str]) -> None:
    """mkdir -p, each directory it creates 0700 whatever the umask (existing ones untouched).

    Example:
        >>> import tempfile
        >>> d = Path(tempfile.mkdtemp()) / "a" / "b"
        >>> make_private(d); oct(d.stat().st_mode & 0o777)
        '0o700'
    """
    p = Path(path)
    if p.is_dir():
        return
    make_private(p.parent)
    try:
        p.mkdir(mode=0o700)
    except FileExistsError:
        return
    os.chmod(p, 0o700)  # mkdir's mode passes through the umask; chmod does not
