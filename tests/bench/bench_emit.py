"""`hookaudit emit`: cold start and 100 concurrent `emit --wait`, against a real embedded nats-server.

`hookaudit emit` runs once per tool call, so its wall time is the latency it adds to
every action of the agent. Measured here, interleaved in one run:

- cold start (observe mode): the console script `hookaudit emit` through `hookaudit relay`
  (the fast path), ``python -I -S ingest/emit/fast.py`` (the leanest form,
  `hookaudit relay --print-command`), and the same with ``HOOKAUDIT_RELAY=off`` (emit doing everything
  itself, as before the relay), against ``python -c pass`` (the same interpreter, site
  included: the issue's ``python3 -c pass``), ``python -I -S -c pass`` and
  ``python -c "import nats"``. Target: relay / ``python -c pass`` <= 1.5.
- ``--concurrent N`` (default 100): N ``hookaudit emit --wait --fail closed`` started at
  once, each waiting for a real worker's signed decision (python-only policy, one event in
  ten denied), through the relay and without it; each process's wall time from spawn to
  exit; p50/p99/max. Every answer is checked (a deny where the policy denies, silence
  elsewhere). Target: relay p99 <= 2 s. N concurrent ``python -c pass`` as the floor.

Bytecode is cached for the timed runs (PYTHONPYCACHEPREFIX in a temp dir), as it is for an
installed wheel.

    .venv/bin/python tests/bench/bench_emit.py [-n 20] [--concurrent 100] [--no-auth]

Prints one JSON object (medians in ms, ratios).
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

from ingest.nats import embedded
from ingest.nats import streams as ha_nats
from ingest.nats.options import NatsArgs, connect_options

REPO = Path(__file__).resolve().parents[2]
#: The leanest hook command (`hookaudit relay --print-command`): python -I -S on this file.
FAST = str(REPO / "ingest" / "emit" / "fast.py")
HOOKS = """
def guard(event):
    if "DENY" in str((event.get("tool_input") or {}).get("command", "")):
        return {"hookSpecificOutput": {"hookEventName": "PreToolUse",
                "permissionDecision": "deny", "permissionDecisionReason": "bench deny"}}
    return None
"""


def event(command: str = "ls -la") -> bytes:
    return json.dumps(
        {
            "session_id": "bench",
            "transcript_path": "/tmp/t.jsonl",
            "cwd": "/tmp",
            "permission_mode": "default",
            "hook_event_name": "PreToolUse",
            "tool_name": "Bash",
            "tool_input": {"command": command, "description": "list"},
            "tool_use_id": "toolu_01",
        }
    ).encode()


def _hookaudit() -> list[str]:
    script = Path(sys.executable).with_name("hookaudit")
    if script.is_file():
        return [str(script)]  # the console script, as an agent's settings run it
    return [sys.executable, "-m", "hookaudit"]


def _env(pycache: Path, **extra: str) -> dict[str, str]:
    """The environment of the timed runs: bytecode cached, as in an installed wheel."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("HOOKAUDIT_") and k != "PYTHONDONTWRITEBYTECODE"
    }
    env["PYTHONPYCACHEPREFIX"] = str(pycache)
    env.update(extra)
    return env


def _time(argv: list[str], env: dict[str, str], stdin: bytes = b"") -> float:
    t0 = time.perf_counter()
    p = subprocess.run(argv, input=stdin, capture_output=True, cwd=REPO, env=env, check=False)
    elapsed = (time.perf_counter() - t0) * 1000
    if p.returncode != 0 or p.stdout or p.stderr:
        raise SystemExit(f"{argv} failed ({p.returncode}): {p.stdout!r} {p.stderr!r}")
    return elapsed


def _concurrent(
    argv: list[str], env: dict[str, str], inputs: list[bytes]
) -> tuple[list[float], list[tuple[int, bytes, bytes]]]:
    """Start one process per input at once; each one's wall time (ms) and answer."""
    t0 = []
    procs = []
    for _ in inputs:
        t0.append(time.perf_counter())
        p = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=REPO,
            env=env,
        )
        procs.append(p)
    for p, data in zip(procs, inputs, strict=True):
        assert p.stdin is not None
        try:
            p.stdin.write(data)
            p.stdin.close()
        except BrokenPipeError:  # `python -c pass` reads no stdin
            pass
        p.stdin = None
    done: dict[int, float] = {}
    while len(done) < len(procs):
        for i, p in enumerate(procs):
            if i not in done and p.poll() is not None:
                done[i] = time.perf_counter()
        time.sleep(0.002)
    answers = []
    for p in procs:
        out, err = p.communicate()
        answers.append((p.returncode, out, err))
    return [(done[i] - t0[i]) * 1000 for i in range(len(procs))], answers


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return round(s[min(len(s) - 1, int(q * len(s)))], 1)


def _summary(values: list[float]) -> dict[str, float]:
    return {
        "p50": round(statistics.median(values), 1),
        "p99": _pct(values, 0.99),
        "max": round(max(values), 1),
    }


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
    for attempt in range(3):  # the ports file can be read while still empty
        try:
            return embedded.start_embedded(data_dir, auth=auth)
        except ValueError:
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


def _spawn(args: list[str], env: dict[str, str], ready: str | None) -> subprocess.Popen[bytes]:
    p = subprocess.Popen(args, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    if ready is not None:
        assert p.stdout is not None
        line = p.stdout.readline().decode()
        if ready not in line:
            raise SystemExit(f"{args[:3]} did not start: {line!r}")
    return p


def _stop(p: subprocess.Popen[bytes]) -> None:
    p.terminate()
    try:
        p.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        p.kill()
        p.communicate()


def _check(answers: list[tuple[int, bytes, bytes]], inputs: list[bytes]) -> dict[str, int]:
    """Every answer is the policy's (a deny for DENY commands, silence elsewhere) or a
    fail-closed deny (no decision in time: counted as a fallback); never an allow of DENY."""
    counts = {"policy": 0, "fallback": 0}
    for (code, out, err), data in zip(answers, inputs, strict=True):
        if b"DENY" in data:
            ok = code == 0 and b'"permissionDecisionReason":"bench deny"' in out
        else:
            ok = (code, out, err) == (0, b"", b"")
        closed = b"blocked because the hook fails closed" in out + err
        if not ok and not closed:
            raise SystemExit(f"wrong answer ({code}): {out[:200]!r} {err[:300]!r}")
        counts["policy" if ok else "fallback"] += 1
    return counts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=20, help="cold-start runs of each command")
    ap.add_argument("--concurrent", type=int, default=100, help="emits started at once")
    ap.add_argument("--no-auth", action="store_true", help="an open server (no role keys)")
    args = ap.parse_args()
    py = sys.executable
    ha = _hookaudit()

    with tempfile.TemporaryDirectory(prefix="bench-emit-") as tmp:
        data_dir = Path(tmp) / "data"
        (Path(tmp) / "benchhooks.py").write_text(HOOKS)
        settings = Path(tmp) / "settings.json"
        settings.write_text(
            json.dumps(
                {
                    "hooks": {
                        "PreToolUse": [
                            {
                                "matcher": "*",
                                "hooks": [{"type": "python", "callable": "benchhooks.py:guard"}],
                            }
                        ]
                    }
                }
            )
        )
        server = _start(data_dir, auth=not args.no_auth)
        asyncio.run(_provision(server.url, data_dir))
        env = _env(Path(tmp) / "pycache", HOOKAUDIT_DATA_DIR=str(data_dir))
        direct_env = {**env, "HOOKAUDIT_RELAY": "off"}
        relay = _spawn([*ha, "relay"], env, "listening on")
        worker = None
        try:
            commands = {
                "python_pass": ([py, "-c", "pass"], env),
                "python_isolated_pass": ([py, "-I", "-S", "-c", "pass"], env),
                "import_nats": ([py, "-c", "import nats"], env),
                "emit_relay": ([*ha, "emit"], env),
                "emit_relay_isolated": ([py, "-I", "-S", FAST], env),
                "emit_direct": ([*ha, "emit"], direct_env),
            }
            for argv, e in commands.values():  # warm the page cache and .pyc files
                _time(argv, e, event())
            samples: dict[str, list[float]] = {k: [] for k in commands}
            for _ in range(args.n):
                for name, (argv, e) in commands.items():
                    samples[name].append(_time(argv, e, event()))
            emitted = 3 * (args.n + 1)  # three emit commands, warm-up included
            stored = asyncio.run(_stored(server.url, data_dir))
            spooled = (data_dir / "spool" / "events.jsonl").exists()
            if stored != emitted or spooled:
                raise SystemExit(f"expected {emitted} events in the stream, found {stored}")

            worker = _spawn(
                [*ha, "worker", "--settings", f"project:{settings}"], {**env, "PWD": tmp}, None
            )
            wait = [*ha, "emit", "--wait", "--fail", "closed"]
            for _ in range(100):  # until the worker answers
                p = subprocess.run(wait, input=event(), capture_output=True, env=env, cwd=REPO)
                if (p.returncode, p.stdout, p.stderr) == (0, b"", b""):
                    break
                time.sleep(0.2)
            inputs = [
                event("DENY it" if i % 10 == 0 else f"ls {i}") for i in range(args.concurrent)
            ]
            conc: dict[str, dict[str, float]] = {}
            floor, _ = _concurrent([py, "-c", "pass"], env, inputs)
            conc["python_pass"] = _summary(floor)
            relayed, answers = _concurrent(wait, env, inputs)
            checked = {"emit_wait_relay": _check(answers, inputs)}
            conc["emit_wait_relay"] = _summary(relayed)
            lean = [py, "-I", "-S", FAST, "--wait", "--fail", "closed"]
            isolated, answers = _concurrent(lean, env, inputs)
            checked["emit_wait_relay_isolated"] = _check(answers, inputs)
            conc["emit_wait_relay_isolated"] = _summary(isolated)
            direct, answers = _concurrent(wait, direct_env, inputs)
            checked["emit_wait_direct"] = _check(answers, inputs)
            conc["emit_wait_direct"] = _summary(direct)
        finally:
            if worker is not None:
                _stop(worker)
            _stop(relay)
            embedded.stop_embedded(data_dir)

    med = {k: round(statistics.median(v), 1) for k, v in samples.items()}
    report = {
        "n": args.n,
        "auth": not args.no_auth,
        "emit_command": " ".join(ha) + " emit",
        "cold_start_median_ms": med,
        "cold_start_min_ms": {k: round(min(v), 1) for k, v in samples.items()},
        "ratio_relay_vs_python_pass": round(med["emit_relay"] / med["python_pass"], 3),
        "ratio_relay_isolated_vs_python_pass": round(
            med["emit_relay_isolated"] / med["python_pass"], 3
        ),
        "concurrent_p99_ratio_vs_python_pass": {
            k: round(v["p99"] / conc["python_pass"]["p99"], 2) for k, v in conc.items()
        },
        "ratio_direct_vs_python_pass": round(med["emit_direct"] / med["python_pass"], 3),
        "ratio_direct_vs_import_nats": round(med["emit_direct"] / med["import_nats"], 3),
        "target_ratio": 1.5,
        "events_stored": stored,
        "concurrent": args.concurrent,
        "concurrent_ms": conc,
        "concurrent_answers": checked,
        "target_concurrent_p99_ms": 2000,
        "python": sys.version.split()[0],
        "load_avg": [round(x, 2) for x in os.getloadavg()],
    }
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
