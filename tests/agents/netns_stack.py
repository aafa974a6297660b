"""Run one agent and a whole hookaudit deployment in one network namespace with loopback
only, for hooks that reach hookaudit over HTTP (`hookaudit serve`): `nats up`, a worker with
the policy, serve on 127.0.0.1, the loopback model, then the agent; all stopped after. The
data dir is a file tree shared with the host, so the test reads the log afterwards.

    unshare -n python tests/agents/netns_stack.py DATA SETTINGS SERVE_PORT MODEL_PORT LOG \\
        COMMAND -- AGENT-ARGV...
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
HOOKAUDIT = [sys.executable, "-m", "hookaudit"]
PROBE = {"hook_event_name": "PreToolUse", "session_id": "probe", "cwd": "/",
         "tool_name": "Bash", "tool_input": {"command": "true"}}  # fmt: skip


def _until_decided(port: int) -> None:
    """Until serve answers the worker's decision (an allow: empty body), not a fallback."""
    deadline = time.monotonic() + 90
    while True:
        req = urllib.request.Request(
            f"http://127.0.0.1:{port}/hooks", data=json.dumps(PROBE).encode(), method="POST",
            headers={"content-type": "application/json"},
        )  # fmt: skip
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                if r.status == 200 and r.read() == b"":
                    return
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() > deadline:
            raise SystemExit("netns_stack: serve never answered with the worker's decision")
        time.sleep(0.3)


def main() -> int:
    data, settings, serve_port, model_port, log, command, sep, *argv = sys.argv[1:]
    assert sep == "--" and argv, sys.argv
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    subprocess.run([*HOOKAUDIT, "nats", "up", "--data-dir", data], check=True,
                   capture_output=True)  # fmt: skip
    procs = []
    try:
        for name, args in (
            ("worker", ["worker", "--data-dir", data, "--settings", f"project:{settings}"]),
            (
                "serve",
                [
                    "serve",
                    "--data-dir",
                    data,
                    "--listen",
                    f"127.0.0.1:{serve_port}",
                    "--fail",
                    "closed",
                ],
            ),
        ):
            with open(f"{log}.{name}", "wb") as err:
                procs.append(subprocess.Popen([*HOOKAUDIT, *args], stdin=subprocess.DEVNULL,
                                              stdout=subprocess.DEVNULL, stderr=err))  # fmt: skip
        _until_decided(int(serve_port))
        return subprocess.run(
            [sys.executable, str(HERE / "netns.py"), model_port, log, command, "--", *argv],
            stdin=subprocess.DEVNULL, check=False,
        ).returncode  # fmt: skip
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
        subprocess.run([*HOOKAUDIT, "nats", "down", "--data-dir", data], capture_output=True,
                       check=False)  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
