"""Cold-start cost of `hookaudit emit` (observe mode) against a real embedded nats-server.

`hookaudit emit` runs once per tool call, so its wall time is the latency it adds to
every action of the agent. The yardstick is what no NATS client can avoid: starting
Python and importing nats-py. Both are run N times, interleaved, in the same run.

    .venv/bin/python tests/bench/bench_emit.py [-n 20] [--no-auth]

Prints one JSON object: medians in ms and ``ratio`` = emit / `python -c "import nats"`
(target <= 1.3). Bytecode is cached for the timed runs (PYTHONPYCACHEPREFIX in a temp
dir), as it is for an installed wheel. Until `emit` is registered in hookaudit/cli.py the emit command is
``python -c "from ingest.cli_emit import emit; emit()"`` (reported as ``emit_command``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ingest import embedded
from ingest import nats as ha_nats
from ingest.natsopts import NatsArgs, connect_options

REPO = Path(__file__).resolve().parents[2]
EVENT = json.dumps(
    {
        "session_id": "bench",
        "transcript_path": "/tmp/t.jsonl",
        "cwd": "/tmp",
        "permission_mode": "default",
        "hook_event_name": "PreToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": "ls -la", "description": "list"},
        "tool_use_id": "toolu_01",
    }
).encode()


def _emit_argv(data_dir: Path) -> list[str]:
    from hookaudit import cli

    if "emit" in cli.COMMANDS:
        return [sys.executable, "-m", "hookaudit", "emit", "--data-dir", str(data_dir)]
    code = "from ingest.cli_emit import emit; emit()"
    return [sys.executable, "-c", code, "--data-dir", str(data_dir)]


def _env(pycache: Path) -> dict[str, str]:
    """The environment of the timed runs: bytecode cached, as in an installed wheel.

    With PYTHONDONTWRITEBYTECODE set (as in some dev shells) hookaudit's own modules
    would be compiled on every run while nats-py's come precompiled from site-packages.
    """
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("HOOKAUDIT_") and k != "PYTHONDONTWRITEBYTECODE"
    }
    env["PYTHONPYCACHEPREFIX"] = str(pycache)
    return env


def _time(argv: list[str], env: dict[str, str], stdin: bytes = b"") -> float:
    t0 = time.perf_counter()
    p = subprocess.run(argv, input=stdin, capture_output=True, cwd=REPO, env=env, check=False)
    elapsed = (time.perf_counter() - t0) * 1000
    if p.returncode != 0 or p.stdout or p.stderr:
        raise SystemExit(f"{argv} failed ({p.returncode}): {p.stdout!r} {p.stderr!r}")
    return elapsed


async def _stored(url: str, data_dir: Path) -> int:
    nc = await connect_options(NatsArgs(nats_url=url), data_dir, "analyst").connect()
    try:
        info = await nc.jetstream().stream_info(ha_nats.EVENTS_STREAM)
        return int(info.state.messages)
    finally:
        await nc.close()


async def _provision(url: str, data_dir: Path) -> None:
    nc = await connect_options(NatsArgs(nats_url=url), data_dir, "worker").connect()
    try:
        await ha_nats.provision(nc.jetstream())
    finally:
        await nc.close()


def _start(data_dir: Path, auth: bool = True) -> embedded.EmbeddedServer:
    # start_embedded can read the server's ports file while it is still empty
    # (JSONDecodeError, reported to its owner); starting again is harmless.
    for attempt in range(3):
        try:
            return embedded.start_embedded(data_dir, auth=auth)
        except ValueError:
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=20, help="runs of each command (interleaved)")
    ap.add_argument("--no-auth", action="store_true", help="an open server (no role keys)")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-emit-") as tmp:
        data_dir = Path(tmp)
        server = _start(data_dir, auth=not args.no_auth)
        try:
            asyncio.run(_provision(server.url, data_dir))
            emit = _emit_argv(data_dir)
            commands = {
                "python": [sys.executable, "-c", "pass"],
                "import_nats": [sys.executable, "-c", "import nats"],
                "emit": emit,
                "emit_nats_url": [*emit, "--nats", server.url],
            }
            env = _env(data_dir / "pycache")
            for argv in commands.values():  # warm the page cache and .pyc files
                _time(argv, env, EVENT)
            samples: dict[str, list[float]] = {k: [] for k in commands}
            for _ in range(args.n):
                for name, argv in commands.items():
                    samples[name].append(_time(argv, env, EVENT))
            emitted = 2 * (args.n + 1)
            stored = asyncio.run(_stored(server.url, data_dir))
            if stored != emitted:
                raise SystemExit(f"expected {emitted} events in the stream, found {stored}")
        finally:
            embedded.stop_embedded(data_dir)

    med = {k: round(statistics.median(v), 1) for k, v in samples.items()}
    report = {
        "n": args.n,
        "auth": not args.no_auth,
        "emit_command": " ".join(emit[:4]) + " …",
        "median_ms": med,
        "min_ms": {k: round(min(v), 1) for k, v in samples.items()},
        "ratio": round(med["emit"] / med["import_nats"], 3),
        "ratio_nats_url": round(med["emit_nats_url"] / med["import_nats"], 3),
        "target": 1.3,
        "events_stored": stored,
        "python": sys.version.split()[0],
        "load_avg": [round(x, 2) for x in os.getloadavg()],
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
