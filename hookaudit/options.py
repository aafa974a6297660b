"""Click options and error exits shared by every package's CLI (ingest, queries, replay, siem).

Rules of this file:
- Click and the stdlib only, and `ingest.log.layout` for the data dir's default: a
  package's `cli.py` takes these from here, never from another package's `cli.py`, so
  queries and replay import no NATS side of `ingest` to get a ``--data-dir`` flag.

Example:
    >>> import click
    >>> @click.command()
    ... @data_dir_option
    ... def cmd(data_dir): ...
    >>> [p.name for p in cmd.params]
    ['data_dir']
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from ingest.log.layout import default_data_dir
from ingest.nats.options import ENV

__all__ = [
    "data_dir_option",
    "default_data_dir",
    "fail",
    "format_option",
    "missing_data_dir",
    "nats_options",
    "new_data_dir_option",
    "output_options",
]

F = TypeVar("F", bound=Callable[..., Any])


_DATA_DIR_HELP = (
    "Where the log, spool and embedded NATS live (env HOOKAUDIT_DATA_DIR; "
    "default ~/.local/share/hookaudit)."
)


def missing_data_dir(path: Path) -> str | None:
    """Why `path` cannot be a data dir a command reads (it does not exist or is not a
    directory), or None. A mistyped path must not read as an empty history.

    >>> missing_data_dir(Path("/nonexistent/hookaudit"))
    "/nonexistent/hookaudit: no such data dir (check --data-dir or HOOKAUDIT_DATA_DIR; 'hookaudit nats up' or 'hookaudit demo' makes one)"
    """
    from ingest.logsetup import escape_controls

    if path.is_dir():
        return None
    what = "not a directory" if path.exists() else "no such data dir"
    return (
        f"{escape_controls(str(path))}: {what} (check --data-dir or HOOKAUDIT_DATA_DIR; "
        "'hookaudit nats up' or 'hookaudit demo' makes one)"
    )


def data_dir_option(f: F) -> F:
    """``--data-dir`` of a command that reads a data dir (env HOOKAUDIT_DATA_DIR; default
    `default_data_dir`): one that does not exist is exit 1 naming it, before the command
    runs (nothing is created there). Not checked when the command is only asked to list
    what it offers (``--list``)."""
    import functools

    @functools.wraps(f)
    def checked(*args: Any, **kwargs: Any) -> Any:
        if not kwargs.get("list_"):
            value = kwargs.get("data_dir")
            why = missing_data_dir(value if value is not None else default_data_dir())
            if why is not None:
                ctx = click.get_current_context()
                click.echo(f"{ctx.command_path or 'hookaudit'}: {why}", err=True)
                ctx.exit(1)
        return f(*args, **kwargs)

    return click.option(
        "--data-dir",
        type=click.Path(file_okay=False, path_type=Path),
        default=None,
        envvar="HOOKAUDIT_DATA_DIR",
        help=_DATA_DIR_HELP,
    )(checked)  # type: ignore[return-value]


def new_data_dir_option(f: F) -> F:
    """``--data-dir`` of a command that makes the data dir on purpose when it is missing
    (`nats up`, `worker`, `serve`, `provision`)."""
    return click.option(
        "--data-dir",
        type=click.Path(file_okay=False, path_type=Path),
        default=None,
        envvar="HOOKAUDIT_DATA_DIR",
        help=_DATA_DIR_HELP + " Made (0700) when missing.",
    )(f)


def fail(message: str) -> None:
    """Print ``hookaudit: message`` on stderr and exit 1."""
    click.echo(f"hookaudit: {message}", err=True)
    sys.exit(1)


def nats_options(f: F) -> F:
    """--nats, --creds, --nkey, --user, --password, --tls-ca/-cert/-key, --prefix (hidden).

    Example:
        >>> @nats_options
        ... def cmd(**kw): ...
    """

    def path_opt(flag: str, dest: str, what: str) -> Callable[[Any], Any]:
        return click.option(
            flag,
            dest,
            envvar=ENV[dest],
            default=None,
            metavar="FILE",
            help=f"{what} (env {ENV[dest]}).",
        )

    opts: list[Callable[[Any], Any]] = [
        click.option(
            "--nats",
            "nats_url",
            envvar=ENV["nats_url"],
            default=None,
            metavar="URL[,URL…]",
            help="NATS server(s), comma-separated (env HOOKAUDIT_NATS_URL). Default: the "
            "embedded server of --data-dir, with this command's role key.",
        ),
        path_opt("--creds", "creds", "NATS credentials file (JWT + seed)"),
        path_opt("--nkey", "nkey_seed", "NATS nkey seed file"),
        click.option(
            "--user", envvar=ENV["user"], default=None, help="NATS user (env HOOKAUDIT_NATS_USER)."
        ),
        click.option(
            "--password",
            envvar=ENV["password"],
            default=None,
            help="NATS password (prefer env HOOKAUDIT_NATS_PASSWORD: argv is visible to ps).",
        ),
        path_opt("--tls-ca", "tls_ca", "CA bundle to verify the NATS server's certificate"),
        path_opt("--tls-cert", "tls_cert", "client certificate for NATS mutual TLS"),
        path_opt("--tls-key", "tls_key", "key of --tls-cert"),
        click.option(
            "--prefix",
            default="",
            hidden=True,
            help="Stream/subject prefix (tests run side by side with it).",
        ),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return f


def output_options(f: F) -> F:
    """--format table|json|jsonl|csv|parquet, --output FILE and --max-rows (shared)."""
    from queries.output import FORMATS

    opts = [
        format_option(
            *FORMATS,
            help="table for people; json (a list of row objects), jsonl, csv, parquet for machines.",
        ),
        click.option(
            "--output",
            "-o",
            type=click.Path(dir_okay=False, path_type=Path),
            default=None,
            help="Write to this file instead of stdout (required for parquet).",
        ),
        click.option(
            "--max-rows",
            type=click.IntRange(0),
            default=1000,
            show_default=True,
            help="Rows shown by --format table (the other formats write every row).",
        ),
    ]
    for opt in reversed(opts):
        f = opt(f)
    return f


def format_option(*choices: str, default: str | None = None, help: str = "") -> Callable[[F], F]:
    """THE `--format` option of every command: its choices (the first is the default unless
    `default` says otherwise), the value passed as `fmt`.

    Example:
        >>> @click.command()
        ... @format_option("text", "json")
        ... def cmd(fmt): ...
    """
    return click.option(
        "--format",
        "fmt",
        type=click.Choice(choices),
        default=default if default is not None else choices[0],
        show_default=True,
        help=help or f"How to print the result: {', '.join(choices)}.",
    )
