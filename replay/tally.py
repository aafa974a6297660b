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
  The rule is applied in two steps: each job's `Tally.partial` (counts, unflagged
  rows, session ids) is merged in the parent (`Summary.merge` is plain addition);
  `settle` flags the merged rows and returns each session's first behavioural change;
  every job's `Tally.after` then counts its events past those. `Tally.close` does all
  three for a single job.
- Everything here is plain data that pickles (jobs send their Summary to the parent).

Example:
    >>> t = Tally()
    >>> t.events_seen("u", 0)
    >>> s = t.close()
    >>> (s.events, s.changed)
    (1, 0)
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

__all__ = ["HookStats", "Row", "Summary", "Tally", "settle"]

HOUR_US = 3_600_000_000


@dataclass(slots=True)
class Row:
    """One changed event, as reports and the `replays` view show it."""

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
    rows: list[Row] = field(default_factory=list)
    answered: Counter[str] = field(default_factory=Counter)
    llm: dict[str, Counter[str]] = field(default_factory=dict)
    session_ids: set[str] = field(default_factory=set)  # a partial's sessions, until `settle`

    def merge(self, o: Summary) -> None:
        """Add another job's summary (jobs own disjoint sessions)."""
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
        self.rows.extend(o.rows)
        self.session_ids |= o.session_ids


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
        self._users: Counter[str] = Counter()
        self._hours: Counter[int] = Counter()

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
        self._users[user] += 1
        self._hours[ts_us // HOUR_US] += 1

    def add(self, session_id: str, ts_us: int, event_id: str, row: Row | None) -> None:
        """Record an evaluated event of a session, with its Row when it changed."""
        keys = self._sessions.get(session_id)
        if keys is None:
            keys = self._sessions[session_id] = []
        keys.append((ts_us, event_id))
        if row is not None:
            self._pending.setdefault(session_id, []).append(row)

    def not_evaluated(self) -> None:
        self.summary.not_evaluated += 1

    def _fold(self) -> None:
        s = self.summary
        for user, n in self._users.items():
            s.users.setdefault(user, Counter())["events"] += n
        for hour, n in self._hours.items():
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
        self._users.clear()
        self._hours.clear()
        self.answers.clear()
        self.runs.clear()

    def partial(self) -> Summary:
        """This job's counts before the session rule: rows not yet flagged or counted, the
        session ids seen (`settle` finishes a merge of partials; `after` then counts)."""
        self._fold()
        s = self.summary
        s.session_ids.update(self._sessions)
        for rows in self._pending.values():
            s.rows.extend(rows)
        self._pending.clear()
        return s

    def after(self, firsts: dict[str, tuple[int, str]]) -> int:
        """How many of this job's events come after their session's first behavioural
        change (`firsts`, from `settle`): the counterfactual events."""
        n = 0
        for sid, first in firsts.items():
            keys = self._sessions.get(sid)
            if keys is not None:
                n += sum(1 for k in keys if k > first)
        return n

    def close(self) -> Summary:
        """Apply the counterfactual rule per session and return the final counts (one job
        that owns its sessions whole)."""
        s = self.partial()
        s.counterfactual += self.after(settle(s))
        self._sessions.clear()
        return s


def settle(s: Summary) -> dict[str, tuple[int, str]]:
    """Apply the session rule to the rows of a merged `Tally.partial` (every job's share):
    flag counterfactual rows, count them, and return each changed session's first
    behavioural change (what `Tally.after` compares with).

    Example:
        >>> settle(Summary())
        {}
    """
    by_session: dict[str, list[Row]] = {}
    for r in s.rows:
        by_session.setdefault(r.session_id, []).append(r)
    s.rows = []
    firsts: dict[str, tuple[int, str]] = {}
    for sid, rows in by_session.items():
        behavioural = [r.key() for r in rows if r.behavioural]
        first = min(behavioural) if behavioural else None
        if first is not None:
            firsts[sid] = first
        plain_changes = False
        for r in rows:
            r.counterfactual = first is not None and r.key() > first
            _count(s, r)
            plain_changes = plain_changes or not r.counterfactual
        s.sessions_changed += plain_changes
    s.sessions += len(s.session_ids)
    s.session_ids = set()
    s.rows.sort(key=Row.key)
    return firsts


def _count(s: Summary, r: Row) -> None:
    s.rows.append(r)
    user = s.users.setdefault(r.user, Counter())
    hour = s.hours.setdefault(r.ts_us // HOUR_US, Counter())
    if r.counterfactual:
        s.counterfactual_changed += 1
        user["counterfactual_changed"] += 1
        if r.transition:
            s.counterfactual_transitions[r.transition] += 1
    else:
        s.changed += 1
        user["changed"] += 1
        hour["changed"] += 1
        hour[r.transition or "other"] += 1
        s.kinds.update(r.kinds)
        if r.transition:
            s.transitions[r.transition] += 1
    for hid in r.hooks:
        hs = s.hooks.get(hid)
        if hs is None:
            hs = s.hooks[hid] = HookStats()
        if r.counterfactual:
            hs.counterfactual_changed += 1
        else:
            hs.changed += 1
            if r.transition:
                hs.transitions[r.transition] += 1
