"""`hookaudit relay`: the unix-socket relay that makes `hookaudit emit` fast (ingest.relay.server)."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path
from typing import Any

import click

from hookaudit.emit_cmd import _target_options

__all__ = ["relay_cmd"]


def _uid(value: str) -> int:
    import pwd

    if value.isdigit():
        return int(value)
    try:
        return pwd.getpwnam(value).pw_uid
    except KeyError:
        raise click.BadParameter(f"no such user {value!r}", param_hint="--allow-user") from None


@click.command("relay")
@_target_options
@click.option(
    "--socket",
    "socket_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Where to listen (default <data-dir>/relay/emit.sock, where emit looks first; "
    "elsewhere, tell emit with HOOKAUDIT_RELAY=PATH).",
)
@click.option(
    "--allow-user",
    "allow_users",
    multiple=True,
    metavar="USER|UID",
    help="Users whose emits are relayed (repeatable, or comma-separated; default: the relay's "
    "own user). The kernel's SO_PEERCRED uid of each client is checked.",
)
@click.option(
    "--socket-mode",
    default="0600",
    show_default=True,
    help="Mode of the socket file (0660 with a shared group when --allow-user names others).",
)
@click.option(
    "--worker-key",
    envvar="HOOKAUDIT_WORKER_KEY",
    default=None,
    metavar="U…[,U…]",
    help="Public key(s) whose signed decisions are accepted (env HOOKAUDIT_WORKER_KEY). "
    "Default: <data-dir>/nats/auth/reply.pub, re-read when it changes.",
)
@click.option(
    "--print-command",
    is_flag=True,
    help="Print the leanest emit command for settings.json (python -I -S on "
    "ingest/emit/fast.py: no site, no imports beyond the standard library) and exit.",
)
@click.option("-v", "--verbose", is_flag=True, help="Log every connection and flush.")
def relay_cmd(
    socket_path: Path | None,
    allow_users: tuple[str, ...],
    socket_mode: str,
    worker_key: str | None,
    print_command: bool,
    verbose: bool,
    **kw: Any,
) -> None:
    """Relay `hookaudit emit` to NATS over a local unix socket, until SIGTERM.

    `hookaudit emit` then starts with the standard library only, hands its input to
    the relay and prints the relay's answer: the same bytes, exit code and guarantees
    as without it (signed decisions verified here, spool when NATS is down, --fail),
    without paying for Python imports and a NATS connection on every tool call.
    While no relay listens, emit does the work itself, as before.

    The socket is 0600 in a 0700 directory and only the allowed uids are answered;
    emit in turn refuses a relay that does not run as its own uid (or
    HOOKAUDIT_RELAY_UID).

    `hookaudit emit` itself takes the fast path. For the lowest cost per tool call
    (no site-packages scan, which an editable install makes slow), put the line
    `hookaudit relay --print-command` prints in settings.json instead.

    \b
    Example:
      hookaudit relay --data-dir ~/.local/share/hookaudit &
      hookaudit relay --print-command    # /…/python3 -I -S /…/ingest/emit/fast.py
      echo '{"hook_event_name":"Stop","session_id":"s"}' | hookaudit emit --wait
    """
    if print_command:
        import shlex

        import ingest.emit.fast

        click.echo(shlex.join([sys.executable, "-I", "-S", ingest.emit.fast.__file__]))
        return
    from engine.errors import HookauditError
    from hookaudit.emit_cmd import _target
    from ingest.relay.server import Relay
    from ingest.relay.sock import default_socket

    try:
        mode = int(socket_mode, 8)
    except ValueError:
        raise click.BadParameter(
            "expected an octal mode like 0600", param_hint="--socket-mode"
        ) from None
    from ingest.logsetup import setup_logging

    setup_logging(verbose)
    kw["worker_key"] = worker_key
    target = _target(kw)
    path = socket_path or default_socket(target.data_dir)
    uids = [_uid(u.strip()) for v in allow_users for u in v.split(",") if u.strip()]

    async def run() -> None:
        relay = Relay(target, path, allow_uids=uids, socket_mode=mode)
        await relay.start()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        click.echo(f"hookaudit relay: listening on {path}")
        sys.stdout.flush()
        await relay.serve_forever(stop)

    try:
        asyncio.run(run())
    except HookauditError as e:
        click.echo(f"hookaudit relay: {e}", err=True)
        sys.exit(1)
