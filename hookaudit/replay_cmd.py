"""`hookaudit replay`: re-evaluate history with other settings and report every difference.

The command wraps `replay.jobs.replay`; everything it prints comes from the report object
of `replay.report` (schema there). `--distribute`'s NATS side and `hookaudit replay-join`
are `hookaudit.replay_join_cmd`.

Example:
    $ hookaudit replay --settings project:new-policy.json --since 30d --format json
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any, cast

import click

from engine.errors import HookauditError
from engine.records import POSTURES, uuid7
from hookaudit.options import data_dir_option, format_option
from hookaudit.replay_join_cmd import nats_options, start_coordinator
from queries.output import check_writable

__all__ = ["replay_cmd"]

_SAMPLES = re.compile(r"^samples=(\d+)$")


def _llm(value: str) -> tuple[str, int]:
    if value in ("recorded", "live"):
        return value, 1
    m = _SAMPLES.match(value)
    if m and int(m.group(1)) >= 1:
        return "live", int(m.group(1))
    raise click.BadParameter("expected recorded, live or samples=N (N ≥ 1)", param_hint="--llm")


def _rules(value: str) -> list[str]:
    from replay.report import FAIL_RULES

    rules = [r.strip() for r in value.split(",") if r.strip()]
    for r in rules:
        if r not in FAIL_RULES:
            raise click.BadParameter(
                f"unknown rule {r!r} (one of {', '.join(FAIL_RULES)})", param_hint="--fail-on"
            )
    return rules


def _check_events(events: tuple[str, ...]) -> None:
    """An unknown --event is a usage error listing the known ones (it would select nothing)."""
    import difflib

    from engine.events import CATALOG

    for name in events:
        if name not in CATALOG:
            near = difflib.get_close_matches(name, list(CATALOG), n=1)
            hint = f"did you mean {near[0]!r}? " if near else ""
            raise click.BadParameter(
                f"unknown event {name!r} ({hint}known: {', '.join(sorted(CATALOG))})",
                param_hint="--event",
            )


def _describe(selection: Any, data_dir: Path) -> str:
    parts = [f"log {data_dir}"]
    for key in ("since", "until", "session", "where"):
        value = getattr(selection, key)
        if value is not None:
            parts.append(f"--{key} {value.isoformat() if hasattr(value, 'isoformat') else value}")
    if selection.event:
        parts.append("--event " + ",".join(selection.event))
    return "; ".join(parts) + ": no recorded event matches"


def _fail(message: str) -> None:
    click.echo(f"hookaudit replay: {message}", err=True)
    sys.exit(1)


@click.command("replay")
@click.option(
    "--settings",
    "settings",
    multiple=True,
    required=True,
    metavar="[SCOPE:]PATH",
    help="Candidate settings, repeatable (scope user|project|local|managed|plugin; default project).",
)
@click.option(
    "--since",
    help="Events from this time: ISO 8601 (UTC by default) or a duration back (30d, 12h).",
)
@click.option("--until", help="Events before this time (same forms as --since).")
@click.option("--session", help="Only this session id.")
@click.option(
    "--event", "events", multiple=True, metavar="TYPE", help="Only these hook events (repeatable)."
)
@click.option(
    "--where", metavar="SQL", help="SQL condition over the `events` query view (hookaudit query)."
)
@click.option(
    "--baseline",
    type=click.Choice(["recorded"]),
    default="recorded",
    show_default=True,
    help="Compare with the recorded decisions…",
)
@click.option(
    "--baseline-settings",
    multiple=True,
    metavar="[SCOPE:]PATH",
    help="…or with a replay of these settings (repeatable).",
)
@click.option(
    "--reuse",
    type=click.Choice(["unchanged", "none"]),
    default="unchanged",
    show_default=True,
    help="Answer unchanged command/http hooks from the log, or re-run everything.",
)
@click.option(
    "--exec",
    "exec_",
    type=click.Choice(["sandbox", "allow", "deny"]),
    default="sandbox",
    show_default=True,
    help="New or changed command hooks: sandboxed, as a worker would, or not at all.",
)
@click.option(
    "--llm",
    default="recorded",
    show_default=True,
    metavar="recorded|live|samples=N",
    help="Prompt/agent hooks: recorded answers, ask again, or ask N times and report flips.",
)
@click.option(
    "--posture",
    type=click.Choice(POSTURES),
    default=None,
    help="Override the posture (default: the candidate settings', else the recorded one).",
)
@click.option(
    "--jobs",
    type=click.IntRange(1, 256),
    default=1,
    show_default=True,
    help="Processes to use (each reads its own segments of the log).",
)
@click.option(
    "--concurrency",
    type=click.IntRange(1, 4096),
    default=32,
    show_default=True,
    help="Hooks running at once per job (sandbox, live LLM, http).",
)
@format_option(
    "table",
    "json",
    "html",
    help="table for people, json for machines, html: a page (with --output).",
)
@click.option(
    "--output", type=click.Path(dir_okay=False, path_type=Path), help="Write the report here."
)
@click.option(
    "--fail-on",
    default="",
    metavar="new-deny,new-allow,any",
    help="Exit 1 when the replay finds such a change (a CI gate).",
)
@click.option(
    "--store",
    type=click.Choice(["changed", "all", "none"]),
    default="changed",
    show_default=True,
    help="Replayed outcomes to append to the log (view `replays`): those of changed, "
    "non-counterfactual events, of every evaluated event, or none.",
)
@click.option(
    "--max-rows",
    type=click.IntRange(0),
    default=1000,
    show_default=True,
    help="Changed events listed in the report.",
)
@click.option(
    "--project-dir", help="CLAUDE_PROJECT_DIR for the settings (default: each event's cwd)."
)
@data_dir_option
@click.option(
    "--strict",
    is_flag=True,
    help="Refuse to run when `hookaudit lint` finds anything in the settings.",
)
@click.option(
    "--distribute",
    is_flag=True,
    help="Run the jobs as `hookaudit replay-join` processes (any machine that sees the same "
    "log) taking segments from a JetStream work queue on --nats; prints the join command.",
)
@click.option("--ack-wait", type=click.FloatRange(1, 3600), default=30.0, show_default=True,
              help="With --distribute: seconds a job may stay silent before the segments it "
              "holds go to another job (one that died is re-run).")  # fmt: skip
@click.option("--job-timeout", type=click.FloatRange(2, 86400), default=600.0,
              show_default=True, help="With --distribute: fail after this many seconds "
              "without progress from any job (must exceed --ack-wait).")  # fmt: skip
@click.option("--max-deliver", type=click.IntRange(1, 1000), default=5, show_default=True,
              help="With --distribute: fail when a segment was handed out this many times "
              "and every job that took it died.")  # fmt: skip
@nats_options
def replay_cmd(
    settings: tuple[str, ...], since: str | None, until: str | None, session: str | None,
    events: tuple[str, ...], where: str | None, baseline: str, baseline_settings: tuple[str, ...],
    reuse: str, exec_: str, llm: str, posture: str | None, jobs: int, concurrency: int, fmt: str,
    output: Path | None, fail_on: str, store: str, max_rows: int, project_dir: str | None,
    data_dir: Path | None, strict: bool, distribute: bool, **kw: Any,
) -> None:  # fmt: skip
    """Re-evaluate recorded events with other settings and report what would change.

    Every selected event is run through the engine again with --settings; each hook
    that ran then and is unchanged is answered from the log, new ones run under
    --exec. Each difference from the recorded decision is classified (none->deny,
    deny->allow, ask changes, updatedInput, context, errors) and attributed to
    hooks; after a session's first change its later events are counterfactual.
    Results are appended to the log (view `replays`) and the report carries a digest
    of its inputs: the same replay gives the same digest.

    Exit status: 0 ok, 1 on bad input or when --fail-on matches, 2 on usage errors.

    \b
    Example:
      hookaudit replay --settings project:new-policy.json --since 30d
      hookaudit replay --settings project:new.json --format html --output replay.html
      hookaudit replay --settings project:new.json --fail-on new-deny --format json
      hookaudit replay --settings project:new.json --distribute --nats nats://nats:4222
    """
    if fmt == "html" and output is None and sys.stdout.isatty():
        # a page of HTML on a terminal helps nobody: name the file (a pipe still gets it)
        raise click.UsageError("--format html writes a page: give --output FILE.html")
    from engine.sources import parse_scoped
    from hookaudit.options import default_data_dir
    from replay import render
    from replay.answers import Policy
    from replay.jobs import replay
    from replay.report import fail_on as match_rules
    from replay.request import Request
    from replay.select import Selection, parse_when, where_ids

    mode, samples = _llm(llm)
    rules = _rules(fail_on)
    _check_events(events)
    if strict:
        from engine.lint import lint_specs, refusal

        findings = lint_specs([*settings, *baseline_settings])
        if findings:
            for line in refusal("replay", findings):
                click.echo(line, err=True)
            sys.exit(1)
    problem = check_writable(output)
    if problem is not None:  # before the replay runs and stores its outcomes
        _fail(problem)
    try:
        lo = parse_when(since) if since else None
        hi = parse_when(until) if until else None
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--since/--until") from None
    if lo is not None and hi is not None and lo >= hi:
        raise click.UsageError(
            f"--since {since} ({lo.isoformat()}) is not before --until {until} "
            f"({hi.isoformat()}): the window is empty"
        )
    d = data_dir or default_data_dir()
    if not (d / "log").is_dir():
        _fail(f"{d}: no log here (give --data-dir or set HOOKAUDIT_DATA_DIR)")
    try:
        ids = where_ids(d, where) if where else None
        selection = Selection(
            since=lo,
            until=hi,
            session=session,
            event=tuple(events),
            where=where,
            ids=ids,
        )
        req = Request(
            data_dir=str(d),
            candidate=tuple(parse_scoped(s) for s in settings),
            replay_id=uuid7(),
            baseline=tuple(parse_scoped(s) for s in baseline_settings) or None,
            selection=selection,
            policy=Policy(
                reuse=cast(Any, reuse),
                exec=cast(Any, exec_),
                llm=cast(Any, mode),
                samples=samples,
                posture=cast(Any, posture),
                store=cast(Any, store),
            ),
            jobs=jobs,
            concurrency=concurrency,
            project_dir=project_dir,
        )
        tty = sys.stderr.isatty()
        coordinator = start_coordinator(d, req.replay_id, kw) if distribute else None
        done = replay(
            req,
            max_rows=max_rows,
            progress=(lambda m: click.echo(m, err=True)) if tty else None,
            coordinator=coordinator,
        )
    except (HookauditError, ValueError, OSError) as exc:
        _fail(str(exc))
        return
    report = done.report
    if not report.get("selected"):
        click.echo(f"hookaudit replay: no event selected ({_describe(selection, d)})", err=True)
    matched = match_rules(report, rules)
    report["fail_on"] = {"rules": rules, "matched": matched}
    if fmt == "json":
        import json

        text = json.dumps(report, indent=2, sort_keys=True) + "\n"
    elif fmt == "html":
        text = render.to_html(report, max_rows=max_rows)
    else:
        text = ""
    try:
        if fmt == "table":
            from rich.console import Console

            if output is not None:
                with open(output, "w", encoding="utf-8") as f:
                    render.print_summary(report, Console(file=f, width=160, color_system=None))
            else:
                render.print_summary(report)
        elif output is not None:
            output.write_text(text, encoding="utf-8")
        else:
            click.echo(text, nl=False)
    except OSError as exc:
        stored = (report.get("stored") or {}).get("summary")
        _fail(
            f"{output}: {exc.strerror or exc}"
            + (f" (the report is kept in {stored})" if stored else "")
        )
    if output is not None:
        click.echo(f"report written to {output}", err=True)
    if matched:
        click.echo(f"hookaudit replay: --fail-on matched: {', '.join(matched)}", err=True)
        sys.exit(1)
