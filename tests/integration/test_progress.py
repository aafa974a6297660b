"""Long work shows a progress bar (count, rate, time left) on a terminal, and nothing of it
when stderr is piped."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
TRANSCRIPTS = REPO / "tests" / "fixtures" / "agents" / "transcripts"


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HOOKAUDIT_", "NO_COLOR"))}
    env["COLUMNS"] = "120"
    return env


def test_backfill_shows_its_progress_on_a_terminal_only(tmp_path: Path) -> None:
    argv = [sys.executable, "-m", "hookaudit", "backfill", "--dry-run", str(TRANSCRIPTS)]
    on_tty = subprocess.run(
        ["script", "-qec", shlex.join(argv), "/dev/null"],
        capture_output=True, cwd=REPO, env=_env(), timeout=120,
    )  # fmt: skip
    assert on_tty.returncode == 0, on_tty.stdout[-2000:]
    assert b"reading" in on_tty.stdout and b"files" in on_tty.stdout, on_tty.stdout[-2000:]
    piped = subprocess.run(argv, capture_output=True, cwd=REPO, env=_env(), timeout=120)
    assert piped.returncode == 0
    assert b"reading" not in piped.stderr and b"\x1b[" not in piped.stderr, piped.stderr


def test_detect_shows_its_progress_on_a_terminal(tmp_path: Path) -> None:
    data = tmp_path / "data"
    demo = subprocess.run(
        [sys.executable, "-m", "hookaudit", "demo", "--sessions", "2", "--data-dir", str(data)],
        capture_output=True, cwd=REPO, env=_env(), timeout=300,
    )  # fmt: skip
    assert demo.returncode == 0, demo.stderr[-2000:]
    argv = [sys.executable, "-m", "hookaudit", "detect", "--data-dir", str(data),
            "--rules", str(REPO / "infra" / "sigma")]  # fmt: skip
    on_tty = subprocess.run(
        ["script", "-qec", shlex.join(argv), "/dev/null"],
        capture_output=True, cwd=REPO, env=_env(), timeout=120,
    )  # fmt: skip
    assert on_tty.returncode == 0, on_tty.stdout[-2000:]
    assert b"rules" in on_tty.stdout, on_tty.stdout[-2000:]
    piped = subprocess.run(argv, capture_output=True, cwd=REPO, env=_env(), timeout=120)
    assert piped.returncode == 0 and b"\x1b[" not in piped.stderr
