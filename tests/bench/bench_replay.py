"""Benchmark: replay throughput on a large stored log (not a test). Prints one JSON object.

    .venv/bin/python tests/bench/bench_replay.py [--events 1000000] [--data DIR] [--jobs 2] [--keep]
        [--only python|reuse|new_command] [--repeat N] [--bash-calls 5000]

The log is written by `tests/bench/gen_log.py` (real engine outcomes of realistic
sessions, re-timed and re-identified, as sealed Parquet + active JSONL, with the
security policy plus a failing http/command/python hook); `--data DIR` reuses one.
Three scenarios, each a full `replay.jobs.replay` (select → engine → diff → report):

1. ``python``: a candidate of matcher groups with in-process python hooks, over every
   event, ``--jobs`` processes (target ≥ 100k events/s on both cores). Before each run,
   the read floor: events/s of only reading and decoding every record (`replay.select`)
   in as many processes, so that a run on a slow minute of a shared machine shows as one
   (``of_read_floor``: the replay's rate over it).
2. ``reuse``: the settings that produced the log, whose command and http hooks are
   answered from the log by the recorded executor (target ≥ 50k events/s, 0 spawns).
3. ``new_command``: the python candidate plus a new bash command hook on every Bash
   call, run in the sandbox (``--exec sandbox``, concurrency C), over a time window of
   the log holding ``--bash-calls`` Bash calls; its hook spawns/s (spawns / wall time of
   the whole replay) against the spawn limit measured in the same run: raw
   ``asyncio.create_subprocess_exec`` of the same ``/bin/sh -c`` command with the same
   input and the same concurrency. Three interleaved rounds; the median ratio counts
   (target ≥ 0.9). Each round also drives the sandbox helper alone with the same
   number of hooks (``sandbox_only``): the spawn path without the replay's reading
   and evaluating of the log, which share the same cores.

Throughput runs use ``store="none"`` (nothing appended): the numbers are evaluation.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import multiprocessing
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from engine.records import uuid7  # noqa: E402
from ingest.log.layout import segments  # noqa: E402
from replay.answers import Policy  # noqa: E402
from replay.jobs import replay  # noqa: E402
from replay.request import Request  # noqa: E402
from replay.select import Selection, select  # noqa: E402

HOOKS = """
import re
DANGER = re.compile(r"rm -rf /|\\| *(sudo )?(ba)?sh\\b|push (-f|--force)|\\bnc -e\\b")
SECRET = re.compile(r"AKIA[0-9A-Z]{16}|ghp_[A-Za-z0-9]{36}")

def _pre(decision, reason):
    return {"hookSpecificOutput": {"hookEventName": "PreToolUse",
            "permissionDecision": decision, "permissionDecisionReason": reason}}

def bash(event):
    cmd = (event.get("tool_input") or {}).get("command", "")
    if DANGER.search(cmd):
        return _pre("deny", "dangerous command")
    if cmd.startswith(("curl ", "wget ")):
        return _pre("ask", "network tool")
    return None

def files(event):
    path = (event.get("tool_input") or {}).get("file_path", "")
    if "/.ssh/" in path or "/.aws/" in path or path.endswith(".env"):
        return _pre("deny", "sensitive file")
    return None

def web(event):
    url = (event.get("tool_input") or {}).get("url", "")
    return _pre("ask", "unknown domain") if "example" in url else None

def prompt(event):
    if SECRET.search(event.get("prompt", "")):
        return {"decision": "block", "reason": "secret in prompt"}
    return None
"""
NEW_COMMAND = "cat > /dev/null"


def python_settings(d: Path, new_command: bool = False) -> Path:
    (d / "bench_hooks.py").write_text(HOOKS)

    def py(name: str) -> dict[str, Any]:
        return {"type": "python", "callable": f"bench_hooks.py:{name}", "timeout": 2}

    bash: list[dict[str, Any]] = [py("bash")]
    if new_command:
        bash.append({"type": "command", "command": NEW_COMMAND, "timeout": 30})
    doc = {
        "hooks": {
            "PreToolUse": [
                {"matcher": "Bash", "hooks": bash},
                {"matcher": "Read|Edit|Write|MultiEdit|NotebookEdit", "hooks": [py("files")]},
                {"matcher": "WebFetch|WebSearch", "hooks": [py("web")]},
                {"matcher": "mcp__github__.*", "hooks": [py("bash")]},
                {"matcher": "mcp__slack__.*", "hooks": [py("web")]},
                {"matcher": "Agent", "hooks": [py("files")]},
            ],
            "UserPromptSubmit": [{"hooks": [py("prompt")]}],
        }
    }
    path = d / ("python_new_command.json" if new_command else "python.json")
    path.write_text(json.dumps(doc))
    return path


def recorded_settings(data: Path, d: Path) -> list[tuple[str, str]]:
    """The settings gen_log.py evaluated its template sessions with.

    gen_log's extra settings name a python Stop hook by an absolute path that depends on
    the run (its own file, or a temporary directory); the path is read back from a
    recorded run, so that the candidate's hook identities are exactly the recorded ones.
    A missing hook file is recreated only under the system temporary directory.
    """
    spec = importlib.util.spec_from_file_location("gen_log", ROOT / "tests/bench/gen_log.py")
    assert spec is not None and spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    sys.modules["gen_log"] = gen  # its dataclasses look their module up
    spec.loader.exec_module(gen)
    recorded: str | None = None
    for s in select(str(data), Selection(event=("Stop",))):
        calls = [r.hook.callable for r in s.outcome().runs if r.hook.type == "python"]
        if calls and calls[0]:
            recorded = calls[0]
            break
    doc = json.loads(json.dumps(gen._EXTRA_SETTINGS))
    if recorded is not None:
        doc["hooks"]["Stop"][0]["hooks"][0]["callable"] = recorded
        path = Path(recorded.rpartition(":")[0])
        if not path.exists() and path.is_relative_to(tempfile.gettempdir()):
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(getattr(gen, "_STOP_HOOK", ""))
    extra = d / "extra.json"
    extra.write_text(json.dumps(doc))
    return [("project", str(ROOT / "infra" / "policies" / "security.json")), ("user", str(extra))]


def generate(d: Path, events: int) -> float:
    t0 = time.perf_counter()
    active = min(100_000, events // 10)
    subprocess.run(
        [sys.executable, str(ROOT / "tests/bench/gen_log.py"), str(d), "--rows", str(events - active),
         "--active", str(active), "--workers", "2", "--crashes", "0", "--template-sessions", "300"],
        check=True, stdout=subprocess.DEVNULL,
    )  # fmt: skip
    return time.perf_counter() - t0


def run(d: Path, settings: list[tuple[str, str]], **kw: Any) -> dict[str, Any]:
    policy = Policy(store="none", **kw.pop("policy", {}))
    req = Request(str(d), tuple(settings), uuid7(), policy=policy, **kw)
    cpu0 = os.times()
    t0 = time.perf_counter()
    rep = replay(req).report
    wall = time.perf_counter() - t0
    cpu1 = os.times()
    cpu = sum(cpu1[:4]) - sum(cpu0[:4])
    return {
        "events": rep["selected"],
        "seconds": round(wall, 2),
        "events_per_second": round(rep["selected"] / wall),
        "cpu_seconds": round(cpu, 2),
        # largest resident sets so far: of a child (a job process; with jobs=1 the
        # sandbox helper), and of this process (the parent, or the job with jobs=1)
        "children_max_rss_mb": round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024),
        "self_max_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "changed": rep["changed"],
        "counterfactual": rep["counterfactual"],
        "reused": rep["hooks"]["reused"],
        "executed": rep["hooks"]["executed"],
        "spawned": rep["spawned"],
        "sandbox": rep["sandbox"],
        "digest": rep["digest"],
    }


def repeated(n: int, once: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """The median of `n` runs (by events/s), with every run's rate and CPU seconds (and
    its read floor, when measured)."""
    runs = [once() for _ in range(max(1, n))]
    best = sorted(runs, key=lambda r: r["events_per_second"])[len(runs) // 2]
    if n > 1:
        cols = ("events_per_second", "cpu_seconds", "read_floor")
        best = {**best, "runs": [[r[c] for c in cols if c in r] for r in runs]}
    return best


def _count_records(args: tuple[str, list[Any]]) -> int:
    data, segs = args
    return sum(1 for _ in select(data, Selection(), segs=segs, skip={}))


def read_floor(d: Path, jobs: int) -> float:
    """Events/s of only reading and decoding every stored record (`replay.select`) in
    `jobs` processes: the floor under any replay on this machine at this minute."""
    segs = segments(str(d))
    ctx = multiprocessing.get_context("fork")
    t0 = time.perf_counter()
    with ctx.Pool(jobs) as pool:
        counts = pool.map(_count_records, [(str(d), segs[i::jobs]) for i in range(jobs)])
    return sum(counts) / (time.perf_counter() - t0)


def with_floor(d: Path, jobs: int, once: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """`once()`, preceded by the read floor measured just before it."""
    floor = read_floor(d, jobs)
    res = once()
    return {
        **res,
        "read_floor": round(floor),
        "of_read_floor": round(res["events_per_second"] / floor, 3),
    }


async def sandbox_spawns(n: int, concurrency: int, data: bytes) -> float:
    """Spawns/s of the same hook through `SandboxExecutor` alone (no log, no engine)."""
    from engine.effects import Invocation
    from engine.records import HookIdentity
    from engine.settings import CommandHook
    from replay.sandbox import SandboxExecutor

    hook = CommandHook(type="command", command=NEW_COMMAND)
    identity = HookIdentity(type="command", source="project", command=NEW_COMMAND)
    inv = Invocation(index=0, event="PreToolUse", hook=hook, identity=identity, source="project",
                     matcher="Bash", timeout=30, payload={}, input_json=data, cwd="/")  # fmt: skip
    ex = SandboxExecutor(concurrency=concurrency)
    await ex.run(inv)  # the helper is up
    t0 = time.perf_counter()
    await asyncio.gather(*(ex.run(inv) for _ in range(n)))  # it runs `concurrency` at once
    rate = n / (time.perf_counter() - t0)
    await ex.aclose()
    return rate


async def raw_spawns(n: int, concurrency: int, data: bytes) -> float:
    """Spawns/s of bare asyncio subprocesses of the hook's argv with its input."""
    sem = asyncio.Semaphore(concurrency)

    async def one() -> None:
        async with sem:
            proc = await asyncio.create_subprocess_exec(
                "/bin/sh", "-c", NEW_COMMAND, stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
            )  # fmt: skip
            await proc.communicate(data)

    t0 = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(n)))
    return n / (time.perf_counter() - t0)


def window(d: Path, bash_calls: int) -> tuple[Selection, int, bytes]:
    """The time window from the first Bash call of the log holding `bash_calls` of them."""
    stamps = []
    sample = b"{}"
    for s in select(str(d), Selection(event=("PreToolUse",))):
        ev = s.base.event
        if ev.tool_name == "Bash":
            stamps.append(ev.ts)
            sample = ev.payload.encode()
    stamps.sort()
    n = min(bash_calls, len(stamps))
    return Selection(since=stamps[0], until=stamps[n - 1] + timedelta(microseconds=1)), n, sample


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--data", type=Path, help="an existing gen_log.py directory to reuse")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--bash-calls", type=int, default=5000)
    ap.add_argument("--only", choices=["python", "reuse", "new_command"], action="append")
    ap.add_argument("--keep", action="store_true", help="keep the generated log")
    ap.add_argument(
        "--repeat", type=int, default=1,
        help="run the python and reuse scenarios N times: the median run, and every rate",
    )  # fmt: skip
    args = ap.parse_args()
    only = set(args.only or ["python", "reuse", "new_command"])
    work = Path(tempfile.mkdtemp(prefix="hookaudit-bench-replay-"))
    data = args.data or work / "log"
    out: dict[str, Any] = {"cpus": os.cpu_count(), "load_before": os.getloadavg()[0]}
    if args.data is None:
        out["generate_seconds"] = round(generate(data, args.events), 1)
    if "python" in only:
        py = python_settings(work)
        out["python"] = repeated(
            args.repeat,
            lambda: with_floor(
                data, args.jobs, lambda: run(data, [("project", str(py))], jobs=args.jobs)
            ),
        )
        out["python"]["target"] = 100_000
        print(json.dumps({"python": out["python"]}), file=sys.stderr)
    if "reuse" in only:
        recorded = recorded_settings(data, work)
        out["reuse"] = repeated(args.repeat, lambda: run(data, recorded, jobs=args.jobs))
        out["reuse"]["target"] = 50_000
        print(json.dumps({"reuse": out["reuse"]}), file=sys.stderr)
    if "new_command" in only:
        out["new_command"] = new_command(data, work, args.bash_calls, args.concurrency)
    out["load_after"] = os.getloadavg()[0]
    if args.keep:
        out["data"] = str(data)
    else:
        shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(out, indent=1))


def new_command(data: Path, work: Path, bash_calls: int, concurrency: int) -> dict[str, Any]:
    """Rounds of (raw spawn limit, replay), interleaved so that load drift hits both."""
    sel, bash, sample = window(data, bash_calls)
    new = python_settings(work, new_command=True)
    rounds = []
    res: dict[str, Any] = {}
    for _ in range(3):
        limit = asyncio.run(raw_spawns(bash, concurrency, sample))
        alone = asyncio.run(sandbox_spawns(bash, concurrency, sample))
        res = run(data, [("project", str(new))], jobs=1, selection=sel, concurrency=concurrency)
        rate = res["spawned"] / res["seconds"]
        rounds.append({"spawn_limit": round(limit, 1), "replay_spawns": round(rate, 1),
                       "ratio": round(rate / limit, 3), "sandbox_only": round(alone / limit, 3)})  # fmt: skip
    ratios = sorted(r["ratio"] for r in rounds)
    res["rounds"] = rounds
    res["ratio"] = ratios[len(ratios) // 2]  # the median round
    res["target_ratio"] = 0.9
    res["concurrency"] = concurrency
    return res


if __name__ == "__main__":
    main()
