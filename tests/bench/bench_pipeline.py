"""Benchmark: sustained end-to-end events/s through the worker vs a raw JetStream loop.

Both sides consume the same N pre-published events from the same stream on the same
embedded nats-server, in the same run:
- raw: a nats-py pull consumer that fetches batches and acks each message (the
  baseline the issue names); also shown, the same loop pulling with hookaudit's own
  `ingest.nats.pull.Puller`, which the worker uses instead of nats-py's `fetch`;
- hookaudit: the Worker (matcher-only settings: 20 groups, none matching the events'
  tools), which decodes, evaluates, appends to the fsynced log, publishes each outcome
  (PubAck awaited), then acks.

Prints JSON with both rates and the ratio (target ≥ 0.7), and the worker's CPU µs per event
(process time of this process, the log's thread included, between 10% and 90% of the events).
Run: .venv/bin/python tests/bench/bench_pipeline.py [N] [--no-auth]
(--no-auth: the same run on an open server, to measure what authentication costs.)
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path

from engine.records import encode_msgpack, new_event
from ingest.nats.embedded import start_embedded, stop_embedded
from ingest.nats.options import NatsArgs, connect_options
from ingest.nats.streams import ConnectOptions, event_subject, names, provision
from ingest.protocol import MSG_ID
from ingest.worker.loop import Worker

MATCHERS = ["Bash", "Edit|Write", "Read", "WebFetch", "mcp__github__.*", "NotebookEdit", "Agent"]


def write_settings(d: Path) -> Path:
    groups = [
        {"matcher": m, "hooks": [{"type": "command", "command": f"guard-{i}.sh"}]}
        for i, m in enumerate(MATCHERS * 3)
    ][:20]
    path = d / "settings.json"
    path.write_text(json.dumps({"hooks": {"PreToolUse": groups}}))
    return path


#: Who publishes the events (set by main): the emitter role, as `hookaudit emit` does.
EMITTER: list[ConnectOptions] = []


async def preload(_js: object, n_prefix: str, count: int) -> None:
    enc = await EMITTER[0].connect()
    try:
        await _preload(enc.jetstream(), n_prefix, count)
    finally:
        await enc.close()


async def _preload(js: object, n_prefix: str, count: int) -> None:
    nm = names(n_prefix)
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
        futs.append(
            js.publish(
                event_subject(nm, "PreToolUse"),
                encode_msgpack(ev),  # type: ignore[attr-defined]
                headers={MSG_ID: ev.id},
            )
        )
        if len(futs) >= 500:
            await asyncio.gather(*futs)
            futs = []
    await asyncio.gather(*futs)


async def raw_rate(co: ConnectOptions, prefix: str, count: int) -> float:
    nc = await co.connect()
    js = nc.jetstream()
    nm = names(prefix)
    await provision(js, prefix=prefix)
    await preload(js, prefix, count)
    sub = await js.pull_subscribe_bind(nm.worker_consumer, stream=nm.events_stream)
    got = 0
    t = time.perf_counter()
    while got < count:
        msgs = await sub.fetch(256, timeout=5)
        for m in msgs:
            await m.ack()
        got += len(msgs)
    await nc.flush()
    elapsed = time.perf_counter() - t
    await nc.close()
    return count / elapsed


async def raw_puller_rate(co: ConnectOptions, prefix: str, count: int) -> float:
    """The same raw loop, but pulling with hookaudit's Puller (what the worker uses)."""
    from ingest.nats.pull import Puller, ack_many

    nc = await co.connect()
    js = nc.jetstream()
    nm = names(prefix)
    await provision(js, prefix=prefix)
    await preload(js, prefix, count)
    sub = Puller(nc, nm.events_stream, nm.worker_consumer, ahead=True)  # as the worker
    await sub.start()
    got = 0
    t = time.perf_counter()
    while got < count:
        msgs = await sub.fetch(512, timeout=5)
        await ack_many(nc, msgs)  # as the worker: a batch's acks in one write
        got += len(msgs)
    await nc.flush()
    elapsed = time.perf_counter() - t
    await nc.close()
    return count / elapsed


async def worker_rate(co: ConnectOptions, prefix: str, count: int, d: Path) -> float:
    nc = await co.connect()
    js = nc.jetstream()
    await provision(js, prefix=prefix)
    await preload(js, prefix, count)
    await nc.close()
    w = Worker(
        data_dir=d / "data",
        settings=[("project", str(write_settings(d)))],
        connect=co,
        names=names(prefix),
        name="bench-1",
        batch=256,
    )
    t = time.perf_counter()
    task = asyncio.create_task(w.run())
    lo, hi = count // 10, count * 9 // 10
    c_lo = c_hi = 0.0
    n_lo = n_hi = 0
    while w.stats.events < count:
        if task.done():
            task.result()
        if not n_lo and w.stats.events >= lo:
            c_lo, n_lo = time.process_time(), w.stats.events
        if not n_hi and w.stats.events >= hi:
            c_hi, n_hi = time.process_time(), w.stats.events
        await asyncio.sleep(0.01)
    elapsed = time.perf_counter() - t
    if not n_hi:  # the last poll jumped past 90% to the end: read the span's end here
        c_hi, n_hi = time.process_time(), w.stats.events
    w.stop()
    await task
    # The worker's CPU (this process, its log thread included) per event, between 10% and
    # 90% of the events: start-up not counted.
    WORKER_CPU.append(1e6 * (c_hi - c_lo) / max(n_hi - n_lo, 1))
    return count / elapsed


WORKER_CPU: list[float] = []


async def main(count: int, auth: bool = True) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        # The embedded default: the worker role's nkey, anonymous clients refused.
        server = start_embedded(d / "nats-data", prefixes=("raw", "ours", "raw2", "lean"))
        try:
            co = connect_options(NatsArgs(nats_url=server.url), d / "nats-data", "worker")
            EMITTER.append(
                connect_options(NatsArgs(nats_url=server.url), d / "nats-data", "emitter")
            )
            raw = await raw_rate(co, "raw", count)
            ours = await worker_rate(co, "ours", count, d)
            raw2 = await raw_rate(co, "raw2", count)
            lean = await raw_puller_rate(co, "lean", count)
        finally:
            stop_embedded(d / "nats-data")
    baseline = (raw + raw2) / 2
    print(
        json.dumps(
            {
                "events": count,
                "auth": auth,
                "raw_pull_ack_per_s": round(baseline),
                "worker_end_to_end_per_s": round(ours),
                "ratio": round(ours / baseline, 3),
                "target_ratio": 0.7,
                "raw_with_our_puller_per_s": round(lean),
                "ratio_vs_raw_with_our_puller": round(ours / lean, 3),
                "worker_cpu_us_per_event": round(WORKER_CPU[0], 1),
                "load_average_at_end": [round(x, 2) for x in os.getloadavg()],
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    argv = [a for a in sys.argv[1:] if a != "--no-auth"]
    asyncio.run(main(int(argv[0]) if argv else 20000, auth="--no-auth" not in sys.argv))
