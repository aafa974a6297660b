"""`pip wheel .` gives a wheel that, installed alone in a fresh venv (no checkout on the
path), runs `hookaudit demo`: the data the commands need (policies, Sigma rules, snippets,
SQL, templates) is in the package. Offline: the wheel is built with this venv's setuptools
and its dependencies come from the wheelhouse install.sh keeps for the compose test."""

from __future__ import annotations

import os
import subprocess
import sys
import venv
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
WHEELHOUSE = REPO / ".cache" / "compose" / "wheelhouse"

pytestmark = pytest.mark.slow


def test_the_wheel_alone_runs_the_demo(tmp_path: Path) -> None:
    assert WHEELHOUSE.is_dir(), f"{WHEELHOUSE} missing: run ./install.sh --dev"
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
         "-w", str(tmp_path / "dist"), str(REPO)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-2000:]
    assert "Warning" not in built.stderr and "deprecated" not in built.stderr, built.stderr
    (wheel,) = (tmp_path / "dist").glob("hookaudit-*.whl")
    venv.EnvBuilder(with_pip=True).create(tmp_path / "v")
    pip = [str(tmp_path / "v" / "bin" / "python"), "-m", "pip"]
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("HOOKAUDIT_", "PYTHON", "PIP_"))
    }
    env["HOME"] = str(tmp_path / "home")
    installed = subprocess.run(
        [*pip, "install", "-q", "--no-index", "--find-links", str(WHEELHOUSE), str(wheel)],
        capture_output=True, text=True, env=env, timeout=600,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stderr[-3000:]
    assert "DEPRECATION" not in installed.stderr, installed.stderr
    demo = subprocess.run(
        [str(tmp_path / "v" / "bin" / "hookaudit"), "demo", "--sessions", "3",
         "--data-dir", str(tmp_path / "data")],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600,
    )  # fmt: skip
    assert demo.returncode == 0, demo.stderr[-3000:]
    assert "verify" in demo.stdout and "replay against strict.json" in demo.stdout, demo.stdout
