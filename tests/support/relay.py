"""A real deployment for the relay tests: `nats up`, a worker, a relay, emit processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

HOOKS = """
def guard(event):
    cmd = str((event.get("tool_input") or {}).get("command", ""))
    if "rm -rf /" in cmd:
        return {"hookSpecificOutput": {"hookEventName": "PreToolUse",
                "permissionDecision": "deny", "permissionDecisionReason": "no rm -rf /"}}
    return None

def prompt(event):
    if "secret" in str(event.get("prompt", "")):
        return {"decision": "block", "reason": "no secrets in prompts"}
    return None
"""


def env(**extra: str) -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith("HOOKAUDIT_")}
    e["PYTHONPATH"] = str(REPO)
    e.update(extra)
    return e


def pre_tool_use(command: str) -> bytes:
    return json.dumps(
        {
            "hook_event_name": "PreToolUse",
            "session_id": "relay",
            "cwd": "/tmp",
            "tool_name": "Bash",
            "tool_input": {"command": command},
        }
    ).encode()


def prompt(text: str) -> bytes:
    return json.dumps(
        {"hook_event_name": "UserPromptSubmit", "session_id": "relay", "prompt": text}
    ).encode()


def hookaudit(
    *args: str, stdin: bytes = b"", timeout: float = 90, **extra: str
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "hookaudit", *args],
        input=stdin,
        capture_output=True,
        cwd=REPO,
        env=env(**extra),
        timeout=timeout,
    )


def write_settings(directory: Path) -> Path:
    (directory / "relayhooks.py").write_text(HOOKS)
    settings = directory / "settings.json"
    py = "relayhooks.py"
    settings.write_text(
        json.dumps(
            {
                "hooks": {
                    "PreToolUse": [
                        {"matcher": "*", "hooks": [{"type": "python", "callable": f"{py}:guard"}]}
                    ],
                    "UserPromptSubmit": [
                        {"hooks": [{"type": "python", "callable": f"{py}:prompt"}]}
                    ],
                }
            }
        )
    )
    return settings


@dataclass
class Stack:
    data: Path
    settings: Path
    worker: subprocess.Popen[bytes] | None = None
    relay: subprocess.Popen[bytes] | None = None

    def nats_up(self) -> None:
        p = hookaudit("nats", "up", "--data-dir", str(self.data))
        assert p.returncode == 0, p.stderr.decode()

    def nats_down(self) -> None:
        hookaudit("nats", "down", "--data-dir", str(self.data))

    def start_worker(self) -> None:
        self.worker = subprocess.Popen(
            [sys.executable, "-m", "hookaudit", "worker", "--data-dir", str(self.data),
             "--settings", f"project:{self.settings}"],
            cwd=REPO, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )  # fmt: skip

    def start_relay(self, *args: str, **extra: str) -> subprocess.Popen[bytes]:
        sock = self.data / "relay" / "emit.sock"
        with_socket = "--socket" in args
        proc = subprocess.Popen(
            [sys.executable, "-m", "hookaudit", "relay", "--data-dir", str(self.data), "-v", *args],
            cwd=REPO, env=env(**extra), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )  # fmt: skip
        assert proc.stdout is not None
        line = proc.stdout.readline().decode()
        assert "listening on" in line, (line, proc.stderr.read() if proc.stderr else b"")
        assert with_socket or sock.is_socket()
        self.relay = proc
        return proc

    def emit(self, *args: str, stdin: bytes, **extra: str) -> subprocess.CompletedProcess[bytes]:
        return hookaudit("emit", "--data-dir", str(self.data), *args, stdin=stdin, **extra)

    def wait_decided(self) -> None:
        """Until the worker answers (its first decision may wait for JetStream)."""
        deadline = time.monotonic() + 60
        while True:
            p = self.emit("--wait", "--timeout", "5", stdin=pre_tool_use("true"))
            if p.returncode == 0 and not p.stdout and not p.stderr:
                return
            assert time.monotonic() < deadline, p.stderr.decode()

    def stop(self) -> str:
        out = ""
        for proc in (self.relay, self.worker):
            if proc is not None and proc.poll() is None:
                proc.terminate()
                try:
                    _, err = proc.communicate(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    _, err = proc.communicate()
                out += err.decode(errors="replace") if err else ""
        self.nats_down()
        return out


async def keyed_server(root: Path, *emitters: str) -> tuple[subprocess.Popen[bytes], str, Path]:
    """A nats-server running `hookaudit nats keys`' users.conf, its streams provisioned with
    the worker key: (the server, its URL, the keys dir). `emitters` adds per-host keys."""
    import asyncio
    import socket

    from ingest.nats import embedded
    from ingest.nats import streams as ha_nats
    from ingest.nats.streams import ConnectOptions

    keys = root / "keys"
    per_host = [a for name in emitters for a in ("--emitter", name)]
    p = subprocess.run(
        [sys.executable, "-m", "hookaudit", "nats", "keys", "--dir", str(keys), *per_host],
        capture_output=True, cwd=REPO, env=env(), timeout=60,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    conf = keys / "server.conf"
    conf.write_text(
        f'listen: 127.0.0.1:{port}\njetstream {{ store_dir: "{root / "store"}" }}\n'
        'max_payload: 9437184\ninclude "users.conf"\n'
    )
    server = subprocess.Popen(
        [embedded.find_nats_server(), "-c", str(conf)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    url = f"nats://127.0.0.1:{port}"
    for _ in range(100):
        try:
            admin = await ConnectOptions(
                servers=(url,), nkey_seed=str(keys / "worker.nk")
            ).connect()
            break
        except Exception:
            await asyncio.sleep(0.1)
    else:
        server.kill()
        server.wait()
        raise AssertionError("nats-server did not start")
    await ha_nats.provision(admin.jetstream())
    await admin.close()
    return server, url, keys
