"""`hookaudit demo`: the pipeline, a DuckDB query and a replay, in one command.

The CLI layer composes the packages here (ingest runs the pipeline; queries and
replay read what it logged), so no package has to import a sibling it should not.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import click

from engine.errors import HookauditError
from hookaudit.options import format_option
from ingest.private import UnsafeDataDir, check_data_dir, make_private

__all__ = ["demo_cmd"]

_TOP_DENIED = """
SELECT coalesce(tool_name, event) AS what, count(*) AS n
FROM outcomes WHERE decision = 'deny' GROUP BY 1 ORDER BY n DESC, what LIMIT 5
"""


def _query(data_dir: Path) -> list[tuple[Any, ...]]:
    from queries.db import open_db

    con = open_db(data_dir)
    try:
        return [tuple(r) for r in con.sql(_TOP_DENIED).fetchall()]
    finally:
        con.close()


def _replay(data_dir: Path, strict: Path) -> dict[str, Any]:
    from engine.records import uuid7
    from replay.jobs import replay
    from replay.request import Request

    req = Request(data_dir=str(data_dir), candidate=(("project", str(strict)),), replay_id=uuid7())
    return replay(req).report


def _check_data_dir(data_dir: Path, live_reason: Any) -> None:
    """Refuse a data dir in use (one line, exit 1); create a new one."""
    if data_dir.exists() and not data_dir.is_dir():
        _fail(f"--data-dir {data_dir}: not a directory")
    try:
        check_data_dir(data_dir)
    except UnsafeDataDir as exc:
        _fail(str(exc))
    if data_dir.is_dir():
        why = live_reason(data_dir)
        if why is not None:
            _fail(
                f"--data-dir {data_dir}: {why}; the demo would mix synthetic sessions into it "
                "(give a new or empty directory)"
            )
    try:
        make_private(data_dir)
        probe = data_dir / ".hookaudit-demo-probe"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        _fail(f"--data-dir {data_dir}: cannot write there: {exc.strerror or exc}")


def _expected_events(n_sessions: int, seed: int) -> int:
    """How many events the sample sessions hold (the progress total; denials cut a few)."""
    from ingest.samples import sessions

    return sum(1 for _ in sessions(n_sessions, seed=seed))


def _fail(message: str) -> None:
    click.echo(f"hookaudit demo: {message}", err=True)
    sys.exit(1)


def _me() -> str:
    """How to run this hookaudit again from here: a path when it is not on PATH."""
    import os
    import shutil

    argv0 = sys.argv[0] if sys.argv and sys.argv[0] else "hookaudit"
    if os.path.basename(argv0) in ("__main__.py", "-c", "-m"):
        return f"{sys.executable} -m hookaudit"
    found = shutil.which("hookaudit")
    real = os.path.realpath(argv0) if os.sep in argv0 else (found or argv0)
    if found and os.path.realpath(found) == os.path.realpath(real):
        return "hookaudit"
    rel = os.path.relpath(real)
    return rel if not rel.startswith("..") else real


@click.command("demo")
@click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where to keep the demo's NATS store and log (default: a new temp dir, "
    "kept afterwards so you can query it).",
)
@click.option(
    "--sessions",
    "n_sessions",
    type=int,
    default=30,
    show_default=True,
    help="How many agent sessions to play.",
)
@click.option("--seed", type=int, default=7, show_default=True)
@click.option(
    "--policy",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Settings file to enforce (default infra/policies/security.json).",
)
@format_option("text", "json")
def demo_cmd(
    data_dir: Path | None, n_sessions: int, seed: int, policy: Path | None, fmt: str
) -> None:
    """Run everything once: embedded NATS, a worker, sample sessions, a query, a replay.

    Starts an embedded nats-server and a worker enforcing the example policy, plays
    realistic agent sessions through it (each PreToolUse waits for its decision), verifies
    the hash-chained log, asks DuckDB for the top denials, replays the history against the
    stricter infra/policies/strict.json, prints a report and stops everything it started.
    The log stays in --data-dir for `hookaudit sql`, `query` and `replay`.

    \b
    Example:
      hookaudit demo
      hookaudit demo --sessions 100 --data-dir ./demo-data
    """
    from ingest.demo import default_policy, live_reason, run_demo

    if n_sessions < 1 or n_sessions > 100_000:
        raise click.BadParameter("expected 1 to 100000", param_hint="--sessions")
    if policy is not None and not policy.is_file():
        raise click.BadParameter(f"{policy}: no such file", param_hint="--policy")
    if data_dir is not None:
        _check_data_dir(data_dir, live_reason)
    total = _expected_events(n_sessions, seed)

    def progress(n: int) -> None:
        if fmt == "text" and sys.stderr.isatty():
            click.echo(f"\r  published {n}/~{total} events", nl=False, err=True)

    strict = default_policy().with_name("strict.json")
    try:
        r = asyncio.run(
            run_demo(data_dir, n_sessions=n_sessions, seed=seed, policy=policy, progress=progress)
        )
        top = _query(r.data_dir)
        rep = _replay(r.data_dir, strict)
    except HookauditError as exc:
        click.echo(f"hookaudit demo: {exc}", err=True)
        sys.exit(1)
    ok = r.verified and r.records == r.published
    if fmt == "json":
        click.echo(
            json.dumps(
                {
                    "data_dir": str(r.data_dir),
                    "sessions": r.sessions,
                    "events": r.published,
                    "records": r.records,
                    "seconds": round(r.seconds, 2),
                    "decisions": dict(r.decisions),
                    "by_event": dict(r.events),
                    "by_agent": dict(r.agents),
                    "top_denied": r.denied.most_common(10),
                    "top_asked": r.asked.most_common(10),
                    "verified": r.verified,
                    "query_top_denied_tools": top,
                    "replay": {
                        k: rep.get(k)
                        for k in (
                            "replay_id",
                            "events",
                            "changed",
                            "transitions",
                            "counterfactual",
                            "digest",
                        )
                    },
                },
                indent=2,
                default=str,
            )
        )
        sys.exit(0 if ok else 1)
    if sys.stderr.isatty():
        click.echo("", err=True)
    click.echo(
        f"hookaudit demo: {r.sessions} sessions, {r.published} events published, "
        f"{r.records} outcomes logged in {r.seconds:.1f}s"
    )
    click.echo("decisions: " + ", ".join(f"{k}={v}" for k, v in r.decisions.most_common()))
    click.echo("events:    " + ", ".join(f"{k}={v}" for k, v in r.events.most_common()))
    click.echo("agents:    " + ", ".join(f"{k}={v}" for k, v in sorted(r.agents.items())))
    click.echo("top denied:")
    for what, count in r.denied.most_common(8):
        click.echo(f"  {count:4d}  {what[:100]}")
    click.echo("top asked:")
    for what, count in r.asked.most_common(5):
        click.echo(f"  {count:4d}  {what[:100]}")
    click.echo(f"verify: {'ok' if r.verified else 'FAILED'} ({r.verify_message})")
    click.echo("query (DuckDB): denials by tool: " + ", ".join(f"{what}={n}" for what, n in top))
    trans = ", ".join(f"{k}={v}" for k, v in sorted((rep.get("transitions") or {}).items()))
    click.echo(
        f"replay against {strict.name}: {rep.get('events')} events re-evaluated, "
        f"{rep.get('changed')} would change ({trans}); "
        f"{rep.get('counterfactual', 0)} later events flagged counterfactual"
    )
    me = _me()
    click.echo(f"log kept in {r.data_dir}; try:")
    click.echo(f"  export HOOKAUDIT_DATA_DIR={r.data_dir}")
    click.echo(f"  {me} query denied")
    click.echo(f'  {me} sql "SELECT decision, count(*) AS n FROM outcomes GROUP BY 1"')
    click.echo(f"  {me} replay --settings project:{strict} --format html --output replay.html")
    sys.exit(0 if ok else 1)
