"""`hookaudit siem` says where a new sink starts (everything the stream holds, or `--from now`)
and that an existing one resumes; `--from now` forwards only what is appended later."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.tty import OnTty, on_tty

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def _run(*args: str, data: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOOKAUDIT_")}
    env["HOOKAUDIT_DATA_DIR"] = str(data)
    return subprocess.run(
        [sys.executable, "-m", "hookaudit", *args],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=timeout,
    )  # fmt: skip


def _siem(data: Path, name: str, out: Path, *extra: str, until: str) -> OnTty:
    """`hookaudit siem` with stderr on a terminal, stopped once it has said `until`."""
    args = ("siem", "--name", name, "--format", "ocsf", "--to", f"file://{out}", *extra)
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("HOOKAUDIT_")},
           "HOOKAUDIT_DATA_DIR": str(data)}  # fmt: skip
    return on_tty([sys.executable, "-m", "hookaudit", *args], env=env, cwd=REPO,
                  until=until.encode())  # fmt: skip


def _counters(p: OnTty) -> dict[str, int]:
    """The counters siem prints when it stops (its last stderr line)."""
    last: dict[str, int] = json.loads(p.stderr.decode().strip().splitlines()[-1])
    return last


def test_a_new_sink_says_where_it_starts(tmp_path: Path) -> None:
    data = tmp_path / "data"
    demo = _run("demo", "--sessions", "2", "--data-dir", str(data), data=data)
    assert demo.returncode == 0, demo.stderr
    assert _run("nats", "up", data=data).returncode == 0
    try:
        first = _siem(data, "soc", tmp_path / "soc.jsonl", until="now forwarding new ones")
        said = first.stderr.decode()
        m = re.search(r"starts with the oldest outcome the stream holds \((\d+) to forward", said)
        assert m, said
        backlog = int(m[1])
        # a bar while it catches up (count, rate, time left), then one line when it has
        assert "catching up" in said and "outcomes" in said, said
        assert f"caught up: {backlog} outcomes forwarded in " in said, said
        sent = _counters(first)["sent"]
        assert sent > 0 and len((tmp_path / "soc.jsonl").read_text().splitlines()) == sent
        again = _siem(data, "soc", tmp_path / "soc.jsonl", until="to forward)")
        assert (
            "sink soc: resumes where it left off (0 outcomes to forward)" in again.stderr.decode()
        )
        assert "catching up" not in again.stderr.decode()  # nothing to catch up on
        fresh = _siem(data, "late", tmp_path / "late.jsonl", "--from", "now", until="from now on")
        assert (
            "new sink late: starts with the outcomes appended from now on" in fresh.stderr.decode()
        )
        assert _counters(fresh)["sent"] == 0
    finally:
        _run("nats", "down", data=data)
