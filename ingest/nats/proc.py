"""The nats-server process: spawned detached, awaited until ready, recognised by its argv.

`ingest.nats.embedded` decides what to run (the binary, the config, the port, the data dir's
record); this file runs it and watches it. The server's stdout and stderr go to its log
file, appended across restarts; `offset` is where this start's lines begin.

Rules of this file:
- A server counts as ready only when it logged its ready line, wrote its ports file and
  accepts a TCP connection; a server that exits while starting is reported with its own
  last [FTL]/[ERR] line, in one line.
- A PID is ours only while its argv is a nats-server on our store: a reused PID is never
  signalled (`is_our_server`).

Example:
    >>> accepts(1)
    False
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

from engine.errors import Unavailable
from ingest.procs import cmdline

__all__ = ["BINARY", "HOST", "accepts", "is_our_server", "spawn", "wait_ready"]

BINARY = "nats-server"
HOST = "127.0.0.1"
_READY_LINE = "Server is ready"


def is_our_server(pid: int, store: str) -> bool:
    """True if `pid` is a live nats-server using `store`: never signal a reused PID."""
    argv = cmdline(pid)
    return argv is not None and Path(argv[0]).name == BINARY and store in argv


def _log_tail(log: Path, offset: int, lines: int = 20) -> str:
    try:
        with open(log, "rb") as f:
            f.seek(offset)
            text = f.read().decode(errors="replace")
    except FileNotFoundError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:]) or "(log is empty)"


def _fatal_line(log: Path, offset: int) -> str:
    """The server's own reason for stopping (its last [FTL]/[ERR] line), without the banner."""
    lines = _log_tail(log, offset, lines=200).splitlines()
    for marker in ("[FTL]", "[ERR]"):
        for line in reversed(lines):
            if marker in line:
                return line.split(marker, 1)[1].strip()
    return lines[-1].strip() if lines else "(no log)"


def accepts(port: int, timeout: float = 0.2) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=timeout):
            return True
    except OSError:
        return False


def spawn(argv: list[str], log: Path) -> int:
    # posix_spawn rather than Popen: the server must outlive this process, and a
    # Popen object dropped while its child runs raises ResourceWarning ("subprocess
    # still running"). setsid is Popen's start_new_session: no SIGINT/SIGHUP from our
    # terminal. Python opens files O_CLOEXEC, so the child inherits only 0, 1 and 2.
    return os.posix_spawn(
        argv[0],
        argv,
        dict(os.environ),
        file_actions=[
            (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
            (os.POSIX_SPAWN_OPEN, 1, str(log), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600),
            (os.POSIX_SPAWN_DUP2, 1, 2),
        ],
        setsid=True,
    )


def wait_ready(pid: int, ndir: Path, log: Path, offset: int, timeout: float) -> int:
    """Wait for the ready line, the ports file and a TCP accept; return the port."""
    ports_file = ndir / f"{BINARY}_{pid}.ports"
    deadline = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            code = os.waitstatus_to_exitcode(status)
            raise Unavailable(
                f"{BINARY} exited with {code} while starting: {_fatal_line(log, offset)} "
                f"(full log: {log})"
            )
        ready = _READY_LINE in _log_tail(log, offset, lines=1000)
        if ready and ports_file.exists():
            # Ready comes after JetStream has started and the listener is bound.
            try:
                urls = json.loads(ports_file.read_text()).get("nats") or []
            except (ValueError, RecursionError):  # the server is still writing the file
                urls = []
            port = int(urls[0].rsplit(":", 1)[1]) if urls else 0
            if port and accepts(port):
                return port
        if time.monotonic() > deadline:
            raise Unavailable(
                f"{BINARY} not ready after {timeout:.0f}s; {log}:\n{_log_tail(log, offset)}"
            )
        time.sleep(0.02)
