"""The `hookaudit` command: a root click group that loads each subcommand lazily.

`hookaudit emit` runs on every tool call of an agent, so nothing here imports a
subcommand's module until that subcommand is invoked.

Example:
    $ hookaudit eval --settings project:.claude/settings.json --event event.json
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

import click

__all__ = ["COMMANDS", "main"]

# name -> ("module:attribute", one-line help shown by `hookaudit --help`)
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": (
        "hookaudit.demo_cmd:demo_cmd",
        "Run everything once: embedded NATS, worker, sample sessions, a query, a replay.",
    ),
    "emit": (
        "hookaudit.emit_cmd:emit",
        "Publish the hook event on stdin to NATS (a Claude Code command hook).",
    ),
    "eval": (
        "hookaudit.eval_cmd:eval_cmd",
        "Run the engine once on one event and print the decision.",
    ),
    "nats": (
        "hookaudit.stream_cmd:nats_group",
        "NATS: up, down, status of the embedded server; keys, creds, provision for any.",
    ),
    "worker": (
        "hookaudit.stream_cmd:worker_cmd",
        "Consume events, evaluate, append to the log, ack, answer.",
    ),
    "query": (
        "hookaudit.query_cmd:query_cmd",
        "Run a named security query over the whole history (DuckDB).",
    ),
    "sql": ("hookaudit.query_cmd:sql_cmd", "Run read-only SQL over the history's views (DuckDB)."),
    "replay": (
        "hookaudit.replay_cmd:replay_cmd",
        "Re-evaluate history with other settings and report what would change.",
    ),
    "replay-join": (
        "hookaudit.replay_join_cmd:replay_join_cmd",
        "Be one job of a distributed replay (segments from a JetStream work queue).",
    ),
    "serve": (
        "hookaudit.serve_cmd:serve_cmd",
        "HTTP gateway for Claude Code http hooks: POST the hook input, get the decision.",
    ),
    "relay": (
        "hookaudit.relay_cmd:relay_cmd",
        "Relay `hookaudit emit` to NATS over a local unix socket (a fast emit).",
    ),
    "spool": (
        "hookaudit.emit_cmd:spool",
        "Events spooled on disk while NATS was unreachable, and refused input: flush, status, rejects.",
    ),
    "backfill": (
        "hookaudit.backfill_cmd:backfill_cmd",
        "Publish the tool calls of Claude Code transcripts as hook events (gaps in the log).",
    ),
    "detect": (
        "hookaudit.detect_cmd:detect_cmd",
        "Run Sigma rules over the history (products: coding_agent, claude_code, codex, ...).",
    ),
    "siem": (
        "hookaudit.siem_cmd:siem_group",
        "Stream outcomes to a SIEM (OCSF, CEF, ECS; syslog, HEC, Elastic, HTTPS, file).",
    ),
    "verify": ("hookaudit.log_cmd:verify_cmd", "Check the log's hash chains and manifests."),
    "lint": (
        "hookaudit.lint_cmd:lint_cmd",
        "Find settings entries that would silently remove a gate (typos, dead `if` rules).",
    ),
    "wire": (
        "hookaudit.wire_cmd:wire_cmd",
        "Write an agent's hook configuration (Claude Code, Codex, Gemini CLI, …) to send its events here.",
    ),
    "log": (
        "hookaudit.log_cmd:log_group",
        "The append-only log: seal, ship to object storage, prune shipped copies.",
    ),
}


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module_name, _, attr = target[0].partition(":")
        cmd = getattr(importlib.import_module(module_name), attr)
        assert isinstance(cmd, click.Command)
        return cmd

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name = args[0] if args else ""
        if name and not name.startswith("-") and name not in COMMANDS:
            import difflib

            near = difflib.get_close_matches(name, list(COMMANDS), n=1)
            if near:
                ctx.fail(f"No such command {name!r}: did you mean {near[0]!r}?")
        return super().resolve_command(ctx, args)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, COMMANDS[name][1]) for name in self.list_commands(ctx)]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="hookaudit")
def root() -> None:
    """hookaudit: a Claude Code-compatible hook engine with an audit log, queries and replay.

    \b
    Example:
      hookaudit demo
      hookaudit eval --settings project:.claude/settings.json --event event.json --format json
    """


def _one_line(text: str) -> str:
    return " ".join(text.split())


def main(argv: list[str] | None = None) -> Any:
    """Console-script entry point: every error is one line on stderr, exit 1 or 2.

    A usage error (bad option, bad value) is exit 2; a failure a command reports is exit 1;
    an exception no command expected is one line naming it, exit 1
    (``HOOKAUDIT_DEBUG=1`` shows its traceback instead).
    """
    args = argv if argv is not None else sys.argv[1:]
    try:
        rv = root.main(args=args, prog_name="hookaudit", standalone_mode=False)
    except (Exception, click.Abort) as exc:
        from engine.failclosed import armed, closed_answer, exit_now, one_line

        prog = armed()  # a hook that fails closed: every failure blocks (exit 2), never 1
        if prog is None or isinstance(exc, click.UsageError):
            _report(exc, args)
            raise  # unreachable: _report exits
        exit_now(*closed_answer(f"internal error: {one_line(exc)}", prog))
    sys.exit(rv if isinstance(rv, int) else 0)


def _report(exc: BaseException, args: list[str]) -> None:
    """One line for an error no command reported, and its exit code."""
    try:
        raise exc
    except click.UsageError as exc:
        where = exc.ctx.command_path if exc.ctx is not None else "hookaudit"
        click.echo(f"{where}: {_one_line(exc.format_message())} (see `{where} --help`)", err=True)
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        sys.exit(exc.exit_code)
    except click.Abort:
        click.echo("hookaudit: aborted", err=True)
        sys.exit(1)
    except BrokenPipeError:
        # the reader went away (`| head`): stop quietly; stdout can no longer be flushed
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(1)
    except Exception as exc:
        if os.environ.get("HOOKAUDIT_DEBUG"):
            raise
        cmd = " ".join(a for a in args[:2] if not a.startswith("-"))
        click.echo(
            f"hookaudit {cmd}: internal error: {type(exc).__name__}: {_one_line(str(exc))} "
            "(HOOKAUDIT_DEBUG=1 shows the traceback)",
            err=True,
        )
        sys.exit(1)
