"""Sigma correlation rules as DuckDB SQL over the flat Sigma events of the log.

The meaning is `queries.sigma_correlation`'s (anchors, windows ``[t - timespan, t]`` with
both ends included, groups by exact text, an event lacking a group-by field left out); this
is its SQL form, held to the Python matcher by the differential test (an empty group-by
value is NULL here, as a missing one):
- one row per (event, referenced rule) match, with its group key and value (``hits``);
- ``event_count``, ``value_count`` and ``temporal`` are window aggregates over each group
  ordered by event time in microseconds, ``RANGE BETWEEN span PRECEDING AND CURRENT ROW``
  (a RANGE frame takes the current row's peers, so events at the anchor's time count);
- ``temporal_ordered`` joins each anchor to its window and finds, rule after rule, the
  earliest match later than the previous one (a chain of list lambdas);
- the window's event ids are fetched for the anchors where the condition held only.

Example:
    >>> from queries.sigma_correlation import DENIALS, load_rule_set
    >>> (c,) = load_rule_set([(DENIALS, "d.yml")]).correlations
    >>> "RANGE BETWEEN 600000000 PRECEDING AND CURRENT ROW" in correlation_sql(c, "t")
    True
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from queries.sigma_correlation import Correlation
from queries.sigma_duckdb import DuckDBBackend, rule_sql, sigma_events_sql

__all__ = ["CorrelationMatch", "correlation_sql", "detect_correlations"]

_SQL_OPS = {"gt": ">", "gte": ">=", "lt": "<", "lte": "<=", "eq": "=", "neq": "<>"}


def _expr(node: Any) -> str:
    from sigma.correlations import (
        CorrelationConditionAND,
        CorrelationConditionNOT,
        CorrelationConditionOR,
    )

    if isinstance(node, int):
        return f"p{node}"
    if isinstance(node, CorrelationConditionAND):
        return "(" + " AND ".join(_expr(a) for a in node.args) + ")"
    if isinstance(node, CorrelationConditionOR):
        return "(" + " OR ".join(_expr(a) for a in node.args) + ")"
    if isinstance(node, CorrelationConditionNOT):
        return f"(NOT {_expr(node.args[0])})"
    raise TypeError(type(node).__name__)


def correlation_sql(c: Correlation, table: str, from_us: int | None = None) -> str:
    """The SELECT of `c`'s hits over `table` (rows of `sigma_events_sql`): one row per
    (anchor id, group) where the condition holds, with ``n``, ``first_us``, ``ids`` (the
    window's event ids, sorted) and ``g0``… (the group); anchors at or after `from_us` only."""
    be = DuckDBBackend()
    g = [f"g{i}" for i in range(len(c.group_by))]
    selects = []
    for k, rule in enumerate(c.rules):
        keys = "".join(
            f", nullif({be.escape_and_quote_field(f)}, '') AS g{i}"
            for i, f in enumerate(c.fields[k])
        )
        vf = c.value_fields[k]
        value = be.escape_and_quote_field(vf) if vf else "CAST(NULL AS VARCHAR)"
        selects.append(
            f"SELECT id, epoch_us(ts) AS us, {k} AS k{keys}, {value} AS v "
            f"FROM {table} WHERE {rule_sql(rule)}"
        )
    gcols = "".join(f", {x}" for x in g)
    present = " AND ".join(f"{x} IS NOT NULL" for x in g) or "true"
    part = f"PARTITION BY {', '.join(g)} " if g else ""
    window = f"({part}ORDER BY us RANGE BETWEEN {c.span_us} PRECEDING AND CURRENT ROW)"
    same = "".join(f" AND m.{x} = a.{x}" for x in g)
    in_window = f"m.us BETWEEN a.us - {c.span_us} AND a.us{same}"
    ctes = [
        f"hits AS ({' UNION ALL '.join(selects)})",
        f"keyed AS (SELECT * FROM hits WHERE {present})",
    ]
    if c.kind == "event_count":
        ctes.append(f"ev AS (SELECT DISTINCT id, us{gcols} FROM keyed)")
        ctes.append(
            f"w AS (SELECT id, us{gcols}, count(*) OVER {window} AS n, "
            f"min(us) OVER {window} AS first_us FROM ev)"
        )
    elif c.kind == "value_count":
        ctes.append(
            f"w AS (SELECT DISTINCT id, us{gcols}, count(DISTINCT v) OVER {window} AS n, "
            f"min(us) OVER {window} AS first_us FROM keyed)"
        )
    elif c.kind == "temporal":
        flags = "".join(f", bool_or(k = {j}) OVER {window} AS p{j}" for j in range(len(c.rules)))
        if c.expression is not None:
            n = f"CASE WHEN {_expr(c.expression)} THEN 1 ELSE 0 END"
        else:
            n = " + ".join(f"CAST(p{j} AS INTEGER)" for j in range(len(c.rules)))
        ctes.append(
            f"f AS (SELECT id, us{gcols}{flags}, min(us) OVER {window} AS first_us FROM keyed)"
        )
        ctes.append(f"w AS (SELECT DISTINCT id, us{gcols}, {n} AS n, first_us FROM f)")
    else:  # temporal_ordered
        agcols = "".join(f", a.{x}" for x in g)
        ctes.append(f"anch AS (SELECT DISTINCT id, us{gcols} FROM keyed)")
        ctes.append(
            f"s AS (SELECT a.id, a.us{agcols}, list({{'k': m.k, 'u': m.us}}) AS l, "
            f"min(m.us) AS first_us FROM anch a JOIN keyed m ON {in_window} "
            f"GROUP BY a.id, a.us{agcols})"
        )
        prev = "s"
        for j in range(len(c.rules)):
            later = f" AND x.u > f{j - 1}" if j else ""
            ctes.append(
                f"s{j} AS (SELECT *, list_min(list_transform(list_filter(l, "
                f"lambda x: x.k = {j}{later}), lambda x: x.u)) AS f{j} FROM {prev})"
            )
            prev = f"s{j}"
        n = " + ".join(f"CAST(f{j} IS NOT NULL AS INTEGER)" for j in range(len(c.rules)))
        ctes.append(f"w AS (SELECT id, us{gcols}, {n} AS n, first_us FROM {prev})")
    since = f" AND us >= {int(from_us)}" if from_us is not None else ""
    ctes.append(f"fired AS (SELECT * FROM w WHERE n {_SQL_OPS[c.op]} {c.count!r}{since})")
    agcols = "".join(f", a.{x}" for x in g)
    return (
        "WITH " + ",\n".join(ctes) + "\n"
        f"SELECT a.id, a.n, a.first_us, list_sort(list_distinct(list(m.id))) AS ids{agcols} "
        f"FROM fired a JOIN keyed m ON {in_window} "
        f"GROUP BY a.id, a.us, a.n, a.first_us{agcols}"
    )


@dataclass(frozen=True)
class CorrelationMatch:
    """A window where a correlation held, at its anchor event (the fields of `Match`)."""

    rule: Correlation
    id: str  # the anchor's event id
    ts: datetime
    worker: str
    seq: int
    session_id: str
    user: str
    host: str
    tool: str | None
    decision: str
    what: str
    group: tuple[tuple[str, str], ...]  # (group-by name, value)
    count: int
    first: datetime  # the window's first event
    events: tuple[str, ...]  # the window's event ids, sorted


def _what(c: Correlation, n: int, group: tuple[tuple[str, str], ...]) -> str:
    by = ", ".join(f"{k}={v}" for k, v in group)
    what = {
        "event_count": f"{n} event(s)",
        "value_count": f"{n} distinct {c.value_fields[0]}",
        "temporal": f"{n} of {len(c.rules)} rules",
        "temporal_ordered": f"{n} of {len(c.rules)} rules in order",
    }[c.kind]
    if c.kind == "temporal" and c.expression is not None:
        what = "the condition"
    return f"{what} within {c.timespan}" + (f" ({by})" if by else "")


def detect_correlations(
    con: Any,
    correlations: list[Correlation],
    *,
    since: datetime | None = None,
    new_from: datetime | None = None,
    table: str | None = None,
) -> list[CorrelationMatch]:
    """The hits of `correlations` over the live outcomes of `con` (at or after `since`), in
    anchor time order. `table` names rows of `sigma_events_sql` already made (e.g.
    ``sigma_events`` after a first `detect_history`); without it the rows are read from the
    log from `timespan` before `new_from` on, and only anchors at or after `new_from` count
    (what `--follow` asks once new events are in).

    Example:
        >>> found = detect_correlations(open_db(d), rs.correlations)  # doctest: +SKIP
    """
    if not correlations:
        return []
    from_us = None
    if table is None:
        where = ["true"]
        if since is not None:
            where.append(f"ts >= TIMESTAMPTZ '{since.isoformat()}'")
        if new_from is not None:
            span = max(c.span_us for c in correlations)
            where.append(f"epoch_us(ts) >= {_us(new_from) - span}")
            from_us = _us(new_from)
        con.execute(
            "CREATE OR REPLACE TEMP TABLE corr_events AS " + sigma_events_sql(" AND ".join(where))
        )
        table = "corr_events"
    out: list[CorrelationMatch] = []
    for c in correlations:
        rows = con.execute(
            f'SELECT e.id, e.ts, e.worker, e.seq, e."SessionId", e."User", e."Host", '
            f'e."ToolName", e."Decision", h.* EXCLUDE (id) '
            f"FROM ({correlation_sql(c, table, from_us)}) h JOIN {table} e ON e.id = h.id"
        ).fetchall()
        for eid, ts, worker, seq, sess, user, host, tool, dec, n, first_us, ids, *key in rows:
            group = tuple(zip(c.group_by, key, strict=True))
            first = _EPOCH + timedelta(microseconds=first_us)
            out.append(
                CorrelationMatch(
                    c, eid, ts, worker, seq, sess, user, host, tool, dec,
                    _what(c, n, group), group, n, first, tuple(ids),
                )
            )  # fmt: skip
    out.sort(key=lambda m: (m.ts, m.worker, m.seq, m.group))
    return out


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _us(t: datetime) -> int:
    return (t - _EPOCH) // timedelta(microseconds=1)
