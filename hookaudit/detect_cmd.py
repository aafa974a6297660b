"""`hookaudit detect`: Sigma rules over the history (and, with --follow, what comes next).

The rules run as SQL through the DuckDB backend (`queries.sigma_duckdb`) over the log's
`outcomes` view; `--follow` asks again every `--interval` seconds for what lies past the
log positions already read (worker -> last seq), never rescanning what it has matched.
Correlation rules (`queries.sigma_correlation_duckdb`) are evaluated over the whole history
on the first turn; on a later one, every window that ends at or after the earliest new
event is evaluated again (its events read from a timespan before that), and a window
(correlation, anchor event, group) already reported is not reported again.
Matches print as a table (or JSON) or go, as OCSF Detection Findings, to any SIEM target.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import math
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import click

from hookaudit.options import data_dir_option, default_data_dir, fail, format_option

__all__ = ["detect_cmd"]

_SEVERITY = {"informational": 1, "low": 3, "medium": 5, "high": 7, "critical": 9}


def _finite(v: float) -> float:
    if not math.isfinite(v):
        raise click.BadParameter(f"{v} is not a number of seconds")
    return v


def _load(rules_dir: Path) -> tuple[Any, list[str]]:
    """The rules that can run, one line on stderr for each file or rule that cannot."""
    from queries.sigma import RuleError
    from queries.sigma_files import load_dir

    try:
        rs, refused = load_dir(rules_dir)
    except RuleError as e:
        fail(str(e))
    for line in refused:
        click.echo(f"hookaudit detect: {line}", err=True)
    if not rs.rules and not rs.correlations:
        fail(f"{rules_dir}: no rule that can run ({len(refused)} refused)")
    return rs, refused


def _row(m: Any) -> dict[str, Any]:
    row = {
        "time": m.ts.isoformat(),
        "rule": m.rule.title,
        "level": m.rule.level,
        "rule_id": m.rule.id,
        "event_id": m.id,
        "session_id": m.session_id,
        "user": m.user,
        "host": m.host,
        "tool": m.tool,
        "decision": m.decision,
        "what": str(m.what)[:200],
        "agent": getattr(m, "agent", "claude_code"),
    }
    if hasattr(m, "events"):  # a correlation: its window
        row |= {
            "correlation": m.rule.kind,
            "count": m.count,
            "group": dict(m.group),
            "first": m.first.isoformat(),
            "events": list(m.events),
        }
    return row


def _record(m: Any, fmt: str) -> Any:
    """A match as a record a SIEM sink sends: an OCSF Detection Finding, or the JSON row."""
    from ingest.siem.formats import Formatted
    from ingest.siem.ocsf import sigma_finding

    ms = int(m.ts.timestamp() * 1000)
    if fmt == "ocsf":
        doc = sigma_finding(
            rule_title=m.rule.title,
            rule_id=m.rule.id,
            level=m.rule.level,
            event_id=m.id,
            time_ms=ms,
            user=m.user,
            host=m.host,
            session_id=m.session_id,
            tool=m.tool,
            decision=m.decision,
            what=m.what,
            agent=getattr(m, "agent", "claude_code"),
        )
        if hasattr(m, "events"):
            _window(doc, m)
        uid = doc["metadata"]["uid"]
    else:
        doc = _row(m)
        uid = f"{m.rule.id or m.rule.title}.{m.id}"
    return Formatted(
        uid=uid,
        event_id=m.id,
        seq=m.seq,
        time_ms=ms,
        severity=_SEVERITY.get(m.rule.level, 5),
        event="SigmaMatch",
        host=m.host,
        text=json.dumps(doc, ensure_ascii=False),
        doc=doc,
        sourcetype=f"hookaudit:detect:{fmt}",
    )


def _window(doc: dict[str, Any], m: Any) -> None:
    """A correlation's finding: the window's events and times, the group, the count."""
    c = m.rule
    if len(set(c.fields)) > 1:  # aliases: one anchor may stand in two groups
        digest = hashlib.sha256(json.dumps(m.group).encode()).hexdigest()[:12]
        doc["metadata"]["uid"] = doc["finding_info"]["uid"] = f"{doc['metadata']['uid']}.{digest}"
    info = doc["finding_info"]
    info["related_events"] = [{"uid": e} for e in m.events[:100]]
    info["first_seen_time"] = int(m.first.timestamp() * 1000)
    info["last_seen_time"] = int(m.ts.timestamp() * 1000)
    info["desc"] = f"{c.kind}: {m.what}"
    doc["count"] = m.count
    doc["unmapped"]["correlation"] = {
        "type": c.kind,
        "timespan": c.timespan,
        "condition": {c.op: c.count},
        "count": m.count,
        "group": dict(m.group),
        "events": len(m.events),
    }


async def _send(sink: Any, records: list[Any], max_backoff: float = 10.0) -> int:
    """Send until the sink accepted or parked every record; returns how many it parked."""
    from ingest.siem.sink import SinkDown

    async def alive() -> None:
        return None

    todo, parked, backoff = list(records), 0, 0.5
    while todo:
        try:
            d = await sink.send(todo, alive)
        except SinkDown as e:
            click.echo(f"hookaudit detect: {e}; again in {backoff:g} s", err=True)
        else:
            for i, why in d.parked:
                click.echo(f"hookaudit detect: {sink.name} refused {todo[i].uid}: {why}", err=True)
            parked += len(d.parked)
            todo = [todo[i] for i in sorted(set(d.retry) - {i for i, _ in d.parked})]
            if not todo:
                break
        await asyncio.sleep(backoff)
        backoff = min(backoff * 2, max_backoff)
    return parked


@click.command("detect")
@data_dir_option
@click.option(
    "--rules",
    "rules_dir",
    required=True,
    type=click.Path(file_okay=False, exists=True, path_type=Path),
    help="A directory of Sigma rules (product: coding_agent for every agent, or one agent), e.g. infra/sigma.",
)
@click.option("--since", default=None, help="Only events at or after: 7d, 12h, or ISO-8601.")
@click.option(
    "--follow",
    is_flag=True,
    help="Keep reading the log for new events (until ^C); each turn reads only what lies "
    "past the log positions already read, and evaluates again the correlation windows that "
    "end at or after the earliest new event (each window is reported once).",
)
@click.option(
    "--interval",
    type=click.FloatRange(0.1, 3600),
    default=2.0,
    show_default=True,
    callback=lambda ctx, param, v: _finite(v),
    help="Seconds between two turns of --follow.",
)
@format_option(
    "table",
    "json",
    "jsonl",
    "ocsf",
    help="table/json/jsonl rows, or ocsf: one OCSF Detection Finding (2004) a line. "
    "With --to: ocsf (the default there) or json.",
)
@click.option(
    "--to",
    default=None,
    metavar="URL",
    help="Send the matches to a SIEM target, as `hookaudit siem --to` takes "
    "(syslog+tcp://, hec+https://, elastic+https://, https://, file://, -).",
)
@click.option(
    "--token",
    envvar="HOOKAUDIT_SIEM_TOKEN",
    default=None,
    help="HEC token / Elastic API key / webhook bearer (env HOOKAUDIT_SIEM_TOKEN).",
)
@click.option(
    "--tls-ca", type=click.Path(dir_okay=False, exists=True), default=None, help="CA of the SIEM."
)
@click.option(
    "--tls-cert", type=click.Path(dir_okay=False, exists=True), default=None, help="Client cert."
)
@click.option(
    "--tls-key", type=click.Path(dir_okay=False, exists=True), default=None, help="Its key."
)
def detect_cmd(
    data_dir: Path | None,
    rules_dir: Path,
    since: str | None,
    follow: bool,
    interval: float,
    fmt: str,
    to: str | None,
    token: str | None,
    tls_ca: str | None,
    tls_cert: str | None,
    tls_key: str | None,
) -> None:
    """Run Sigma rules over the history; print one row per (rule, event) that matches.

    The rules run in DuckDB over the log; the log source mapping (products, categories,
    fields) is in the docs' Sigma log sources reference.

    \b
    Examples:
      hookaudit detect --data-dir ./data --rules infra/sigma --since 7d
      hookaudit detect --rules infra/sigma --follow --to hec+https://splunk:8088 --token $T
    """
    from ingest.siem.targets import TlsFiles, parse_target
    from queries.catalog import QueryError, parse_time
    from queries.db import open_db
    from queries.sigma_correlation_duckdb import detect_correlations
    from queries.sigma_duckdb import detect_history

    d = data_dir or default_data_dir()
    rs, refused = _load(rules_dir)
    try:
        start: datetime | None = parse_time(since) if since else None
    except QueryError as e:
        raise click.UsageError(f"--since: {e}") from e
    sink: Any = None
    if to is not None:
        if fmt == "table":
            fmt = "ocsf"
        if fmt not in ("ocsf", "json"):
            raise click.UsageError("--format with --to: ocsf or json")
        try:
            sink = parse_target(to, tls=TlsFiles(tls_ca, tls_cert, tls_key), token=token)
        except ValueError as e:
            raise click.UsageError(str(e)) from e
    positions: dict[str, int] = {}
    fired: set[tuple[int, str, tuple[tuple[str, str], ...]]] = set()
    rows: list[dict[str, Any]] = []
    count = 0

    def turn() -> list[Any]:
        nonlocal positions
        first = not positions
        try:
            con = open_db(d)
            try:
                from hookaudit.progress import Bar

                with Bar("rules", total=len(rs.rules) if first else 0, unit="rules") as bar:
                    matches, positions = detect_history(
                        con, rs.rules, since=start, after=positions, on_rule=bar.advance
                    )
                if rs.correlations:
                    matches += correlations(con, first)
            finally:
                con.close()
        except QueryError as e:
            fail(str(e))
        matches.sort(key=lambda m: (m.ts, m.worker, m.seq))
        return matches

    def correlations(con: Any, first: bool) -> list[Any]:
        """The windows that hold and were not reported yet: over what detect_history read
        on the first turn; later, re-evaluating every window that ends at or after the
        earliest new event (a late event can complete a window already looked at)."""
        if first:
            found = detect_correlations(con, rs.correlations, table="sigma_events")
        else:
            (new_from,) = con.execute("SELECT min(ts) FROM sigma_events").fetchone()
            if new_from is None:
                return []
            found = detect_correlations(con, rs.correlations, since=start, new_from=new_from)
        out = []
        for m in found:
            key = (rs.correlations.index(m.rule), m.id, m.group)
            if key not in fired:
                fired.add(key)
                out.append(m)
        return out

    header_said = False

    def emit(matches: list[Any], runner: asyncio.Runner | None) -> None:
        nonlocal count, header_said
        count += len(matches)
        if sink is not None and runner is not None:
            if matches:
                parked = runner.run(_send(sink, [_record(m, fmt) for m in matches]))
                click.echo(
                    f"{len(matches) - parked} match(es) sent to {sink.name}"
                    + (f", {parked} refused" if parked else ""),
                    err=True,
                )
            return
        for m in matches:
            if fmt == "ocsf":
                click.echo(_record(m, "ocsf").text)
            elif follow or fmt == "jsonl":  # streamed (--follow with json is jsonl)
                if fmt == "table" and not header_said:
                    click.echo("\t".join(_TABLE))
                    header_said = True
                click.echo(json.dumps(_row(m)) if fmt != "table" else _line(_row(m)))
            else:
                rows.append(_row(m))
        sys.stdout.flush()

    with asyncio.Runner() as runner:
        try:
            emit(turn(), runner)
            while follow:
                time.sleep(interval)
                emit(turn(), runner)
        except KeyboardInterrupt:
            return
        finally:
            if sink is not None:
                runner.run(sink.close())
    if fmt == "json" and sink is None:
        click.echo(json.dumps(rows, indent=2))
    elif fmt == "table" and sink is None and rows:
        from queries.output import write_result

        write_result(_Matches(rows), "table", None, max_rows=len(rows))
    n = len(rs.rules) + len(rs.correlations)
    skipped = f", {len(refused)} refused (named above)" if refused else ""
    click.echo(f"{count} match(es), {n} rule(s){skipped}", err=True)
    if refused:
        sys.exit(1)  # the others ran; a gate must still see that some could not


#: The columns of the table (and of `--follow`'s lines): time (with its zone), level, rule,
#: who and where, the tool, the decision, what matched.
_TABLE = ("time", "level", "rule", "user", "host", "tool", "decision", "what")


def _line(row: dict[str, Any]) -> str:
    """One match as one tab-separated line (`--follow`): the table's columns."""
    return "\t".join(str(row.get(c) or "-") for c in _TABLE)


class _Matches:
    """Matches as a result for the shared table writer (a header, nothing cut)."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.columns = [(c, "VARCHAR") for c in _TABLE]
        self.rows = [tuple(r.get(c) or "" for c in _TABLE) for r in rows]

    def batches(self, size: int = 10_000) -> Any:
        yield self.rows

    def arrow(self) -> Any:
        import pyarrow as pa

        return pa.table({c: [r[i] for r in self.rows] for i, c in enumerate(_TABLE)})
