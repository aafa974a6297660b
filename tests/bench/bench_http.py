"""HTTP-hook overhead: one PreToolUse HTTP hook through the engine vs a raw httpx POST.

Run:  .venv/bin/python tests/bench/bench_http.py [N]

A minimal keep-alive HTTP/1.1 server runs in a child process on 127.0.0.1 (so its CPU is
not ours) and answers every POST with the same allow decision. In one event loop, N times
each, interleaved so that drift hits both sides:

- ``engine``: ``Engine.evaluate_payload`` (plan, HttpExecutor: allowlist, header
  interpolation, SSRF check of the literal, pinned connection, capped read; decode,
  aggregate) for a 1 KB event;
- ``executor``: ``HttpExecutor.run`` alone, for the same invocation;
- ``raw``: ``httpx.AsyncClient.post`` of the same body with the same Content-Type.

Both sides reuse their client's keep-alive connection. Target: median engine/raw <= 1.2.
Prints one JSON object.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import httpx

from engine.executors.http import HttpExecutor
from engine.plan import plan
from engine.run import Engine
from engine.settings import parse_settings
from engine.sources import Source, merge

SERVER = r"""
import asyncio
BODY = b'{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"allow"}}'
RESP = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
        + str(len(BODY)).encode() + b"\r\n\r\n" + BODY)

class Conn(asyncio.Protocol):
    def connection_made(self, transport):
        self.t, self.buf = transport, b""

    def data_received(self, data):
        self.buf += data
        while True:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return
            size = 0
            for line in self.buf[:end].split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    size = int(value)
            if len(self.buf) < end + 4 + size:
                return
            self.buf = self.buf[end + 4 + size:]
            self.t.write(RESP)

async def main():
    srv = await asyncio.get_running_loop().create_server(Conn, "127.0.0.1", 0)
    print(srv.sockets[0].getsockname()[1], flush=True)
    await srv.serve_forever()

asyncio.run(main())
"""


def payload_1k() -> dict[str, object]:
    def doc(command: str) -> dict[str, object]:
        return {
            "hook_event_name": "PreToolUse",
            "session_id": "s" * 36,
            "cwd": os.getcwd(),
            "tool_name": "Bash",
            "tool_input": {"command": command},
        }

    pad = 1024 - len(json.dumps(doc("")).encode())
    out = doc("x" * pad)
    assert len(json.dumps(out).encode()) == 1024
    return out


async def bench(n: int, port: int) -> dict[str, object]:
    url = f"http://127.0.0.1:{port}/hook"
    settings = {
        "hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "http", "url": url}]}]}
    }
    eff = merge([Source("project", "bench.json", parse_settings(settings, "bench.json"), "/tmp")])
    payload = payload_1k()
    body = json.dumps(payload).encode()
    executor = HttpExecutor(environ={})
    engine = Engine({"http": executor})
    [inv] = plan("PreToolUse", payload, body, eff).invocations
    raw_client = httpx.AsyncClient(trust_env=False)
    headers = {"Content-Type": "application/json"}

    async def engine_once() -> float:
        t0 = time.perf_counter()
        ev = await engine.evaluate_payload("PreToolUse", payload, body, eff)
        dt = time.perf_counter() - t0
        assert ev.decision.decision == "allow", ev.decision
        return dt

    async def executor_once() -> float:
        t0 = time.perf_counter()
        res = await executor.run(inv)
        dt = time.perf_counter() - t0
        assert res.http_status == 200, res
        return dt

    async def raw_once() -> float:
        t0 = time.perf_counter()
        resp = await raw_client.post(url, content=body, headers=headers)
        _ = resp.content
        dt = time.perf_counter() - t0
        assert resp.status_code == 200
        return dt

    try:
        for _ in range(50):  # warm up: connections, imports, caches
            await engine_once()
            await executor_once()
            await raw_once()
        eng: list[float] = []
        exe: list[float] = []
        raw: list[float] = []
        for i in range(n):
            order = (
                (engine_once, executor_once, raw_once)
                if i % 2
                else (raw_once, executor_once, engine_once)
            )
            for fn in order:
                dt = await fn()
                (eng if fn is engine_once else exe if fn is executor_once else raw).append(dt)
    finally:
        await raw_client.aclose()
        await executor.aclose()

    def us(xs: list[float]) -> dict[str, float]:
        xs = sorted(xs)
        return {
            "median_us": round(statistics.median(xs) * 1e6, 1),
            "p90_us": round(xs[int(len(xs) * 0.9)] * 1e6, 1),
        }

    ratio = statistics.median(eng) / statistics.median(raw)
    return {
        "bench": "http_hook_vs_raw_httpx",
        "n": n,
        "body_bytes": len(body),
        "engine": us(eng),
        "executor": us(exe),
        "raw_httpx": us(raw),
        "ratio_engine_over_raw": round(ratio, 3),
        "ratio_executor_over_raw": round(statistics.median(exe) / statistics.median(raw), 3),
        "target": 1.2,
        "ok": ratio <= 1.2,
        "python": sys.version.split()[0],
        "httpx": httpx.__version__,
    }


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 500
    server = subprocess.Popen([sys.executable, "-c", SERVER], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        print(json.dumps(asyncio.run(bench(n, port))))
    finally:
        server.terminate()
        server.wait(timeout=5)


if __name__ == "__main__":
    main()
