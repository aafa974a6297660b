"""`hookaudit nats keys` (credentials for your own server) and `hookaudit nats creds ROLE`."""

from __future__ import annotations

from pathlib import Path

import click

from hookaudit.options import data_dir_option
from ingest.protocol import default_data_dir

__all__ = ["creds_cmd", "keys_cmd"]

_ROLES = ["emitter", "worker", "siem", "analyst", "replay", "replay-join"]


@click.command("keys")
@click.option(
    "--dir",
    "directory",
    type=click.Path(file_okay=False, path_type=Path),
    required=True,
    help="Where to write the seeds (0600, in a 0700 dir) and users.conf.",
)
@click.option(
    "--emitter",
    "emitters",
    multiple=True,
    metavar="NAME",
    help="Also make a per-host emitter key DIR/emitter-NAME.nk (repeatable; letters, "
    "digits, '-', '_'). Each emitter key may read only its own replies.",
)
def keys_cmd(directory: Path, emitters: tuple[str, ...]) -> None:
    """Make one nkey per role and the server's users.conf, for a self-managed nats-server.

    Existing seeds are kept (run it again to rewrite users.conf). users.conf holds only
    public keys: include it from the server config (infra/nats/auth.conf does). Hand each
    seed only to the hosts of its role: `--nkey DIR/emitter.nk` for emit and serve,
    `DIR/worker.nk` for workers, `DIR/siem.nk` for siem, `DIR/analyst.nk` for status,
    `DIR/replay.nk` for `replay --distribute`, `DIR/replay-join.nk` for its `replay-join` jobs.
    reply.nk is the workers' decision-signing seed (`worker --reply-key`); give its
    reply.pub to emitters (`--worker-key` or HOOKAUDIT_WORKER_KEY).

    Every emitter key may subscribe only below its own inbox prefix (_INBOX.<its public
    key>), which hookaudit clients use by themselves: with one key per host
    (--emitter NAME, kept on later runs), a process holding one host's key cannot read
    the decisions in flight to another host.

    \b
    Example:
      hookaudit nats keys --dir /etc/hookaudit/nats --emitter build-01 --emitter laptop-ana
      nats-server -c infra/nats/auth.conf   # after copying users.conf next to it
    """
    import re

    from engine.errors import HookauditError
    from ingest.nats.auth import (
        authorization_block,
        ensure_emitter_keys_in,
        ensure_keys_in,
        write_private,
    )
    from ingest.replysig import ensure_reply_key_in

    bad = [n for n in emitters if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", n)]
    if bad:
        raise click.BadParameter(
            f"{bad[0]!r}: expected letters, digits, '-' or '_' (at most 64)",
            param_hint="--emitter",
        )
    from ingest.private import check_data_dir

    try:
        # Existing seeds there are reused: a directory another user owns or can write
        # would hand hookaudit their keys (or them ours).
        check_data_dir(directory, label="--dir")
        keys = ensure_keys_in(directory)
        pub = ensure_reply_key_in(directory)
        hosts = ensure_emitter_keys_in(directory, emitters)
        conf = directory / "users.conf"
        head = "# hookaudit roles: made by `hookaudit nats keys`; public keys only.\n"
        write_private(conf, (head + authorization_block(keys, emitters=hosts)).encode())
    except (HookauditError, OSError) as e:
        click.echo(f"hookaudit: nats keys: {e}", err=True)
        raise SystemExit(1) from None
    for role in _ROLES:
        click.echo(f"{role}: {directory / (role + '.nk')}  {keys[role]}")
    for name, key in sorted(hosts.items()):
        click.echo(f"emitter {name}: {directory / f'emitter-{name}.nk'}  {key}")
    click.echo(f"reply: {directory / 'reply.nk'}  {pub}")
    click.echo(f'server: copy {conf} next to its config, which says: include "users.conf"')


@click.command("creds")
@click.argument("role", type=click.Choice(_ROLES))
@data_dir_option
def creds_cmd(role: str, data_dir: Path | None) -> None:
    """Print the path of ROLE's nkey seed for the embedded server (for tools of your own).

    hookaudit's commands find their key by themselves; this is for a `nats` CLI or a
    client of yours: `nats --server URL --nkey "$(hookaudit nats creds analyst)" ...`.

    \b
    Example:
      hookaudit nats creds siem --data-dir ./data
    """
    from ingest.nats.auth import auth_dir, role_credentials

    d = data_dir or default_data_dir()
    path = role_credentials(d, role)  # type: ignore[arg-type]
    if path is None:
        click.echo(
            f"hookaudit: {auth_dir(d)}/{role}.nk does not exist: run `hookaudit nats up "
            f"--data-dir {d}` first",
            err=True,
        )
        raise SystemExit(1)
    click.echo(str(path))
