"""Running SQL on `queries.db`'s connection: results read once, read-only checks, named
queries with bound parameters; DuckDB's errors become `QueryError`.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import duckdb

from queries.catalog import NamedQuery, QueryError, bind_params
from queries.scan import _one_line

__all__ = ["Result", "check_read_only", "run_named", "run_sql"]


# ----------------------------------------------------------------------------- results


@dataclass
class Result:
    """A query's columns (name, DuckDB type) and its rows, read once.

    Nothing runs until `batches()` or `arrow()` is called; runtime errors then raise QueryError.
    """

    columns: list[tuple[str, str]]
    _rel: Any
    _what: str = ""

    def batches(self, size: int = 10_000) -> Iterator[list[tuple[Any, ...]]]:
        """The rows as lists of tuples (Python values: datetime, list, dict, ...)."""
        batch: list[tuple[Any, ...]] = []
        try:
            for row in self._rel.iter_rows(size):
                batch.append(row)
                if len(batch) >= size:
                    yield batch
                    batch = []
        except duckdb.Error as exc:
            raise QueryError(f"{self._what}{_one_line(exc)}") from exc
        if batch:
            yield batch

    def arrow(self) -> Any:
        """The whole result as a pyarrow Table."""
        try:
            return self._rel.to_arrow_table()
        except duckdb.Error as exc:
            raise QueryError(f"{self._what}{_one_line(exc)}") from exc


def _relation(con: Any, sql: str, params: Mapping[str, object] | None, what: str) -> Result:
    try:
        rel = con.sql(sql, params=dict(params) if params else None)
    except duckdb.Error as exc:
        raise QueryError(f"{what}{_one_line(exc)}") from exc
    if rel is None:
        raise QueryError(f"{what}the statement returns no rows")
    return Result([(d[0], str(d[1])) for d in rel.description], rel, what)


_ALLOWED = {"SELECT", "EXPLAIN"}


def check_read_only(sql: str) -> list[str]:
    """The statements of `sql`, or QueryError when one is not a read (SELECT, EXPLAIN).

    Example:
        >>> check_read_only("COPY outcomes TO 'x.csv'")
        Traceback (most recent call last):
        queries.db.QueryError: refused: COPY statements are not allowed (read-only: SELECT only)
    """
    try:
        stmts = duckdb.extract_statements(sql)
    except duckdb.Error as exc:
        raise QueryError(f"bad SQL: {_one_line(exc)}") from exc
    if not stmts:
        raise QueryError("bad SQL: no statement")
    out = []
    for st in stmts:
        kind = str(st.type).rsplit(".", 1)[-1]
        if kind not in _ALLOWED:
            raise QueryError(f"refused: {kind} statements are not allowed (read-only: SELECT only)")
        out.append(st.query)
    return out


def run_sql(con: Any, sql: str) -> Result:
    """Run one read-only statement; anything that is not a SELECT or EXPLAIN is QueryError.

    Example:
        >>> next(run_sql(con, "SELECT count(*) AS n FROM outcomes").batches())
        [(3,)]
    """
    stmts = check_read_only(sql)
    if len(stmts) > 1:
        raise QueryError(f"one statement at a time, got {len(stmts)}")
    return _relation(con, stmts[0], None, "")


# ----------------------------------------------------------------------------- named queries


def run_named(con: Any, query: NamedQuery, given: Mapping[str, str]) -> Result:
    """Run a named query with its parameters bound (never formatted into the SQL).

    Example:
        >>> r = run_named(con, load_catalog()["denied"], {"tool": "Bash"})
        >>> [c for c, _ in r.columns][:3]
        ['ts', 'user', 'host']
    """
    values = bind_params(query, given)
    used = set(re.findall(r"\$([a-z_][a-z0-9_]*)", query.sql))
    bound = {k: v for k, v in values.items() if k in used}
    return _relation(con, query.sql, bound, f"query {query.name!r}: ")
