"""`hookaudit eval`: evaluate one hook event against settings and print the decision."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import click

from engine.errors import HookauditError, InvalidEvent
from engine.records import POSTURES, PROFILES, HookRun
from hookaudit.lint_cmd import refuse_unless_clean, strict_option
from hookaudit.options import format_option

__all__ = ["eval_cmd", "evaluation_json"]


def _hook_json(run: HookRun) -> dict[str, Any]:
    h = run.hook
    out: dict[str, Any] = {"type": h.type, "source": h.source, "matcher": h.matcher}
    for key in ("command", "args", "url", "prompt", "callable", "server", "tool"):
        value = getattr(h, key)
        if value is not None:
            out[key] = value
    if h.if_ is not None:
        out["if"] = h.if_
    out.update(
        outcome=run.outcome,
        decision=run.decision,
        exit_code=run.exit_code,
        duration_ms=round(run.duration_ms, 3),
        error_kind=run.error_kind,
        message=run.message,
        stdout=run.stdout,
        stderr=run.stderr,
        output=run.output,
        pending=run.pending,
    )
    return out


def evaluation_json(outcome: Any) -> dict[str, Any]:
    """The `--format json` object of an Outcome (documented in the README)."""
    return {
        "event": outcome.event.event,
        "blocked": outcome.blocked,
        "decision": outcome.decision,
        "reason": outcome.reason,
        "updated_input": outcome.updated_input,
        "additional_context": list(outcome.additional_context),
        "system_messages": list(outcome.system_messages),
        "continue": outcome.continue_,
        "stop_reason": outcome.stop_reason,
        "specific": outcome.specific,
        "posture": outcome.posture,
        "profile": outcome.profile,
        "settings_id": outcome.settings_id,
        "hooks": [_hook_json(r) for r in outcome.runs],
        "errors": list(outcome.errors),
        "rules": list(outcome.rules),
    }


def _fail(message: str) -> None:
    click.echo(f"hookaudit eval: {message}", err=True)
    sys.exit(1)


@click.command("eval")
@click.option(
    "--settings",
    "settings_specs",
    multiple=True,
    metavar="[SCOPE:]PATH",
    help="A settings file; SCOPE is managed|user|project|local|flag|plugin|skill (default project). "
    "Repeat to combine with Claude Code's precedence. Without any, settings are discovered "
    "from the event's cwd as Claude Code would.",
)
@click.option(
    "--event",
    "event_path",
    default="-",
    show_default=True,
    metavar="PATH|-",
    help="The hook input JSON (a file, or - for stdin).",
)
@click.option(
    "--posture",
    type=click.Choice(POSTURES),
    default=None,
    help="compat: hook errors never block (Claude Code). enforcing: at PreToolUse an "
    "error, timeout or unknown hook type denies. Default: per event from settings "
    "(hookauditPosture), else compat.",
)
@click.option(
    "--profile",
    type=click.Choice(PROFILES),
    default="current",
    show_default=True,
    help="Claude Code behaviour to reproduce (legacy = v2.1.88).",
)
@format_option(
    "json",
    "claude",
    "table",
    help="claude: print and exit exactly as one Claude Code command "
    "hook expressing the whole decision.",
)
@click.option(
    "--lenient",
    is_flag=True,
    help="Skip malformed hook entries with a warning, as Claude Code does, instead of failing.",
)
@click.option(
    "--mcp-config",
    "mcp_configs",
    multiple=True,
    type=click.Path(dir_okay=False),
    help="MCP server configuration (.mcp.json) for mcp_tool hooks; repeatable. "
    "Default: the project root's .mcp.json when there is one.",
)
@click.option(
    "--wait-async",
    is_flag=True,
    help="Wait for background (async) hooks and report their late results.",
)
@strict_option
def eval_cmd(
    settings_specs: tuple[str, ...],
    event_path: str,
    posture: str | None,
    profile: str,
    fmt: str,
    lenient: bool,
    mcp_configs: tuple[str, ...],
    wait_async: bool,
    strict: bool,
) -> None:
    """Run the engine once on one event and print the decision.

    Exit status: 0 when the event was evaluated (whatever the decision; with
    --format claude, the exit code a Claude Code hook would use), 1 on bad input,
    2 on usage errors. With --format claude it is a hook that fails closed in every
    posture: bad input (too large, nested deeper than 64, duplicate keys, wrong field
    types, not UTF-8), settings it refuses or any internal error exit 2 with the reason
    on stderr, which blocks (exit 1 would let the call run, whatever the policy says).
    The posture decides only what a hook's own error means.

    \b
    Example:
      echo '{"hook_event_name":"PreToolUse","tool_name":"Bash",
             "tool_input":{"command":"rm -rf /"},"cwd":"/tmp","session_id":"s"}' |
        hookaudit eval --settings project:infra/policies/security.json --format json
    """
    from engine.failclosed import closed_answer, exit_now, guard_process, one_line

    # With --format claude this process stands in for the hooks of a Claude Code session:
    # whatever goes wrong before a decision (bad input, settings it refuses, a bug, an
    # exception at exit) it exits 2 with the reason on stderr, which blocks; never exit 1,
    # which would let a call run that the policy may deny. This holds in every posture: the
    # posture says what a *hook's* error means, and here no hook has run.
    closed = fmt == "claude"
    guard_process("hookaudit eval", closed=closed)
    try:
        _eval(
            settings_specs,
            event_path,
            posture,
            profile,
            fmt,
            lenient,
            mcp_configs,
            wait_async,
            strict,
        )
    except SystemExit as exc:
        if closed and exc.code not in (0, None):  # e.g. --strict refusing the settings
            exit_now(*closed_answer(f"exit {exc.code} without a decision", "hookaudit eval"))
        raise
    except HookauditError as exc:
        if closed:
            exit_now(*closed_answer(str(exc), "hookaudit eval"))
        _fail(str(exc))
    except BaseException as exc:
        if closed:
            exit_now(*closed_answer(f"internal error: {one_line(exc)}", "hookaudit eval"))
        _fail(f"internal error: {one_line(exc)}")


def _eval(
    settings_specs: tuple[str, ...],
    event_path: str,
    posture: str | None,
    profile: str,
    fmt: str,
    lenient: bool,
    mcp_configs: tuple[str, ...],
    wait_async: bool,
    strict: bool,
) -> None:
    from engine.records import new_event
    from engine.run import Engine, parse_payload
    from engine.sources import discover, load_sources, parse_scoped

    raw, where = _read_event(event_path)
    payload = parse_payload(raw, where)
    cwd = payload.get("cwd") if isinstance(payload.get("cwd"), str) else str(Path.cwd())
    project_dir = _project_dir(str(cwd))
    specs = [parse_scoped(s) for s in settings_specs] or discover(project_dir or str(cwd))
    if strict:
        refuse_unless_clean("eval", [f"{scope}:{path}" for scope, path in specs])
    eff = load_sources(specs, strict=not lenient, project_dir=project_dir)
    for w in eff.warnings:
        click.echo(f"hookaudit eval: warning: {w}", err=True)
    event = new_event(payload, raw=raw.decode("utf-8"), source="eval")
    engine = Engine(
        _mcp_executors(mcp_configs, project_dir),
        profile=profile,  # type: ignore[arg-type]
        posture=posture,  # type: ignore[arg-type]
    )
    outcome = asyncio.run(_evaluate(engine, event, eff, wait_async, payload))
    if fmt == "json":
        doc = evaluation_json(outcome)
        if wait_async:
            doc["async_results"] = _LATE
        elif any(r.pending for r in outcome.runs):
            doc["async_pending"] = sum(1 for r in outcome.runs if r.pending)
        click.echo(json.dumps(doc, indent=2, ensure_ascii=False))
    elif fmt == "table":
        _print_table(outcome)
    else:
        from engine.claude_output import express_outcome
        from engine.failclosed import exit_now

        out, err, code, _ = express_outcome(outcome)
        exit_now(out, err, code)  # no interpreter teardown after the answer


def _project_dir(cwd: str) -> str | None:
    """The session's project: ``$CLAUDE_PROJECT_DIR`` when Claude Code runs this as a hook
    (it names the directory the session started in, whatever the hook input's `cwd` is
    after a `cd`), else the nearest ancestor of `cwd` with ``.claude/settings*.json``."""
    import os

    from engine.sources import find_project_root

    given = os.environ.get("CLAUDE_PROJECT_DIR", "")
    if given and os.path.isabs(given) and os.path.isdir(given):
        return given
    return find_project_root(cwd)


def _read_event(event_path: str) -> tuple[bytes, str]:
    """The hook input, read up to the parser's limit: a larger one is refused with its size
    without being held in memory (stdin is read to its end, so the writer is not stalled)."""
    from engine.payload import MAX_EVENT_BYTES

    if event_path == "-":
        where, stream = "<stdin>", sys.stdin.buffer
    else:
        where = event_path
        try:
            stream = open(event_path, "rb")  # noqa: SIM115  # closed below
        except OSError as exc:
            raise InvalidEvent(where, f"cannot read: {exc.strerror or exc}") from exc
    try:
        raw = stream.read(MAX_EVENT_BYTES + 1)
        if len(raw) > MAX_EVENT_BYTES:
            size = len(raw)
            while chunk := stream.read(1 << 20):
                size += len(chunk)
            raise InvalidEvent(
                where, f"event of {size} bytes exceeds the limit of {MAX_EVENT_BYTES} bytes"
            )
    except OSError as exc:
        raise InvalidEvent(where, f"cannot read: {exc.strerror or exc}") from exc
    finally:
        if stream is not sys.stdin.buffer:
            stream.close()
    return raw, where


def _mcp_executors(configs: tuple[str, ...], project_root: str | None) -> dict[str, Any]:
    """An mcp_tool executor over the given (or the project's) .mcp.json, if any."""
    paths = list(configs)
    if not paths and project_root and (Path(project_root) / ".mcp.json").is_file():
        paths = [str(Path(project_root) / ".mcp.json")]
    if not paths:
        return {}
    from engine.executors.mcp import McpExecutor, load_mcp_config

    return {"mcp_tool": McpExecutor(load_mcp_config(paths))}


async def _evaluate(engine: Any, event: Any, eff: Any, wait_async: bool, payload: Any) -> Any:
    try:
        started = engine.start(event, eff, payload=payload)
        outcome = started if not asyncio.iscoroutine(started) else await started
        if wait_async and any(r.pending for r in outcome.runs):
            late = await engine.executors["command"].registry.drain(timeout=None)
            _LATE.extend(_late_json(inv, raw) for inv, raw in late)
        return outcome
    finally:
        await engine.aclose()


_LATE: list[dict[str, Any]] = []


def _late_json(inv: Any, raw: Any) -> dict[str, Any]:
    """A background hook's late result, decoded as Claude Code would deliver it."""
    from engine.verdict import decode

    v = decode(inv, msgspec_replace(raw), profile="current")
    return {
        "hook": inv.identity.command,
        "outcome": v.outcome,
        "exit_code": raw.exit_code,
        "error_kind": raw.error_kind or v.error_kind,
        "additional_context": list(v.additional_context),
        "system_message": v.system_message,
        "specific": v.specific,
        "stdout": raw.stdout,
        "stderr": raw.stderr,
    }


def msgspec_replace(raw: Any) -> Any:
    import msgspec

    return msgspec.structs.replace(raw, pending=False)


def _print_table(outcome: Any) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    verdict = "BLOCKED" if outcome.blocked else "not blocked"
    console.print(
        f"[bold]{outcome.event.event}[/bold]: {verdict}; decision={outcome.decision} "
        f"continue={outcome.continue_}"
    )
    if outcome.reason:
        console.print(f"reason: {outcome.reason}")
    table = Table("#", "type", "source", "matcher", "hook", "outcome", "exit", "ms", "error")
    for i, r in enumerate(outcome.runs):
        h = r.hook
        what = h.command or h.url or h.prompt or h.callable or ""
        table.add_row(
            str(i),
            h.type,
            h.source,
            h.matcher or "",
            what[:60],
            r.outcome,
            "" if r.exit_code is None else str(r.exit_code),
            f"{r.duration_ms:.1f}",
            r.error_kind or "",
        )
    console.print(table)
    for e in outcome.errors:
        console.print(f"[yellow]error:[/yellow] {e}")
