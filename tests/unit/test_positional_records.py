"""The records the hot path builds positionally (`to_outcome`, `build_verdict`,
`aggregate`) are built with each value in its own field.

A field added in the middle of `Outcome`, `HookVerdict` or `Decision` would shift every
later value by one without an error: these tests fail first.
"""

from __future__ import annotations

from engine.aggregate import Decision, aggregate
from engine.flow import Evaluation
from engine.hook_verdict import HookVerdict, build_verdict, example_invocation
from engine.outcome import to_outcome
from engine.plan import Plan
from engine.records import Outcome, new_event
from engine.sources import merge


def test_outcome_fields_in_the_order_to_outcome_passes_them() -> None:
    assert Outcome.__struct_fields__[:18] == (
        "event", "settings_id", "engine_version", "posture", "profile", "blocked",
        "decision", "reason", "updated_input", "additional_context", "system_messages",
        "continue_", "stop_reason", "specific", "runs", "errors", "rules", "replay_id",
    )  # fmt: skip


def test_to_outcome_puts_each_value_in_its_field() -> None:
    event = new_event({"hook_event_name": "PreToolUse", "session_id": "s"})
    d = Decision(
        blocked=True, decision="deny", reason="r", updated_input={"u": 1},
        additional_context=["ctx"], system_messages=["sys"], continue_=False,
        stop_reason="stop", specific={"k": 1}, errors=["err"], rules=["rule"],
    )  # fmt: skip
    plan = Plan((), ())  # type: ignore[call-arg]
    ev = Evaluation(plan, (), (), d, "enforcing", "legacy")
    eff = merge([])
    out = to_outcome(event, ev, eff, replay_id="rp")
    assert (out.event, out.settings_id, out.posture, out.profile) == (
        event, eff.settings_id, "enforcing", "legacy",
    )  # fmt: skip
    assert (out.blocked, out.decision, out.reason, out.updated_input) == (
        True, "deny", "r", {"u": 1},
    )  # fmt: skip
    assert (out.additional_context, out.system_messages, out.continue_, out.stop_reason) == (
        ["ctx"], ["sys"], False, "stop",
    )  # fmt: skip
    assert (out.specific, out.runs, out.errors, out.rules, out.replay_id) == (
        {"k": 1}, [], ["err"], ["rule"], "rp",
    )  # fmt: skip


def test_build_verdict_puts_each_value_in_its_field() -> None:
    v = build_verdict(
        "deny", blocking=True, message="m", permission_decision="deny", reason="r",
        updated_input={"a": 1}, context=["c"], system_message="s", continue_=False,
        stop_reason="st", specific={"k": 1}, output={"o": 1}, error_kind="e", pending=True,
        block_form="json", nulls=("x",),
    )  # fmt: skip
    assert v == HookVerdict(
        outcome="deny", blocking=True, message="m", permission_decision="deny", reason="r",
        updated_input={"a": 1}, additional_context=("c",), system_message="s",
        continue_=False, stop_reason="st", specific={"k": 1}, output={"o": 1},
        error_kind="e", pending=True, block_form="json", nulls=("x",),
    )  # fmt: skip


def test_aggregate_puts_each_value_in_its_field() -> None:
    inv = example_invocation("PreToolUse", {"tool_name": "Bash"})
    v = build_verdict(
        "deny", blocking=True, permission_decision="deny", message="no", context=["c"],
        system_message="s", block_form="json", nulls=("x",),
    )  # fmt: skip
    d = aggregate("PreToolUse", inv.payload, [(inv, v)])
    assert (d.blocked, d.decision, d.reason) == (True, "deny", "no")
    assert (d.additional_context, d.system_messages, d.continue_) == (["c"], ["s"], True)
    assert (d.rules, d.block_form, d.block_text, d.plain) == (
        ["null-read-as-absent"], "json", None, None,
    )  # fmt: skip
    assert (d.no_verdict, d.failed) == (False, False)
    assert Decision.__struct_fields__ == (
        "blocked", "decision", "reason", "updated_input", "additional_context",
        "system_messages", "continue_", "stop_reason", "specific", "errors", "rules",
        "block_form", "block_text", "plain", "no_verdict", "failed",
    )  # fmt: skip
