"""Benchmark: what authentication and signed decisions cost, paired in one run.

The same code against two embedded servers side by side, one with role nkeys (the
default) and one open, alternated so that a shared, noisy machine loads both alike:

- ``emit``: `hookaudit emit` cold start (observe mode), runs interleaved open/auth;
- ``worker``: the Worker end to end (bench_pipeline's loop) in alternating phases;
- ``reply``: signing one Reply (worker) plus verifying it (emit, serve), in µs,
  against the p50 of a raw NATS request/reply measured here (the floor of a decision).

Prints JSON with each pair and its ratio (auth / open; target <= 1.10).

    .venv/bin/python tests/bench/bench_auth.py [--emit-runs 30] [--events 5000] [--phases 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_emit
import bench_pipeline
from nats.aio.msg import Msg

from engine.records import Outcome, encode_msgpack, new_event
from ingest.nats import embedded
from ingest.nats.auth import new_seed
from ingest.nats.options import NatsArgs, connect_options
from ingest.protocol import Reply
from ingest.replysig import Signer, Verifier


def _emit_pair(dirs: dict[str, Path], runs: int) -> dict[str, object]:
    # emit doing everything itself (no relay): its own NATS connection carries the cost
    # of authentication, which the relay would otherwise pay once for many emits.
    pycache = next(iter(dirs.values())).parent / "pycache"
    envs = {
        k: bench_emit._env(pycache, HOOKAUDIT_DATA_DIR=str(d), HOOKAUDIT_RELAY="off")
        for k, d in dirs.items()
    }
    argv = [*bench_emit._hookaudit(), "emit"]
    for env in envs.values():
        bench_emit._time(argv, env, bench_emit.event())  # warm
    samples: dict[str, list[float]] = {k: [] for k in dirs}
    for _ in range(runs):
        for k, env in envs.items():
            samples[k].append(bench_emit._time(argv, env, bench_emit.event()))
    med = {k: round(statistics.median(v), 1) for k, v in samples.items()}
    return {"median_ms": med, "ratio": round(med["auth"] / med["open"], 3)}


async def _worker_pair(dirs: dict[str, Path], events: int, phases: int) -> dict[str, object]:
    rates: dict[str, list[float]] = {k: [] for k in dirs}
    for i in range(phases):
        for k, d in dirs.items():
            rec = embedded.live_server(d)
            assert rec is not None
            args = NatsArgs(nats_url=rec.url)
            bench_pipeline.EMITTER[:] = [connect_options(args, d, "emitter")]
            co = connect_options(args, d, "worker")
            work = d.parent / f"work-{k}-{i}"
            work.mkdir()
            rates[k].append(await bench_pipeline.worker_rate(co, f"p{i}", events, work))
    med = {k: round(statistics.median(v)) for k, v in rates.items()}
    return {"events_per_s": med, "ratio": round(med["open"] / med["auth"], 3)}


async def _request_floor(d: Path, n: int = 500) -> float:
    rec = embedded.live_server(d)
    assert rec is not None
    nc = await connect_options(NatsArgs(nats_url=rec.url), d, "worker").connect()
    try:

        async def echo(m: Msg) -> None:
            await m.respond(m.data)

        sub = await nc.subscribe("_INBOX.bench.rr", cb=echo)
        await nc.flush()
        times = []
        for _ in range(n):
            t = time.perf_counter()
            await nc.request("_INBOX.bench.rr", b"x" * 700, timeout=5)
            times.append((time.perf_counter() - t) * 1e6)
        await sub.unsubscribe()
        return statistics.median(times)
    finally:
        await nc.close()


def _reply_cost() -> float:
    ev = new_event({"hook_event_name": "PreToolUse", "session_id": "s"}, source="bench")
    data = encode_msgpack(Reply(event_id=ev.id, outcome=Outcome(event=ev, settings_id="s")))
    signer = Signer(new_seed())
    verifier = Verifier.from_keys([signer.public])

    def both() -> None:
        verifier.verify(data, signer.sign(data))

    return min(timeit.repeat(both, number=500, repeat=7)) / 500 * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--emit-runs", type=int, default=30)
    ap.add_argument("--events", type=int, default=5000)
    ap.add_argument("--phases", type=int, default=2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-auth-") as tmp:
        dirs = {"open": Path(tmp) / "open", "auth": Path(tmp) / "auth"}
        prefixes = tuple(f"p{i}" for i in range(args.phases))
        try:
            for k, d in dirs.items():
                embedded.start_embedded(d, auth=(k == "auth"), prefixes=("", *prefixes))
                rec = embedded.live_server(d)
                assert rec is not None
                asyncio.run(bench_emit._provision(rec.url, d))
            emit = _emit_pair(dirs, args.emit_runs)
            worker = asyncio.run(_worker_pair(dirs, args.events, args.phases))
            floor_us = asyncio.run(_request_floor(dirs["auth"]))
        finally:
            for d in dirs.values():
                embedded.stop_embedded(d)
    reply_us = _reply_cost()
    print(
        json.dumps(
            {
                "emit_cold_start": emit,
                "worker_end_to_end": worker,
                "reply_sign_plus_verify_us": round(reply_us, 1),
                "nats_request_reply_p50_us": round(floor_us, 1),
                "reply_ratio": round((floor_us + reply_us) / floor_us, 3),
                "target_ratio": 1.10,
                "load_avg": [round(x, 2) for x in os.getloadavg()],
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
