"""`hookaudit detect`: Sigma rules over the history (and, with --follow, what comes next)."""

from __future__ import annotations

import json
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import click

from hookaudit.options import data_dir_option, default_data_dir, fail

__all__ = ["detect_cmd"]


def _load(rules_dir: Path) -> list[Any]:
    from queries.sigma import RuleError, load_rules

    files = sorted(p for p in rules_dir.rglob("*") if p.suffix in (".yml", ".yaml"))
    if not files:
        fail(f"{rules_dir}: no Sigma rules (*.yml, *.yaml)")
    rules = []
    for f in files:
        try:
            rules += load_rules(f.read_text(encoding="utf-8"), str(f))
        except (RuleError, OSError, UnicodeDecodeError) as e:
            fail(str(e) if isinstance(e, RuleError) else f"{f}: {e}")
    return rules


def _row(rule: Any, o: Any, ev: dict[str, Any]) -> dict[str, Any]:
    what = ev.get("CommandLine") or ev.get("TargetFilename") or ev.get("c-uri") or ""
    return {
        "time": o.event.ts.isoformat(),
        "rule": rule.title,
        "level": rule.level,
        "rule_id": rule.id,
        "event_id": o.event.id,
        "session_id": o.event.session_id,
        "user": o.event.user,
        "host": o.event.host,
        "tool": o.event.tool_name,
        "decision": o.decision or "none",
        "what": str(what)[:200],
    }


@click.command("detect")
@data_dir_option
@click.option(
    "--rules",
    "rules_dir",
    required=True,
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    help="A directory of Sigma rules (product: claude_code), e.g. infra/sigma.",
)
@click.option("--since", default=None, help="Only events at or after: 7d, 12h, or ISO-8601.")
@click.option("--follow", is_flag=True, help="Keep reading the log for new events (until ^C).")
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["table", "json", "jsonl"]),
    default="table",
    show_default=True,
)
def detect_cmd(
    data_dir: Path | None, rules_dir: Path, since: str | None, follow: bool, fmt: str
) -> None:
    """Run Sigma rules over the history; print one row per (rule, event) that matches.

    The log source mapping (fields, categories) is in queries/sigma.py and the README.

    \b
    Example:
      hookaudit detect --data-dir ./data --rules infra/sigma --since 7d
    """
    from ingest.log import iter_outcomes
    from queries.catalog import QueryError, parse_time
    from queries.sigma import event_fields, matches

    d = data_dir or default_data_dir()
    rules = _load(rules_dir)
    try:
        start: datetime | None = parse_time(since) if since else None
    except QueryError as e:
        raise click.UsageError(f"--since: {e}") from e
    seen: set[tuple[str, str]] = set()
    rows: list[dict[str, Any]] = []

    def scan() -> None:
        for o in iter_outcomes(d):
            if o.replay_id is not None or (start is not None and o.event.ts < start):
                continue
            key = (o.event.id, o.settings_id)
            if key in seen:
                continue
            seen.add(key)
            ev = event_fields(o)
            for r in rules:
                if matches(r, ev):
                    row = _row(r, o, ev)
                    if follow or fmt == "jsonl":  # streamed (--follow with json is jsonl)
                        click.echo(json.dumps(row) if fmt != "table" else _line(row))
                        sys.stdout.flush()
                    else:
                        rows.append(row)

    scan()
    if follow:
        try:
            while True:
                time.sleep(2.0)
                scan()
        except KeyboardInterrupt:
            return
    if fmt == "json":
        click.echo(json.dumps(rows, indent=2))
    elif fmt == "table":
        for row in rows:
            click.echo(_line(row))
        click.echo(f"{len(rows)} match(es), {len(rules)} rule(s), {len(seen)} event(s)", err=True)


def _line(row: dict[str, Any]) -> str:
    return (
        f"{row['time'][:19]}  {row['level']:<8} {row['rule'][:40]:<40} {row['tool'] or '-':<10}"
        f" {row['decision']:<6} {row['what']}"
    )
