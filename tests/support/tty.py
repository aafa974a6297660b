"""Running a command with its stderr on a pseudo-terminal, as a user at a terminal sees it
(progress bars are drawn only there).

Example:
    >>> out = on_tty(["sh", "-c", "[ -t 2 ] && echo tty >&2"])
    >>> out.stderr.strip()
    b'tty'
"""

from __future__ import annotations

import os
import select
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = ["OnTty", "on_tty"]


@dataclass
class OnTty:
    returncode: int
    stdout: bytes
    stderr: bytes  # everything drawn on the terminal, control sequences included


def on_tty(
    argv: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    until: bytes | None = None,
    timeout: float = 120,
) -> OnTty:
    """Run `argv` with stderr on a pty (80 columns) until it exits, or until `until` has
    been drawn (then SIGTERM it); fail after `timeout` seconds."""
    master, slave = os.openpty()
    env = {**(env if env is not None else os.environ), "COLUMNS": "80", "TERM": "xterm"}
    p = subprocess.Popen(
        list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave,
        env=env, cwd=cwd,
    )  # fmt: skip
    os.close(slave)
    drawn = bytearray()
    deadline = time.monotonic() + timeout
    try:
        while True:
            assert time.monotonic() < deadline, (
                f"{argv[:4]}: still running; drew {bytes(drawn[-2000:])!r}"
            )
            ready, _, _ = select.select([master], [], [], 0.1)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: every writer closed the terminal
                    chunk = b""
                if not chunk:
                    break
                drawn += chunk
                if until is not None and until in drawn and p.poll() is None:
                    p.terminate()
            elif p.poll() is not None:
                break
        out, _ = p.communicate(timeout=max(deadline - time.monotonic(), 1))
    finally:
        os.close(master)
        if p.poll() is None:
            p.kill()
            p.communicate()
    return OnTty(p.returncode, out, bytes(drawn))
