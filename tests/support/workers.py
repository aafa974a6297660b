"""Starting and stopping a real `hookaudit worker` process, the one way every suite does it.

Example:
    >>> argv = worker_argv(Path("/d"), "--name", "w1", nats="nats://127.0.0.1:4222",
    ...                    settings=[Path("/s.json")], batch=8)
    >>> argv[3:]
    ['worker', '--data-dir', '/d', '--nats', 'nats://127.0.0.1:4222', '--settings', 'project:/s.json', '--batch', '8', '--name', 'w1']
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["REPO", "clean_env", "start_worker", "stop", "worker_argv"]

REPO = Path(__file__).resolve().parents[2]


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without any HOOKAUDIT_ variable, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOOKAUDIT_")}
    return {**env, **extra}


def worker_argv(
    data: Path,
    *args: str,
    nats: str | None = None,
    prefix: str | None = None,
    settings: Sequence[str | Path] = (),
    batch: int | None = None,
) -> list[str]:
    """The worker's command line: a Path in `settings` is a project settings file, a str is
    a scoped spec as given (``skill:FILE``)."""
    argv = [sys.executable, "-m", "hookaudit", "worker", "--data-dir", str(data)]
    if nats is not None:
        argv += ["--nats", nats]
    if prefix is not None:
        argv += ["--prefix", prefix]
    for spec in settings:
        argv += ["--settings", f"project:{spec}" if isinstance(spec, Path) else spec]
    if batch is not None:
        argv += ["--batch", str(batch)]
    return [*argv, *args]


def start_worker(
    data: Path,
    *args: str,
    env: Mapping[str, str] | None = None,
    stdout: Any = subprocess.PIPE,
    **where: Any,
) -> subprocess.Popen[bytes]:
    """A running worker (see `worker_argv` for `where`), in the checkout, its stderr piped."""
    return subprocess.Popen(
        worker_argv(data, *args, **where),
        cwd=REPO,
        env=dict(env) if env is not None else clean_env(),
        stdout=stdout,
        stderr=subprocess.PIPE,
    )


def stop(proc: subprocess.Popen[bytes], *, check: bool = True, timeout: float = 30) -> str:
    """SIGTERM `proc`, wait for it (SIGKILL after `timeout`), and return its stderr; with
    `check`, the process must have exited 0."""
    if proc.poll() is None:
        proc.terminate()
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate()
    text = (err or b"").decode(errors="replace")
    if check:
        assert proc.returncode == 0, text
    return text
