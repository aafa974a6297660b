"""Unit tests of replay's pure parts: diff classification and attribution, the recorded
executor's rebuilt answers, the session (counterfactual) rule and the --fail-on rules."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.aggregate import Decision
from engine.decode import decode
from engine.effects import Invocation, RawResult
from engine.events import CATALOG
from engine.hook_verdict import to_hook_run
from engine.records import HookIdentity, HookRun
from engine.settings import AgentHook, CommandHook, HttpHook, PromptHook
from replay.diff import ENGINE_HOOK, Change, attribute, compare, decision_class
from replay.recorded import RecordedExecutor, to_raw
from replay.report import fail_on
from replay.tally import Row, Summary, Tally, earliest, firsts

# ----------------------------------------------------------------------------- compare


def test_classes() -> None:
    assert decision_class(Decision()) == "none"
    assert decision_class(Decision(decision="allow")) == "allow"
    assert decision_class(Decision(decision="ask")) == "ask"
    assert decision_class(Decision(decision="defer")) == "defer"
    assert decision_class(Decision(blocked=True)) == "deny"
    assert decision_class(Decision(decision="deny")) == "deny"
    assert decision_class(Decision(continue_=False)) == "stop"
    assert decision_class(Decision(blocked=True, continue_=False)) == "deny"


@pytest.mark.parametrize(
    ("base", "cand", "transition", "kinds", "behavioural"),
    [
        (Decision(), Decision(blocked=True, decision="deny"), "none->deny", ("decision",), True),
        (Decision(decision="deny", blocked=True), Decision(), "deny->none", ("decision",), True),
        (Decision(decision="allow"), Decision(decision="ask"), "allow->ask", ("decision",), True),
        (Decision(decision="ask", reason="a"), Decision(decision="ask", reason="b"), None, ("reason",), True),
        (Decision(decision="allow", updated_input={"a": 1}), Decision(decision="allow", updated_input={"a": 2}),
         None, ("updated_input",), True),
        (Decision(additional_context=["x"]), Decision(additional_context=["x", "y"]), None, ("context_added",), True),
        (Decision(additional_context=["x", "y"]), Decision(additional_context=["y"]), None, ("context_removed",), True),
        (Decision(additional_context=["x", "y"]), Decision(additional_context=["y", "x"]), None,
         ("context_added", "context_removed"), True),
        (Decision(errors=["e1"]), Decision(errors=[]), None, ("errors_removed",), False),
        (Decision(), Decision(errors=["hook failed"]), None, ("errors_added",), False),
        (Decision(system_messages=["m"]), Decision(), None, ("system_message",), False),
        (Decision(specific={"sessionTitle": "a"}), Decision(), None, ("specific",), True),
        (Decision(), Decision(continue_=False, stop_reason="s"), "none->stop", ("decision",), True),
    ],
)  # fmt: skip
def test_compare_kinds(
    base: Decision,
    cand: Decision,
    transition: str | None,
    kinds: tuple[str, ...],
    behavioural: bool,
) -> None:
    change = compare(base, cand)
    assert change is not None
    assert change.transition == transition
    assert change.kinds == kinds
    assert change.behavioural is behavioural


def test_compare_equal_is_none() -> None:
    d = Decision(decision="ask", reason="r", additional_context=["c"], errors=["e"])
    assert (
        compare(d, Decision(decision="ask", reason="r", additional_context=["c"], errors=["e"]))
        is None
    )


# ----------------------------------------------------------------------------- attribute


def run(
    hid: str, outcome: Any = "noop", decision: str | None = None, message: str | None = None
) -> HookRun:
    ident = HookIdentity(type="command", source="project", command=hid)
    return HookRun(hook=ident, hook_id=hid, outcome=outcome, decision=decision, message=message)


def test_attribute_new_denier() -> None:
    base = [run("a"), run("b")]
    cand = [run("a"), run("b"), run("new", "deny", "deny", "no"), run("quiet")]
    assert attribute(base, cand, Change("none", "deny", ("decision",))) == ("new",)


def test_attribute_removed_denier() -> None:
    base = [run("old", "deny", "deny", "no"), run("a")]
    assert attribute(base, [run("a")], Change("deny", "none", ("decision",))) == ("old",)


def test_attribute_changed_message_and_engine() -> None:
    base = [run("a", "deny", "deny", "one")]
    cand = [run("a", "deny", "deny", "two")]
    assert attribute(base, cand, Change("deny", "deny", ("reason",))) == ("a",)
    same = [run("a", "error", message="boom")]
    assert attribute(same, same, Change("none", "deny", ("decision",))) == (ENGINE_HOOK,)


# ----------------------------------------------------------------------------- recorded answers

KINDS = ["command", "http", "prompt", "agent", "python", "mcp_tool"]
EVENTS = [
    "PreToolUse",
    "PostToolUse",
    "UserPromptSubmit",
    "Stop",
    "PermissionRequest",
    "SessionStart",
]
STDOUTS = [
    "",
    "plain text",
    '{"decision": "block", "reason": "r"}',
    '{"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny", "permissionDecisionReason": "x"}}',
    '{"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "allow", "updatedInput": {"command": "ls"}}}',
    '{"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "maybe"}}',
    '{"continue": false, "stopReason": "halt"}',
    '{"ok": true}',
    '{"ok": false, "reason": "no"}',
    '{"ok": "yes"}',
    '{"async": true}',
    "{not json",
    '{"hookSpecificOutput": {"hookEventName": "UserPromptSubmit", "additionalContext": "ctx"}}',
]  # fmt: skip
ERRORS = [
    None,
    None,
    None,
    "timeout",
    "spawn_failed",
    "cancelled",
    "llm_transport",
    "python_exception",
]


def invocation(kind: str, event: str) -> Invocation:
    hook: Any = {
        "command": CommandHook(type="command", command="h.sh"),
        "mcp_tool": None,
        "http": HttpHook(type="http", url="http://127.0.0.1:1/h"),
        "prompt": PromptHook(type="prompt", prompt="p"),
        "agent": AgentHook(type="agent", prompt="p"),
        "python": None,
    }[kind]
    ident = HookIdentity(
        type=kind, source="project", command="h.sh" if kind == "command" else None,
        url="http://127.0.0.1:1/h" if kind == "http" else None,
        prompt="p" if kind in ("prompt", "agent") else None,
        callable="m:f" if kind == "python" else None,
        server="s" if kind == "mcp_tool" else None, tool="t" if kind == "mcp_tool" else None,
    )  # fmt: skip
    payload = {"hook_event_name": event, "session_id": "s", "cwd": "/", "tool_name": "Bash",
               "tool_input": {"command": "rm -rf /"}}  # fmt: skip
    return Invocation(0, event, hook, ident, "project", None, 10.0, payload, b"{}", "/")


raws = st.builds(
    RawResult,
    exit_code=st.sampled_from([None, 0, 1, 2, 127]),
    stdout=st.sampled_from(STDOUTS),
    stderr=st.sampled_from(["", "oops", "denied by policy\nsecond line"]),
    http_status=st.sampled_from([None, 200, 204, 500]),
    error_kind=st.sampled_from(ERRORS),
    error=st.sampled_from([None, "it broke"]),
    output=st.sampled_from(
        [None, {"decision": "block", "reason": "py"}, {"continue": False}, {"x": 1}]
    ),
    pending=st.booleans(),
    duration_ms=st.floats(0, 100),
)


@settings(max_examples=600, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(kind=st.sampled_from(KINDS), event=st.sampled_from(EVENTS), raw=raws,
       profile=st.sampled_from(["current", "legacy"]))  # fmt: skip
def test_recorded_answer_decodes_to_the_recorded_verdict(
    kind: str, event: str, raw: RawResult, profile: Any
) -> None:
    if event not in CATALOG:
        return
    inv = invocation(kind, event)
    verdict = decode(inv, raw, profile=profile)
    stored = to_hook_run(inv, raw, verdict)
    again_raw = to_raw(stored, inv, profile=profile)
    again = decode(inv, again_raw, profile=profile)
    assert again == verdict
    assert to_hook_run(inv, again_raw, again) == stored


def test_recorded_executor_hands_out_runs_in_order_and_counts() -> None:
    inv = invocation("command", "PreToolUse")
    key = inv.identity.key()
    first = HookRun(hook=inv.identity, hook_id=key, outcome="noop", exit_code=0, stdout="1")
    second = HookRun(hook=inv.identity, hook_id=key, outcome="noop", exit_code=0, stdout="2")
    rec = RecordedExecutor([first, second])
    assert [asyncio.run(rec.run(inv)).stdout for _ in range(2)] == ["1", "2"]
    with pytest.raises(LookupError):
        asyncio.run(rec.run(inv))
    assert (rec.hits, rec.misses, rec.reused) == (2, 1, [key, key])


def test_recorded_executor_matches_an_identity_stored_under_another_key() -> None:
    inv = invocation("command", "PreToolUse")
    old = HookRun(
        hook=inv.identity, hook_id="hashed-by-an-older-engine", outcome="noop", exit_code=0
    )
    assert RecordedExecutor([old]).answer(inv) is not None


# ----------------------------------------------------------------------------- sessions


def row(sid: str, t: int, transition: str | None, kinds: tuple[str, ...] = ("decision",)) -> Row:
    b, _, c = (transition or "none->none").partition("->")
    return Row(f"{sid}-{t}", t, sid, "u", "h", "PreToolUse", "Bash", "Bash: x", b, c,
               transition, kinds, ("h1",), any(k != "errors_added" for k in kinds))  # fmt: skip


def test_counterfactual_rule() -> None:
    t = Tally()
    # s1: change at t=2 (behavioural) -> t=3, t=4 counterfactual (t=4 changed too)
    # s2: errors-only change at t=1 (not behavioural) then a deny at t=2; nothing after
    # s3: arrives out of order; first change t=5, the event at t=1 is not counterfactual
    plan = [
        ("s1", 1, None), ("s1", 2, row("s1", 2, "none->deny")), ("s1", 3, None),
        ("s1", 4, row("s1", 4, "none->ask")),
        ("s2", 1, row("s2", 1, None, ("errors_added",))), ("s2", 2, row("s2", 2, "allow->deny")),
        ("s3", 9, None), ("s3", 5, row("s3", 5, "deny->none")), ("s3", 1, None),
    ]  # fmt: skip
    for sid, ts, r in plan:
        t.events_seen("u", ts)
        t.add(sid, ts, f"{sid}-{ts}", r)
    s = t.close()
    assert s.events == 9 and s.sessions == 3 and s.sessions_changed == 3
    assert s.changed == 4
    assert s.transitions == {"none->deny": 1, "allow->deny": 1, "deny->none": 1}
    assert s.counterfactual == 3  # s1 t3, s1 t4, s3 t9
    assert s.counterfactual_changed == 1 and s.counterfactual_transitions == {"none->ask": 1}
    assert s.kinds == {"decision": 3, "errors_added": 1}
    assert s.hooks["h1"].changed == 4 and s.hooks["h1"].counterfactual_changed == 1


def test_the_session_rule_over_two_jobs_equals_one_job() -> None:
    plan = [
        ("s1", 1, None), ("s1", 2, row("s1", 2, "none->deny")), ("s1", 3, None),
        ("s1", 4, row("s1", 4, "none->ask")), ("s2", 1, row("s2", 1, None, ("errors_added",))),
        ("s2", 2, row("s2", 2, "allow->deny")), ("s3", 9, None), ("s3", 5, row("s3", 5, "deny->none")),
        ("s3", 1, None), ("s4", 7, row("s4", 7, "none->ask")), ("s4", 8, None),
    ]  # fmt: skip
    one, jobs = Tally(), [Tally(), Tally()]
    for i, (sid, ts, r) in enumerate(plan):
        for t, rr in ((one, r), (jobs[i % 2], copy.copy(r) if r else None)):  # sessions spread
            t.events_seen("u", ts)
            t.add(sid, ts, f"{sid}-{ts}", rr)
    whole = one.close()
    every = earliest([firsts(t.partial().rows) for t in jobs])
    assert every == {"s1": (2, "s1-2"), "s2": (2, "s2-2"), "s3": (5, "s3-5"), "s4": (7, "s4-7")}
    merged = Summary()
    for t in jobs:
        merged.merge(t.settle(every, keep=3))
    merged.finish(keep=3)
    for name in ("events", "changed", "counterfactual", "counterfactual_changed", "sessions",
                 "sessions_changed", "transitions", "counterfactual_transitions", "kinds",
                 "labels"):  # fmt: skip
        assert getattr(merged, name) == getattr(whole, name), name
    assert merged.counterfactual == 4  # s1 t3, s1 t4, s3 t9, s4 t8
    assert [r.key() for r in merged.rows] == [r.key() for r in whole.rows][:3]
    assert [r.counterfactual for r in merged.rows] == [r.counterfactual for r in whole.rows][:3]


# ----------------------------------------------------------------------------- --fail-on


@pytest.mark.parametrize(
    ("transitions", "changed", "matched"),
    [
        ({}, 0, []),
        ({"none->deny": 1}, 1, ["new-deny", "any"]),
        ({"allow->stop": 1}, 1, ["new-deny", "any"]),
        ({"deny->none": 1}, 1, ["new-allow", "any"]),
        ({"ask->allow": 2}, 2, ["new-allow", "any"]),
        ({"none->allow": 1}, 1, ["new-allow", "any"]),
        ({"deny->ask": 1}, 1, ["any"]),
        ({}, 3, ["any"]),  # changed without a class change (context, reasons)
    ],
)
def test_fail_on(transitions: dict[str, int], changed: int, matched: list[str]) -> None:
    report = {"transitions": transitions, "changed": changed}
    assert fail_on(report, ["new-deny", "new-allow", "any"]) == matched


def test_fail_on_unknown_rule() -> None:
    with pytest.raises(ValueError, match="unknown rule"):
        fail_on({}, ["sometimes"])
