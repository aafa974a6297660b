"""`hookaudit serve` against hostile clients, on loopback: slowloris, slow bodies, huge heads.

Real processes: the session nats-server, a `hookaudit worker` evaluating a python hook,
and `hookaudit serve` with short timeouts and a connection cap below the attack's size.
Every test prints what it tried and what held.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
import pytest
from nats.aio.client import Client

from ingest.nats.streams import Names, provision

if TYPE_CHECKING:
    from tests.conftest import NatsServer

REPO = Path(__file__).resolve().parents[2]
HEADER_TIMEOUT = 3.0
BODY_TIMEOUT = 3.0
MAX_CONNECTIONS = 200
SLOW = 300

HOOKS = """
def guard(event):
    if "rm -rf /" in str((event.get("tool_input") or {}).get("command", "")):
        return {"hookSpecificOutput": {"hookEventName": "PreToolUse",
                "permissionDecision": "deny", "permissionDecisionReason": "no rm"}}
    return None
"""


def pretool(command: str) -> dict[str, object]:
    return {
        "hook_event_name": "PreToolUse",
        "session_id": "s1",
        "cwd": "/tmp",
        "tool_name": "Bash",
        "tool_input": {"command": command},
    }


def _spawn(args: list[str]) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOOKAUDIT_")}
    return subprocess.Popen(
        [sys.executable, "-m", "hookaudit", *args],
        cwd=REPO,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def _stop(proc: subprocess.Popen[bytes]) -> str:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        _, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    return err.decode(errors="replace")


@pytest.fixture
async def gateway(
    nats_server: NatsServer, nc: Client, names: Names, tmp_path: Path
) -> AsyncIterator[tuple[str, int]]:
    """A worker and a serve process on the session server; yields (host, port)."""
    await provision(nc.jetstream(), prefix=names.prefix)
    (tmp_path / "hooks.py").write_text(HOOKS)
    settings = tmp_path / "settings.json"
    hook = {"type": "python", "callable": f"{tmp_path / 'hooks.py'}:guard"}
    settings.write_text(json.dumps({"hooks": {"PreToolUse": [{"hooks": [hook]}]}}))
    common = ["--nats", nats_server.url, "--prefix", names.prefix]
    worker = _spawn(
        ["worker", "--data-dir", str(tmp_path / "data"), *common,
         "--settings", f"project:{settings}"]
    )  # fmt: skip
    serve = _spawn(
        ["serve", *common, "--listen", "127.0.0.1:0", "--timeout", "10", "--fail", "closed",
         "--header-timeout", str(HEADER_TIMEOUT), "--body-timeout", str(BODY_TIMEOUT),
         "--max-connections", str(MAX_CONNECTIONS), "--max-header-bytes", "8192"]
    )  # fmt: skip
    try:
        assert serve.stdout is not None
        line = (await asyncio.to_thread(serve.stdout.readline)).decode()
        assert line.startswith("hookaudit serve: listening on http://127.0.0.1:"), line + _stop(
            serve
        )
        port = int(line.rsplit(":", 1)[1].split("/")[0])
        yield "127.0.0.1", port
    finally:
        err = await asyncio.to_thread(_stop, serve)
        await asyncio.to_thread(_stop, worker)
        assert serve.returncode == 0, err
        assert "Traceback" not in err, err


async def _closed_after(host: str, port: int, head: bytes, drip: bytes) -> float | None:
    """Open a connection, send `head`, then one `drip` every 0.5 s until the server closes
    it; the seconds that took, or None when it stayed open 30 s (the test's own bound)."""
    t0 = time.monotonic()
    try:
        reader, writer = await asyncio.open_connection(host, port)
    except OSError:
        return 0.0
    try:
        writer.write(head)
        while time.monotonic() - t0 < 30:
            try:
                data = await asyncio.wait_for(reader.read(4096), 0.5)
            except TimeoutError:
                writer.write(drip)
                continue
            except OSError:  # reset by the server
                return time.monotonic() - t0
            if not data:
                return time.monotonic() - t0
            # an answer (503, 408, ...) still means the server is done with us
        return None
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def _health(client: httpx.AsyncClient) -> dict[str, object]:
    r = await client.get("/healthz")
    assert r.status_code == 200, r.text
    report: dict[str, object] = r.json()
    return report


async def test_slowloris_while_normal_requests_are_answered(
    gateway: tuple[str, int],
) -> None:
    host, port = gateway
    base = f"http://{host}:{port}"
    head = b"POST /hooks HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    slow = [
        asyncio.create_task(_closed_after(host, port, head, b"X-Slow: 1\r\n")) for _ in range(SLOW)
    ]
    # A few that never send a byte, and a few that dribble their body.
    body_head = head + b"Content-Length: 100000\r\n\r\n{"
    silent = [asyncio.create_task(_closed_after(host, port, b"", b"")) for _ in range(20)]
    bodies = [asyncio.create_task(_closed_after(host, port, body_head, b" ")) for _ in range(20)]
    latencies: list[float] = []
    answers: list[tuple[str, int, bytes]] = []
    # Fresh connections per request: an idle keep-alive connection is the first to be
    # evicted at the cap, which a real client survives by reconnecting.
    limits = httpx.Limits(max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=base, timeout=15, limits=limits) as client:
        for i in range(30):
            command = "rm -rf /" if i % 3 == 0 else f"ls {i}"
            t0 = time.monotonic()
            r = await client.post("/hooks", json=pretool(command))
            latencies.append(time.monotonic() - t0)
            answers.append((command, r.status_code, r.content))
            if i == 5:
                during = await _health(client)
            await asyncio.sleep(0.1)
        slow_times = await asyncio.gather(*slow)
        silent_times = await asyncio.gather(*silent)
        body_times = await asyncio.gather(*bodies)
        after = await _health(client)
        r = await client.post("/hooks", json=pretool("rm -rf /"))
        assert b"no rm" in r.content  # still deciding after the attack

    for command, status, content in answers:
        assert status == 200, (command, status, content)
        if command == "rm -rf /":
            assert json.loads(content)["hookSpecificOutput"]["permissionDecision"] == "deny"
        else:
            assert content == b"", content  # no decision: the agent proceeds
    everything = slow_times + silent_times + body_times
    assert None not in everything, f"{everything.count(None)} connections still open after 30 s"
    http = after["http"]
    assert isinstance(http, dict)
    closed_by_timeout = http.get("head_timeouts", 0) + http.get("body_timeouts", 0)
    assert http["evicted"] + closed_by_timeout >= SLOW + 40 - http["refused"], http
    assert http.get("head_timeouts", 0) > 0 and http["evicted"] > 0, http
    assert http["connections"] <= 2, http  # the attack's connections are all gone
    late = [t for t in slow_times + silent_times if t is not None and t >= HEADER_TIMEOUT * 0.9]
    print(
        f"slowloris: {SLOW} dribbling heads + 20 silent + 20 dribbling bodies against "
        f"--max-connections {MAX_CONNECTIONS}, --header-timeout {HEADER_TIMEOUT:g} s; "
        f"{len(answers)}/30 normal requests answered (9 denied), latency p50 "
        f"{statistics.median(latencies) * 1000:.1f} ms max {max(latencies) * 1000:.1f} ms; "
        f"during the attack {during['http']}; after {http}; "
        f"{len(late)} heads closed at >= the header timeout (last after "
        f"{max(t for t in everything if t is not None):.1f} s), bodies closed after "
        f"{min(t for t in body_times if t is not None):.1f}-"
        f"{max(t for t in body_times if t is not None):.1f} s"
    )


def _exchange(host: str, port: int, data: bytes) -> bytes:
    with socket.create_connection((host, port), timeout=10) as s:
        s.sendall(data)
        out = b""
        with contextlib.suppress(ConnectionResetError):
            while chunk := s.recv(65536):
                out += chunk
    return out


async def test_oversized_head_pipelining_and_expect(gateway: tuple[str, int]) -> None:
    host, port = gateway
    # A head beyond --max-header-bytes: 431, closed, never buffered whole.
    huge = b"POST /hooks HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 100_000 + b"\r\n\r\n"
    out = await asyncio.to_thread(_exchange, host, port, huge)
    assert out.startswith(b"HTTP/1.1 431"), out[:100]
    # Two pipelined requests on one connection: both answered, in order.
    deny = json.dumps(pretool("rm -rf /")).encode()
    allow = json.dumps(pretool("ls")).encode()

    def req(body: bytes, close: bool = False) -> bytes:
        extra = b"Connection: close\r\n" if close else b""
        return (
            b"POST /hooks HTTP/1.1\r\nHost: x\r\n" + extra
            + b"Content-Length: %d\r\n\r\n" % len(body) + body
        )  # fmt: skip

    out = await asyncio.to_thread(_exchange, host, port, req(deny) + req(allow, close=True))
    assert out.count(b"HTTP/1.1 200") == 2, out
    assert out.index(b"no rm") < out.rindex(b"HTTP/1.1 200"), out

    # curl's Expect: 100-continue: the 100 comes before the body is sent, then the answer.
    def expect_continue() -> tuple[bytes, bytes]:
        with socket.create_connection((host, port), timeout=10) as s:
            s.sendall(
                b"POST /hooks HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(deny)
            )
            first = s.recv(65536)
            s.sendall(deny)
            rest = b""
            while chunk := s.recv(65536):
                rest += chunk
        return first, rest

    first, rest = await asyncio.to_thread(expect_continue)
    assert first.startswith(b"HTTP/1.1 100"), first[:100]
    assert rest.startswith(b"HTTP/1.1 200") and b"no rm" in rest, rest
    print("hostile heads: 100 kB head -> 431; 2 pipelined requests answered in order; 100-continue")
