"""`hookaudit demo`, the README's main command, as a new user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def test_demo_runs_end_to_end_and_leaves_no_process(tmp_path: Path) -> None:
    data = tmp_path / "demo"
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "hookaudit",
            "demo",
            "--sessions",
            "8",
            "--data-dir",
            str(data),
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["events"] == out["records"] > 100
    assert out["verified"] is True
    assert out["decisions"].get("deny", 0) > 0
    assert out["replay"]["events"] == out["records"]
    assert out["replay"]["digest"].startswith("sha256:")
    # the embedded server it started is gone
    log = (data / "nats" / "nats-server.log").read_text()
    pid = int(log.split("[", 1)[1].split("]", 1)[0])
    assert (
        not Path(f"/proc/{pid}").exists()
        or "Z" in Path(f"/proc/{pid}/stat").read_text().split(")")[1][:3]
    )
    assert not (data / "nats" / "server.json").exists()
    # and what it logged is queryable afterwards
    q = subprocess.run(
        [
            sys.executable,
            "-m",
            "hookaudit",
            "sql",
            "--data-dir",
            str(data),
            "SELECT count(*) AS n FROM outcomes",
            "--format",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert q.returncode == 0, q.stderr
    assert json.loads(q.stdout) == [{"n": out["records"]}]
    assert os.path.isdir(data / "log")
