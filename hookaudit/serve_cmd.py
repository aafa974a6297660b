"""`hookaudit serve`: the click command around `ingest.serve.server.HttpServer`."""

from __future__ import annotations

import asyncio
import signal
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from engine.errors import HookauditError
from hookaudit.stream_cmd import build_connect, connection_options, fail, new_data_dir_option
from ingest.protocol import default_data_dir

__all__ = ["serve_cmd"]


@click.command("serve")
@new_data_dir_option
@connection_options
@click.option(
    "--listen",
    default="127.0.0.1:8787",
    show_default=True,
    metavar="HOST:PORT",
    help="Address to listen on (IPv6 as [::1]:8787; port 0 picks a free one). "
    "Anything but loopback needs --token.",
)
@click.option(
    "--token",
    envvar="HOOKAUDIT_SERVE_TOKEN",
    default=None,
    help="Require 'Authorization: Bearer TOKEN' on every request but /healthz "
    "(env HOOKAUDIT_SERVE_TOKEN; prefer the env var, argv is visible to ps).",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0.01),
    default=10.0,
    show_default=True,
    help="Seconds to wait for a worker's decision.",
)
@click.option(
    "--fail",
    "fail_mode",
    type=click.Choice(["open", "closed"]),
    default="open",
    show_default=True,
    help="No decision in time, NATS down or overloaded: open answers an empty body "
    "(Claude Code proceeds); closed answers the event's blocking JSON (deny at "
    "PreToolUse).",
)
@click.option(
    "--max-body",
    type=click.IntRange(min=1),
    default=1024 * 1024,
    show_default=True,
    help="Largest request body in bytes; larger ones get 413.",
)
@click.option(
    "--max-pending",
    type=click.IntRange(min=1),
    default=1024,
    show_default=True,
    help="Requests waiting for a decision at once; beyond that, the --fail answer.",
)
@click.option(
    "--header-timeout",
    type=click.FloatRange(min=0.01),
    default=10.0,
    show_default=True,
    help="Seconds a client has to send a whole request head, from connecting (or from its "
    "first byte after an idle period); then the connection is closed.",
)
@click.option(
    "--body-timeout",
    type=click.FloatRange(min=0.01),
    default=10.0,
    show_default=True,
    help="Seconds a client has to send the body after the head, and to read the answer.",
)
@click.option(
    "--keepalive-timeout",
    type=click.FloatRange(min=0.01),
    default=75.0,
    show_default=True,
    help="Seconds an idle keep-alive connection stays open (longer than Claude Code's 4 s).",
)
@click.option(
    "--max-connections",
    type=click.IntRange(min=1),
    default=1000,
    show_default=True,
    help="Open connections at once (lowered to fit the open-file limit). At the cap a new "
    "connection closes the oldest idle one, else the oldest still sending its head; "
    "with none of those it gets 503.",
)
@click.option(
    "--max-header-bytes",
    type=click.IntRange(min=1024),
    default=16 * 1024,
    show_default=True,
    help="Largest request head (request line + headers) in bytes; larger ones get 431.",
)
@click.option(
    "--provision/--no-provision",
    default=None,
    help="Create the streams at start if missing. Default: only on a server reached without "
    "credentials; a key or creds file is a role (the emitter's may not create streams: "
    "`hookaudit nats provision` does).",
)
@click.option(
    "--worker-key",
    envvar="HOOKAUDIT_WORKER_KEY",
    default=None,
    metavar="U…[,U…]",
    help="Public key(s) whose signed decisions are accepted (env HOOKAUDIT_WORKER_KEY). "
    "Default: <data-dir>/nats/auth/reply.pub.",
)
@click.option(
    "-v",
    "--verbose",
    is_flag=True,
    help="Also log late replies (failures are always logged to stderr).",
)
def serve_cmd(
    data_dir: Path | None,
    listen: str,
    token: str | None,
    timeout: float,
    fail_mode: str,
    max_body: int,
    max_pending: int,
    header_timeout: float,
    body_timeout: float,
    keepalive_timeout: float,
    max_connections: int,
    max_header_bytes: int,
    provision: bool | None,
    verbose: bool,
    worker_key: str | None,
    **kw: Any,
) -> None:
    """HTTP gateway for Claude Code http hooks: POST the hook input, get the decision.

    POST /hooks (or /, or /hooks/<EventName>) with the hook input JSON. The answer
    is 200 with the JSON one Claude Code hook returns for the worker's decision, or
    200 with an empty body for "no decision". GET /healthz is 200 while NATS is
    connected, else 503. Each request becomes a HookEvent (source "http"; host from
    the X-Hookaudit-Host header, else the peer address; user from X-Hookaudit-User).
    Another agent's http hooks POST to /hooks?agent=NAME (qwen_code: Qwen Code): the
    event is recorded as that agent's and answered in the form it obeys.

    A status code cannot block in Claude Code: a rejected request (413 too large,
    400 bad JSON or unknown event, 401 bad token) is a non-blocking hook error, so
    it fails OPEN whatever --fail says; --fail covers the decision path only.
    SIGTERM stops accepting, answers the requests in flight, then closes NATS.

    No http hook can block Notification, SessionStart, Setup, SessionEnd,
    StopFailure, SubagentStart, PostCompact, PermissionDenied, WorktreeRemove,
    InstructionsLoaded, CwdChanged, FileChanged, MessageDisplay or DirectoryAdded:
    there --fail closed answers an empty body too. TeammateIdle and TaskCompleted
    are blocked with continue:false, which stops the teammate.

    \b
    Claude Code settings (the token travels through headers + allowedEnvVars):
      {"hooks": {"PreToolUse": [{"hooks": [{"type": "http",
         "url": "http://127.0.0.1:8787/hooks",
         "headers": {"Authorization": "Bearer $HOOKAUDIT_TOKEN"},
         "allowedEnvVars": ["HOOKAUDIT_TOKEN"]}]}]}}

    \b
    Example:
      HOOKAUDIT_SERVE_TOKEN=s3cret hookaudit serve --data-dir ./data --fail closed
    """
    from ingest.nats.options import NatsArgs
    from ingest.nats.streams import names
    from ingest.replysig import trusted_verifier
    from ingest.serve.http1 import Limits
    from ingest.serve.server import HttpServer, ServeOptions, check_listen, parse_listen

    args = NatsArgs.pop(kw)
    d = data_dir or default_data_dir()

    from ingest.logsetup import setup_logging

    setup_logging(verbose)
    try:
        host, port = parse_listen(listen)
    except ValueError as exc:
        raise click.BadParameter(
            str(exc).removeprefix(f"--listen {listen!r}: "), param_hint="--listen"
        ) from None
    try:
        check_listen(host, token)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    options = ServeOptions(
        host=host,
        port=port,
        names=names(args.prefix),
        timeout=timeout,
        fail="closed" if fail_mode == "closed" else "open",
        max_body=max_body,
        max_pending=max_pending,
        token=token or None,
        provision=provision is not False,
        data_dir=d,
        limits=Limits(
            header_timeout=header_timeout,
            body_timeout=body_timeout,
            keepalive_timeout=keepalive_timeout,
            max_connections=max_connections,
            max_header_bytes=max_header_bytes,
        ),
    )

    async def _run() -> None:
        # A gateway outlives NATS outages: it answers with --fail meanwhile, /healthz says
        # 503, and it reconnects by itself instead of giving up after a minute or two.
        connect = build_connect(d, args, "emitter", name="hookaudit-serve", max_reconnect=-1)
        opts = options
        if provision is None:
            # Credentials name a role, and serve's is the emitter's, which may not create
            # streams: provisioning would only be refused and stop serve at start.
            anonymous = not (connect.nkey_seed or connect.creds or connect.user or connect.token)
            opts = replace(options, provision=anonymous)
        opts = replace(opts, verifier=trusted_verifier(worker_key, d))
        server = HttpServer(opts, connect)
        await server.start()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, server.request_stop)
        click.echo(f"hookaudit serve: listening on {server.url}")
        sys.stdout.flush()
        await server.wait()

    try:
        asyncio.run(_run())
    except HookauditError as exc:
        fail(str(exc))


if __name__ == "__main__":
    serve_cmd()
