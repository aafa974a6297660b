"""`hookaudit replay-join` and `replay --distribute`'s side of NATS: a replay over machines.

The work queue itself is `replay.workqueue`; this file connects to NATS with the shared
flags (`ingest.nats.options`, the one place replay takes them: see pyproject's import
contracts) and wraps `replay.workjob.join` as a command. The coordinator connects with the
``replay`` role's key, a job with ``replay-join``'s (`ingest.nats.auth`): on the data dir's
embedded server by themselves, else with the flags given.

Example:
    $ hookaudit replay-join --replay-id 0190c3a2-… --nats nats://nats:4222 --data-dir /mnt/log
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Literal

import click

from engine.errors import HookauditError

__all__ = ["nats_options", "replay_join_cmd", "start_coordinator"]


def nats_options(f: Any) -> Any:
    """The shared NATS connection flags (`ingest.nats.options.nats_options`) on a command."""
    from hookaudit.options import nats_options as shared

    return shared(f)


def _connect(data_dir: Path, kw: dict[str, Any], role: Literal["replay", "replay-join"]) -> Any:
    """`--nats` and its credentials, else the data dir's embedded server with `role`'s key."""
    from ingest.nats.options import NatsArgs, connect_options

    options = connect_options(NatsArgs.pop(kw), data_dir, role)
    return options.connect


def start_coordinator(data_dir: Path, replay_id: str, kw: dict[str, Any]) -> Any:
    """The `replay.workqueue.Coordinator` of ``replay --distribute`` (pops its options)."""
    from replay.workqueue import Coordinator

    ack_wait, timeout, tries = kw.pop("ack_wait"), kw.pop("job_timeout"), kw.pop("max_deliver")
    if timeout <= ack_wait:
        raise click.BadParameter(f"{timeout:g} s is not more than --ack-wait {ack_wait:g} s",
                                 param_hint="--job-timeout")  # fmt: skip
    connect = _connect(data_dir, kw, "replay")
    click.echo(f"replay {replay_id}: start jobs with: hookaudit replay-join --replay-id "
               f"{replay_id} --nats URL [--data-dir DIR]", err=True)  # fmt: skip
    return Coordinator(connect, timeout=timeout, ack_wait=ack_wait, max_deliver=tries,
                       on_event=lambda m: click.echo(f"replay: {m}", err=True))  # fmt: skip


@click.command("replay-join")
@click.option("--replay-id", required=True, help="The id `replay --distribute` printed.")
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    envvar="HOOKAUDIT_DATA_DIR",
    help="Where this machine sees the log (env HOOKAUDIT_DATA_DIR; default: the "
    "coordinator's path).",
)
@click.option("--timeout", type=click.FloatRange(1, 86400), default=600.0, show_default=True,
              help="Seconds to wait for a coordinator that does not answer.")  # fmt: skip
@nats_options
def replay_join_cmd(replay_id: str, data_dir: Path | None, timeout: float, **kw: Any) -> None:
    """Be one job of a distributed replay: take segments from its JetStream work queue
    and send their results to the coordinator, until the replay is closed (segments of a
    job that died come back meanwhile). Start as many as you like, on any machine that
    sees the same log (the same files, or shipped segments).

    \b
    Example:
      hookaudit replay-join --replay-id 0190c3a2-… --nats nats://nats:4222 --data-dir /mnt/log
    """
    from hookaudit.options import default_data_dir
    from replay.workjob import join

    try:
        connect = _connect(data_dir or default_data_dir(), kw, "replay-join")
        taken = join(connect, replay_id, data_dir=str(data_dir) if data_dir else None,
                     timeout=timeout)  # fmt: skip
    except (HookauditError, ValueError, OSError, TimeoutError) as exc:
        click.echo(f"hookaudit replay-join: {exc}", err=True)
        sys.exit(1)
    if taken < 0:
        click.echo(f"replay {replay_id} is closed: every segment was taken", err=True)
    else:
        click.echo(f"replay {replay_id}: this job read {taken} segment(s)", err=True)
