"""Benchmark: SIEM forward rate per transport against writing the same bytes, printed as JSON.

For each transport the forwarder (`ingest.siem.forward.Forwarder`: pull from JetStream, decode,
redact, format, frame, send, ack) moves N outcomes from HOOK_OUTCOMES to a receiver; the
baseline writes the same pre-formatted bytes to the same receiver in the same run, with the
same batch size. The receiver is a separate process that reads and counts octet-counted
frames (syslog) or lines (file). Targets: ratio >= 0.7; TCP >= 20k events/s, TLS >= 10k.

    .venv/bin/python tests/bench/bench_siem.py [--events 20000] [--batch 512]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import ssl
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from engine.records import encode_msgpack
from ingest import embedded
from ingest import nats as ha_nats
from ingest.siem.formats import format_view
from ingest.siem.forward import Forwarder
from ingest.siem.redact import Redactor
from ingest.siem.syslog import frame, rfc5424
from ingest.siem.targets import TlsFiles, parse_target
from ingest.siem.view import build_view

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.bench.bench_log import outcome

RECEIVER = r"""
import asyncio, ssl, sys
tls = sys.argv[1] == "tls"
ctx = None
if tls:
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(sys.argv[2], sys.argv[3])
count = 0
async def handle(r, w):
    global count
    buf = b""
    while True:
        data = await r.read(1 << 20)
        if not data:
            break
        buf += data
        while True:
            sp = buf.find(b" ")
            if sp < 0:
                break
            n = int(buf[:sp])
            if len(buf) < sp + 1 + n:
                break
            buf = buf[sp + 1 + n:]
            count += 1
            if count % 1000 == 0:
                print(count, flush=True)
async def main():
    srv = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=ctx)
    print(srv.sockets[0].getsockname()[1], flush=True)
    await srv.serve_forever()
asyncio.run(main())
"""


class Receiver:
    def __init__(self, proto: str, cert: Path, key: Path) -> None:
        self.p = subprocess.Popen(
            [sys.executable, "-c", RECEIVER, proto, str(cert), str(key)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.p.stdout is not None
        self.port = int(self.p.stdout.readline())
        self.seen = 0

    def wait(self, n: int) -> None:
        assert self.p.stdout is not None
        while self.seen < n:
            self.seen = int(self.p.stdout.readline())

    def stop(self) -> None:
        self.p.terminate()
        self.p.wait()


async def baseline(
    proto: str, port: int, frames: list[bytes], batch: int, ctx: ssl.SSLContext | None
) -> None:
    _, w = await asyncio.open_connection(
        "127.0.0.1", port, ssl=ctx, server_hostname="127.0.0.1" if ctx else None
    )
    for i in range(0, len(frames), batch):
        w.write(b"".join(frames[i : i + batch]))
        await w.drain()
    w.close()


async def forward(
    url: str,
    names: ha_nats.Names,
    d: Path,
    fmt: str,
    batch: int,
    n: int,
    tls: TlsFiles | None,
    name: str,
) -> float:
    sink = parse_target(url, tls=tls)
    from ingest.nats import ConnectOptions

    srv = embedded.live_server(d)
    assert srv is not None
    fwd = Forwarder(
        connect=ConnectOptions(servers=(srv.url,)),
        names=names,
        name=name,
        fmt=fmt,
        sink=sink,
        redactor=Redactor(key=b"bench-key-0123456789"),
        data_dir=d,
        batch=batch,
    )
    task = asyncio.create_task(fwd.run())
    t0 = time.perf_counter()
    while fwd.counters.messages < n:
        await asyncio.sleep(0.01)
    dt = time.perf_counter() - t0
    fwd.stop()
    await task
    return dt


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=20000)
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--format", default="cef", choices=["cef", "ocsf", "ecs", "json"])
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-siem-"))
    d = tmp / "data"
    srv = embedded.start_embedded(d, auth=False)
    key, cert = tmp / "key.pem", tmp / "cert.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=IP:127.0.0.1",
        ],
        check=True,
        capture_output=True,
    )
    outcomes = [outcome(i) for i in range(a.events)]
    names = ha_nats.names("bench")

    async def publish() -> None:
        nc = await ha_nats.connect(srv.url)
        js = nc.jetstream()
        await ha_nats.provision(js, prefix="bench")
        for o in outcomes:
            await js.publish(
                ha_nats.outcome_subject(names, "PreToolUse", "allow"), encode_msgpack(o)
            )
        await nc.close()

    asyncio.run(publish())
    # The same bytes the forwarder sends (same redaction, format and framing), made up front.
    red = Redactor(key=b"bench-key-0123456789")
    frames = [
        frame(rfc5424(r))
        for i, o in enumerate(outcomes)
        for r in format_view(a.format, build_view(o, seq=i + 1, redactor=red))
    ]
    results = []
    try:
        for proto in ("tcp", "tls"):
            ctx = ssl.create_default_context(cafile=str(cert)) if proto == "tls" else None
            rx = Receiver(proto, cert, key)
            try:
                t0 = time.perf_counter()
                asyncio.run(baseline(proto, rx.port, frames, a.batch, ctx))
                rx.wait(len(frames))
                base = time.perf_counter() - t0
                t0 = time.perf_counter()
                fwd_s = asyncio.run(
                    forward(
                        f"syslog+{proto}://127.0.0.1:{rx.port}",
                        names,
                        d,
                        a.format,
                        a.batch,
                        a.events,
                        TlsFiles(ca=str(cert)),
                        f"bench-{proto}",
                    )
                )
                rx.wait(2 * len(frames))
                total = time.perf_counter() - t0
                fwd_rate = a.events / max(fwd_s, total)
                base_rate = len(frames) / base
                results.append(
                    {
                        "transport": f"syslog+{proto}",
                        "format": a.format,
                        "events": a.events,
                        "forward_events_per_s": round(fwd_rate),
                        "baseline_events_per_s": round(base_rate),
                        "ratio": round(fwd_rate / base_rate, 3),
                    }
                )
            finally:
                rx.stop()
        out = tmp / "out.ndjson"
        t0 = time.perf_counter()
        lines = b"".join(
            r.text.encode() + b"\n"
            for i, o in enumerate(outcomes)
            for r in format_view(a.format, build_view(o, seq=i + 1, redactor=red))
        )
        base_t = time.perf_counter()
        fd = os.open(tmp / "base.ndjson", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
        step = len(lines) // max(1, a.events // a.batch)
        for i in range(0, len(lines), step or 1):
            os.write(fd, lines[i : i + step])
            os.fsync(fd)
        os.close(fd)
        base = time.perf_counter() - base_t
        del t0
        fwd_s = asyncio.run(
            forward(f"file://{out}", names, d, a.format, a.batch, a.events, None, "bench-file")
        )
        results.append(
            {
                "transport": "file",
                "format": a.format,
                "events": a.events,
                "forward_events_per_s": round(a.events / fwd_s),
                "baseline_events_per_s": round(a.events / base),
                "ratio": round(base / fwd_s, 3),
            }
        )
    finally:
        embedded.stop_embedded(d)
    print(json.dumps({"bench": "siem", "cpus": os.cpu_count(), "results": results}, indent=2))


if __name__ == "__main__":
    main()
