"""Benchmark: plan + run + aggregate for events whose matched hooks are all python hooks.

Target (issue 3): median ≤ 20 µs per event (≥ 50k events/s on one core). Also shown,
as the baseline in the same run: calling the hook functions directly.
Run: .venv/bin/python tests/bench/bench_python_hooks.py
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

from engine.records import new_event
from engine.run import Engine
from engine.sources import load_sources

POLICY = Path(__file__).resolve().parents[2] / "infra" / "policies" / "security.json"


def main(n: int = 20000) -> None:
    eff = load_sources([("project", str(POLICY))])
    engine = Engine()
    events = [
        new_event(
            {
                "hook_event_name": "PreToolUse",
                "session_id": "s",
                "cwd": "/home/u/p",
                "tool_name": tool,
                "tool_input": ti,
                "tool_use_id": f"t{i}",
            }
        )
        for i, (tool, ti) in enumerate(
            [
                ("Read", {"file_path": "/home/u/p/src/app.py"}),
                ("Edit", {"file_path": "/home/u/p/.env", "old_string": "a", "new_string": "b"}),
                ("WebFetch", {"url": "https://docs.python.org/3/"}),
                ("Write", {"file_path": "/home/u/p/README.md", "content": "x"}),
            ]
            * (n // 4)
        )
    ]
    fns = [
        engine.python.resolve(h.callable)
        for h in (  # type: ignore[union-attr]
            e.hook for e in eff.entries["PreToolUse"] if e.hook.type == "python"
        )
    ]

    def run_engine() -> float:
        t = time.perf_counter()
        for ev in events:
            out = engine.start(ev, eff)
            assert not asyncio.iscoroutine(out)
        return (time.perf_counter() - t) / len(events) * 1e6

    def run_direct() -> float:
        payloads = [json.loads(ev.payload) for ev in events]
        t = time.perf_counter()
        for p in payloads:
            fns[1](p)
        return (time.perf_counter() - t) / len(events) * 1e6

    engine_us = statistics.median(run_engine() for _ in range(5))
    direct_us = statistics.median(run_direct() for _ in range(5))
    print(
        json.dumps(
            {
                "events": len(events),
                "engine_us_per_event": round(engine_us, 2),
                "events_per_s": round(1e6 / engine_us),
                "hook_function_alone_us": round(direct_us, 2),
                "target_us": 20.0,
                "ok": engine_us <= 20.0,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20000)
