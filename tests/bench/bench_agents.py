"""One enforced tool call per agent, as `hookaudit wire` wires it, against `python -c pass`.

For each agent: its captured PreToolUse input (tests/fixtures/agents/, Claude Code's from
the demo's samples) through the command `hookaudit wire` writes for it
(`hookaudit emit --agent AGENT --data-dir D --wait --timeout 10 --fail closed`, the console
script, through `hookaudit relay`), answered by a real worker on the embedded NATS
(python-only policy: allow), interleaved with `python -c pass` (the same interpreter) in one
run. OpenCode's plugin runs the same command. Target: every agent's median <= 1.5x the
floor; Claude Code's path no slower than before.

    .venv/bin/python tests/bench/bench_agents.py [-n 20]

Prints one JSON object (medians in ms, ratios).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

from tests.support.relay import Stack  # noqa: E402

FIXTURES = REPO / "tests" / "fixtures" / "agents"
POLICY = "def allow(event):\n    return None\n"


def inputs() -> dict[str, bytes]:
    def read(rel: str) -> dict[str, object]:
        data: dict[str, object] = json.loads((FIXTURES / rel).read_text())
        return data

    oc = read("opencode-1.18.33/tool.execute.before.json")
    claude = {"session_id": "bench", "transcript_path": "/tmp/t.jsonl", "cwd": "/tmp",
              "permission_mode": "default", "hook_event_name": "PreToolUse", "tool_name": "Bash",
              "tool_input": {"command": "ls -la"}, "tool_use_id": "toolu_01"}  # fmt: skip
    copilot = {"hook_event_name": "PreToolUse", "session_id": "bench", "cwd": "/tmp",
               "timestamp": "2026-01-01T00:00:00Z", "tool_name": "Bash",
               "tool_input": {"command": "ls -la"}}  # fmt: skip
    qwen = {**read("gemini-0.61.0/BeforeTool.json"), "hook_event_name": "PreToolUse",
            "tool_use_id": "toolu_1"}  # fmt: skip
    return {
        "claude_code": json.dumps(claude).encode(),
        "codex": json.dumps(read("codex-0.171.0/PreToolUse.json")).encode(),
        "gemini_cli": json.dumps(read("gemini-0.61.0/BeforeTool.json")).encode(),
        "copilot_cli": json.dumps(copilot).encode(),
        "qwen_code": json.dumps(qwen).encode(),
        "opencode": json.dumps({"hook_event_name": "tool.execute.before", **oc}).encode(),
        "cline": json.dumps(read("cline-3.0.65/PreToolUse.json")).encode(),
    }


def _time(argv: list[str], env: dict[str, str], stdin: bytes = b"") -> float:
    t0 = time.perf_counter()
    p = subprocess.run(argv, input=stdin, capture_output=True, env=env, check=False)
    elapsed = (time.perf_counter() - t0) * 1000
    if p.returncode != 0 or p.stdout.strip() or p.stderr.strip():
        raise SystemExit(f"{argv} failed ({p.returncode}): {p.stdout!r} {p.stderr!r}")
    return elapsed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=20, help="runs of each command")
    args = ap.parse_args()
    root = Path(tempfile.mkdtemp(prefix="hookaudit-bench-agents-"))
    (root / "benchpolicy.py").write_text(POLICY)
    settings = root / "settings.json"
    settings.write_text(json.dumps({"hooks": {"PreToolUse": [
        {"matcher": "*", "hooks": [{"type": "python", "callable": "benchpolicy.py:allow"}]}]}}))  # fmt: skip
    stack = Stack(data=root / "data", settings=settings)
    stack.nats_up()
    stack.start_worker()
    try:
        stack.wait_decided()
        stack.start_relay()
        env = {k: v for k, v in os.environ.items() if not k.startswith("HOOKAUDIT_")}
        env["PYTHONPYCACHEPREFIX"] = str(root / "pycache")
        hookaudit = str(Path(sys.executable).with_name("hookaudit"))
        cmds = {
            agent: (
                [
                    hookaudit,
                    "emit",
                    "--agent",
                    agent,
                    "--data-dir",
                    str(stack.data),
                    "--wait",
                    "--timeout",
                    "10",
                    "--fail",
                    "closed",
                ],
                body,
            )
            for agent, body in inputs().items()
        }
        floor_cmd = [sys.executable, "-c", "pass"]
        for argv, body in cmds.values():  # warm: bytecode, page cache, the relay's paths
            _time(argv, env, body)
        times: dict[str, list[float]] = {a: [] for a in cmds}
        floor: list[float] = []
        for _ in range(args.n):
            floor.append(_time(floor_cmd, env))
            for agent, (argv, body) in cmds.items():
                times[agent].append(_time(argv, env, body))
        base = statistics.median(floor)
        out = {
            "runs": args.n,
            "load_average": os.getloadavg()[0],
            "python_c_pass_ms": round(base, 1),
            "agents": {
                a: {
                    "median_ms": round(statistics.median(t), 1),
                    "ratio": round(statistics.median(t) / base, 2),
                }
                for a, t in times.items()
            },
        }
        print(json.dumps(out, indent=2))
    finally:
        stack.stop()


if __name__ == "__main__":
    main()
