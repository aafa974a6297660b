"""Benchmark: instructions per event of this tree against another commit's, in the same run.

CPU time on a shared 2-core machine moves by 20-40% between minutes; instruction counts
(valgrind's cachegrind) do not depend on the load, so they settle differences of a few
percent. Each figure is the difference of two run lengths divided by the events between
them, so start-up and imports cancel.

Scenarios:
- ``python_hooks``: `bench_python_hooks`'s `engine.start` loop (4,000 events run 1 and 4
  times; the events are built once, outside the difference);
- ``replay_python`` / ``replay_reuse``: `bench_replay`'s python and reuse scenarios with
  ``jobs=1`` over logs of 25,000 and 65,000 events written by the base tree's
  `gen_log.py`. ``--no-digest`` runs this tree's replay without the sha256 of the bytes it
  read (the base commit may not compute one): valgrind runs sha256 without the CPU's SHA
  instructions, ~28 instructions a byte against ~1 ns a byte natively, so the digest's
  share of these counts is ~10x its share of CPU time.

The base tree needs its own venv (``python -m venv .venv && .venv/bin/pip install -e .``).
Run:
    git worktree add --detach /tmp/base 2bf88ba   # then make its .venv
    .venv/bin/python tests/bench/bench_instructions.py --base /tmp/base --scenario python_hooks
Prints JSON: instructions per event of each tree and the ratio (this / base).
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parents[2]

# The loops are self-contained, not imported from bench_python_hooks: they run in the base
# tree too, whose bench files need not have the same helpers.
_LOOP = """
import sys
from pathlib import Path
root, reps = Path(sys.argv[1]), int(sys.argv[2])
sys.path.insert(0, str(root))
from engine.records import new_event
from engine.run import Engine
from engine.sources import load_sources
eff = load_sources([("project", str(root / "infra" / "policies" / "security.json"))])
engine = Engine()
calls = [
    ("Read", {"file_path": "/home/u/p/src/app.py"}),
    ("Edit", {"file_path": "/home/u/p/.env", "old_string": "a", "new_string": "b"}),
    ("WebFetch", {"url": "https://docs.python.org/3/"}),
    ("Write", {"file_path": "/home/u/p/README.md", "content": "x"}),
] * 1000
events = [new_event({"hook_event_name": "PreToolUse", "session_id": "s", "cwd": "/home/u/p",
                     "tool_name": t, "tool_input": ti, "tool_use_id": f"t{i}"})
          for i, (t, ti) in enumerate(calls)]
for _ in range(reps):
    for ev in events:
        engine.start(ev, eff)
"""

_REPLAY = """
import sys, tempfile
from pathlib import Path
root, data, scenario, digest = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3], sys.argv[4]
sys.path.insert(0, str(root / "tests" / "bench")); sys.path.insert(0, str(root))
import bench_replay as B
if digest == "no":
    import replay.runner as R
    _select = R.select
    def _no_digest(*a, **k):
        k["digests"] = None
        return _select(*a, **k)
    R.select = _no_digest
work = Path(tempfile.mkdtemp())
if scenario == "python":
    settings = [("project", str(B.python_settings(work)))]
else:
    settings = B.recorded_settings(data, work)
print("events", B.run(data, settings, jobs=1)["events"])
"""


def instructions(tree: Path, script: str, *args: str) -> tuple[int, str]:
    """The instructions one run of `script` takes in `tree`'s venv, and its stdout."""
    out = subprocess.run(
        ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
         str(tree / ".venv" / "bin" / "python"), "-c", script, str(tree), *args],
        cwd=tree, capture_output=True, text=True, check=True,
    )  # fmt: skip
    m = re.search(r"I\s+refs:\s+([\d,]+)", out.stderr)
    if m is None:
        sys.exit(f"bench_instructions: no instruction count from valgrind in {tree}")
    return int(m.group(1).replace(",", "")), out.stdout


def per_event_loop(tree: Path) -> float:
    one, _ = instructions(tree, _LOOP, "1")
    four, _ = instructions(tree, _LOOP, "4")
    return (four - one) / 12_000


def per_event_replay(tree: Path, small: Path, large: Path, scenario: str, digest: bool) -> float:
    flag = "yes" if digest else "no"
    a, out_a = instructions(tree, _REPLAY, str(small), scenario, flag)
    b, out_b = instructions(tree, _REPLAY, str(large), scenario, flag)
    events = int(out_b.split()[-1]) - int(out_a.split()[-1])
    return (b - a) / events


def generate(base: Path, d: Path, rows: int) -> None:
    subprocess.run(
        [str(base / ".venv" / "bin" / "python"), str(base / "tests" / "bench" / "gen_log.py"),
         str(d), "--rows", str(rows), "--active", str(rows // 9), "--workers", "2",
         "--crashes", "0", "--template-sessions", "300"],
        check=True, capture_output=True,
    )  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--base", type=Path, required=True, help="the other commit's worktree")
    ap.add_argument(
        "--scenario", choices=["python_hooks", "replay_python", "replay_reuse"], required=True
    )
    ap.add_argument("--no-digest", action="store_true", help="this tree's replay without it")
    args = ap.parse_args()
    base = args.base.resolve()
    if not (base / ".venv" / "bin" / "python").exists():
        sys.exit(f"bench_instructions: {base}/.venv/bin/python: no venv in the base tree")
    if args.scenario == "python_hooks":
        got = {"base": per_event_loop(base), "this": per_event_loop(HERE)}
    else:
        scenario = args.scenario.removeprefix("replay_")
        with tempfile.TemporaryDirectory(prefix="hookaudit-bench-ir-") as tmp:
            small, large = Path(tmp) / "small", Path(tmp) / "large"
            generate(base, small, 25_000)
            generate(base, large, 65_000)
            got = {
                "base": per_event_replay(base, small, large, scenario, True),
                "this": per_event_replay(HERE, small, large, scenario, not args.no_digest),
            }
    print(json.dumps({
        "scenario": args.scenario, "base": str(base), "digest": not args.no_digest,
        "instructions_per_event": {k: round(v) for k, v in got.items()},
        "ratio": round(got["this"] / got["base"], 3),
    }, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
