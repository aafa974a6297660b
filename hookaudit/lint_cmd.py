"""`hookaudit lint SETTINGS…`, and the `--strict` check of eval, worker and replay.

The checks are `engine.lint` (pure); this module only reads the arguments and prints.

Example:
    $ hookaudit lint .claude/settings.json ~/.claude/settings.json
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from hookaudit.options import format_option

F = TypeVar("F", bound=Callable[..., Any])

__all__ = ["lint_cmd", "refuse_unless_clean", "strict_option"]


def refuse_unless_clean(command: str, specs: tuple[str, ...] | list[str]) -> None:
    """With --strict: print every finding (one line each) and exit 1 if there is any.

    Example:
        >>> refuse_unless_clean("eval", ["project:infra/policies/security.json"])  # clean
    """
    from engine.lint import lint_specs, refusal

    findings = lint_specs(specs)
    if findings:
        for line in refusal(command, findings):
            click.echo(line, err=True)
        sys.exit(1)


def strict_option(f: F) -> F:
    return click.option(
        "--strict",
        is_flag=True,
        help="Refuse to start when `hookaudit lint` finds anything in the settings.",
    )(f)


@click.command("lint")
@click.argument("settings", nargs=-1, required=True, metavar="[SCOPE:]PATH...")
@format_option("text", "json")
def lint_cmd(settings: tuple[str, ...], fmt: str) -> None:
    """Find settings entries that would silently remove a gate; exit 1 if any.

    Reports, one line each with the file, the JSON path and the kind in brackets:

    \b
      unknown-key          a misspelt key ("hook", "comand"): ignored
      unknown-event        an event name Claude Code does not have
      unknown-type         a hook type that does not exist: never runs
      bad-if               an `if` rule that never matches (unbalanced, not a tool)
      if-never-runs        `if` on a non-tool event, or WebFetch(domain:...)
      invalid              what strict loading refuses or Claude Code would skip
      empty                a group with no hooks
      python-missing       a python hook's file, module or function is missing
      fails-open-on-start  `hookaudit emit --fail closed` not ending in `|| exit 2`
      timeout-fails-open   the hook's timeout is under emit's --timeout plus 2 s
      json                 the file is not JSON
      unreadable           missing, not UTF-8, or over 16 MiB

    \b
    Example:
      hookaudit lint .claude/settings.json
      hookaudit lint project:infra/policies/security.json user:~/.claude/settings.json
    """
    from engine.lint import lint_specs

    findings = lint_specs(settings)
    if fmt == "json":
        import msgspec

        click.echo(json.dumps([msgspec.structs.asdict(f) for f in findings], indent=2))
    else:
        for f in findings:
            click.echo(f.line())
        if not findings:
            click.echo(f"ok: {len(settings)} file(s), no findings")
    if findings:
        click.echo(
            f"hookaudit lint: {len(findings)} finding(s) in {len(settings)} file(s)", err=True
        )
    sys.exit(1 if findings else 0)
