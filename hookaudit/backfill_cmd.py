"""`hookaudit backfill`: publish what agents' session files show (Claude Code transcripts,
Codex rollouts, Gemini CLI and Qwen Code chats) as backfilled hook events.

Rules of this file:
- Reading and shaping are `ingest.backfill`'s; this file publishes, with the emitter's
  credentials and `emit`'s Publisher, each event without a reply subject (nobody waits:
  the worker records it as `observed`).
- A file that cannot be read is one line on stderr and exit 1 after the others are done;
  nothing already published is taken back (ids are stable: run it again).
"""

from __future__ import annotations

import asyncio
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import click

from hookaudit.emit_cmd import _target_options, existing_target

__all__ = ["backfill_cmd"]


@click.command("backfill")
@_target_options
@click.argument("paths", nargs=-1, type=click.Path(path_type=Path))
@click.option("--since", default=None, metavar="TIME",
              help="Only calls at or after TIME (7d, 12h, 2026-03-01).")  # fmt: skip
@click.option("--dry-run", is_flag=True, help="List the calls found; publish nothing.")
def backfill_cmd(paths: tuple[Path, ...], since: str | None, dry_run: bool, **kw: Any) -> None:
    """Publish what agents' transcripts show as hook events: tool calls, prompts, results.

    Each tool call in a transcript (PATH: a .jsonl file or a directory of them; default
    ~/.claude/projects, ~/.codex/sessions, ~/.gemini/tmp and ~/.qwen/projects: Claude Code's
    transcripts, Codex CLI's rollouts, Gemini CLI's and Qwen Code's chat files, each told
    by its content) becomes the PreToolUse input that agent would have sent (and a Claude
    Code transcript's prompts and tool results their UserPromptSubmit and PostToolUse), with
    source "backfill", an id derived from its session and tool_use id (a second run adds
    nothing), and whether the transcript shows it ran. Nobody waits for these: the worker
    records the policy's verdict as observed. `hookaudit query unchecked` then lists the
    calls that ran with no live decision (an unreachable serve, a hook that could not
    start or timed out: Claude Code lets the call run).

    \b
    Example:
      hookaudit backfill ~/.claude/projects --since 7d
      hookaudit query unchecked
    """
    from engine.errors import HookauditError
    from ingest.backfill import Scan, scan_path, transcripts
    from ingest.backfill_agents import AgentCall, scan_agent_file
    from queries.catalog import QueryError, parse_time

    home = Path.home()
    roots = list(paths) or [
        p
        for p in (home / ".claude" / "projects", home / ".codex" / "sessions",
                  home / ".gemini" / "tmp", home / ".qwen" / "projects")
        if p.is_dir()
    ]  # fmt: skip
    try:
        cutoff: datetime | None = parse_time(since) if since else None
    except QueryError as e:
        raise click.BadParameter(str(e), param_hint="--since") from None
    # a mistyped --data-dir is an error before the scan, not an empty history after it
    target = None if dry_run else existing_target(kw, "hookaudit backfill")
    scan, failed = Scan(), 0
    files = 0
    from hookaudit.progress import Bar

    agent_calls: list[AgentCall] = []
    found = list(transcripts(roots))
    with Bar("reading", total=len(found), unit="files") as bar:
        for f in found:
            try:
                if scan_agent_file(f, scan, agent_calls) is None:
                    scan_path(f, scan)
                files += 1
            except OSError as e:
                click.echo(f"hookaudit backfill: {f}: {e.strerror or e}", err=True)
                failed += 1
            bar.advance()
    everything: list[Any] = [*scan.calls, *agent_calls]
    calls = [c for c in everything if cutoff is None or c.ts >= cutoff]
    others = [e for e in scan.events if cutoff is None or e.ts >= cutoff]
    summary = (
        f"{files} transcript(s), {scan.lines} lines ({scan.skipped} passed over), "
        f"{len(calls)} tool call(s): {sum(c.ran is True for c in calls)} ran, "
        f"{sum(c.ran is False for c in calls)} refused, {sum(c.ran is None for c in calls)} "
        f"without a result; {len(others)} other event(s) (session starts and ends, prompts, tool results, stops)"
    )
    if dry_run:
        for c in calls:
            ran = {True: "ran", False: "refused", None: "-"}[c.ran]
            agent = getattr(c, "agent", "claude_code")
            click.echo(
                f"{c.ts.isoformat()}  {agent}  {c.session_id}  {c.tool_use_id}  {c.tool_name}  {ran}"
            )
        click.echo(summary, err=True)
        sys.exit(1 if failed else 0)
    try:
        events = [c.event() for c in calls] + [e.event() for e in others]
        sent, dup, refused = asyncio.run(_publish(target, events))
    except HookauditError as e:
        click.echo(f"hookaudit backfill: {e}", err=True)
        sys.exit(1)
    click.echo(f"{summary}; published {sent} ({dup} already there), refused {refused}", err=True)
    sys.exit(1 if failed or refused else 0)


async def _publish(target: Any, events: list[Any]) -> tuple[int, int, int]:
    from hookaudit.progress import Bar
    from ingest.emit.publish import Publisher, connect, quiet_nats_logs

    quiet_nats_logs()
    nc = await connect(target)
    try:
        publish = Publisher(nc, target)
        sent = dup = refused = 0
        with Bar("publishing", total=len(events), unit="events") as bar:
            for ev in events:
                r = await publish(ev)
                if r.rejected:
                    click.echo(f"hookaudit backfill: {ev.tool_use_id}: {r.rejected}", err=True)
                    refused += 1
                elif r.duplicate:
                    dup += 1
                else:
                    sent += 1
                bar.advance()
        return sent, dup, refused
    finally:
        await nc.close()
