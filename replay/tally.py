"""Count what a replay found, session by session, in a form jobs can merge.

Rules of this file:
- A `Tally` is fed one evaluated event at a time, in any order. The session rule:
  events are ordered by (time, event id) inside their session; after the session's
  first **behavioural** change (`diff.BEHAVIOURAL`) every later event is
  **counterfactual** (the agent would have acted differently, so that history would
  not have happened). Counterfactual events are counted apart: their changes are in
  ``counterfactual_changed`` and ``counterfactual_transitions``, never in ``changed``
  and ``transitions``.
- Jobs read disjoint parts of the log, so a session may be spread over several jobs.
  The rule is applied in two steps: each job sends the `firsts` of its rows (after
  `Tally.partial`) to the parent, which merges them (`earliest`) and sends them back;
  each job then `Tally.settle`s (flags and counts its rows and its counterfactual
  events) and sends its Summary; the parent adds them (`Summary.merge`, plain
  addition) and `Summary.finish`es. `Tally.close` does it all for a single job.
- Everything here is plain data that pickles (jobs send their Summary to the parent).

Example:
    >>> t = Tally()
    >>> t.events_seen("u", 0)
    >>> s = t.close()
    >>> (s.events, s.changed)
    (1, 0)
"""

from __future__ import annotations

import heapq
from collections import Counter
from dataclasses import dataclass, field, fields
from operator import attrgetter
from typing import Any

import msgspec

__all__ = ["HookStats", "Row", "Summary", "Tally", "earliest", "firsts"]

HOUR_US = 3_600_000_000


class Row(msgspec.Struct, array_like=True, gc=False):
    """One changed event, as reports and the `replays` view show it (a Struct: a job

    Untracked by the garbage collector (``gc=False``): one is made per event, and it
    can never be part of a reference cycle (it holds values and decoded JSON only).
    """

    event_id: str
    ts_us: int
    session_id: str
    user: str
    host: str
    event: str
    tool_name: str | None
    label: str
    baseline: str
    candidate: str
    transition: str | None
    kinds: tuple[str, ...]
    hooks: tuple[str, ...]
    behavioural: bool
    counterfactual: bool = False
    baseline_reason: str | None = None
    candidate_reason: str | None = None

    def key(self) -> tuple[int, str]:
        return (self.ts_us, self.event_id)


@dataclass(slots=True)
class HookStats:
    """One hook's numbers in a replay (`meta` says which hook: label, type, source…)."""

    meta: dict[str, Any] = field(default_factory=dict)
    ran: int = 0
    reused: int = 0
    executed: int = 0
    not_evaluated: int = 0
    errors: int = 0
    changed: int = 0
    counterfactual_changed: int = 0
    transitions: Counter[str] = field(default_factory=Counter)

    def merge(self, other: HookStats) -> None:
        self.meta = self.meta or other.meta
        self.ran += other.ran
        self.reused += other.reused
        self.executed += other.executed
        self.not_evaluated += other.not_evaluated
        self.errors += other.errors
        self.changed += other.changed
        self.counterfactual_changed += other.counterfactual_changed
        self.transitions.update(other.transitions)


@dataclass(slots=True)
class Summary:
    """The merged counts of a replay (or of one job's share of it)."""

    selected: int = 0
    events: int = 0
    not_evaluated: int = 0
    changed: int = 0
    counterfactual: int = 0
    counterfactual_changed: int = 0
    sessions: int = 0
    sessions_changed: int = 0
    transitions: Counter[str] = field(default_factory=Counter)
    counterfactual_transitions: Counter[str] = field(default_factory=Counter)
    kinds: Counter[str] = field(default_factory=Counter)
    hooks: dict[str, HookStats] = field(default_factory=dict)
    users: dict[str, Counter[str]] = field(default_factory=dict)
    hours: dict[int, Counter[str]] = field(default_factory=dict)
    rows: list[Row] = field(default_factory=list)  # the first `keep` by (time, event id)
    labels: dict[str, Counter[str]] = field(default_factory=dict)  # label -> transitions
    answered: Counter[str] = field(default_factory=Counter)
    llm: dict[str, Counter[str]] = field(default_factory=dict)
    # a job's sessions, and those with a change that is not counterfactual (`finish`)
    session_ids: set[str] = field(default_factory=set)
    changed_session_ids: set[str] = field(default_factory=set)

    def __getstate__(self) -> dict[str, Any]:
        state = {f.name: getattr(self, f.name) for f in fields(self)}
        state["rows"] = _rows_enc.encode(self.rows)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        for name, value in state.items():
            setattr(self, name, _rows_dec.decode(value) if name == "rows" else value)

    def merge(self, o: Summary) -> None:
        """Add another job's summary."""
        for name in (
            "selected", "events", "not_evaluated", "changed", "counterfactual",
            "counterfactual_changed", "sessions", "sessions_changed",
        ):  # fmt: skip
            setattr(self, name, getattr(self, name) + getattr(o, name))
        self.transitions.update(o.transitions)
        self.counterfactual_transitions.update(o.counterfactual_transitions)
        self.kinds.update(o.kinds)
        self.answered.update(o.answered)
        for hid, hs in o.hooks.items():
            self.hooks.setdefault(hid, HookStats()).merge(hs)
        for user, c in o.users.items():
            self.users.setdefault(user, Counter()).update(c)
        for hour, c in o.hours.items():
            self.hours.setdefault(hour, Counter()).update(c)
        for hid, c in o.llm.items():
            self.llm.setdefault(hid, Counter()).update(c)
        for label, c in o.labels.items():
            have = self.labels.get(label)
            if have is None:
                self.labels[label] = c
            else:
                have.update(c)
        self.rows.extend(o.rows)
        self.session_ids |= o.session_ids
        self.changed_session_ids |= o.changed_session_ids

    def finish(self, keep: int | None = None) -> None:
        """Count the sessions (after every job's Summary is merged); keep the first `keep`
        rows (all when None) in (time, event id) order."""
        self.sessions = len(self.session_ids)
        self.sessions_changed = len(self.changed_session_ids)
        self.session_ids, self.changed_session_ids = set(), set()
        self.rows.sort(key=_ROW_KEY)  # each job's rows are sorted: this merges them
        if keep is not None:
            del self.rows[keep:]


class Tally:
    """Accumulates one job's evaluated events; `close()` returns its Summary."""

    def __init__(self) -> None:
        self.summary = Summary()
        self._sessions: dict[str, list[tuple[int, str]]] = {}
        self._pending: dict[str, list[Row]] = {}
        # Hot counters, folded into `summary` by `close`: cheap to bump once per event.
        self.answers: Counter[tuple[str, str]] = Counter()  # (hook_id, how)
        self.runs: Counter[tuple[str, bool]] = Counter()  # (hook_id, was an error)
        self.meta: dict[str, dict[str, Any]] = {}  # hook_id -> what a report shows of it
        self.users: Counter[str] = Counter()
        self.hours: Counter[int] = Counter()

    def hook(self, hook_id: str, meta: dict[str, Any] | None = None) -> HookStats:
        """The stats of a hook (created with `meta` on first sight)."""
        hs = self.summary.hooks.get(hook_id)
        if hs is None:
            hs = self.summary.hooks[hook_id] = HookStats(meta=meta or {})
        elif meta and not hs.meta:
            hs.meta = meta
        return hs

    def events_seen(self, user: str, ts_us: int) -> None:
        """Count an event that was evaluated (changed or not) for the per-user and time charts."""
        self.summary.events += 1
        self.users[user] += 1
        self.hours[ts_us // HOUR_US] += 1

    def add(self, session_id: str, ts_us: int, event_id: str, row: Row | None) -> None:
        """Record an evaluated event of a session, with its Row when it changed."""
        keys = self._sessions.get(session_id)
        if keys is None:
            keys = self._sessions[session_id] = []
        keys.append((ts_us, event_id))
        if row is not None:
            self._pending.setdefault(session_id, []).append(row)

    def counterfactual_row(self, user: str, transition: str | None, hooks: tuple[str, ...]) -> None:
        """Count a changed event known to be counterfactual whose Row is never shown, as
        `settle` counts a counterfactual row."""
        _count_counterfactual(self.summary, _counter(self.summary.users, user), transition, hooks)

    def not_evaluated(self) -> None:
        self.summary.not_evaluated += 1

    def _fold(self) -> None:
        s = self.summary
        for user, n in self.users.items():
            s.users.setdefault(user, Counter())["events"] += n
        for hour, n in self.hours.items():
            s.hours.setdefault(hour, Counter())["events"] += n
        for (hid, how), n in self.answers.items():
            hs = self.hook(hid, self.meta.get(hid))
            setattr(hs, how, getattr(hs, how) + n)
            s.answered[how] += n
        for (hid, error), n in self.runs.items():
            hs = self.hook(hid, self.meta.get(hid))
            hs.ran += n
            hs.errors += n if error else 0
        for hid, meta in self.meta.items():
            self.hook(hid, meta)
        self.users.clear()
        self.hours.clear()
        self.answers.clear()
        self.runs.clear()

    def partial(self) -> Summary:
        """This job's counts before the session rule: its rows not yet flagged or counted
        (`firsts` reads them; `settle` then finishes the job's Summary)."""
        self._fold()
        s = self.summary
        s.session_ids.update(self._sessions)
        for rows in self._pending.values():
            s.rows.extend(rows)
        self._pending.clear()
        return s

    def settle(self, first_changes: dict[str, tuple[int, str]], keep: int | None = None) -> Summary:
        """Apply the session rule with every job's `firsts` (merged by `earliest`): flag
        and count this job's rows, count its events past their session's first
        behavioural change. The rows kept are the first `keep` (all when None) by
        (time, event id), in that order: the counts above cover every row."""
        s = self.summary
        rows = s.rows
        for r in rows:
            first = first_changes.get(r.session_id)
            r.counterfactual = first is not None and (r.ts_us, r.event_id) > first
            _count(s, r)
            if not r.counterfactual:
                s.changed_session_ids.add(r.session_id)
        for sid, first in first_changes.items():
            keys = self._sessions.get(sid)
            if keys is not None:
                s.counterfactual += sum(k > first for k in keys)
        s.rows = (
            sorted(rows, key=_ROW_KEY)
            if keep is None
            else heapq.nsmallest(keep, rows, key=_ROW_KEY)
        )
        return s

    def close(self) -> Summary:
        """The final Summary of a job that owns its sessions whole (a single job)."""
        s = self.settle(firsts(self.partial().rows))
        s.finish()
        return s


def firsts(rows: list[Row]) -> dict[str, tuple[int, str]]:
    """The first behavioural change of each session among `rows` (by time, event id).

    Example:
        >>> firsts([])
        {}
    """
    found: dict[str, tuple[int, str]] = {}
    for r in rows:
        if r.behavioural:
            key = r.key()
            have = found.get(r.session_id)
            if have is None or key < have:
                found[r.session_id] = key
    return found


def earliest(many: list[dict[str, tuple[int, str]]]) -> dict[str, tuple[int, str]]:
    """`firsts` of several jobs merged: the earliest per session.

    Example:
        >>> earliest([{"s": (2, "b")}, {"s": (1, "z")}])
        {'s': (1, 'z')}
    """
    out: dict[str, tuple[int, str]] = {}
    for found in many:
        for sid, key in found.items():
            have = out.get(sid)
            if have is None or key < have:
                out[sid] = key
    return out


def _counter(where: dict[Any, Counter[str]], key: Any) -> Counter[str]:
    c = where.get(key)
    if c is None:
        c = where[key] = Counter()
    return c


def _count_counterfactual(
    s: Summary, user: Counter[str], transition: str | None, hooks: tuple[str, ...]
) -> None:
    s.counterfactual_changed += 1
    user["counterfactual_changed"] += 1
    if transition:
        s.counterfactual_transitions[transition] += 1
    for hid in hooks:
        hs = s.hooks.get(hid)
        if hs is None:
            hs = s.hooks[hid] = HookStats()
        hs.counterfactual_changed += 1


def _count(s: Summary, r: Row) -> None:
    user = _counter(s.users, r.user)
    if r.counterfactual:
        _count_counterfactual(s, user, r.transition, r.hooks)
        return
    s.changed += 1
    user["changed"] += 1
    hour = _counter(s.hours, r.ts_us // HOUR_US)
    hour["changed"] += 1
    hour[r.transition or "other"] += 1
    _counter(s.labels, r.label)[r.transition or "other"] += 1
    s.kinds.update(r.kinds)
    if r.transition:
        s.transitions[r.transition] += 1
    for hid in r.hooks:
        hs = s.hooks.get(hid)
        if hs is None:
            hs = s.hooks[hid] = HookStats()
        hs.changed += 1
        if r.transition:
            hs.transitions[r.transition] += 1


_ROW_KEY = attrgetter("ts_us", "event_id")
_rows_enc = msgspec.msgpack.Encoder()
_rows_dec = msgspec.msgpack.Decoder(list[Row])
