"""Run one agent's terminal UI with no network but loopback: as `netns.py`, but the agent on
a pseudo-terminal (120x40), until it draws UNTIL (then it is killed) or SECONDS pass. What
it drew is written to SCREEN. For what only an interactive agent does (Codex CLI asks for
approval, and raises PermissionRequest, only in its terminal UI).

    unshare -n python tests/agents/netns_tty.py PORT LOG COMMAND SCREEN UNTIL SECONDS -- ARGV...
"""

from __future__ import annotations

import fcntl
import os
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    port, log, command, screen_file, until, seconds, sep, *argv = sys.argv[1:]
    assert sep == "--" and argv, sys.argv
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    model = subprocess.Popen(
        [sys.executable, str(HERE / "mockmodel.py"), port],
        env={**os.environ, "MOCK_LOG": log, "MOCK_CMD": command},
        stdout=subprocess.PIPE,
    )
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    screen = bytearray()
    try:
        assert model.stdout is not None and model.stdout.readline().strip() == b"ready"
        agent = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave,
                                 start_new_session=True,
                                 env={**os.environ, "TERM": "xterm-256color"})  # fmt: skip
        os.close(slave)
        end = time.monotonic() + float(seconds)
        while time.monotonic() < end and agent.poll() is None and until.encode() not in screen:
            if select.select([master], [], [], 0.2)[0]:
                try:
                    screen.extend(os.read(master, 65536))
                except OSError:  # every writer closed the terminal
                    break
        agent.kill()
        agent.wait()
        return 0 if until.encode() in screen else 1
    finally:
        Path(screen_file).write_bytes(bytes(screen))
        os.close(master)
        model.kill()
        model.wait()


if __name__ == "__main__":
    sys.exit(main())
