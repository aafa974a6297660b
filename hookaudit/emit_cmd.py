"""`hookaudit emit` and `hookaudit spool flush|status`: thin click wrappers of ingest.emit.emitter.

Kept minimal: `emit` runs on every tool call, so this module imports click and the
stdlib only; the work is imported when a command runs.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click

from hookaudit.options import data_dir_option, format_option, missing_data_dir
from ingest.emit.fast import AGENTS

# `--agent` takes each agent's name, or the same with hyphens (`gemini-cli`)
AGENT_NAMES = AGENTS + tuple(a.replace("_", "-") for a in AGENTS if "_" in a)

__all__ = ["emit", "spool"]

F = TypeVar("F", bound=Callable[..., Any])


def _target_options(f: F) -> F:
    """--data-dir and the shared NATS connection flags (`ingest.nats.options.nats_options`)."""
    from hookaudit.options import nats_options

    f = nats_options(f)
    return click.option(
        "--data-dir",
        type=click.Path(file_okay=False, path_type=Path),
        envvar="HOOKAUDIT_DATA_DIR",
        help="Where the spool, rejects and embedded NATS live (env HOOKAUDIT_DATA_DIR; "
        "default ~/.local/share/hookaudit).",
    )(f)


def _target(kw: dict[str, Any]) -> Any:
    from ingest.emit.emitter import Target
    from ingest.nats.options import NatsArgs
    from ingest.protocol import default_data_dir

    a = NatsArgs.pop(kw)
    return Target(
        data_dir=kw.pop("data_dir", None) or default_data_dir(),
        nats_url=a.nats_url,
        prefix=a.prefix,
        creds=a.creds,
        nkey_seed=a.nkey_seed,
        user=a.user,
        password=a.password,
        tls_ca=a.tls_ca,
        tls_cert=a.tls_cert,
        tls_key=a.tls_key,
        worker_key=kw.pop("worker_key", None) or None,
    )


def existing_target(kw: dict[str, Any], prog: str) -> Any:
    """`_target` of a command that reads the data dir (`spool flush`, `backfill`): without
    --nats, a data dir that does not exist is exit 1 naming it (a mistyped path is not an
    empty spool, and holds no server to publish to)."""
    target = _target(kw)
    why = missing_data_dir(target.data_dir) if target.nats_url is None else None
    if why is not None:  # the embedded server's data dir (with --nats, the spool's)
        click.echo(f"{prog}: {why}", err=True)
        sys.exit(1)
    return target


def _fails_closed(args: Sequence[str]) -> bool:
    for i, a in enumerate(args):
        if a == "--fail=closed" or (a == "--fail" and args[i + 1 : i + 2] == ["closed"]):
            return True
    return False


def _for_cline(args: Sequence[str]) -> bool:
    for i, a in enumerate(args):
        if a == "--agent=cline" or (a == "--agent" and args[i + 1 : i + 2] == ["cline"]):
            return True
    return False


class _HookCommand(click.Command):
    """A command run by an agent: a usage error must not block it unless it fails closed.

    Claude Code reads exit 2 as "block", and click exits 2 on a usage error; a typo in
    settings.json would then block every tool call.
    """

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        closed = _fails_closed(args)
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as e:
            mode = "blocking: --fail closed" if closed else "ignored: --fail open"
            line = f"hookaudit emit: usage error: {e.format_message()} ({mode})"
            click.echo(line, err=True)
            if closed and _for_cline(args):  # Cline obeys its cancel only, on any exit code
                from engine.failclosed import cline_cancel

                click.echo(cline_cancel(line))
                ctx.exit(0)
            ctx.exit(2 if closed else 0)
            raise  # unreachable: ctx.exit raises


@click.command("emit", cls=_HookCommand)
@_target_options
@click.option(
    "--source",
    default="claude-code",
    show_default=True,
    help="Which agent raised the event (recorded in HookEvent.source).",
)
@click.option(
    "--agent",
    type=click.Choice(AGENT_NAMES, case_sensitive=False),
    default="claude_code",
    show_default=True,
    help="The agent whose hook this is: its input is normalised to a canonical event and "
    "the answer is given in the form that agent obeys (a hyphen may stand for _).",
)
@click.option(
    "--wait", is_flag=True, help="Wait for the worker's decision and answer as the agent's hook."
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0.0),
    default=10.0,
    show_default=True,
    help="With --wait: the answer comes within this many seconds of the start (the "
    "decision, or the --fail answer when none came in time). Keep the hook's timeout in "
    "settings above it: Claude Code lets a call run when it stops a hook.",
)
@click.option(
    "--fail",
    type=click.Choice(["open", "closed"]),
    default="open",
    show_default=True,
    help="When no decision can be had (timeout, NATS down, bad input): open lets "
    "the action proceed; closed denies PreToolUse and blocks other blockable events.",
)
@click.option(
    "--worker-key",
    envvar="HOOKAUDIT_WORKER_KEY",
    default=None,
    metavar="U…[,U…]",
    help="With --wait: public key(s) whose signed decisions are accepted (env "
    "HOOKAUDIT_WORKER_KEY). Default: <data-dir>/nats/auth/reply.pub.",
)
def emit(source: str, agent: str, wait: bool, timeout: float, fail: str, **kw: Any) -> None:
    """Publish the hook event on stdin to NATS (a Claude Code command hook).

    Reads one event, publishes it verbatim to JetStream and exits 0 silently once it
    is stored. With --wait it also waits for the worker's decision and prints and
    exits exactly as `hookaudit eval --format claude` would. When NATS is unreachable
    the event is spooled to <data-dir>/spool and sent by the next emit or by
    `hookaudit spool flush`; bad input is kept in <data-dir>/rejects.

    \b
    Wire it into .claude/settings.json:
      {"hooks": {
        "PreToolUse": [{"matcher": "*", "hooks": [
          {"type": "command", "command": "hookaudit emit --wait --fail closed || exit 2"}]}],
        "PostToolUse": [{"matcher": "*", "hooks": [
          {"type": "command", "command": "hookaudit emit"}]}]}}

    \b
    Example:
      echo '{"hook_event_name":"Stop","session_id":"s1"}' | hookaudit emit --nats nats://127.0.0.1:4222
    """
    from engine.failclosed import closed_answer, guard_process, one_line, open_reason

    closed = fail == "closed"
    # Whatever escapes below (even at exit) blocks when failing closed, never exit 1.
    agent = agent.replace("-", "_").lower()
    guard_process("hookaudit emit", closed=closed, agent=agent)
    try:
        result = _run(source, agent, wait, timeout, fail, kw)
    except Exception as e:  # a bug must not block the agent unless it asked for closed
        why = f"internal error: {one_line(e)}"
        if closed:
            out, err, code = closed_answer(why, "hookaudit emit")
        else:
            out, err, code = "", open_reason(why), 0
        _write(sys.stdout, out)
        _write(sys.stderr, err)
        _exit(code)
        return
    _write(sys.stdout, result.stdout)
    _write(sys.stderr, result.stderr)
    _exit(result.exit_code)


def _run(source: str, agent: str, wait: bool, timeout: float, fail: str, kw: dict[str, Any]) -> Any:
    from ingest.emit.emitter import EmitOptions
    from ingest.emit.emitter import emit as run_emit
    from ingest.emit.fast import process_age
    from ingest.emit.stdin import read_input

    opts = EmitOptions(
        target=_target(kw),
        source=source,
        agent=agent,
        project_dir=os.environ.get("CLAUDE_PROJECT_DIR") or None,
        wait=wait,
        timeout=timeout,
        fail="closed" if fail == "closed" else "open",
        # the answer is due `timeout` after this process started: Claude Code's hook
        # timeout counts the interpreter's start-up too
        started=time.monotonic() - process_age(),
    )
    if sys.stdin is not None and sys.stdin.isatty():
        raise click.UsageError("reads the hook event JSON on stdin, as Claude Code pipes it")
    stdin = None if sys.stdin is None else sys.stdin.buffer
    raw = read_input(stdin)
    full = None
    if stdin is not None and len(raw) > opts.max_bytes():
        from ingest.emit.stdin import drain

        full = drain(stdin, raw)  # too large: read the rest, to record its size and sha256
    return run_emit(raw, opts, full=full)


def _write(stream: Any, text: str) -> None:
    try:
        if text:
            stream.write(text if text.endswith("\n") else text + "\n")
        stream.flush()
    except (OSError, ValueError, AttributeError):
        pass  # the agent closed the pipe; the exit code still speaks


def _exit(code: int) -> None:
    """Exit now. In a real process, skip interpreter teardown.

    Tearing down the modules nats-py and asyncio load takes 10-20 ms, a tenth of
    emit's run, paid on every tool call. Nothing is left to finalise: the event is
    acked or fsynced, the connection closed, stdout and stderr flushed above. Under
    click's CliRunner or pytest's capture (sys.stdout swapped) exit normally.
    """
    if sys.stdout is sys.__stdout__ and sys.stderr is sys.__stderr__:
        os._exit(code)
    sys.exit(code)


@click.group("spool")
def spool() -> None:
    """Events spooled on disk while NATS was unreachable.

    \b
    Example:
      hookaudit spool status --format json
      hookaudit spool flush --nats nats://127.0.0.1:4222
    """


@spool.command("flush")
@_target_options
@format_option("text", "json", help="json: print the report as one JSON object.")
def spool_flush(fmt: str, **kw: Any) -> None:
    """Publish every spooled event to NATS, oldest first, each exactly once.

    Re-sends are safe: each event keeps its id as Nats-Msg-Id and JetStream stores it
    once. A spool file is removed only after all its events are acknowledged; a line
    that cannot be decoded is moved to spool/rejects.jsonl. Exit 1 if anything stays.

    \b
    Example:
      hookaudit spool flush --data-dir ~/.local/share/hookaudit
    """
    from engine.errors import HookauditError
    from ingest.emit.publish import flush_spool

    def progress(done: int, total: int) -> None:
        click.echo(f"hookaudit spool flush: {done}/{total} events", err=True)

    try:
        report = flush_spool(existing_target(kw, "hookaudit spool flush"), progress=progress)
    except (HookauditError, OSError) as e:
        click.echo(f"hookaudit spool flush: {e}; events stay spooled", err=True)
        sys.exit(1)
    if fmt == "json":
        import json

        fields = ("published", "duplicates", "rejected", "remaining", "error", "busy")
        click.echo(json.dumps({k: getattr(report, k) for k in fields}))
    else:
        click.echo(
            f"published {report.published} ({report.duplicates} already stored), "
            f"rejected {report.rejected}, remaining {report.remaining}"
        )
    if report.busy:
        click.echo("hookaudit spool flush: another flush is still running", err=True)
    if report.error:
        click.echo(f"hookaudit spool flush: stopped: {report.error}", err=True)
    sys.exit(1 if report.error or report.busy or report.remaining else 0)


@spool.command("status")
@data_dir_option
@format_option("text", "json", help="json: one JSON object.")
def spool_status(data_dir: Path | None, fmt: str) -> None:
    """How many events wait in the spool, and how many lines were rejected.

    \b
    Example:
      hookaudit spool status --format json
      {"path": "/home/me/.local/share/hookaudit/spool", "events": 3, ...}
    """
    from ingest.protocol import default_data_dir
    from ingest.spool.store import Spool

    st = Spool(data_dir or default_data_dir()).status()
    if fmt == "json":
        import json

        click.echo(json.dumps(st.to_dict()))
    else:
        click.echo(f"{st.events} events spooled in {st.path} ({st.bytes} bytes, {st.files} files)")
        click.echo(
            f"rejects: {st.rejects} ({st.rejected_inputs} refused inputs in "
            f"{Path(st.path).parent / 'rejects'}, {st.rejected_lines} lines in "
            f"{Path(st.path) / 'rejects.jsonl'}); list them: hookaudit spool rejects"
        )


@spool.command("rejects")
@data_dir_option
@format_option("text", "jsonl", help="jsonl: one JSON object a reject.")
def spool_rejects(data_dir: Path | None, fmt: str) -> None:
    """List every refused input kept on this machine, oldest first.

    Refused input (too large, too deep, duplicate keys, wrong field types, not UTF-8,
    undecodable on the wire) is kept under <data-dir>/rejects/ (its first 8 MiB, with
    its full size and sha256) and recorded in the log (the `rejects` query view);
    events the server could never take are lines of <data-dir>/spool/rejects.jsonl.

    \b
    Example:
      hookaudit spool rejects --format jsonl | head -3
    """
    import json

    from ingest.protocol import default_data_dir
    from ingest.rejects import listing
    from ingest.spool.store import Spool

    root = data_dir or default_data_dir()
    rows: list[dict[str, object]] = [
        {k: getattr(r, k) for k in ("ts", "stage", "reason", "size", "sha256", "kept", "path")}
        for r in listing(root)
    ]
    rows += Spool(root).rejected_lines()
    for row in rows:
        if fmt == "jsonl":
            click.echo(json.dumps(row))
        else:
            click.echo(
                f"{row['ts']}  {row['stage']:<6}  {row['size']:>10} B  "
                f"sha256:{str(row['sha256'])[:16]}  {row['reason']}  ({row['path']})"
            )
    if fmt == "text":
        click.echo(f"{len(rows)} rejects", err=True)
