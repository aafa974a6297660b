"""Benchmark: LogWriter.append_batch throughput (one fsync per batch), printed as JSON.

Realistic records: a PreToolUse Bash event with one command HookRun. Target: >= 50k outcomes/s.

    .venv/bin/python tests/bench/bench_log.py [--records 100000] [--dir /path/on/the/real/disk]
"""

from __future__ import annotations

import argparse
import json
import platform
import shutil
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

from engine.records import HookIdentity, HookRun, Outcome, new_event
from ingest.log.verifier import verify
from ingest.log.writer import LogWriter


def outcome(i: int) -> Outcome:
    payload = {
        "session_id": "9f1c2d3e-4b5a-6c7d-8e9f-0a1b2c3d4e5f",
        "transcript_path": "/home/dev/.claude/projects/app/9f1c2d3e.jsonl",
        "cwd": "/home/dev/src/app",
        "permission_mode": "default",
        "hook_event_name": "PreToolUse",
        "tool_name": "Bash",
        "tool_input": {
            "command": f"git status && npm test -- --grep case-{i}",
            "description": "Run tests",
        },
        "tool_use_id": f"toolu_{i:024d}",
    }
    event = new_event(payload, host="dev-laptop", user="dev", ts=datetime.now(UTC))
    hook = HookIdentity(
        type="command", source="project", matcher="Bash", command="./hooks/guard.sh", timeout=60
    )
    run = HookRun(
        hook=hook,
        hook_id=hook.key(),
        outcome="allow",
        exit_code=0,
        duration_ms=12.5,
        stdout='{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"allow"}}',
        stdout_bytes=83,
        output={
            "hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "allow"}
        },
        decision="allow",
    )
    return Outcome(
        event=event,
        settings_id="3f5a9c0d1e2b4a67",
        decision="allow",
        reason="guard.sh: ok",
        runs=[run],
    )


def bench(base: Path, records: int, batch: int) -> dict[str, float]:
    data = Path(tempfile.mkdtemp(dir=base))
    outcomes = [outcome(i) for i in range(records)]
    try:
        with LogWriter.open(data, "bench", max_bytes=1 << 40) as w:
            started = time.perf_counter()
            for i in range(0, records, batch):
                w.append_batch(outcomes[i : i + batch])
            elapsed = time.perf_counter() - started
            size = w.active_path.stat().st_size
            seal_started = time.perf_counter()
            w.seal()
            seal_s = time.perf_counter() - seal_started
        sealed = sum(p.stat().st_size for p in (data / "log" / "sealed" / "bench").iterdir())
        verify_started = time.perf_counter()
        report = verify(data)
        verify_s = time.perf_counter() - verify_started
        assert report.ok and report.records == records, report.first_error
        return {
            "batch": batch,
            "records": records,
            "outcomes_per_s": round(records / elapsed),
            "fsyncs_per_s": round(records / batch / elapsed),
            "bytes_per_record": round(size / records),
            "seal_records_per_s": round(records / seal_s),
            "sealed_bytes_per_record": round(sealed / records),  # Parquet + keys + runs
            "verify_records_per_s": round(records / verify_s),
        }
    finally:
        shutil.rmtree(data)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument(
        "--dir", type=Path, default=None, help="where to write (default: a temp dir)"
    )
    args = parser.parse_args()
    base = args.dir or Path(tempfile.gettempdir())
    results = [bench(base, args.records, batch) for batch in (100, 1000)]
    print(
        json.dumps(
            {
                "bench": "log.append_batch",
                "python": platform.python_version(),
                "dir": str(base),
                "results": results,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
