"""`hookaudit serve` with an operator's emitter key, as the systemd unit runs it.

The unit hands serve its key through ``HOOKAUDIT_NATS_NKEY`` (emitter.nk) and runs
`hookaudit serve` without `--no-provision`. The emitter role may not create streams, so
serve must not try to unless told: it starts, answers /healthz, and a worker's signed deny
reaches an http hook through it. `--provision` forced with that key is one line and exit 1.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.support.relay import REPO, env, keyed_server, write_settings

pytestmark = pytest.mark.timeout(180)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve(url: str, keys: Path, data: Path, *extra: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "hookaudit", "serve", "--listen", f"127.0.0.1:{_free_port()}",
         "--fail", "closed", "--data-dir", str(data), *extra],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env=env(HOOKAUDIT_NATS_URL=url, HOOKAUDIT_NATS_NKEY=str(keys / "emitter.nk"),
                HOOKAUDIT_WORKER_KEY=(keys / "reply.pub").read_text().strip()),
    )  # fmt: skip


async def test_serve_with_an_emitter_key_starts_without_provisioning(tmp_path: Path) -> None:
    server, url, keys = await keyed_server(tmp_path)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        forced = _serve(url, keys, tmp_path / "forced", "--provision")
        _, err = forced.communicate(timeout=60)
        lines = err.decode().strip().splitlines()
        print(f"serve --provision with the emitter key: exit {forced.returncode}: {lines}")
        # the connection's own warning, then the refusal named in one line; no traceback
        assert forced.returncode == 1 and "Traceback" not in err.decode()
        assert "permission denied" in lines[-1] and "may not manage streams" in lines[-1]

        settings = write_settings(tmp_path)
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "hookaudit",
                    "worker",
                    "--data-dir",
                    str(tmp_path / "w"),
                    "--nats",
                    url,
                    "--nkey",
                    str(keys / "worker.nk"),
                    "--reply-key",
                    str(keys / "reply.nk"),
                    "--settings",
                    f"project:{settings}",
                ],
                cwd=REPO,
                env=env(),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        serve = _serve(url, keys, tmp_path / "serve")
        procs.append(serve)
        assert serve.stdout is not None
        line = serve.stdout.readline().decode()
        assert "listening on" in line, (line, serve.stderr.read() if serve.stderr else b"")
        hooks = line.rsplit(" ", 1)[1].strip()
        base = hooks.removesuffix("/hooks")
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            assert (await client.get("/healthz")).status_code == 200
            body = {
                "session_id": "s", "transcript_path": "/tmp/t", "cwd": "/tmp",
                "hook_event_name": "PreToolUse", "tool_name": "Bash",
                "tool_input": {"command": "rm -rf /"},
            }  # fmt: skip
            for _ in range(50):  # until the worker has joined and answers
                r = await client.post("/hooks", json=body)
                decision = r.json().get("hookSpecificOutput", {}) if r.content else {}
                if "spooled" not in str(decision) and "no decision" not in str(decision):
                    break
                await asyncio.sleep(0.2)
        print(f"serve with HOOKAUDIT_NATS_NKEY=emitter.nk: {line.strip()}; answer {decision}")
        assert decision.get("permissionDecision") == "deny"
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=30)
            for f in (proc.stdout, proc.stderr):
                if f is not None:
                    f.close()
        server.terminate()
        server.wait(timeout=30)
