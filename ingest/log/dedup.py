"""The one dedup rule of the log, in Python and in SQL: which stored copy of a record counts.

The rule: **of the records that share a key, the first in log order counts; log order is
(worker, seq)** — the order `segments` lists segments in, `verify` walks chains in and
`iter_outcomes` yields records in. Two keys are used:

- the idempotency key (event id, settings_id, replay_id): a record stored twice by two
  workers (an event re-delivered after a crash between append and ack) is one record
  (`outcomes`, `all_outcomes`, `hook_runs`);
- the live event (event id, replay_id null): one decision per event, whatever settings
  decided it (`events`, `tool_calls`, `sessions`, and replay's baseline).

Why log order and not the `appended` time: workers on other hosts have other clocks, so
`appended` times of two workers do not order anything; (worker, seq) is total, the same
on every reader, and needs no global sort (replay keeps the first copy as it streams the
log). A copy appended later by a worker whose name sorts earlier does take over: the
rule is documented in the README ("The log") for that reason.

Rules of this file:
- Pure: no I/O. `queries.db` uses `sql_copy` in its views; `replay` keeps the first copy
  in log order (`replay.select`, `replay.parts`) and the contract suite checks both
  against `first_copies` / `first_live`.

Example:
    >>> sql_copy(KEY_PARTITION)
    'row_number() OVER (PARTITION BY id, settings_id, replay_id ORDER BY worker, seq) > 1'
"""

from __future__ import annotations

from collections.abc import Iterable

from engine.records import Outcome
from ingest.log.lines import idempotency_key

__all__ = [
    "EVENT_PARTITION",
    "KEY_PARTITION",
    "LOG_ORDER_SQL",
    "first_copies",
    "first_live",
    "log_order",
    "sql_copy",
]

LOG_ORDER_SQL = "worker, seq"
"""SQL ORDER BY of log order, over the `worker` and `seq` columns."""
KEY_PARTITION = "id, settings_id, replay_id"
"""SQL PARTITION BY of the idempotency key, over the flat columns of a segment."""
EVENT_PARTITION = "id, replay_id IS NULL"
"""SQL PARTITION BY of a live event (only rows with replay_id NULL are live)."""


def log_order(o: Outcome) -> tuple[str, int]:
    """Where a record stands in log order.

    Example:
        >>> from engine.records import new_event
        >>> log_order(Outcome(event=new_event({"hook_event_name": "Stop"}), settings_id="s",
        ...                   worker="w1", seq=3))
        ('w1', 3)
    """
    return (o.worker, o.seq)


def sql_copy(partition: str) -> str:
    """SQL: true for a row that is a later copy (by the rule) of another row of `partition`.

    Example:
        >>> sql_copy(EVENT_PARTITION).startswith("row_number() OVER (PARTITION BY id,")
        True
    """
    return f"row_number() OVER (PARTITION BY {partition} ORDER BY {LOG_ORDER_SQL}) > 1"


def first_copies(outcomes: Iterable[Outcome]) -> list[Outcome]:
    """The records that count by idempotency key, in log order.

    Example:
        >>> first_copies([])
        []
    """
    kept: dict[str, Outcome] = {}
    for o in sorted(outcomes, key=log_order):
        kept.setdefault(idempotency_key(o.event.id, o.settings_id, o.replay_id), o)
    return list(kept.values())


def first_live(outcomes: Iterable[Outcome]) -> list[Outcome]:
    """The live record that counts for each event id (replay's baseline), in log order.

    Example:
        >>> first_live([])
        []
    """
    kept: dict[str, Outcome] = {}
    for o in sorted(outcomes, key=log_order):
        if o.replay_id is None:
            kept.setdefault(o.event.id, o)
    return list(kept.values())
