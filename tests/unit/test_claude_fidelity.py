"""What the differential suite against Claude Code 2.1.332 found, pinned as unit cases.

Each case names the scenario of tests/conformance/claude_code/scenarios.py that measured it.
"""

from __future__ import annotations

import json
from typing import Any

from engine.aggregate import RULES, aggregate
from engine.claude_output import decision_of, render_claude
from engine.decode import decode
from engine.effects import Invocation, RawResult
from engine.hook_verdict import HookVerdict, to_hook_run
from engine.records import HookIdentity, Outcome, new_event


def inv(event: str, index: int = 0, type: str = "command") -> Invocation:
    payload = {"hook_event_name": event, "session_id": "s", "cwd": "/w", "tool_name": "Bash"}
    return Invocation(
        index=index,
        event=event,
        hook=None,
        identity=HookIdentity(
            type=type,
            source="project",
            command=f"h{index}.sh" if type == "command" else None,
            prompt="p $ARGUMENTS" if type != "command" else None,
        ),
        source="project",
        matcher=None,
        timeout=60.0,
        payload=payload,
        input_json=json.dumps(payload).encode(),
        cwd="/w",
    )


def run(i: Invocation, **raw: Any) -> tuple[Invocation, HookVerdict, RawResult]:
    r = RawResult(**raw)
    return i, decode(i, r), r


def outcome_of(event: str, *runs: tuple[Invocation, HookVerdict, RawResult]) -> Outcome:
    d = aggregate(event, runs[0][0].payload, [(i, v) for i, v, _ in runs])
    return Outcome(
        event=new_event(runs[0][0].payload),
        settings_id="s",
        blocked=d.blocked,
        decision=d.decision,
        reason=d.reason,
        additional_context=list(d.additional_context),
        continue_=d.continue_,
        runs=[to_hook_run(i, r, v) for i, v, r in runs],
        errors=list(d.errors),
        rules=list(d.rules),
    )


def test_agent_hook_ok_false_keeps_the_old_wording() -> None:  # type.agent_deny
    v = decode(inv("PreToolUse", type="agent"), RawResult(stdout='{"ok": false, "reason": "no"}'))
    assert v.blocking and v.message == "Agent hook condition was not met: no" and v.continue_


def test_prompt_hook_ok_false_on_pretooluse_ends_the_turn() -> None:  # type.prompt_deny
    v = decode(inv("PreToolUse", type="prompt"), RawResult(stdout='{"ok": false, "reason": "no"}'))
    assert v.blocking and v.message == "no" and not v.continue_ and v.block_form == "exit"


def test_null_hook_specific_output_is_no_usable_answer() -> None:  # pre.json.null_hso
    o = outcome_of(
        "PreToolUse", run(inv("PreToolUse"), exit_code=0, stdout='{"hookSpecificOutput": null}')
    )
    assert not o.blocked and o.runs[0].error_kind == "schema" and "null" in o.errors[0]
    assert render_claude("PreToolUse", decision_of(o)) == (
        '{"hookSpecificOutput":null}',
        o.errors[0],
        0,
    )


def test_a_null_never_opens_a_gate_the_rest_closes() -> None:
    o = outcome_of(
        "PreToolUse",
        run(inv("PreToolUse"), exit_code=0, stdout='{"decision": "block", "reason": null}'),
    )
    assert o.blocked and o.decision == "deny"
    assert o.rules == ["null-read-as-absent"]  # Claude Code would discard the answer: recorded


def test_a_null_beside_nothing_else_is_no_rule_and_one_beside_context_is() -> None:
    alone = outcome_of(
        "PreToolUse", run(inv("PreToolUse"), exit_code=0, stdout='{"hookSpecificOutput": null}')
    )
    assert alone.rules == []  # no usable answer in Claude Code too: no deviation
    ctx = outcome_of(
        "UserPromptSubmit",
        run(
            inv("UserPromptSubmit"),
            exit_code=0,
            stdout='{"systemMessage": null, "hookSpecificOutput": {"hookEventName": '
            '"UserPromptSubmit", "additionalContext": "C"}}',
        ),
    )
    assert ctx.additional_context == ["C"] and ctx.rules == ["null-read-as-absent"]


def test_stop_exit2_block_is_rendered_as_exit2_with_the_exact_stderr() -> None:
    # stop.exit2_always_cap: Claude Code words an exit-2 Stop block apart from a JSON one.
    o = outcome_of("Stop", run(inv("Stop"), exit_code=2, stderr="never done"))
    assert render_claude("Stop", decision_of(o)) == ("", "never done", 2)
    o = outcome_of(
        "Stop", run(inv("Stop"), exit_code=0, stdout='{"decision": "block", "reason": "r"}')
    )
    assert render_claude("Stop", decision_of(o)) == ('{"decision":"block","reason":"r"}', "", 0)


def test_failing_stop_hook_is_rendered_as_exit1() -> None:  # stop.exit1
    o = outcome_of("Stop", run(inv("Stop"), exit_code=1, stderr="stop broke"))
    out, err, code = render_claude("Stop", decision_of(o))
    assert (out, code) == ("", 1) and "stop broke" in err


def test_plain_stdout_context_is_rendered_as_plain_stdout() -> None:  # ups.plain_stdout_context
    o = outcome_of("UserPromptSubmit", run(inv("UserPromptSubmit"), exit_code=0, stdout="PLAIN\n"))
    assert render_claude("UserPromptSubmit", decision_of(o)) == ("PLAIN", "", 0)


def test_each_outcome_records_the_deliberate_rule_that_decided_it() -> None:
    deny = '{"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "deny"}}'
    o = outcome_of(
        "PreToolUse",
        run(inv("PreToolUse", 0), exit_code=0, stdout=deny),
        run(inv("PreToolUse", 1), exit_code=2, stderr="B"),
    )
    assert o.rules == ["first-deny-in-config-order"] and set(o.rules) <= set(RULES)
    one = outcome_of("PreToolUse", run(inv("PreToolUse"), exit_code=2, stderr="A"))
    assert one.rules == []
    stop = outcome_of(
        "Stop",
        run(inv("Stop", 0), exit_code=2, stderr="A"),
        run(inv("Stop", 1), exit_code=2, stderr="B"),
    )
    assert stop.rules == ["first-block-in-config-order"] and stop.reason == "A"


def test_rules_are_kept_by_the_log_record_and_old_records_read_without_them() -> None:
    from engine.records import decode_outcome_json, encode_json

    o = Outcome(event=new_event({"hook_event_name": "Stop"}), settings_id="s", rules=["x"])
    line = encode_json(o)
    assert b'"rules":["x"],"replay_id":null,' in line  # nested values come before replay_id
    assert decode_outcome_json(line).rules == ["x"]
    old = line.replace(b'"rules":["x"],', b"")
    assert decode_outcome_json(old).rules == []
