"""`hookaudit siem` says where a new sink starts (everything the stream holds, or `--from now`)
and that an existing one resumes; `--from now` forwards only what is appended later."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def _run(*args: str, data: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOOKAUDIT_")}
    env["HOOKAUDIT_DATA_DIR"] = str(data)
    return subprocess.run(
        [sys.executable, "-m", "hookaudit", *args],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=timeout,
    )  # fmt: skip


def _siem(data: Path, name: str, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    args = ("siem", "--name", name, "--format", "ocsf", "--to", f"file://{out}", *extra)
    p = subprocess.Popen(
        [sys.executable, "-m", "hookaudit", *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
        env={**{k: v for k, v in os.environ.items() if not k.startswith("HOOKAUDIT_")},
             "HOOKAUDIT_DATA_DIR": str(data)},
    )  # fmt: skip
    assert p.stderr is not None
    first = p.stderr.readline()  # the notice comes once the consumer is known
    try:
        import time

        time.sleep(3)  # let it forward what there is
        p.terminate()
        out_text, err_text = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
            p.communicate()
    return subprocess.CompletedProcess(args, p.returncode, out_text, first + err_text)


def _counters(p: subprocess.CompletedProcess[str]) -> dict[str, int]:
    """The counters siem prints when it stops (its last stderr line)."""
    last: dict[str, int] = json.loads(p.stderr.strip().splitlines()[-1])
    return last


def test_a_new_sink_says_where_it_starts(tmp_path: Path) -> None:
    data = tmp_path / "data"
    demo = _run("demo", "--sessions", "2", "--data-dir", str(data), data=data)
    assert demo.returncode == 0, demo.stderr
    assert _run("nats", "up", data=data).returncode == 0
    try:
        first = _siem(data, "soc", tmp_path / "soc.jsonl")
        assert "new sink soc: starts with the oldest outcome the stream holds" in first.stderr
        sent = _counters(first)["sent"]
        assert sent > 0 and len((tmp_path / "soc.jsonl").read_text().splitlines()) == sent
        again = _siem(data, "soc", tmp_path / "soc.jsonl")
        assert "sink soc: resumes where it left off (0 outcomes to forward)" in again.stderr
        fresh = _siem(data, "late", tmp_path / "late.jsonl", "--from", "now")
        assert "new sink late: starts with the outcomes appended from now on" in fresh.stderr
        assert _counters(fresh)["sent"] == 0
    finally:
        _run("nats", "down", data=data)
