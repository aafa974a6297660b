"""Command-hook overhead: CommandExecutor against a bare asyncio subprocess.

Run:  .venv/bin/python tests/bench/bench_command.py [N]

1. One hook, ``/bin/sh -c 'cat >/dev/null'`` with 1 KB of JSON on stdin, N times through
   CommandExecutor and N times through ``asyncio.create_subprocess_exec`` of the same
   argv + ``communicate``, interleaved so that drift hits both. Target ratio <= 1.10.
2. Four hooks sleeping 0.2 s gathered, against one alone. Target ratio <= 1.2.

Prints one JSON object.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from engine.effects import Invocation
from engine.executors.command import CommandExecutor
from engine.records import HookIdentity
from engine.settings import CommandHook

CMD = "cat >/dev/null"


def payload_1k() -> bytes:
    def encode(command: str) -> bytes:
        doc = {
            "hook_event_name": "PreToolUse",
            "session_id": "s" * 36,
            "cwd": os.getcwd(),
            "tool_name": "Bash",
            "tool_input": {"command": command},
        }
        return json.dumps(doc).encode()

    out = encode("x" * (1024 - len(encode(""))))
    assert len(out) == 1024, len(out)
    return out


def invocation(command: str, data: bytes) -> Invocation:
    hook = CommandHook(type="command", command=command)
    return Invocation(
        index=0,
        event="PreToolUse",
        hook=hook,
        identity=HookIdentity(type="command", source="user", command=command),
        source="user",
        matcher="Bash",
        timeout=30,
        payload={},
        input_json=data,
        cwd=os.getcwd(),
    )


async def raw_once(data: bytes) -> float:
    t0 = time.perf_counter()
    proc = await asyncio.create_subprocess_exec(
        "/bin/sh",
        "-c",
        CMD,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    await proc.communicate(data + b"\n")
    assert proc.returncode == 0
    return time.perf_counter() - t0


async def executor_once(ex: CommandExecutor, inv: Invocation) -> float:
    t0 = time.perf_counter()
    res = await ex.run(inv)
    assert res.exit_code == 0 and res.error is None, res
    return time.perf_counter() - t0


async def overhead(n: int) -> dict[str, float]:
    data = payload_1k()
    ex = CommandExecutor()
    inv = invocation(CMD, data)
    for _ in range(10):  # warm up imports, the child watcher, page cache
        await raw_once(data)
        await executor_once(ex, inv)
    raw: list[float] = []
    ours: list[float] = []
    for i in range(n):
        if i % 2:
            raw.append(await raw_once(data))
            ours.append(await executor_once(ex, inv))
        else:
            ours.append(await executor_once(ex, inv))
            raw.append(await raw_once(data))
    raw_ms = statistics.median(raw) * 1000
    ours_ms = statistics.median(ours) * 1000
    return {
        "raw_median_ms": round(raw_ms, 3),
        "executor_median_ms": round(ours_ms, 3),
        "ratio": round(ours_ms / raw_ms, 3),
    }


async def parallel(rounds: int = 5) -> dict[str, float]:
    ex = CommandExecutor()
    inv = invocation("sleep 0.2", b"{}")
    one: list[float] = []
    four: list[float] = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        await ex.run(inv)
        one.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        await asyncio.gather(*(ex.run(inv) for _ in range(4)))
        four.append(time.perf_counter() - t0)
    one_ms = statistics.median(one) * 1000
    four_ms = statistics.median(four) * 1000
    return {
        "one_median_ms": round(one_ms, 1),
        "four_gathered_median_ms": round(four_ms, 1),
        "ratio": round(four_ms / one_ms, 3),
    }


async def main(n: int) -> None:
    report = {
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "n": n,
        "overhead_1k_stdin": await overhead(n),
        "parallel_4x_sleep_0_2": await parallel(),
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 200))
