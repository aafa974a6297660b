"""Click commands of the read side: `query` (named security queries) and `sql` (ad-hoc, read-only).

Both open the log of --data-dir with `queries.db.open_db` and write with `queries.output`.
Bad SQL, a refused statement, an unknown query or a bad parameter is one line on stderr and
exit 1; a log that does not exist yet gives an empty result and a hint on stderr.

Example:
    $ hookaudit query denied --since 7d --param tool=Bash
    $ hookaudit sql "SELECT decision, count(*) AS n FROM outcomes GROUP BY 1" --format json
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import click

from hookaudit.options import data_dir_option, default_data_dir, fail, output_options
from queries.catalog import Catalog, NamedQuery, QueryError, bind_params, load_catalog
from queries.output import OutputError, check_writable, write_result

__all__ = ["query_cmd", "sql_cmd"]


def _database_option(f: Any) -> Any:
    return click.option(
        "--database",
        type=click.Path(dir_okay=False),
        default=None,
        help="A DuckDB file to run in instead of memory (it is not modified).",
    )(f)


def _open(data_dir: Path | None, database: str | None) -> Any:
    """open_db with unreadable records warned on stderr, and a hint when there is no log yet."""
    from ingest.log.layout import segments
    from queries.db import open_db

    d = data_dir or default_data_dir()
    if database is not None and not Path(database).is_file():
        fail(f"--database {database}: no such DuckDB file (it is opened read-only, never created)")
    skipped = 0

    def warn(file: str, line: int, reason: str) -> None:
        nonlocal skipped
        skipped += 1
        click.echo(
            f"hookaudit: warning: {file}:{line}: skipped unreadable record: {reason}", err=True
        )

    if not d.exists() or not segments(d):
        click.echo(
            f"hookaudit: no log in {d} yet (run `hookaudit worker` or `hookaudit demo`, "
            "or pass --data-dir): the result is empty",
            err=True,
        )
    con = open_db(d, database=database, on_corrupt=warn)
    if skipped:
        click.echo(
            f"hookaudit: warning: {skipped} unreadable record(s) skipped "
            '(listed by: hookaudit sql "SELECT * FROM unreadable")',
            err=True,
        )
    return con


def _check_output(fmt: str, output: Path | None) -> None:
    """Refuse an output that cannot be written before the log is read."""
    if fmt == "parquet" and output is None:
        raise click.UsageError("--format parquet needs --output FILE")
    problem = check_writable(output)
    if problem is not None:
        fail(problem)


def _write(rows: Any, fmt: str, output: Path | None, max_rows: int) -> None:
    """Write a result; an output that fails while written is one line and exit 1."""
    try:
        write_result(rows, fmt, output, max_rows=max_rows)
    except OutputError as e:
        fail(str(e))


def _parse_params(items: tuple[str, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.UsageError(f"--param {item!r}: expected KEY=VALUE")
        out[key.strip()] = value
    return out


class _Listing:
    """The named queries as a result: name, summary, parameters (name:type, ? if optional)."""

    def __init__(self, catalog: Catalog) -> None:
        self.columns = [
            ("name", "VARCHAR"),
            ("summary", "VARCHAR"),
            ("parameters", "VARCHAR"),
            ("description", "VARCHAR"),
        ]
        self.rows = [
            (
                q.name,
                q.summary,
                ", ".join(f"{p.name}:{p.type}" + ("" if p.required else "?") for p in q.params),
                q.description,
            )
            for q in catalog.values()
        ]

    def batches(self, size: int = 10_000) -> Iterator[list[tuple[Any, ...]]]:
        yield list(self.rows)

    def arrow(self) -> Any:
        import pyarrow as pa

        return pa.table({c: [r[i] for r in self.rows] for i, (c, _) in enumerate(self.columns)})


def _param_help(q: NamedQuery) -> str:
    lines = [f"{q.name}: {q.summary}", ""]
    if q.description:
        lines += [q.description, ""]
    for p in q.params:
        need = "required" if p.required else (f"default {p.default}" if p.default else "optional")
        lines.append(f"  --param {p.name}=<{p.type}>  ({need}) {p.help}")
    return "\n".join(lines)


@click.command("query")
@click.argument("name", required=False)
@click.option("--list", "list_", is_flag=True, help="List the named queries and their parameters.")
@click.option(
    "--param",
    "-p",
    "params",
    multiple=True,
    metavar="KEY=VALUE",
    help="A parameter of the query (repeatable); see `hookaudit query NAME --describe`.",
)
@click.option(
    "--since",
    default=None,
    help="Only rows at or after this time: 7d, 12h, 30m, or ISO-8601 (the query's `since`).",
)
@click.option("--until", default=None, help="Only rows before this time (the query's `until`).")
@click.option("--describe", is_flag=True, help="Show what the query does and its parameters.")
@data_dir_option
@_database_option
@output_options
def query_cmd(
    name: str | None,
    list_: bool,
    params: tuple[str, ...],
    since: str | None,
    until: str | None,
    describe: bool,
    data_dir: Path | None,
    database: str | None,
    fmt: str,
    output: Path | None,
    max_rows: int,
) -> None:
    """Run a named security query over the whole log (sealed and active segments).

    Queries: denied, commands, files, session, hook-errors, slow-hooks, top-tools,
    policy-changes, egress, unchecked. Each is one SQL file under queries/sql/; `--list` shows them.

    \b
    Example:
      hookaudit query --list
      hookaudit query denied --since 7d --param tool=Bash
      hookaudit query commands --param 'pattern=curl .*\\|\\s*(ba)?sh' --format json
      hookaudit query files --param 'glob=~/.ssh/**' --data-dir ./data
    """
    from queries.db import run_named

    _check_output(fmt, output)
    catalog = load_catalog()
    if list_:
        _write(_Listing(catalog), fmt, output, max_rows)
        return
    if name is None:
        raise click.UsageError("give a query NAME, or --list")
    query = catalog.get(name)
    if query is None:
        fail(f"unknown query {name!r} (known: {', '.join(catalog)})")
        return
    if describe:
        click.echo(_param_help(query))
        return
    given = _parse_params(params)
    declared = {p.name for p in query.params}
    for key, value in (("since", since), ("until", until)):
        if value is None:
            continue
        if key not in declared:
            fail(f"query {name!r} has no time range (--{key})")
        given[key] = value
    try:
        bind_params(query, given)  # bad parameters fail before the log is read
        con = _open(data_dir, database)
        try:
            _write(run_named(con, query, given), fmt, output, max_rows)
        finally:
            con.close()
    except QueryError as exc:
        fail(str(exc))


@click.command("sql")
@click.argument("statement")
@data_dir_option
@_database_option
@output_options
def sql_cmd(
    statement: str,
    data_dir: Path | None,
    database: str | None,
    fmt: str,
    output: Path | None,
    max_rows: int,
) -> None:
    """Run one read-only SQL statement over the log's views.

    Views: outcomes, events, hook_runs, tool_calls, sessions, replays, all_outcomes,
    unreadable (`SELECT * FROM duckdb_views() WHERE NOT internal` lists them; `DESCRIBE
    outcomes` shows columns). Only SELECT and EXPLAIN run: anything that writes, attaches,
    installs, copies or changes settings is refused, and files other than the log's
    segments cannot be read.

    \b
    Example:
      hookaudit sql "SELECT decision, count(*) AS n FROM outcomes GROUP BY 1"
      hookaudit sql "SELECT * FROM tool_calls WHERE status = 'denied'" --format csv -o denied.csv
    """
    from queries.db import check_read_only, run_sql

    _check_output(fmt, output)
    try:
        check_read_only(statement)  # refused before the log is read
        con = _open(data_dir, database)
        try:
            _write(run_sql(con, statement), fmt, output, max_rows)
        finally:
            con.close()
    except QueryError as exc:
        fail(str(exc))
