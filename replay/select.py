"""Select the historical events a replay re-evaluates, straight from the append-only log.

Rules of this file:
- The log is found and read through `ingest.log` (`segments`, `iter_raw_lines`); sealed
  segments through their flat columns when they have them (`ingest.log.scan`: records are
  filtered before they are decoded, and handed out as memoryviews of the Arrow buffer).
  Nothing here writes.
- An unreadable record is skipped with a warning (`hookaudit verify` names it).
- A baseline is a live outcome (``replay_id`` is null). An event stored twice (a
  re-delivery appended by two workers) is selected once: the first copy in log order
  (worker, then seq, then row), so the same log always gives the same selection.
  Reading the whole log in order, `select` finds the later copies itself; a job that
  reads only some segments (`segs`) is told them (`skip`, from `replay.parts`).
- Records are decoded lazily: `Selected.base` holds the decision fields, its runs as raw
  JSON (`Selected.runs()` parses just them); `Selected.outcome()` decodes the whole record.

Example:
    >>> sel = Selection(since=parse_when("2026-03-01"), event=("PreToolUse",))
    >>> sel.matches_ts(parse_when("2026-03-02").timestamp() * 1e6)
    True
"""

from __future__ import annotations

import logging
import re
import tempfile  # noqa: F401  (docstring examples)
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, NamedTuple

import msgspec

from engine.payload import stored_payload
from engine.records import ENGINE_VERSION, HookEvent, HookRun, Outcome
from ingest.log.layout import Segment, segments
from ingest.log.lines import HEAD_TS
from ingest.log.reader import hashed_lines, iter_raw_lines
from ingest.log.scan import sealed_rows

__all__ = [
    "BaseRecord",
    "ChainPosition",
    "Piece",
    "RunVerdict",
    "Selected",
    "Selection",
    "parse_when",
    "select",
]

_logger = logging.getLogger(__name__)
_RELATIVE = re.compile(r"^(\d+(?:\.\d+)?)\s*([smhdw])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_NONE: frozenset[int] = frozenset()
_NO_RUNS = msgspec.Raw(b"[]")


def parse_when(text: str, *, now: datetime | None = None) -> datetime:
    """An ISO 8601 date/time (UTC when no offset) or a duration back from now: ``30d``, ``12h``.

    >>> parse_when("2026-03-01T10:00:00").isoformat()
    '2026-03-01T10:00:00+00:00'
    >>> parse_when("2d", now=datetime(2026, 3, 3, tzinfo=UTC)).day
    1
    """
    value = text.strip()
    m = _RELATIVE.match(value)
    if m:
        base = now or datetime.now(UTC)
        try:
            return base - timedelta(seconds=float(m.group(1)) * _UNITS[m.group(2)])
        except (OverflowError, ValueError):
            raise ValueError(f"{text!r}: reaches back before the year 1") from None
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError as exc:
        raise ValueError(
            f"{text!r}: expected an ISO 8601 time (2026-03-01T10:00:00Z) or a duration (30d, 12h)"
        ) from exc
    return when if when.tzinfo else when.replace(tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Selection:
    """Which events to replay: a time range, one session, some event types, event ids."""

    since: datetime | None = None
    until: datetime | None = None
    session: str | None = None
    event: tuple[str, ...] = ()
    where: str | None = None
    ids: frozenset[str] | None = None  # the ids `--where` selected (None: no SQL filter)
    _lo: float = field(default=0.0, init=False, repr=False, compare=False)
    _hi: float = field(default=0.0, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        lo = self.since.timestamp() * 1e6 if self.since is not None else float("-inf")
        hi = self.until.timestamp() * 1e6 if self.until is not None else float("inf")
        object.__setattr__(self, "_lo", lo)
        object.__setattr__(self, "_hi", hi)

    @property
    def lo_us(self) -> float:
        """`since` in µs since the epoch (-inf when open)."""
        return self._lo

    @property
    def hi_us(self) -> float:
        """`until` in µs since the epoch (inf when open)."""
        return self._hi

    def matches_ts(self, ts_us: float) -> bool:
        """Whether an event time (µs since the epoch) lies in [since, until)."""
        return self._lo <= ts_us < self._hi

    def matches(self, event_id: str, ts_us: float, event: str, session_id: str) -> bool:
        if self.session is not None and session_id != self.session:
            return False
        if self.event and event not in self.event:
            return False
        if self.ids is not None and event_id not in self.ids:
            return False
        return self.matches_ts(ts_us)

    def describe(self) -> dict[str, Any]:
        """The selection as it enters the replay digest."""
        return {
            "since": self.since.isoformat() if self.since else None,
            "until": self.until.isoformat() if self.until else None,
            "session": self.session,
            "event": sorted(self.event),
            "where": self.where,
        }


class BaseRecord(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    """The decision fields of a stored Outcome (what a diff reads); its runs are kept as
    raw JSON, decoded only for the rows a report shows (a test keeps every field equal to
    Outcome's: tests/unit/test_record_copies.py).

    Untracked by the garbage collector (``gc=False``): one is made per event, and it
    can never be part of a reference cycle (it holds values and decoded JSON only).
    """

    event: HookEvent
    settings_id: str
    engine_version: str = ENGINE_VERSION
    posture: str = "compat"
    profile: str = "current"
    blocked: bool = False
    decision: str | None = None
    reason: str | None = None
    updated_input: dict[str, Any] | None = None
    additional_context: list[str] = msgspec.field(default_factory=list)
    system_messages: list[str] = msgspec.field(default_factory=list)
    continue_: bool = msgspec.field(default=True, name="continue")
    stop_reason: str | None = None
    specific: dict[str, Any] = msgspec.field(default_factory=dict)
    errors: list[str] = msgspec.field(default_factory=list)
    runs: msgspec.Raw = msgspec.field(default_factory=lambda: _NO_RUNS)
    replay_id: str | None = None
    worker: str = ""
    seq: int = 0
    hash: str = ""


_base_decoder = msgspec.json.Decoder(BaseRecord)
_outcome_decoder = msgspec.json.Decoder(Outcome)
_runs_decoder = msgspec.json.Decoder(list[HookRun])


class RunVerdict(msgspec.Struct, frozen=True, gc=False):
    """What attribution reads of a stored hook run (`replay.diff.attribute`): decoded
    without the hook's identity, in half the time of a whole `HookRun`."""

    hook_id: str
    outcome: str
    error_kind: str | None = None
    message: str | None = None
    output: dict[str, Any] | None = None
    decision: str | None = None


_verdicts_decoder = msgspec.json.Decoder(list[RunVerdict])


class _EventKey(msgspec.Struct):
    id: str
    ts: datetime
    event: str
    session_id: str = ""


class _LineKey(msgspec.Struct):
    event: _EventKey
    replay_id: str | None = None


_key_decoder = msgspec.json.Decoder(_LineKey)


class Selected(msgspec.Struct, gc=False):
    """One selected baseline record: its exact line and its decoded decision fields.

    A Struct without GC tracking (it never holds a cycle): one is made per event, and a
    Struct is built several times faster than a dataclass.
    """

    line: bytes | memoryview  # the record's exact bytes (a view into a sealed segment's batch)
    base: BaseRecord
    _outcome: Outcome | None = None
    _runs: list[HookRun] | None = None
    _payload: dict[str, Any] | None = None

    def outcome(self) -> Outcome:
        """The whole stored Outcome (decoded on first use)."""
        if self._outcome is None:
            self._outcome = _outcome_decoder.decode(self.line)
        return self._outcome

    def runs(self) -> list[HookRun]:
        """The stored HookRuns (decoded on first use, without the rest of the record)."""
        if self._runs is None:
            self._runs = (
                self._outcome.runs
                if self._outcome is not None
                else _runs_decoder.decode(self.base.runs)
            )
        return self._runs

    def verdicts(self) -> list[RunVerdict]:
        """The stored runs' verdicts, for attribution (the runs, when already decoded)."""
        if self._runs is not None:
            return self._runs  # type: ignore[return-value]  # HookRun has every field
        return _verdicts_decoder.decode(self.base.runs)

    def payload(self) -> dict[str, Any]:
        """The event's hook input as a dict (decoded on first use)."""
        if self._payload is None:
            self._payload = stored_payload(self.base.event.payload, f"event {self.base.event.id}")
        return self._payload


class Piece(NamedTuple):
    """Rows [lo, hi) (numbers from 1) of a segment: a share of it for one replay job."""

    segment: Segment
    lo: int
    hi: int


@dataclass(frozen=True, slots=True)
class ChainPosition:
    """The last selected record of one worker chain: it commits to the chain up to it."""

    seq: int
    hash: str


# How `ingest.log.writer.LogWriter` writes a record: the event's id, then its time, first
# (`ingest.log.lines.HEAD_TS`). A line laid out otherwise is decoded to read its time.
_HEAD_TS = HEAD_TS


def _iso(text: bytes) -> datetime | None:
    """An RFC 3339 time with its offset, as the log writes it (None otherwise)."""
    try:
        when = datetime.fromisoformat(text.decode("ascii"))
    except ValueError:
        return None
    return when if when.tzinfo is not None else None


def _active_rows(
    seg: Segment,
    sel: Selection,
    skip: frozenset[int],
    span: tuple[int, int] | None,
    digests: dict[str, str] | None,
) -> Iterator[bytes]:
    only_time = sel.session is None and not sel.event and sel.ids is None
    everything = only_time and sel.since is None and sel.until is None
    lo, hi = span if span is not None else (1, float("inf"))
    lines: Iterable[tuple[int, bytes]]
    if digests is None:
        lines = iter_raw_lines(seg)
    else:
        digests[seg.name], lines = hashed_lines(seg)
    for n, raw in lines:
        if n in skip or not lo <= n < hi:
            continue
        if everything:  # no filter to apply before `select` decodes the record
            yield raw
            continue
        if only_time:  # a time window: read the event time from the line's head
            m = _HEAD_TS.match(raw)
            when = _iso(m.group(1)) if m is not None else None
            if when is not None:
                if sel.matches_ts(when.timestamp() * 1e6):
                    yield raw  # `select` decodes it (and skips it if it is a replay's)
                continue
        try:
            key = _key_decoder.decode(raw)
        except (msgspec.DecodeError, RecursionError) as exc:
            _logger.warning("%s: skipped an unreadable record: %s", seg.name, exc)
            continue
        ev = key.event
        if key.replay_id is not None:
            continue
        if sel.matches(ev.id, ev.ts.timestamp() * 1e6, ev.event, ev.session_id):
            yield raw


def select(
    data_dir: str | Path,
    sel: Selection,
    *,
    segs: Iterable[Segment | Piece] | None = None,
    skip: Mapping[str, frozenset[int]] | None = None,
    digests: dict[str, str] | None = None,
) -> Iterator[Selected]:
    """The baseline records a replay job evaluates, once per event id, in log order.

    `segs` reads only those segments or pieces of segments (default: all, in log order);
    `skip` then names the
    rows (segment name -> row numbers from 1) that are later copies of an event stored
    twice (`replay.parts.duplicates`). Without `skip`, the copies are found while reading.
    `digests` receives, per segment name, the sha256 of every byte of it that was read,
    for each segment a record was selected from (the replay digest's `read`).

    Example:
        >>> [s.base.event.id for s in select(tempfile.mkdtemp(), Selection(session="s1"))]
        []
    """
    seen: set[str] | None = set() if skip is None else None
    decode = _base_decoder.decode
    for item in segments(data_dir) if segs is None else segs:
        seg, span = (item.segment, (item.lo, item.hi)) if isinstance(item, Piece) else (item, None)
        hidden = skip.get(seg.name, _NONE) if skip is not None else _NONE
        here: dict[str, str] | None = None if digests is None else {}
        hit = False
        for rows in _records(seg, sel, hidden, span, here):
            for raw in rows:  # one loop per record, no generator between: hot
                try:
                    base = decode(raw)
                except msgspec.DecodeError as exc:
                    _logger.warning("%s: skipped an unreadable record: %s", seg.name, exc)
                    continue
                if base.replay_id is not None or base.event.rejected is not None:
                    continue  # a replay's record, or refused input (nothing to evaluate)
                if seen is not None:
                    if base.event.id in seen:
                        continue
                    seen.add(base.event.id)
                hit = True
                yield Selected(raw, base)
        if hit and here:  # a segment counts in the digest when a record of it was replayed
            digests.update(here)  # type: ignore[union-attr]  # here is set iff digests is


def _records(
    seg: Segment,
    sel: Selection,
    skip: frozenset[int],
    span: tuple[int, int] | None,
    digests: dict[str, str] | None,
) -> Iterator[Iterable[bytes | memoryview]]:
    """The records of a segment to decode: a list of views per slice of a sealed row
    group (`ingest.log.scan`), or the lines of a segment read line by line."""
    batches = sealed_rows(seg, sel, skip, span, digests) if seg.kind == "sealed" else None
    if batches is None:
        yield _active_rows(seg, sel, skip, span, digests)
        return
    for data, off, indices in batches:
        yield [data[off[i] : off[i + 1]] for i in indices]


def where_ids(data_dir: str | Path, where: str) -> frozenset[str]:
    """The ids of the live events an SQL condition over the `events` view of `queries.db`
    selects (read-only SQL; a bad condition raises `queries.db.QueryError`).

    Example:
        >>> where_ids(tempfile.mkdtemp(), "tool_name = 'Bash'")
        frozenset()
    """
    from queries import db

    con = db.open_db(data_dir)
    try:
        result = db.run_sql(con, f"SELECT DISTINCT id FROM events WHERE ({where})")
        return frozenset(str(row[0]) for batch in result.batches() for row in batch)
    finally:
        con.close()
