"""Child and foreign processes: is a PID alive (and what is it), reap it, stop it.

Used by `ingest.nats.embedded` to never signal a reused PID and never leave a zombie.

Example:
    >>> cmdline(os.getpid()) is not None
    True
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path

from engine.errors import Unavailable

__all__ = ["cmdline", "reap", "terminate"]


def reap(pid: int, wait: float = 0.0) -> None:
    """Collect `pid` if it is our exited child, so it does not linger as a zombie.

    With `wait`, keep trying that long: a process seen exiting (empty cmdline, state
    X) becomes reapable a moment later.
    """
    deadline = time.monotonic() + wait
    while True:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            return  # not our child (or already collected)
        if done or time.monotonic() >= deadline:
            return
        time.sleep(0.005)


def cmdline(pid: int) -> list[str] | None:
    """`pid`'s argv, or None if there is no such live (non-zombie) process."""
    reap(pid)
    proc = Path(f"/proc/{pid}")
    if Path("/proc/self").exists():
        try:
            # The state follows the parenthesised command name, which may hold spaces.
            if (proc / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                reap(pid)  # it died since the first look: collect it if it is ours
                return None
            raw = (proc / "cmdline").read_bytes()
        except (FileNotFoundError, ProcessLookupError, IndexError):
            return None
        return [a.decode(errors="replace") for a in raw.split(b"\0") if a] or None
    ps = subprocess.run(
        ["ps", "-o", "stat=,command=", "-p", str(pid)], capture_output=True, text=True, check=False
    )
    fields = ps.stdout.split()
    if ps.returncode != 0 or len(fields) < 2 or fields[0].startswith("Z"):
        return None
    return fields[1:]


def terminate(pid: int, grace: float) -> None:
    """SIGTERM `pid`, then SIGKILL after `grace` seconds; return once it is gone."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if cmdline(pid) is None:
                reap(pid, wait=1.0)
                return
            time.sleep(0.02)
    raise Unavailable(f"pid {pid} survived SIGKILL")
