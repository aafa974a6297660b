"""`hookaudit nats provision`: create the streams and the worker consumer on a NATS of your own."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import click

from engine.errors import HookauditError
from hookaudit.stream_cmd import build_connect, connection_options, fail, new_data_dir_option
from ingest.protocol import default_data_dir

__all__ = ["provision_cmd"]


@click.command("provision")
@new_data_dir_option
@connection_options
@click.option(
    "--replicas",
    type=click.IntRange(1, 5),
    default=1,
    show_default=True,
    help="Replicas of each stream (3 on a 3-node cluster).",
)
@click.option(
    "--max-age",
    "max_age_h",
    type=click.FloatRange(min=0.01),
    default=None,
    metavar="HOURS",
    help="Keep events and outcomes on the streams this long (default: until the server's "
    "store is full). At scale, set it: see README, The model for 100 million events a day.",
)
def provision_cmd(data_dir: Path | None, replicas: int, max_age_h: float | None, **kw: Any) -> None:
    """Create HOOK_EVENTS, HOOK_OUTCOMES and the workers' consumer (idempotent).

    Run it once against a cluster before the workers start: they leave existing streams
    as they are. An existing stream with other subjects, storage or retention is an error
    naming the differing fields, never changed. Connects with the worker role.

    \b
    Example:
      hookaudit nats provision --replicas 3 --max-age 72 --tls-ca ca.pem --nkey worker.nk \\
        --nats tls://nats-1:4222,tls://nats-2:4222,tls://nats-3:4222
    """
    from ingest.nats.options import NatsArgs
    from ingest.nats.streams import provision

    args = NatsArgs.pop(kw)
    d = data_dir or default_data_dir()

    async def _run() -> None:
        nc = await build_connect(d, args, "worker").connect()
        try:
            await provision(nc.jetstream(), replicas=replicas, prefix=args.prefix,
                            max_age=None if max_age_h is None else max_age_h * 3600)  # fmt: skip
        finally:
            await nc.close()

    try:
        asyncio.run(_run())
    except HookauditError as exc:
        fail(str(exc))
    kept = "" if max_age_h is None else f", kept {max_age_h:g} h"
    click.echo(f"provisioned: streams with {replicas} replica(s){kept}")
