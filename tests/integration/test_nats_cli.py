"""`hookaudit nats up` as a new user meets it, and one set of NATS options for every command."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import click
import pytest

from ingest.nats import embedded
from ingest.nats.options import ENV
from tests.support.auth import REPO, env

pytestmark = pytest.mark.timeout(120)


def ha(
    *args: str,
    umask: int | None = None,
    extra_env: dict[str, str] | None = None,
    stdin: str = "",
) -> subprocess.CompletedProcess[str]:
    e = env()
    e.update(extra_env or {})
    return subprocess.run(
        [sys.executable, "-m", "hookaudit", *args],
        cwd=REPO,
        env=e,
        capture_output=True,
        text=True,
        timeout=60,
        input=stdin,
        preexec_fn=(lambda: os.umask(umask)) if umask is not None else None,
        check=False,
    )


def one_line(p: subprocess.CompletedProcess[str]) -> str:
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    return lines[0]


def test_nats_up_errors_are_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        p = ha("nats", "up", "--data-dir", str(tmp_path / "a"), "--port", str(port))
    assert p.returncode == 1
    assert one_line(p) == f"hookaudit: port {port} on 127.0.0.1 is in use by another process"

    p = ha("nats", "up", "--data-dir", str(tmp_path / "a"), "--port", "99999")
    assert p.returncode == 2 and "99999 is not in the range 1<=x<=65535" in p.stderr

    p = ha("nats", "up", "--data-dir", "/proc/x")
    assert p.returncode == 1
    assert one_line(p).startswith("hookaudit: data dir /proc/x: cannot create"), p.stderr

    d = tmp_path / "b"
    up = ha("nats", "up", "--data-dir", str(d))
    assert up.returncode == 0, up.stderr
    try:
        running = json.loads(up.stdout)["url"].rsplit(":", 1)[1]
        other = str(int(running) + 1 if int(running) < 65535 else int(running) - 1)
        p = ha("nats", "up", "--data-dir", str(d), "--port", other)
        assert p.returncode == 1
        assert f"already running on port {running}" in one_line(p)
        same = ha("nats", "up", "--data-dir", str(d), "--port", running)
        assert same.returncode == 0, same.stderr  # the port it runs on: idempotent
    finally:
        ha("nats", "down", "--data-dir", str(d))
    print("nats up: port in use, 99999, /proc/x, --port on a running server: one line each")


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


def test_files_are_private_whatever_the_umask(tmp_path: Path) -> None:
    d = tmp_path / "data"
    up = ha("nats", "up", "--data-dir", str(d), umask=0o022)
    assert up.returncode == 0, up.stderr
    try:
        n = d / "nats"
        assert _mode(d) == 0o700 and _mode(n) == 0o700 and _mode(n / "auth") == 0o700
        private = [
            n / "server.json",
            n / "port",
            n / "nats-server.conf",
            n / "nats-server.log",
            n / "lock",
            *sorted((n / "auth").iterdir()),
        ]
        assert {p.name: oct(_mode(p)) for p in private} == {p.name: "0o600" for p in private}
        assert {p.name for p in (n / "auth").iterdir()} >= {
            "emitter.nk", "worker.nk", "siem.nk", "analyst.nk", "reply.nk", "reply.pub",
        }  # fmt: skip
        assert embedded.live_server(d) is not None
    finally:
        ha("nats", "down", "--data-dir", str(d))
    print(f"umask 022: data dir, nats/, auth/ 0700; {len(private)} files 0600")


def _commands() -> dict[str, click.Command]:
    """Every command that talks to NATS (it takes --nats), groups that run alone included."""
    from hookaudit.cli import root as cli

    out: dict[str, click.Command] = {}

    def walk(cmd: click.Command, path: tuple[str, ...]) -> None:
        if any("--nats" in p.opts for p in cmd.params):
            out[" ".join(path)] = cmd
        if isinstance(cmd, click.Group):
            ctx = click.Context(cmd)
            for name in cmd.list_commands(ctx):
                sub = cmd.get_command(ctx, name)
                assert sub is not None
                walk(sub, (*path, name))

    walk(cli, ())
    return out


def test_every_nats_command_takes_the_same_connection_options() -> None:
    commands = _commands()
    assert set(commands) >= {
        "worker", "emit", "serve", "relay", "siem", "siem status", "nats status",
        "nats provision", "spool flush", "verify", "replay", "replay-join",
    }  # fmt: skip
    for name, cmd in commands.items():
        # by environment variable: siem spells TLS to NATS --nats-tls-* (--tls-* is the SIEM's)
        envvars = {p.envvar for p in cmd.params if isinstance(p, click.Option)}
        assert set(ENV.values()) <= envvars, (name, set(ENV.values()) - envvars)


@pytest.mark.parametrize(
    "command",
    [
        "worker --settings project:x.json", "serve", "nats status", "spool flush", "emit",
        "nats provision", "replay-join --replay-id 0190c3a2-7b1e-7c3d-9f00-123456789abc",
    ],
)  # fmt: skip
def test_every_nats_command_honours_the_env_vars(tmp_path: Path, command: str) -> None:
    settings = tmp_path / "x.json"
    settings.write_text("{}")
    args = [a.replace("x.json", str(settings)) for a in command.split()]
    bad = str(tmp_path / "no-such.nk")
    p = ha(
        *args,
        "--data-dir",
        str(tmp_path),
        extra_env={"HOOKAUDIT_NATS_URL": "nats://127.0.0.1:1", "HOOKAUDIT_NATS_NKEY": bad},
        stdin='{"hook_event_name": "Stop", "session_id": "s"}',
    )
    assert f"{bad}: --nkey: file not found" in p.stderr + p.stdout, (command, p.stderr)
    assert p.returncode == (0 if command == "emit" else 1), p.stderr
