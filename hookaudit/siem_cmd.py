"""`hookaudit siem`: stream outcomes to a SIEM; `hookaudit siem status`: what each sink did.

Longer than 400 lines: one command group and its options (sink, format, TLS, redaction,
where a new sink starts), each with its help text.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import sys
from pathlib import Path
from typing import Any, NoReturn

import click

from engine.errors import HookauditError
from hookaudit.options import format_option, missing_data_dir, new_data_dir_option
from ingest.private import make_private
from ingest.protocol import default_data_dir

__all__ = ["siem_group"]


def _fail(message: str) -> NoReturn:
    click.echo(f"hookaudit siem: {message}", err=True)
    sys.exit(1)


class CatchUp:
    """A new or resumed sink's backlog: a bar on a terminal while it is forwarded, and one
    line once it is (rate included), whatever stderr is."""

    def __init__(self) -> None:
        self.total = self.done = 0
        self.began = 0.0
        self.bar: Any = None

    def start(self, backlog: int) -> None:
        import time

        from hookaudit.progress import Bar

        self.total, self.done, self.began = backlog, 0, time.monotonic()
        if backlog > 0:
            self.bar = Bar("catching up", total=backlog, unit="outcomes").__enter__()

    def advance(self, n: int) -> None:
        if self.done >= self.total:
            return
        self.done += n
        if self.bar is not None:
            self.bar.advance(n)
        if self.done >= self.total:
            import time

            self.close()
            took = max(time.monotonic() - self.began, 1e-3)
            click.echo(
                f"hookaudit siem: caught up: {self.total} outcomes forwarded in {took:.1f} s "
                f"({self.total / took:,.0f}/s); now forwarding new ones",
                err=True,
            )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)
            self.bar = None


def _redaction_key(data_dir: Path, key_file: str | None) -> bytes:
    """The HMAC key: --redact-key-file, else one made once per data dir (mode 0600)."""
    path = Path(key_file) if key_file else data_dir / "siem" / "redact.key"
    if key_file is None and not path.exists():
        try:
            make_private(path.parent)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(secrets.token_bytes(32))
        except OSError as e:  # a data dir that cannot be made or written: one line, exit 1
            _fail(f"data dir {data_dir}: cannot create {path}: {e.strerror or e}")
    try:
        key = path.read_bytes()
    except OSError as e:
        raise click.UsageError(f"--redact-key-file {path}: {e.strerror}") from e
    if len(key) < 16:
        raise click.UsageError(f"--redact-key-file {path}: expected at least 16 bytes")
    return key


def _nats_options(f: Any) -> Any:
    """The shared NATS flags, except that TLS to NATS is --nats-tls-*: --tls-* is the SIEM's."""
    from ingest.nats.options import ENV

    opts = [
        click.option(
            "--nats",
            "nats_url",
            envvar=ENV["nats_url"],
            default=None,
            metavar="URL[,URL…]",
            help="NATS server(s) (env HOOKAUDIT_NATS_URL). Default: the embedded "
            "server of --data-dir, with the siem role's key.",
        ),
        click.option(
            "--creds",
            envvar=ENV["creds"],
            default=None,
            metavar="FILE",
            type=click.Path(exists=True, dir_okay=False),
            help="NATS credentials file (env HOOKAUDIT_NATS_CREDS).",
        ),
        click.option(
            "--nkey",
            "nkey_seed",
            envvar=ENV["nkey_seed"],
            default=None,
            metavar="FILE",
            type=click.Path(exists=True, dir_okay=False),
            help="NATS nkey seed file (env HOOKAUDIT_NATS_NKEY).",
        ),
        click.option(
            "--user", envvar=ENV["user"], default=None, help="NATS user (env HOOKAUDIT_NATS_USER)."
        ),
        click.option(
            "--password",
            envvar=ENV["password"],
            default=None,
            help="NATS password (prefer env HOOKAUDIT_NATS_PASSWORD).",
        ),
        click.option(
            "--nats-tls-ca",
            "nats_tls_ca",
            envvar=ENV["tls_ca"],
            default=None,
            metavar="FILE",
            help="CA of the NATS server (env HOOKAUDIT_NATS_TLS_CA).",
        ),
        click.option(
            "--nats-tls-cert",
            "nats_tls_cert",
            envvar=ENV["tls_cert"],
            default=None,
            metavar="FILE",
            help="Client certificate for NATS (env HOOKAUDIT_NATS_TLS_CERT).",
        ),
        click.option(
            "--nats-tls-key",
            "nats_tls_key",
            envvar=ENV["tls_key"],
            default=None,
            metavar="FILE",
            help="Key of --nats-tls-cert (env HOOKAUDIT_NATS_TLS_KEY).",
        ),
        click.option("--prefix", default="", hidden=True, help="Stream/subject prefix (tests)."),
        new_data_dir_option,  # checked in the command: a group's check would run for
    ]  # `siem status` too, before status's own --data-dir is read
    for opt in reversed(opts):
        f = opt(f)
    return f


def _connect(d: Path, o: dict[str, Any]) -> Any:
    """The siem role's connection: the flags given, else the embedded server's siem key."""
    from ingest.nats.options import NatsArgs, connect_options

    args = NatsArgs(
        nats_url=o["nats_url"],
        creds=o["creds"],
        nkey_seed=o["nkey_seed"],
        user=o["user"],
        password=o["password"],
        tls_ca=o["nats_tls_ca"],
        tls_cert=o["nats_tls_cert"],
        tls_key=o["nats_tls_key"],
        prefix=o["prefix"],
    )
    return connect_options(args, d, "siem", name="hookaudit-siem", max_reconnect=-1)


@click.group("siem", invoke_without_command=True)
@_nats_options
@click.option("--name", default=None, help="The sink's name: its durable consumer and state.")
@format_option("ocsf", "cef", "ecs", "json", help="The records' format: OCSF, CEF, ECS or JSON.")
@click.option(
    "--to",
    "to",
    default=None,
    metavar="URL",
    help="syslog+udp|tcp|tls://HOST:PORT, hec+https://HOST:PORT, "
    "elastic+https://HOST:PORT/INDEX, https://URL, file://PATH or - (stdout).",
)
@click.option(
    "--filter",
    "subject_filter",
    default=None,
    metavar="EVENT[.DECISION]",
    help="Only these outcomes, as subject tokens: 'PreToolUse.deny', 'PreToolUse.*'.",
)
@click.option("--batch", type=click.IntRange(1, 10000), default=256, show_default=True)
@click.option(
    "--syslog-bom/--no-syslog-bom",
    default=True,
    show_default=True,
    help="Put RFC 5424's UTF-8 BOM before the message of syslog and RELP records "
    "(turn it off for a receiver that shows the BOM as text).",
)
@click.option("--tls-ca", type=click.Path(dir_okay=False), default=None, help="CA of the SIEM.")
@click.option(
    "--tls-cert",
    type=click.Path(dir_okay=False),
    default=None,
    help="Client certificate for the SIEM.",
)
@click.option("--tls-key", type=click.Path(dir_okay=False), default=None, help="Its key.")
@click.option(
    "--token",
    envvar="HOOKAUDIT_SIEM_TOKEN",
    default=None,
    help="HEC token / Elastic API key / webhook bearer (env HOOKAUDIT_SIEM_TOKEN).",
)
@click.option(
    "--redact",
    "redact_specs",
    multiple=True,
    metavar="NAME=REGEX",
    help="Another redaction pattern (repeatable); a group redacts only the group.",
)
@click.option(
    "--no-default-redaction",
    is_flag=True,
    help="Turn off the built-in patterns (API keys, tokens, AWS keys, passwords).",
)
@click.option(
    "--redact-key-file",
    type=click.Path(dir_okay=False),
    default=None,
    envvar="HOOKAUDIT_REDACT_KEY_FILE",
    help="HMAC key of redaction tokens (default: DATA_DIR/siem/redact.key, made once).",
)
@click.option(
    "--ack-timeout",
    type=float,
    default=60.0,
    show_default=True,
    help="HEC: seconds to wait for the indexer acknowledgement before re-sending.",
)
@click.option(
    "--max-file-mb",
    type=int,
    default=100,
    show_default=True,
    help="file://: rotate past this size.",
)
@click.option(
    "--from",
    "start",
    type=click.Choice(["all", "now"]),
    default="all",
    show_default=True,
    help="Where a new sink starts: every outcome the stream holds, or those appended from "
    "now on. A sink that exists resumes where it left off.",
)
@click.option("--ack-wait", type=float, default=120.0, hidden=True)
@click.option("-v", "--verbose", is_flag=True)
@click.pass_context
def siem_group(ctx: click.Context, /, **o: Any) -> None:
    """Stream outcomes to a SIEM until SIGTERM, acking each only after the SIEM accepted it.

    \b
    Example:
      hookaudit siem --data-dir ./data --name soc --format cef --to syslog+tcp://127.0.0.1:514
      hookaudit siem --name splunk --format ocsf --to hec+https://splunk:8088 --token $T
      hookaudit siem status --data-dir ./data
    """
    if ctx.invoked_subcommand is not None:
        return
    if not o["name"] or not o["to"]:
        raise click.UsageError("hookaudit siem needs --name and --to (or the 'status' command)")
    from ingest.logsetup import setup_logging
    from ingest.nats.streams import names
    from ingest.redact import Redactor, parse_pattern
    from ingest.siem.forward import NAME_OK, Forwarder
    from ingest.siem.targets import TlsFiles, parse_filter, parse_target, redact_url

    setup_logging(o["verbose"])
    if not NAME_OK.fullmatch(o["name"]):
        raise click.UsageError(f"--name {o['name']!r}: expected 1-64 of [A-Za-z0-9_-]")
    d = o["data_dir"] or default_data_dir()
    from ingest.private import UnsafeDataDir, check_data_dir

    # a typo must not make a dir and a key: without --nats the data dir is the embedded
    # server's, which must exist; with --nats it holds only this sink's state, made here
    if o["nats_url"] is None and (why := missing_data_dir(d)) is not None:
        _fail(why)
    try:  # before the redaction key or the sink's lock is made there
        check_data_dir(d)
    except UnsafeDataDir as exc:
        _fail(str(exc))
        return
    try:
        subject_filter = o["subject_filter"] and parse_filter(o["subject_filter"])
        extra = [parse_pattern(s) for s in o["redact_specs"]]
        tls = TlsFiles(o["tls_ca"], o["tls_cert"], o["tls_key"])
        sink = parse_target(
            o["to"],
            tls=tls,
            token=o["token"],
            ack_timeout=o["ack_timeout"],
            max_file_bytes=o["max_file_mb"] << 20,
            syslog_bom=o["syslog_bom"],
        )
    except ValueError as e:
        raise click.UsageError(str(e)) from e
    redactor = Redactor.build(
        _redaction_key(d, o["redact_key_file"]), extra, defaults=not o["no_default_redaction"]
    )

    catch_up = CatchUp()

    async def _run() -> Any:
        fwd = Forwarder(
            connect=_connect(d, o),
            names=names(o["prefix"]),
            name=o["name"],
            fmt=o["fmt"],
            sink=sink,
            redactor=redactor,
            data_dir=d,
            filter=subject_filter,
            batch=o["batch"],
            ack_wait=o["ack_wait"],
            to=redact_url(o["to"]),
            start=o["start"],
            notice=lambda m: click.echo(f"hookaudit siem: {m}", err=True),
            backlog=catch_up.start,
            forwarded=catch_up.advance,
        )
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, fwd.stop)
        return await fwd.run()

    from ingest.siem.state import hold_sink

    try:
        held = hold_sink(d, o["name"])
    except OSError as e:
        _fail(f"{d}/siem/{o['name']}/lock: {e.strerror or e}")
        return
    except HookauditError as exc:
        _fail(str(exc))
        return
    try:
        c = asyncio.run(_run())
    except HookauditError as exc:
        _fail(str(exc))
        return
    finally:
        catch_up.close()
        os.close(held)
    click.echo(
        json.dumps(
            {
                "name": c.name,
                "sent": c.sent,
                "retried": c.retried,
                "failed": c.failed,
                "parked": c.parked,
            }
        ),
        err=True,
    )


@siem_group.command("status")
@_nats_options
@click.option("--name", default=None, help="One sink (default: all in --data-dir).")
@click.option(
    "--parked",
    "show_parked",
    type=click.IntRange(0),
    default=5,
    show_default=True,
    help="How many of the last parked records to show per sink.",
)
def siem_status(show_parked: int, **o: Any) -> None:
    """Per-sink counters (sent, retried, failed, parked, lag) and the last parked records.

    Exit 1 when a sink's consumer cannot be read (lag unknown).

    \b
    Example:
      hookaudit siem status --data-dir ./data
    """
    from ingest.nats.streams import names
    from ingest.siem.forward import consumer_name
    from ingest.siem.state import BadState, sink_names, sink_report

    d = o["data_dir"] or default_data_dir()
    if (why := missing_data_dir(d)) is not None:
        click.echo(f"hookaudit siem status: {why}", err=True)
        sys.exit(1)
    n = names(o["prefix"])
    sinks: list[dict[str, Any]] = []
    ok = True
    for name in [o["name"]] if o["name"] else sink_names(d):
        try:
            report = sink_report(d, name, show_parked)
        except BadState as e:  # reported with the others; a running sink sets it aside
            click.echo(f"hookaudit siem status: {e}", err=True)
            report, ok = sink_report(d, name, show_parked, damaged=True), False
        if report is None:
            _fail(f"{d}/siem/{name}/status.json: no such sink (never started here)")
        sinks.append(report)

    async def _lag() -> None:
        nonlocal ok
        nc = await _connect(d, o).connect()
        try:
            js = nc.jetstream()
            for s in sinks:
                try:
                    ci = await js.consumer_info(n.outcomes_stream, consumer_name(s["name"]))
                    s["lag"] = ci.num_pending + ci.num_ack_pending
                    s["ack_pending"] = ci.num_ack_pending
                    s["redelivered"] = ci.num_redelivered
                except Exception as e:  # reported, not raised: status always prints
                    s["lag_error"] = str(e) or type(e).__name__
                    ok = False
        finally:
            await nc.close()

    if sinks:
        try:
            asyncio.run(_lag())
        except HookauditError as e:
            for s in sinks:
                s["lag_error"] = str(e)
            ok = False
    click.echo(json.dumps({"sinks": sinks}, indent=2))
    sys.exit(0 if ok else 1)
