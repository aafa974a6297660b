"""Run one agent with no network but loopback: inside a fresh network namespace
(`unshare -n`), bring `lo` up, start the loopback model there, run the agent, stop the
model. The agent's hooks reach hookaudit through the relay's unix socket (a file, shared
with the host), so nothing the agent or its hooks do can leave 127.0.0.1 of the namespace.

    unshare -n python tests/agents/netns.py PORT LOG COMMAND -- AGENT-ARGV...
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main() -> int:
    port, log, command, sep, *argv = sys.argv[1:]
    assert sep == "--" and argv, sys.argv
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    model = subprocess.Popen(
        [sys.executable, str(HERE / "mockmodel.py"), port],
        env={**os.environ, "MOCK_LOG": log, "MOCK_CMD": command},
        stdout=subprocess.PIPE,
    )
    try:
        assert model.stdout is not None and model.stdout.readline().strip() == b"ready"
        return subprocess.run(argv, stdin=subprocess.DEVNULL, check=False).returncode
    finally:
        model.kill()
        model.wait()


if __name__ == "__main__":
    sys.exit(main())
