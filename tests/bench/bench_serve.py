"""Benchmark: decision round trips through `hookaudit serve`, printed as JSON.

Everything runs on 127.0.0.1 against a fresh embedded nats-server, each part in its own
process as in production (agent, serve, worker/responder, nats-server):

- ``nats_request_reply``: the floor. A raw NATS request/reply (msgpack HookEvent out,
  msgpack Reply back) to the responder process.
- ``http_healthz``: the HTTP floor. GET /healthz on serve (no NATS involved).
- ``serve_responder``: POST /hooks -> serve -> JetStream -> the responder process, which
  answers at once -> serve -> 200 with the decision JSON.
- ``serve_worker_python``: the same with the real worker (`ingest/worker/loop.py`) evaluating a
  python-only policy and appending each outcome to its log (fsync per batch) before it
  answers. One request in ten is denied by the policy; the others get no decision.

The client is a minimal keep-alive HTTP/1.1 client on a blocking socket, sending requests
one after another as one Claude Code session does; a Python HTTP client (httpx) would add
~0.8 ms of its own per request. Target: serve_responder p99 <= 5 ms.

    .venv/bin/python tests/bench/bench_serve.py [--requests 2000] [--no-worker] [--no-auth]

``--pair N`` starts both configurations side by side, authenticated (role keys, replies
signed or keyed and verified) and open, and alternates each request between them (ABBA),
N rounds with fresh processes; it prints the ratio auth / open of each serve part's p50
and p99 (per round and the median): what authentication and signing cost serve, with
both measured at the same moments of a noisy machine.

    .venv/bin/python tests/bench/bench_serve.py --pair 3 --requests 1000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nats.aio.msg import Msg

from engine.records import HookEvent, Outcome, decode_event_msgpack, encode_msgpack, new_event
from ingest.nats.embedded import start_embedded, stop_embedded
from ingest.nats.streams import connect, names
from ingest.protocol import PEER_HEADER, REPLY_HEADER, Reply

REPO = Path(__file__).resolve().parents[2]
WARMUP = 200


def payload(i: int) -> dict[str, Any]:
    return {
        "session_id": "9f1c2d3e-4b5a-6c7d-8e9f-0a1b2c3d4e5f",
        "transcript_path": "/home/dev/.claude/projects/app/9f1c2d3e.jsonl",
        "cwd": "/home/dev/src/app",
        "permission_mode": "default",
        "hook_event_name": "PreToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": "rm -rf /" if i % 10 == 0 else f"npm test -- --grep case-{i}"},
        "tool_use_id": f"toolu_{i:024d}",
    }


def stats(samples: list[float]) -> dict[str, Any]:
    ms = sorted(s * 1000 for s in samples)
    q = statistics.quantiles(ms, n=100, method="inclusive")
    return {
        "n": len(ms),
        "p50_ms": round(q[49], 3),
        "p90_ms": round(q[89], 3),
        "p99_ms": round(q[98], 3),
        "max_ms": round(ms[-1], 3),
        "mean_ms": round(statistics.fmean(ms), 3),
    }


def _allow(ev: HookEvent) -> Outcome:
    return Outcome(event=ev, settings_id="bench", decision="allow", reason="ok")


# -- the responder process (plays the worker, answers at once) ---------------------------


async def responder(url: str, prefix: str, data_dir: str) -> None:
    from ingest.replysig import Signer, ensure_reply_key

    # Serve verifies, as live; "-" (--no-auth): unsigned replies, serve verifies nothing.
    signer = None if data_dir == "-" else Signer.from_file(ensure_reply_key(Path(data_dir)))
    nc = await connect(url, name="bench-responder")
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)

    async def on_event(msg: Msg) -> None:
        ev = decode_event_msgpack(msg.data)
        reply = encode_msgpack(Reply(event_id=ev.id, outcome=_allow(ev)))
        hdrs = msg.headers or {}
        sig = None if signer is None else signer.reply_headers(reply, hdrs.get(PEER_HEADER))
        await nc.publish(hdrs[REPLY_HEADER], reply, headers=sig)

    async def on_request(msg: Msg) -> None:
        ev = decode_event_msgpack(msg.data)
        await msg.respond(encode_msgpack(Reply(event_id=ev.id, outcome=_allow(ev))))

    await nc.subscribe(names(prefix).events_subjects, cb=on_event)
    await nc.subscribe(f"bench.rr.{prefix}", cb=on_request)
    await nc.flush()
    print("ready", flush=True)
    await stop.wait()
    await nc.drain()


# -- the measuring side ------------------------------------------------------------------


def spawn(argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOOKAUDIT_")}
    with open(log, "ab") as err:
        return subprocess.Popen(
            [sys.executable, *argv], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=err
        )


def first_line(proc: subprocess.Popen[bytes], what: str, log: Path) -> str:
    assert proc.stdout is not None
    line = proc.stdout.readline().decode()
    if not line:
        raise SystemExit(f"{what} did not start; see {log}:\n{log.read_text()[-2000:]}")
    return line.strip()


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


class RawClient:
    """One keep-alive HTTP/1.1 connection; just enough to read Content-Length responses."""

    def __init__(self, url: str) -> None:
        host, port = url.split("/")[2].rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def call(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        head = f"{method} {path} HTTP/1.1\r\nHost: bench\r\n"
        if method == "POST":
            head += f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        self.sock.sendall(head.encode() + b"\r\n" + body)
        buf = b""
        while b"\r\n\r\n" not in buf:
            buf += self.sock.recv(65536)
        top, _, rest = buf.partition(b"\r\n\r\n")
        lines = top.split(b"\r\n")
        length = next(
            int(v)
            for k, _, v in (ln.partition(b":") for ln in lines[1:])
            if k.strip().lower() == b"content-length"
        )
        while len(rest) < length:
            rest += self.sock.recv(65536)
        return int(lines[0].split()[1]), rest

    def close(self) -> None:
        self.sock.close()


def timed(n: int, one: Callable[[int], None]) -> dict[str, Any]:
    for i in range(WARMUP):
        one(i)
    samples = []
    for i in range(n):
        t0 = time.perf_counter()
        one(WARMUP + i)
        samples.append(time.perf_counter() - t0)
    return stats(samples)


async def bench_nats(url: str, prefix: str, n: int) -> dict[str, Any]:
    nc = await connect(url, name="bench-requester")
    samples = []
    try:
        for i in range(WARMUP + n):
            data = encode_msgpack(new_event(payload(i), source="bench"))
            t0 = time.perf_counter()
            await nc.request(f"bench.rr.{prefix}", data, timeout=5)
            if i >= WARMUP:
                samples.append(time.perf_counter() - t0)
    finally:
        await nc.close()
    return stats(samples)


def bench_http(hooks_url: str, n: int, healthz: bool) -> dict[str, Any]:
    client = RawClient(hooks_url)
    answers: dict[str, int] = {}

    def post(i: int) -> None:
        status, body = client.call("POST", "/hooks", json.dumps(payload(i)).encode())
        assert status == 200, (status, body)
        kind = json.loads(body)["hookSpecificOutput"]["permissionDecision"] if body else "none"
        answers[kind] = answers.get(kind, 0) + 1

    def health(i: int) -> None:
        status, _ = client.call("GET", "/healthz")
        assert status == 200

    try:
        result = timed(n, health if healthz else post)
    finally:
        client.close()
    if not healthz:
        result["answers"] = answers
    return result


def worker_ready(hooks_url: str, log: Path, wait: float = 60.0) -> None:
    """Until the policy's deny comes back through serve (payload 0 is the denied one)."""
    client = RawClient(hooks_url)
    deadline = time.monotonic() + wait
    try:
        while time.monotonic() < deadline:
            _, body = client.call("POST", "/hooks", json.dumps(payload(0)).encode())
            if body and b'"deny"' in body:
                return
            time.sleep(0.2)
    finally:
        client.close()
    raise SystemExit(f"the worker gave no decision within {wait:g}s; see {log}")


def start_serve(
    url: str, prefix: str, log: Path, data_dir: Path
) -> tuple[subprocess.Popen[bytes], str]:
    argv = [
        "-m",
        "hookaudit.serve_cmd",
        "--data-dir",
        str(data_dir),
        "--nats",
        url,
        "--prefix",
        prefix,
        "--listen",
        "127.0.0.1:0",
        "--timeout",
        "10",
    ]
    proc = spawn(argv, log)
    return proc, first_line(proc, "serve", log).split()[-1]


class Rig:
    """Everything one configuration (authenticated or open) runs, started and live."""

    def __init__(self, with_worker: bool, auth: bool) -> None:
        self.tmp = Path(tempfile.mkdtemp(prefix="bench-serve-"))
        self.procs: list[subprocess.Popen[bytes]] = []
        self.urls: dict[str, str] = {}  # part -> serve's hooks URL
        tmp = self.tmp
        # The responder reads events with a plain subscription, which no role may: it runs
        # on an open server (replies signed or keyed still). The worker run uses the
        # embedded default: role keys, signed or keyed and verified replies.
        self.server = start_embedded(tmp / "nats", auth=False)
        prefix2 = f"bench{secrets.token_hex(3)}"
        self.authed = start_embedded(tmp / "auth", prefixes=(prefix2,), auth=auth)
        # open: serve's data dirs hold no reply.pub, so it verifies nothing (the worker
        # still signs: its cost stays in both runs).
        serve_dir = tmp / "auth" if auth else tmp / "noverify"
        responder_dir = str(tmp / "nats") if auth else "-"
        try:
            self.prefix = f"bench{secrets.token_hex(3)}"
            me = str(Path(__file__).resolve())
            argv = [me, "--responder", self.server.url, self.prefix, responder_dir]
            self.procs.append(spawn(argv, tmp / "responder.log"))
            first_line(self.procs[-1], "responder", tmp / "responder.log")
            serve, self.urls["serve_responder"] = start_serve(
                self.server.url,
                self.prefix,
                tmp / "serve.log",
                tmp / "nats" if auth else tmp / "noverify",
            )
            self.procs.append(serve)
            if with_worker and (REPO / "ingest" / "worker" / "loop.py").exists():
                self.urls["serve_worker_python"] = self._worker(prefix2, serve_dir)
        except BaseException:
            self.close()
            raise

    def _worker(self, prefix: str, serve_dir: Path) -> str:
        tmp = self.tmp
        settings = tmp / "settings.json"
        hook = {
            "type": "python",
            "timeout": 2,
            "callable": f"{REPO}/infra/policies/security_hooks.py:bash_guard",
        }
        rules = {"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [hook]}]}}
        settings.write_text(json.dumps(rules))
        argv = [
            "-c",
            "from hookaudit.stream_cmd import worker_cmd; worker_cmd()",
            *("--data-dir", str(tmp / "auth"), "--nats", self.authed.url),
            *("--prefix", prefix, "--settings", f"project:{settings}"),
        ]
        self.procs.append(spawn(argv, tmp / "worker.log"))
        serve, hooks_url = start_serve(self.authed.url, prefix, tmp / "serve2.log", serve_dir)
        self.procs.append(serve)
        # serve's emitter role cannot create the stream: until the worker has, serve
        # fails open at once and a run would time only that. Wait for a real decision.
        worker_ready(hooks_url, tmp / "worker.log")
        return hooks_url

    def close(self) -> None:
        for p in reversed(self.procs):
            stop(p)
        stop_embedded(self.tmp / "nats")
        stop_embedded(self.tmp / "auth")
        shutil.rmtree(self.tmp, ignore_errors=True)


def run(n: int, with_worker: bool, auth: bool = True) -> dict[str, Any]:
    rig = Rig(with_worker, auth)
    results: dict[str, Any] = {}
    try:
        results["nats_request_reply"] = asyncio.run(bench_nats(rig.server.url, rig.prefix, n))
        results["http_healthz"] = bench_http(rig.urls["serve_responder"], n, healthz=True)
        for part, url in rig.urls.items():
            results[part] = bench_http(url, n, healthz=False)
    finally:
        rig.close()
    return results


def interleaved(n: int, rigs: dict[bool, Rig]) -> dict[str, dict[str, Any]]:
    """Each part's requests alternated between the authenticated and the open rig (ABBA),
    so both see the same moment of the machine: the ratio is not a difference of minutes."""
    out: dict[str, dict[str, Any]] = {}
    for part in rigs[True].urls:
        clients = {auth: RawClient(rig.urls[part]) for auth, rig in rigs.items()}
        samples: dict[bool, list[float]] = {True: [], False: []}
        answers: dict[bool, dict[str, int]] = {True: {}, False: {}}
        try:
            for i in range(WARMUP + n):
                body = json.dumps(payload(i)).encode()
                for auth in (True, False) if i % 2 == 0 else (False, True):
                    t0 = time.perf_counter()
                    status, got = clients[auth].call("POST", "/hooks", body)
                    took = time.perf_counter() - t0
                    assert status == 200, (status, got)
                    if i >= WARMUP:
                        samples[auth].append(took)
                        kind = (
                            json.loads(got)["hookSpecificOutput"]["permissionDecision"]
                            if got
                            else "none"
                        )
                        answers[auth][kind] = answers[auth].get(kind, 0) + 1
        finally:
            for c in clients.values():
                c.close()
        out[part] = {
            "auth": stats(samples[True]),
            "open": stats(samples[False]),
            "answers": {"auth": answers[True], "open": answers[False]},
        }
    return out


def paired(n: int, rounds: int, with_worker: bool) -> dict[str, Any]:
    """Both configurations live at once, requests alternated between them, `rounds` times
    (fresh processes each); ratios auth / open of p50 and p99, per round and the median."""
    per_round: list[dict[str, dict[str, Any]]] = []
    for _ in range(rounds):
        rigs: dict[bool, Rig] = {}
        try:
            rigs[True] = Rig(with_worker, auth=True)
            rigs[False] = Rig(with_worker, auth=False)
            per_round.append(interleaved(n, rigs))
        finally:
            for rig in rigs.values():
                rig.close()
    out: dict[str, Any] = {}
    for part in per_round[0]:
        row: dict[str, Any] = {}
        for q in ("p50_ms", "p99_ms"):
            ratios = [r[part]["auth"][q] / r[part]["open"][q] for r in per_round]
            row[q] = {
                "auth": statistics.median(r[part]["auth"][q] for r in per_round),
                "open": statistics.median(r[part]["open"][q] for r in per_round),
                "ratio": round(statistics.median(ratios), 3),
                "per_round": [round(x, 3) for x in ratios],
            }
        row["answers"] = per_round[0][part]["answers"]
        out[part] = row
    return {
        "benchmark": "serve auth vs open, requests interleaved",
        "requests": n,
        "rounds": rounds,
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "target": "ratio <= 1.10 (issue 11)",
        "results": out,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--no-worker", action="store_true", help="skip the real-worker run")
    ap.add_argument(
        "--no-auth", action="store_true", help="open server, replies not verified (baseline)"
    )
    ap.add_argument(
        "--responder", nargs=3, metavar=("NATS_URL", "PREFIX", "DATA_DIR"), help=argparse.SUPPRESS
    )
    ap.add_argument(
        "--pair", type=int, metavar="N", help="N rounds of both rigs live, requests alternated"
    )
    args = ap.parse_args()
    if args.responder:
        asyncio.run(responder(*args.responder))
        return
    if args.pair:
        print(json.dumps(paired(args.requests, args.pair, not args.no_worker), indent=2))
        return
    results = run(args.requests, with_worker=not args.no_worker, auth=not args.no_auth)
    print(
        json.dumps(
            {
                "benchmark": "serve",
                "requests": args.requests,
                "auth": not args.no_auth,
                "warmup": WARMUP,
                "http_parser": "h11 (ingest/serve/http1.py)",
                "python": platform.python_version(),
                "machine": f"{platform.machine()}, {os.cpu_count()} cpu",
                "load_average": [round(x, 2) for x in os.getloadavg()],
                "target": "serve_responder p99 <= 5 ms",
                "results": results,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
