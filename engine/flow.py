"""The decision for one event, as a generator of effects.

Rules of this file:
- Pure. The flow yields effects (`RunHooks`) and receives their results; it never
  awaits, spawns, connects or reads the clock. A driver runs it: `engine.run` for
  live evaluation, replay's recorded executor for what-if, a fake for tests.
- One flow serves every driver, so live, replayed and dry-run decisions cannot drift.
- Hostile hook output never raises here: decoding turns it into values.

Example:
    >>> from engine.sources import merge
    >>> gen = decide("Stop", {"hook_event_name": "Stop"}, b"{}", merge([]))
    >>> try:
    ...     next(gen)
    ... except StopIteration as done:
    ...     done.value.decision.blocked
    False
"""

from __future__ import annotations

from collections.abc import Collection, Generator, Mapping, Sequence
from typing import Any

import msgspec

from engine import match
from engine.effects import RawResult, RunHooks
from engine.hook_verdict import NOOP
from engine.plan import Plan, plan
from engine.records import HookRun, Posture, Profile
from engine.sources import Effective
from engine.verdict import Decision, HookVerdict, aggregate, decode, to_hook_run

__all__ = ["Evaluation", "Flow", "decide", "finish"]


class Evaluation(msgspec.Struct, frozen=True, gc=False):
    """Everything one evaluation produced: the plan, each hook's run, the decision.

    A msgspec Struct rather than a frozen dataclass: one is built per event, and a
    Struct is built several times faster.

    Untracked by the garbage collector (``gc=False``): one is made per event, and it
    can never be part of a reference cycle (it holds values and decoded JSON only).
    """

    plan: Plan
    runs: tuple[HookRun, ...]
    verdicts: tuple[HookVerdict, ...]
    decision: Decision
    posture: str
    profile: str


Flow = Generator[RunHooks, Sequence[RawResult], Evaluation]

# The decision when no hook runs depends only on (event, posture, profile).
_EMPTY_DECISIONS: dict[tuple[str, str, str], Decision] = {}


def _empty_decision(
    event: str, payload: Mapping[str, Any], posture: Posture, profile: Profile
) -> Decision:
    key = (event, posture, profile)
    empty = _EMPTY_DECISIONS.get(key)
    if empty is None:
        empty = _EMPTY_DECISIONS[key] = aggregate(
            event, payload, [], posture=posture, profile=profile
        )
    return empty


def finish(
    event: str,
    payload: Mapping[str, Any],
    the_plan: Plan,
    results: Sequence[RawResult],
    *,
    posture: Posture,
    profile: Profile,
) -> Evaluation:
    """Decode each hook's raw result and aggregate (the second half of `decide`)."""
    invocations = the_plan.invocations
    if not invocations:
        empty = _empty_decision(event, payload, posture, profile)
        return Evaluation(the_plan, (), (), empty, posture, profile)
    verdicts: list[HookVerdict] = []
    runs: list[HookRun] = []
    silent = True
    for inv, raw in zip(invocations, results, strict=True):
        v = decode(inv, raw, profile=profile)
        verdicts.append(v)
        runs.append(to_hook_run(inv, raw, v))
        silent = silent and v is NOOP
    if silent and event != "WorktreeCreate":
        # Every hook stayed silent: the decision is the one with no hooks at all
        # (WorktreeCreate excepted: hooks that give no path fail creation).
        decision = _empty_decision(event, payload, posture, profile)
    else:
        pairs = list(zip(invocations, verdicts, strict=True))
        decision = aggregate(event, payload, pairs, posture=posture, profile=profile)
    return Evaluation(the_plan, tuple(runs), tuple(verdicts), decision, posture, profile)


def decide(
    event: str,
    payload: Mapping[str, Any],
    input_json: bytes,
    eff: Effective,
    *,
    posture: Posture = "compat",
    profile: Profile = "current",
    dialect: match.Dialect = "claude",
    trusted: bool = True,
    home: str = "/root",
    sessionend_budget_ms: float | None = None,
    once_done: Collection[tuple[str, str]] = (),
) -> Flow:
    """Plan, yield one `RunHooks` effect for all matched hooks, then decode and aggregate."""
    the_plan = plan(
        event,
        payload,
        input_json,
        eff,
        profile=profile,
        dialect=dialect,
        trusted=trusted,
        home=home,
        sessionend_budget_ms=sessionend_budget_ms,
        once_done=once_done,
    )
    results: Sequence[RawResult] = ()
    if the_plan.invocations:
        results = yield RunHooks(the_plan.invocations)
    return finish(event, payload, the_plan, results, posture=posture, profile=profile)
