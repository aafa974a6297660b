"""Benchmark: SIEM forward rate per transport against sending the same bytes, printed as JSON.

For each transport the forwarder (`ingest.siem.forward.Forwarder`: pull from JetStream, decode,
redact, format, frame, send, wait for the receiver's answer, ack) moves N outcomes from
HOOK_OUTCOMES to a receiver; the baseline sends the same pre-formatted bytes (the same frames,
request bodies and HEC ack queries) to the same receiver in the same run, with the same batch
size and client (asyncio streams, a datagram endpoint, httpx). Each receiver is a separate
process speaking the real wire format (tests/bench/siem_receivers.py). The forwarder's rate
counts from its start (connect and consumer included) until the receiver holds every record,
not its shutdown after; `ratio` = forward / baseline.
Targets: ratio >= 0.7; syslog TCP >= 20k events/s, TLS >= 10k.

The ceiling: in the same run, a loop that only pulls the same outcomes from a durable
consumer configured as the forwarder's and acks them (the forwarder's own puller and batched
acks; nothing decoded, formatted or sent). No forwarder that takes its outcomes from
JetStream with explicit acks can go faster than that on this machine, so `ceiling_ratio` =
pull+ack / baseline bounds `ratio` from above. `combined_ratio` = forward against
1 / (1/pull+ack + 1/baseline), the combined raw limit bench_scale uses for the worker: a
process doing only the pulling, acking and sending of the same bytes, one after the other.

    .venv/bin/python tests/bench/bench_siem.py [--events 20000] [--batch 512] [--format cef]
        [--only syslog+tcp,hec]
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
import threading
import time
from pathlib import Path

import httpx
import msgspec

from engine.records import encode_msgpack
from ingest.nats import embedded
from ingest.nats import streams as ha_nats
from ingest.nats.pull import Puller, ack_many
from ingest.nats.streams import ConnectOptions
from ingest.redact import Redactor
from ingest.siem.formats import Formatted, format_view
from ingest.siem.forward import Forwarder
from ingest.siem.http import ElasticSink, hec_event
from ingest.siem.syslog import frame, rfc5424
from ingest.siem.targets import TlsFiles, parse_target
from ingest.siem.view import build_view

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.bench.bench_log import outcome

HERE = Path(__file__).resolve().parent
TRANSPORTS = ("syslog+tcp", "syslog+tls", "syslog+udp", "hec", "elastic", "webhook", "file")
KEY = b"bench-key-0123456789"
_enc = msgspec.json.Encoder()


class Receiver:
    def __init__(self, kind: str, tls: tuple[Path, Path] | None = None) -> None:
        self.kind = kind
        args = [str(a) for a in tls] if tls else []
        self.p = subprocess.Popen(
            [sys.executable, str(HERE / "siem_receivers.py"), kind, *args],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.p.stdout is not None
        self.port = int(self.p.stdout.readline())
        self.seen = 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.p.stdout is not None
        for line in self.p.stdout:
            self.seen = int(line)

    def wait(self, n: int, timeout: float = 300.0, settle: float = 1.0) -> int:
        """Until the receiver counted `n` records; UDP may lose some: then the count once it
        has not moved for `settle` seconds."""
        deadline = time.monotonic() + timeout
        last, since = -1, time.monotonic()
        while self.seen < n and time.monotonic() < deadline:
            if self.seen != last:
                last, since = self.seen, time.monotonic()
            elif time.monotonic() - since > settle and self.kind == "udp":
                break
            time.sleep(0.002)
        return self.seen

    def stop(self) -> None:
        self.p.terminate()
        self.p.wait()


async def pull_ack(url: str, names: ha_nats.Names, name: str, n: int, batch: int) -> float:
    """Seconds to pull `n` outcomes from a new durable consumer configured as the
    forwarder's and ack them, batch by batch (nothing else): the ceiling."""
    from nats.js import api as js_api

    nc = await ha_nats.connect(url)
    js = nc.jetstream()
    cfg = js_api.ConsumerConfig(
        durable_name=name,
        deliver_policy=js_api.DeliverPolicy.ALL,
        ack_policy=js_api.AckPolicy.EXPLICIT,
        ack_wait=120.0,
        max_ack_pending=max(4 * batch, 1024),
        filter_subject=names.outcomes_subjects,
    )
    await js.add_consumer(names.outcomes_stream, cfg)
    t0 = time.perf_counter()
    puller = Puller(nc, names.outcomes_stream, name, ahead=True)
    await puller.start()
    got = 0
    while got < n:
        msgs = await puller.fetch(batch, timeout=1.0)
        await ack_many(nc, msgs)
        got += len(msgs)
    await nc.flush()
    dt = time.perf_counter() - t0
    await puller.stop()
    await nc.close()
    return dt


def chunks(recs: list[Formatted], batch: int) -> list[list[Formatted]]:
    return [recs[i : i + batch] for i in range(0, len(recs), batch)]


async def baseline_stream(port: int, bodies: list[bytes], ctx: ssl.SSLContext | None) -> None:
    _, w = await asyncio.open_connection(
        "127.0.0.1", port, ssl=ctx, server_hostname="127.0.0.1" if ctx else None
    )
    # drain() returns once the transport's buffer is below its high-water mark (64 KiB); with
    # TLS the rest waits in the SSL layer, and closing without wait_closed() as asyncio.run
    # ended threw it away: the receiver never counted the last ~600 records and the bench
    # waited out its 300 s timeout for them (the "67 events/s" baseline). A high-water mark
    # of 1 byte makes each drain wait until the batch left the process, as the sink's does
    # (0 would never resume an SSL transport on 3.11).
    w.transport.set_write_buffer_limits(high=1)
    for b in bodies:
        w.write(b)
        await w.drain()
    w.close()
    await w.wait_closed()


async def baseline_udp(port: int, msgs: list[bytes]) -> None:
    loop = asyncio.get_running_loop()
    tr, _ = await loop.create_datagram_endpoint(
        asyncio.DatagramProtocol, remote_addr=("127.0.0.1", port)
    )
    for i, m in enumerate(msgs):
        tr.sendto(m)
        if i % 512 == 511:
            await asyncio.sleep(0)
    tr.close()


async def baseline_http(url: str, bodies: list[bytes], headers: dict[str, str], hec: bool) -> None:
    async with httpx.AsyncClient() as client:
        for b in bodies:
            r = await client.post(url, content=b, headers=headers)
            r.raise_for_status()
            answer = msgspec.json.decode(r.content)
            if hec:  # the indexer acknowledgement, as the sink asks for it
                ack = _enc.encode({"acks": [answer["ackId"]]})
                await client.post(url.rsplit("/", 1)[0] + "/ack", content=ack, headers=headers)


def baseline_file(path: Path, bodies: list[bytes]) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o640)
    for b in bodies:
        os.write(fd, b)
        os.fsync(fd)
    os.close(fd)


async def forward(
    url: str, names: ha_nats.Names, d: Path, fmt: str, batch: int, name: str, **kw: str
) -> Forwarder:
    srv = embedded.live_server(d)
    assert srv is not None
    tls = TlsFiles(ca=kw.get("ca"))
    fwd = Forwarder(
        connect=ConnectOptions(servers=(srv.url,)),
        names=names,
        name=name,
        fmt=fmt,
        sink=parse_target(url, tls=tls, token=kw.get("token")),
        redactor=Redactor(key=KEY),
        data_dir=d,
        batch=batch,
    )
    return fwd


def run_one(
    transport: str,
    recs: list[Formatted],
    n_events: int,
    names: ha_nats.Names,
    d: Path,
    a: argparse.Namespace,
    cert: Path,
    key: Path,
    tmp: Path,
) -> dict[str, object]:
    batches = chunks(recs, a.batch)
    kind = {"syslog+tcp": "syslog", "syslog+tls": "syslog", "syslog+udp": "udp"}.get(
        transport, {"hec": "hec", "elastic": "bulk", "webhook": "webhook"}.get(transport, "")
    )
    rx = Receiver(kind, (cert, key) if transport == "syslog+tls" else None) if kind else None
    port = rx.port if rx else 0
    ctx = ssl.create_default_context(cafile=str(cert)) if transport == "syslog+tls" else None
    hdr = {"Content-Type": "application/json"}
    t0 = sent_at = time.perf_counter()
    if transport in ("syslog+tcp", "syslog+tls"):
        bodies = [b"".join(frame(rfc5424(r)) for r in b) for b in batches]
        asyncio.run(baseline_stream(port, bodies, ctx))
        url = f"{transport}://127.0.0.1:{port}"
    elif transport == "syslog+udp":
        asyncio.run(baseline_udp(port, [rfc5424(r) for r in recs]))
        sent_at = time.perf_counter()  # UDP: the rate of sending (the receiver may drop)
        url = f"syslog+udp://127.0.0.1:{port}"
    elif transport == "hec":
        bodies = [b"".join(_enc.encode(hec_event(r)) for r in b) for b in batches]
        hdr |= {"Authorization": "Splunk t", "X-Splunk-Request-Channel": "bench"}
        asyncio.run(
            baseline_http(f"http://127.0.0.1:{port}/services/collector/event", bodies, hdr, True)
        )
        url = f"hec+http://127.0.0.1:{port}"
    elif transport == "elastic":
        es = ElasticSink("http://x", "hookaudit", token=None, auth=None, verify=False)
        bodies = [es._body(b) for b in batches]
        hdr = {"Content-Type": "application/x-ndjson"}
        asyncio.run(baseline_http(f"http://127.0.0.1:{port}/_bulk", bodies, hdr, False))
        url = f"elastic+http://127.0.0.1:{port}/hookaudit"
    elif transport == "webhook":
        bodies = [b"".join(r.text.encode() + b"\n" for r in b) for b in batches]
        hdr = {"Content-Type": "application/x-ndjson"}
        asyncio.run(baseline_http(f"http://127.0.0.1:{port}/in", bodies, hdr, False))
        url = f"http://127.0.0.1:{port}/in"
    else:
        bodies = [b"".join(r.text.encode() + b"\n" for r in b) for b in batches]
        baseline_file(tmp / "base.ndjson", bodies)
        url = f"file://{tmp / 'out.ndjson'}"
    got_base = rx.wait(len(recs), timeout=10 if kind == "udp" else 300) if rx else len(recs)
    if kind != "udp" and got_base != len(recs):  # a rate over lost records is no upper bound
        raise SystemExit(f"{transport} baseline: receiver counted {got_base} of {len(recs)}")
    base_s = (sent_at if kind == "udp" else time.perf_counter()) - t0
    srv = embedded.live_server(d)
    assert srv is not None
    ceiling_s = asyncio.run(
        pull_ack(srv.url, names, f"ceiling-{transport.replace('+', '-')}", n_events, a.batch)
    )

    async def go() -> tuple[float, float]:
        fwd = await forward(
            url,
            names,
            d,
            a.format,
            a.batch,
            f"bench-{transport.replace('+', '-')}",
            ca=str(cert),
            token="t",
        )
        c0, t0 = time.process_time(), time.perf_counter()
        task = asyncio.create_task(fwd.run())
        while fwd.counters.messages < n_events and not task.done():
            await asyncio.sleep(0.005)
        # From the forwarder's start (connect and consumer included) until the receiver
        # holds every record; its shutdown afterwards (a pull in flight runs out) is no
        # forwarding and is not counted.
        while rx is not None and kind != "udp" and rx.seen < got_base + len(recs):
            if task.done() or time.perf_counter() - t0 > 300:
                break
            await asyncio.sleep(0.002)
        dt = time.perf_counter() - t0
        cpu = time.process_time() - c0
        fwd.stop()
        await task
        return dt, cpu

    total, cpu_s = asyncio.run(go())
    got_fwd = (
        rx.wait(len(recs) + got_base, timeout=10 if kind == "udp" else 300) - got_base
        if rx
        else len(recs)
    )
    if kind != "udp" and got_fwd != len(recs):
        raise SystemExit(f"{transport} forward: receiver counted {got_fwd} of {len(recs)}")
    if rx:
        rx.stop()
    fwd_rate, base_rate, ceiling = n_events / total, n_events / base_s, n_events / ceiling_s
    combined = 1 / (1 / ceiling + 1 / base_rate)
    out: dict[str, object] = {
        "transport": transport,
        "format": a.format,
        "events": n_events,
        "batch": a.batch,
        "forward_events_per_s": round(fwd_rate),
        "baseline_events_per_s": round(base_rate),
        "ratio": round(fwd_rate / base_rate, 3),
        "pull_ack_events_per_s": round(ceiling),
        "ceiling_ratio": round(ceiling / base_rate, 3),
        "combined_ratio": round(fwd_rate / combined, 3),
        "forwarder_cpu_us_per_event": round(cpu_s / n_events * 1e6, 1),
    }
    if kind == "udp":
        out["received_forward"], out["received_baseline"] = got_fwd, got_base
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=20000)
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--format", default="cef", choices=["cef", "ocsf", "ecs", "json"])
    ap.add_argument("--only", default=",".join(TRANSPORTS), help="comma-separated transports")
    a = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="bench-siem-"))
    d = tmp / "data"
    srv = embedded.start_embedded(d, auth=False)
    key, cert = tmp / "key.pem", tmp / "cert.pem"
    subprocess.run(
        [
            *("openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key)),
            *("-out", str(cert), "-days", "1", "-subj", "/CN=localhost"),
            *("-addext", "subjectAltName=IP:127.0.0.1"),
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
        subject = ha_nats.outcome_subject(names, "PreToolUse", "allow")
        for i in range(0, len(outcomes), 1000):
            acks = [js.publish(subject, encode_msgpack(o)) for o in outcomes[i : i + 1000]]
            await asyncio.gather(*acks)
        await nc.close()

    asyncio.run(publish())
    # The records the forwarder makes (same redaction and format), made up front.
    red = Redactor(key=KEY)
    recs = [
        r
        for i, o in enumerate(outcomes)
        for r in format_view(a.format, build_view(o, seq=i + 1, redactor=red))
    ]
    results = []
    try:
        for t in a.only.split(","):
            results.append(run_one(t, recs, a.events, names, d, a, cert, key, tmp))
            print(json.dumps(results[-1]), file=sys.stderr, flush=True)
    finally:
        embedded.stop_embedded(d)
    load = os.getloadavg()[0]
    print(
        json.dumps(
            {"bench": "siem", "cpus": os.cpu_count(), "load1": round(load, 1), "results": results},
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
