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

__all__ = ["data_dir_option", "default_data_dir", "fail"]

F = TypeVar("F", bound=Callable[..., Any])


def data_dir_option(f: F) -> F:
    """``--data-dir`` (env HOOKAUDIT_DATA_DIR; default `default_data_dir`)."""
    return click.option(
        "--data-dir",
        type=click.Path(file_okay=False, path_type=Path),
        default=None,
        envvar="HOOKAUDIT_DATA_DIR",
        help="Where the log, spool and embedded NATS live (env HOOKAUDIT_DATA_DIR; "
        "default ~/.local/share/hookaudit).",
    )(f)


def fail(message: str) -> None:
    """Print ``hookaudit: message`` on stderr and exit 1."""
    click.echo(f"hookaudit: {message}", err=True)
    sys.exit(1)
