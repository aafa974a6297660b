"""Benchmark: worker throughput against the combined raw limit, 1 and 2 workers, 1 and 3 nodes.

For each topology (one nats-server; the 3-node TLS cluster of infra/nats/cluster with R3
streams) and each worker count W (1, 2), in the same run and on the same server:

- raw pull+ack: W processes pull batches from the durable consumer and ack each message
  (no decoding, no log), N pre-published events;
- worker: W `hookaudit worker` processes (matcher-only settings, as bench_pipeline) decode,
  evaluate, append to the fsynced log, publish each outcome (PubAck awaited), then ack;
- raw publish: W processes publish the very outcomes the workers published (same subjects,
  bytes and Nats-Msg-Id) to another outcomes stream, PubAcks awaited in bulk, as the
  worker does;
- raw pull+ack again (the machine is shared: the two raw runs bracket the worker's).

combined raw limit = 1 / (1/pull_ack + 1/publish): what a process doing only the NATS work
the worker must do (pull, ack, publish the outcome) could sustain. Every rate is measured
the same way, by the parent polling the server (acked events, stored outcomes) and taking the
10%..90% span, so process start-up is not counted. Over the same span the CPU time (user +
system, from /proc) of the W children, of the nats-server process(es) and of the parent is
taken, per event: it says who uses the two cores (the `cpu_us_per_event` of each phase).
`cpu_bound_per_s` = cores / the worker phase's CPU per event (all its processes): the rate
no scheduling of that work can beat on this machine, and `cpu_bound_ratio` = that over the
combined raw limit, the ceiling of `ratio` for this code here.
Prints JSON; target ratio ≥ 0.85.

Run: .venv/bin/python tests/bench/bench_scale.py [N] [--nodes 1|3] [--workers 1|2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from engine.records import encode_msgpack, new_event  # noqa: E402
from ingest.nats.streams import ConnectOptions, event_subject, names, provision  # noqa: E402
from ingest.protocol import MSG_ID  # noqa: E402

TARGET = 0.85


def _co(url: str, ca: str | None) -> ConnectOptions:
    return ConnectOptions(servers=tuple(url.split(",")), tls_ca=ca, name="bench")


# -- children: one process each, so that W of them use W cores ---------------------------


async def child_pull_ack(url: str, ca: str | None, prefix: str) -> None:
    from ingest.nats.pull import Puller, ack_many

    nc = await _co(url, ca).connect()
    nm = names(prefix)
    sub = Puller(nc, nm.events_stream, nm.worker_consumer, ahead=True)  # as the worker
    await sub.start()
    idle = 0
    while idle < 6:  # until the consumer has stayed empty for 3 s
        msgs = await sub.fetch(512, timeout=0.5)
        idle = 0 if msgs else idle + 1
        await ack_many(nc, msgs)  # as the worker acks a batch: one write
    await nc.flush()
    await nc.close()


async def child_publish(url: str, ca: str | None, prefix: str, src: str) -> None:
    from ingest.nats.puback import AckWaiter

    nc = await _co(url, ca).connect()
    acks = AckWaiter(nc)
    await acks.start()
    old, new = names("wrk").outcomes_prefix, names(prefix).outcomes_prefix
    with open(src, "rb") as f:
        items = [json.loads(line) for line in f]
    batch = [(new + s[len(old) :], bytes.fromhex(d), i) for s, d, i in items]
    flying: list[Any] = []
    for at in range(0, len(batch), 512):
        # As the worker: a batch in one write, its PubAcks awaited in bulk, 3 in flight.
        flying.append(await acks.publish_many(batch[at : at + 512]))
        if len(flying) >= 3:
            await acks.wait_batch(flying.pop(0), timeout=30)
    for b in flying:
        await acks.wait_batch(b, timeout=30)
    await nc.close()


# -- parent ------------------------------------------------------------------------------


async def preload(co: ConnectOptions, prefix: str, count: int, replicas: int) -> None:
    nc = await co.connect()
    js = nc.jetstream()
    await provision(js, prefix=prefix, replicas=replicas)
    subject = event_subject(names(prefix), "PreToolUse")
    futs = []
    for i in range(count):
        ev = new_event(
            {
                "hook_event_name": "PreToolUse",
                "session_id": f"s{i % 50}",
                "cwd": "/home/u/p",
                "tool_name": "Glob",
                "tool_input": {"pattern": "**/*.py"},
                "tool_use_id": f"toolu_{i}",
            },
            source="bench",
            host="h",
            user="u",
        )
        futs.append(js.publish(subject, encode_msgpack(ev), headers={MSG_ID: ev.id}))
        if len(futs) >= 500:
            await asyncio.gather(*futs)
            futs = []
    await asyncio.gather(*futs)
    await nc.close()


_TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU of a live process (all its threads), from /proc; 0 once gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / _TICK  # utime, stime


#: The nats-server processes of the topology being measured (set by run_topology).
SERVER_PIDS: list[int] = []


def _cpu(procs: list[subprocess.Popen[bytes]]) -> tuple[float, float, float]:
    return (
        sum(cpu_seconds(p.pid) for p in procs),
        sum(cpu_seconds(pid) for pid in SERVER_PIDS),
        time.process_time(),
    )


async def span_rate(
    progress: Callable[[], Awaitable[int]],
    count: int,
    procs: list[subprocess.Popen[bytes]],
    cpu: dict[str, dict[str, float]] | None = None,
    phase: str = "",
) -> float:
    """Events/s between 10% and 90% of `count`, polling `progress` every 50 ms.

    With `cpu`, ``cpu[phase]`` gets the children's, the server's and this process's CPU
    µs per event over the same span.
    """
    lo, hi = count // 10, count * 9 // 10
    t_lo = t_hi = None
    c_lo = c_hi = (0.0, 0.0, 0.0)
    deadline = time.monotonic() + 600
    while t_hi is None:
        done = await progress()
        now = time.monotonic()
        if t_lo is None and done >= lo:
            t_lo, c_lo = now, _cpu(procs)
        if done >= hi:
            t_hi, c_hi = now, _cpu(procs)
        gone = procs and all(p.poll() is not None for p in procs)
        if t_hi is None and (time.monotonic() > deadline or gone):
            raise RuntimeError(f"stalled at {done} of {count}")
        await asyncio.sleep(0.05)
    assert t_lo is not None
    if cpu is not None:
        n = hi - lo
        cpu[phase] = {
            who: round(1e6 * (b - a) / n, 1)
            for who, a, b in zip(("children", "nats_server", "parent"), c_lo, c_hi, strict=True)
        }
    return (hi - lo) / max(t_hi - t_lo, 1e-6)


def spawn(argv: list[str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as err:
        return subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=err)


def finish(procs: list[subprocess.Popen[bytes]], log: Path, *, term: bool) -> None:
    for p in procs:
        if term and p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout=120)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        if p.returncode not in (0, -15):
            raise RuntimeError(f"child exited {p.returncode}: {log.read_text()[-2000:]}")


async def measure(url: str, ca: str | None, replicas: int, count: int, w: int, d: Path) -> dict:
    from tests.bench.bench_pipeline import write_settings

    co = _co(url, ca)
    nc = await co.connect()
    js = nc.jetstream()
    log = d / f"children-{w}.log"
    me = [sys.executable, str(Path(__file__).resolve()), "child"]
    tls = ["--tls-ca", ca] if ca else []

    def acked(prefix: str) -> Callable[[], Awaitable[int]]:
        nm = names(prefix)

        async def f() -> int:
            ci = await js.consumer_info(nm.events_stream, nm.worker_consumer)
            return count - int(ci.num_pending) - int(ci.num_ack_pending)

        return f

    def stored(prefix: str) -> Callable[[], Awaitable[int]]:
        async def f() -> int:
            return int((await js.stream_info(names(prefix).outcomes_stream)).state.messages)

        return f

    cpu: dict[str, dict[str, float]] = {}

    async def pull_ack(prefix: str, phase: str) -> float:
        await preload(co, prefix, count, replicas)
        procs = [spawn([*me, "pullack", url, ca or "", prefix], log) for _ in range(w)]
        rate = await span_rate(acked(prefix), count, procs, cpu, phase)
        finish(procs, log, term=False)
        return rate

    tag = f"{replicas}n{w}w"
    raw1 = await pull_ack(f"rawa{tag}", "raw_pull_ack_1")

    await preload(co, "wrk", count, replicas)
    settings = write_settings(d)
    argv = [
        sys.executable, "-m", "hookaudit", "worker", "--nats", url, *tls, "--prefix", "wrk",
        "--settings", f"project:{settings}",
    ]  # fmt: skip
    workers = [
        spawn([*argv, "--data-dir", str(d / f"data{w}"), "--name", f"b{i}"], log) for i in range(w)
    ]
    worker = await span_rate(acked("wrk"), count, workers, cpu, "worker")
    while await acked("wrk")() < count:
        await asyncio.sleep(0.1)
    finish(workers, log, term=True)

    # The outcomes the workers published, to be published again raw.
    src = d / f"outcomes-{w}.jsonl"
    osub = await js.subscribe(names("wrk").outcomes_subjects, ordered_consumer=True)
    with src.open("w") as f:
        for _ in range(count):
            m = await osub.next_msg(timeout=30)
            f.write(json.dumps([m.subject, m.data.hex(), (m.headers or {}).get(MSG_ID)]) + "\n")
    await osub.unsubscribe()
    pprefix = f"rawp{tag}"
    await provision(js, prefix=pprefix, replicas=replicas)
    # Each child publishes its share of the outcomes.
    lines = src.read_text().splitlines()
    shares = []
    for i in range(w):
        part = d / f"outcomes-{w}-{i}.jsonl"
        part.write_text("".join(ln + "\n" for ln in lines[i::w]))
        shares.append(part)
    procs = [spawn([*me, "publish", url, ca or "", pprefix, str(p)], log) for p in shares]
    publish = await span_rate(stored(pprefix), count, procs, cpu, "raw_publish")
    finish(procs, log, term=False)

    raw2 = await pull_ack(f"rawb{tag}", "raw_pull_ack_2")
    for prefix in (f"rawa{tag}", "wrk", pprefix, f"rawb{tag}"):
        for stream in (names(prefix).events_stream, names(prefix).outcomes_stream):
            await js.delete_stream(stream)
    await nc.close()
    pull = (raw1 + raw2) / 2
    combined = 1 / (1 / pull + 1 / publish)
    # What the machine's cores allow the worker phase: all its processes' CPU per event
    # (workers, servers, the parent's polling) spread perfectly over every core. No
    # scheduling beats it, so worker / combined cannot exceed cpu_bound / combined.
    spent = sum(cpu["worker"].values())
    cpu_bound = (os.cpu_count() or 1) / (spent * 1e-6) if spent else float("inf")
    return {
        "nodes": replicas,
        "workers": w,
        "events": count,
        "raw_pull_ack_per_s": round(pull),
        "raw_pull_ack_runs": [round(raw1), round(raw2)],
        "raw_publish_per_s": round(publish),
        "combined_raw_limit_per_s": round(combined),
        "worker_per_s": round(worker),
        "ratio": round(worker / combined, 3),
        "target_ratio": TARGET,
        "cpu_bound_per_s": round(cpu_bound),
        "cpu_bound_ratio": round(cpu_bound / combined, 3),
        "cpu_us_per_event": cpu,
        "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
    }


async def run_topology(nodes: int, count: int, counts: list[int]) -> list[dict]:
    out = []
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        d = Path(tmp)
        if nodes == 1:
            from ingest.nats.embedded import start_embedded, stop_embedded

            server = start_embedded(d / "nats", auth=False)
            SERVER_PIDS[:] = [server.pid]
            try:
                for w in counts:
                    out.append(await measure(server.url, None, 1, count, w, d))
            finally:
                stop_embedded(d / "nats")
        else:
            from tests.reliability.conftest import run_cluster

            with run_cluster(d / "cluster") as cluster:
                SERVER_PIDS[:] = [n.proc.pid for n in cluster.nodes if n.proc is not None]
                for w in counts:
                    out.append(await measure(cluster.urls, str(cluster.ca), 3, count, w, d))
    return out


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        kind, url, ca, prefix, *rest = sys.argv[2:]
        if kind == "pullack":
            asyncio.run(child_pull_ack(url, ca or None, prefix))
        else:
            asyncio.run(child_publish(url, ca or None, prefix, rest[0]))
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("events", nargs="?", type=int, default=20000)
    ap.add_argument("--nodes", type=int, choices=(1, 3), action="append")
    ap.add_argument("--workers", type=int, choices=(1, 2), action="append")
    args = ap.parse_args()
    results: list[dict[str, Any]] = []
    for nodes in args.nodes or [1, 3]:
        results += asyncio.run(run_topology(nodes, args.events, args.workers or [1, 2]))
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
