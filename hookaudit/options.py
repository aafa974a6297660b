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

__all__ = [
    "data_dir_option",
    "default_data_dir",
    "fail",
    "missing_data_dir",
    "new_data_dir_option",
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
