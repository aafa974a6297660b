"""Unit tests of the pure core: decode one hook's answer, aggregate many, render for CC."""

from __future__ import annotations

import json
import string
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.aggregate import Decision, aggregate
from engine.claude_output import render_claude
from engine.decode import STRING_CAP, Posture, Profile, decode
from engine.effects import Invocation, RawResult
from engine.events import CATALOG
from engine.hook_verdict import HookVerdict, to_hook_run
from engine.records import HookIdentity, encode_json
from engine.settings import CommandHook, PromptHook

EVENTS = sorted(CATALOG)
TYPES = ["command", "http", "prompt", "agent", "python", "mcp_tool", "wasm"]


def make_inv(
    event: str,
    payload: dict[str, Any] | None = None,
    *,
    index: int = 0,
    type: str = "command",
    command: str = "hook.sh",
    hook: Any = None,
) -> Invocation:
    full = {"hook_event_name": event, "session_id": "s1", "cwd": "/work", **(payload or {})}
    identity = HookIdentity(
        type=type,
        source="user",
        command=f"{command}#{index}" if type in ("command", "mcp_tool") else None,
        url="http://127.0.0.1:9/h" if type == "http" else None,
        prompt="ok? $ARGUMENTS" if type in ("prompt", "agent") else None,
        callable="pkg.mod:fn" if type == "python" else None,
    )
    return Invocation(
        index=index,
        event=event,
        hook=hook,
        identity=identity,
        source="user",
        matcher=None,
        timeout=600.0,
        payload=full,
        input_json=json.dumps(full).encode(),
        cwd="/work",
    )


PRE = make_inv("PreToolUse", {"tool_name": "Bash", "tool_input": {"command": "ls"}})


def out(event: str, **hso: Any) -> dict[str, Any]:
    return {"hookSpecificOutput": {"hookEventName": event, **hso}}


def dec(
    stdout: Any,
    *,
    inv: Invocation = PRE,
    code: int = 0,
    stderr: str = "",
    profile: Profile = "current",
) -> HookVerdict:
    text = stdout if isinstance(stdout, str) else json.dumps(stdout)
    return decode(inv, RawResult(exit_code=code, stdout=text, stderr=stderr), profile=profile)


def assert_loggable(inv: Invocation, raw: RawResult, v: HookVerdict) -> None:
    run = to_hook_run(inv, raw, v)
    # The parts the verdict produced must always encode (raw stdout is the executor's).
    encode_json(msgspec.structs.replace(run, stdout="", stderr=""))
    encode_json([v.message, v.reason, v.system_message, v.stop_reason, list(v.additional_context)])
    encode_json([v.specific, v.updated_input, v.output])


# --------------------------------------------------------------------------- decision forms


@pytest.mark.parametrize("decision", ["allow", "deny", "ask", "defer"])
def test_pretool_new_form(decision: str) -> None:
    v = dec(out("PreToolUse", permissionDecision=decision, permissionDecisionReason="why"))
    assert v.permission_decision == decision
    assert v.blocking is (decision == "deny")
    assert v.reason == "why"
    assert v.outcome == {"allow": "allow", "deny": "deny"}.get(decision, "noop")


@pytest.mark.parametrize(("top", "mapped"), [("approve", "allow"), ("block", "deny")])
def test_pretool_old_form_maps(top: str, mapped: str) -> None:
    v = dec({"decision": top, "reason": "r"})
    assert v.permission_decision == mapped and v.reason == "r"


def test_new_form_overrides_old_except_a_top_level_block() -> None:
    # Claude Code 2.1.332 blocks on a top-level "block" beside permissionDecision "allow"
    # (tests/conformance/claude_code: pre.json.top_decision_beside_hso); "approve" beside
    # "deny" denies (pre.json.top_approve_beside_hso_deny).
    v = dec({"decision": "block", "reason": "old", **out("PreToolUse", permissionDecision="allow")})
    assert v.permission_decision == "deny" and v.blocking and v.message == "old"
    w = dec({"decision": "approve", **out("PreToolUse", permissionDecision="deny")})
    assert w.permission_decision == "deny" and w.blocking


def test_deny_reason_fallback_chain() -> None:
    both = {
        "reason": "top",
        **out("PreToolUse", permissionDecision="deny", permissionDecisionReason="pdr"),
    }
    assert dec(both).message == "pdr"
    assert dec({"reason": "top", **out("PreToolUse", permissionDecision="deny")}).message == "top"
    assert dec(out("PreToolUse", permissionDecision="deny")).message == "Blocked by hook"
    assert dec({"decision": "block"}).message == "Blocked by hook"


def test_defer_is_current_only() -> None:
    v = dec(out("PreToolUse", permissionDecision="defer"), profile="legacy")
    assert v.outcome == "error" and v.error_kind == "schema" and "defer" in (v.message or "")


def test_updated_input_dropped_with_deny() -> None:
    v = dec(out("PreToolUse", permissionDecision="deny", updatedInput={"command": "pwd"}))
    assert v.updated_input is None
    v = dec(out("PreToolUse", permissionDecision="ask", updatedInput={"command": "pwd"}))
    assert v.updated_input == {"command": "pwd"}


@pytest.mark.parametrize(
    "event",
    [
        "PostToolUse",
        "PostToolUseFailure",
        "UserPromptSubmit",
        "Stop",
        "SubagentStop",
        "TaskCreated",
        "ConfigChange",
        "PreCompact",
        "UserPromptExpansion",
        "PostToolBatch",
    ],
)
def test_top_level_block_on_decision_events(event: str) -> None:
    inv = make_inv(event, {"source": "user_settings"} if event == "ConfigChange" else None)
    v = dec({"decision": "block", "reason": "r"}, inv=inv)
    assert v.blocking and v.message == "r" and v.outcome == "deny"


def test_legacy_precompact_cannot_block() -> None:
    inv = make_inv("PreCompact", {"trigger": "auto"})
    assert not dec({"decision": "block", "reason": "r"}, inv=inv, profile="legacy").blocking
    assert not decode(inv, RawResult(exit_code=2, stderr="x"), profile="legacy").blocking
    legacy = decode(inv, RawResult(exit_code=0, stdout="keep tests"), profile="legacy")
    assert legacy.specific["customInstructions"] == "keep tests"


@pytest.mark.parametrize("event", ["TeammateIdle", "TaskCompleted", "Notification", "SessionStart"])
def test_top_level_block_ignored_where_not_honoured(event: str) -> None:
    v = dec({"decision": "block", "reason": "r"}, inv=make_inv(event))
    assert not v.blocking


def test_permission_request_decisions() -> None:
    inv = make_inv("PermissionRequest", {"tool_name": "Bash"})
    allow = dec(
        out("PermissionRequest", decision={"behavior": "allow", "updatedInput": {"a": 1}}), inv=inv
    )
    assert (
        allow.permission_decision == "allow"
        and allow.updated_input == {"a": 1}
        and allow.outcome == "allow"
    )
    deny = dec(
        out("PermissionRequest", decision={"behavior": "deny", "message": "m", "interrupt": True}),
        inv=inv,
    )
    assert deny.permission_decision == "deny" and deny.blocking and deny.message == "m"
    bad = dec(out("PermissionRequest", decision={"behavior": "maybe"}), inv=inv)
    assert bad.error_kind == "schema"
    # permissionDecision is not a PermissionRequest field: ignored.
    assert dec(out("PermissionRequest", permissionDecision="deny"), inv=inv).outcome == "noop"


def test_elicitation_actions() -> None:
    inv = make_inv("Elicitation", {"mcp_server_name": "s"})
    assert dec(out("Elicitation", action="accept", content={"x": 1}), inv=inv).outcome == "allow"
    assert dec(out("Elicitation", action="decline"), inv=inv).outcome == "deny"
    assert dec(out("Elicitation", action="nope"), inv=inv).error_kind == "schema"
    assert not dec(out("Elicitation", action="decline"), inv=inv).blocking
    legacy = dec(out("Elicitation", action="decline"), inv=inv, profile="legacy")
    assert legacy.blocking and legacy.message == "Elicitation declined by hook"


def test_continue_false_and_discards() -> None:
    v = dec({"continue": False, "stopReason": "S", "systemMessage": "w"}, inv=make_inv("Stop"))
    assert (
        not v.continue_ and v.stop_reason == "S" and v.system_message == "w" and v.outcome == "deny"
    )
    n = dec({"continue": False, "systemMessage": "w"}, inv=make_inv("Notification"))
    assert n.continue_ and n.system_message is None
    end = dec(
        {"continue": False, "systemMessage": "w", "decision": "block"}, inv=make_inv("SessionEnd")
    )
    assert end.continue_ and end.system_message is None and not end.blocking


def test_terminal_sequence_allowlist() -> None:
    inv = make_inv("Notification", {"notification_type": "idle_prompt"})
    assert (
        dec({"terminalSequence": "\x1b]0;title\x07"}, inv=inv).specific["terminalSequence"]
        == "\x1b]0;title\x07"
    )
    assert dec({"terminalSequence": "\x07"}, inv=inv).specific["terminalSequence"] == "\x07"
    assert "terminalSequence" not in dec({"terminalSequence": "\x1b[2J"}, inv=inv).specific
    assert dec({"terminalSequence": 7}, inv=inv).error_kind == "schema"


def test_session_title_ignored_on_clear() -> None:
    fields = out("SessionStart", sessionTitle="T", additionalContext="c")
    assert (
        dec(fields, inv=make_inv("SessionStart", {"source": "startup"})).specific["sessionTitle"]
        == "T"
    )
    cleared = dec(fields, inv=make_inv("SessionStart", {"source": "clear"}))
    assert "sessionTitle" not in cleared.specific and cleared.additional_context == ("c",)


def test_null_reads_as_absent() -> None:
    v = dec({"decision": "block", "reason": None, "systemMessage": None})
    assert v.blocking and v.message == "Blocked by hook"


# --------------------------------------------------------------------------- schema failures


def test_wrong_hook_event_name() -> None:
    v = dec(out("PostToolUse", additionalContext="x"))
    assert v.outcome == "error" and v.error_kind == "wrong_event_name"
    assert (
        v.message
        == "Hook returned incorrect event name: expected 'PreToolUse' but got 'PostToolUse'"
    )
    assert dec({"hookSpecificOutput": {"permissionDecision": "deny"}}).error_kind == "schema"


@pytest.mark.parametrize(
    "obj",
    [
        {"continue": "no"},
        {"systemMessage": 1},
        {"decision": "deny"},
        {"reason": ["r"]},
        {"suppressOutput": "yes"},
        {"hookSpecificOutput": "x"},
        out("PreToolUse", permissionDecision=True),
        out("PreToolUse", updatedInput="pwd"),
        out("PreToolUse", additionalContext={"a": 1}),
    ],
)
def test_schema_failures_are_non_blocking(obj: dict[str, Any]) -> None:
    v = dec(obj)
    assert v.outcome == "error" and v.error_kind == "schema" and not v.blocking
    assert v.message is not None and v.message.startswith("JSON validation failed: ")


def test_exit2_with_schema_failing_json() -> None:
    current = dec({"decision": "deny"}, code=2, stderr="nope")
    assert current.blocking and current.message == "nope" and current.error_kind == "schema"
    legacy = dec({"decision": "deny"}, code=2, stderr="nope", profile="legacy")
    assert not legacy.blocking and legacy.outcome == "error" and legacy.error_kind == "schema"
    wrong = dec(out("Stop"), code=2, stderr="nope")
    assert wrong.blocking and wrong.error_kind == "wrong_event_name"


def test_exit2_message_prefers_json_block_reason() -> None:
    v = dec({"decision": "block", "reason": "json reason"}, code=2, stderr="stderr reason")
    assert v.message == "json reason"
    v = dec({"systemMessage": "hi"}, code=2, stderr="stderr reason")
    assert v.message == "stderr reason" and v.system_message == "hi"


def test_exit2_on_user_events_is_a_notice() -> None:
    v = decode(
        make_inv("SessionStart", {"source": "startup"}), RawResult(exit_code=2, stderr="warn")
    )
    assert v.outcome == "error" and not v.blocking and v.message == "warn"


# --------------------------------------------------------------------------- hostile output


@pytest.mark.parametrize(
    "stdout", ["[1, 2]", '"a string"', "42", "true", "null", "{not json", '{"a": 1} trailing']
)
def test_non_object_stdout_is_plain_text(stdout: str) -> None:
    v = dec(stdout)
    assert v.outcome == "noop" and v.output is None
    ups = dec(stdout, inv=make_inv("UserPromptSubmit", {"prompt": "p"}))
    assert ups.additional_context == (stdout,)


def test_profile_output_before_json_is_plain_text() -> None:
    noisy = "Welcome to zsh!\n" + json.dumps(out("PreToolUse", permissionDecision="deny"))
    v = dec(noisy)
    assert not v.blocking and v.output is None


@pytest.mark.timeout(60)  # a hang guard: speed is measured in tests/bench
def test_ten_megabytes_of_stdout() -> None:
    big = "x" * (10 * 1024 * 1024)
    v = dec(big, inv=make_inv("UserPromptSubmit", {"prompt": "p"}))
    (ctx,) = v.additional_context
    assert len(ctx) <= STRING_CAP and v.specific["capped"] == ["additionalContext"]
    big_json = dec(out("PreToolUse", additionalContext="y" * (10 * 1024 * 1024)))
    assert len(big_json.additional_context[0]) == STRING_CAP
    # Claude Code gives the model a 30,000-character reason whole (limits.pre_deny_reason)
    reason = dec({"decision": "block", "reason": "r" * 30_000})
    assert reason.message == "r" * 30_000 and "capped" not in reason.specific
    huge = dec({"decision": "block", "reason": "r" * (STRING_CAP + 5)})
    assert huge.message is not None and len(huge.message) == STRING_CAP
    assert f"truncated {STRING_CAP + 5} characters" in huge.message


def test_binary_garbage_and_invalid_utf8() -> None:
    garbage = bytes(range(256)).decode("utf-8", "replace") * 100
    escaped = b"\xff\xfe{\x00\x80".decode("utf-8", "surrogateescape")
    for text in (
        garbage,
        escaped,
        "{" + escaped,
        '{"decision": "block", "reason": "' + escaped + '"}',
    ):
        for inv in (PRE, make_inv("UserPromptSubmit", {"prompt": "p"})):
            raw = RawResult(exit_code=1, stdout=text, stderr=text)
            v = decode(inv, raw)
            assert_loggable(inv, raw, v)
            raw0 = RawResult(exit_code=0, stdout=text, stderr=text)
            assert_loggable(inv, raw0, decode(inv, raw0))


def test_lone_surrogate_escape_is_accepted_and_made_loggable() -> None:
    v = dec('{"decision": "block", "reason": "bad \\ud800 char"}')
    assert v.blocking and v.message == "bad \ufffd char"
    assert_loggable(PRE, RawResult(exit_code=0), v)


@pytest.mark.parametrize(
    "stdout",
    [
        '{"a":' + "[" * 100_000 + "]" * 100_000 + "}",
        '{"a":' + "[" * 100_000,
        '{"a":' + '{"a":' * 50_000 + "1" + "}" * 50_001,
    ],
)
def test_deeply_nested_json(stdout: str) -> None:
    v = dec(stdout)
    assert v.outcome == "noop" and not v.blocking  # unparseable here: plain text


def test_nan_and_huge_numbers() -> None:
    assert not dec('{"decision": "block", "x": NaN}').blocking  # JSON.parse rejects NaN
    assert not dec('{"decision": "block", "x": Infinity}').blocking
    huge = dec('{"decision": "block", "x": 1e400}')
    assert huge.blocking and huge.output is not None and huge.output["x"] == float("inf")
    digits = dec('{"decision": "block", "x": ' + "9" * 5000 + "}")
    assert digits.blocking
    for v in (huge, digits):
        assert_loggable(PRE, RawResult(exit_code=0), v)


def test_duplicate_keys_last_wins() -> None:
    v = dec('{"decision": "approve", "decision": "block"}')
    assert v.blocking


# --------------------------------------------------------------------------- hook types


def test_python_hooks() -> None:
    inv = make_inv("PreToolUse", {"tool_name": "Bash"}, type="python")
    assert decode(inv, RawResult(output=None)).outcome == "noop"
    v = decode(
        inv,
        RawResult(
            output=out("PreToolUse", permissionDecision="deny", permissionDecisionReason="py")
        ),
    )
    assert v.blocking and v.message == "py"
    tup = decode(inv, RawResult(output={"decision": "block", "reason": "t", "extra": (1, 2)}))
    assert tup.blocking and tup.output == {"decision": "block", "reason": "t", "extra": [1, 2]}
    weird = decode(inv, RawResult(output={"decision": "block", "x": object()}))
    assert weird.outcome == "error" and weird.error_kind == "schema"
    loop: dict[str, Any] = {}
    loop["self"] = loop
    assert decode(inv, RawResult(output=loop)).error_kind == "schema"
    for lone in ({"reason": "\ud800"}, {"\udfff": 1}):  # not loggable: refused, not repaired
        assert decode(inv, RawResult(output=lone)).error_kind == "schema"
    assert decode(inv, RawResult(output=["not", "a", "dict"])).error_kind == "schema"  # type: ignore[arg-type]
    boom = decode(inv, RawResult(error_kind="python_exception", error="ZeroDivisionError"))
    assert boom.outcome == "error" and boom.message == "ZeroDivisionError"


def test_unknown_type_and_executor_errors() -> None:
    assert decode(make_inv("Stop", type="wasm"), RawResult()).error_kind == "unknown_type"
    for kind in ("timeout", "spawn_failed", "cancelled", "url_not_allowed"):
        v = decode(PRE, RawResult(error_kind=kind, exit_code=2, stdout='{"decision":"block"}'))
        assert v.outcome == "error" and v.error_kind == kind and not v.blocking


def test_prompt_verdicts() -> None:
    inv = make_inv(
        "PreToolUse",
        {"tool_name": "Bash"},
        type="prompt",
        hook=PromptHook(type="prompt", prompt="p"),
    )
    ok = decode(inv, RawResult(stdout='{"ok": true, "reason": "fine"}'))
    assert ok.outcome == "allow" and ok.permission_decision is None  # ok:true does not approve
    for text in ('{"ok": "true"}', '{"ok": 1}', '{"reason": "x"}', "yes", "[true]", ""):
        bad = decode(inv, RawResult(stdout=text))
        assert bad.outcome == "error" and bad.error_kind == "bad_verdict"
    directive = decode(inv, RawResult(stdout='{"ok": "no", "continue": false, "stopReason": "s"}'))
    assert directive.outcome == "deny" and directive.blocking and not directive.continue_
    pre_deny = decode(
        inv,
        RawResult(
            stdout=json.dumps(
                {
                    "ok": None,
                    **out("PreToolUse", permissionDecision="deny", permissionDecisionReason="pd"),
                }
            )
        ),
    )
    assert pre_deny.blocking and pre_deny.message == "pd"


def test_prompt_ok_false_per_event() -> None:
    def ok_false(event: str, **payload: Any) -> HookVerdict:
        inv = make_inv(event, payload, type="prompt", hook=PromptHook(type="prompt", prompt="p"))
        return decode(inv, RawResult(stdout='{"ok": false, "reason": "r", "impossible": false}'))

    stop = ok_false("Stop")
    assert stop.blocking and stop.continue_ and stop.message == "r"
    ups = ok_false("UserPromptSubmit")
    assert ups.blocking and not ups.continue_
    failure = ok_false("PostToolUseFailure")
    assert failure.blocking and failure.continue_
    pr = ok_false("PermissionRequest")
    assert pr.outcome == "deny" and not pr.blocking and pr.permission_decision is None
    impossible_inv = make_inv("Stop", type="prompt", hook=PromptHook(type="prompt", prompt="p"))
    impossible = decode(
        impossible_inv, RawResult(stdout='{"ok": false, "reason": "r", "impossible": true}')
    )
    assert not impossible.blocking and impossible.specific["impossible"] is True


def test_agent_cancelled_is_not_an_error() -> None:
    inv = make_inv("PreToolUse", {"tool_name": "Bash"}, type="agent")
    v = decode(inv, RawResult(error_kind="cancelled"))
    assert v.outcome == "noop" and v.error_kind == "cancelled"
    assert not aggregate("PreToolUse", inv.payload, [(inv, v)]).blocked
    enforced = aggregate("PreToolUse", inv.payload, [(inv, v)], posture="enforcing")
    assert enforced.blocked and "(cancelled) in agent hook" in (enforced.reason or "")


def test_mcp_tool_reads_like_stdout() -> None:
    inv = make_inv("PreToolUse", {"tool_name": "Bash"}, type="mcp_tool")
    v = decode(inv, RawResult(stdout=json.dumps(out("PreToolUse", permissionDecision="deny"))))
    assert v.blocking


def test_pending_applies_nothing() -> None:
    v = decode(PRE, RawResult(pending=True, exit_code=2, stdout='{"decision":"block"}'))
    assert v == HookVerdict(outcome="noop", pending=True)


def test_async_completion_drops_wrong_types() -> None:
    inv = make_inv(
        "PostToolUse",
        {"tool_name": "Write"},
        hook=CommandHook(type="command", command="x", async_=True),
    )
    v = decode(
        inv,
        RawResult(
            exit_code=0,
            stdout=json.dumps({"systemMessage": 3, **out("PostToolUse", additionalContext=["x"])}),
        ),
    )
    assert v.additional_context == () and v.system_message is None and v.outcome == "noop"


# --------------------------------------------------------------------------- aggregation


def pair(
    index: int, verdict: HookVerdict, event: str = "PreToolUse"
) -> tuple[Invocation, HookVerdict]:
    return make_inv(event, {"tool_name": "Bash"}, index=index), verdict


def test_priority_and_legacy_order() -> None:
    answers = [
        pair(0, HookVerdict("allow", permission_decision="allow")),
        pair(1, HookVerdict("noop", permission_decision="ask", reason="asked")),
        pair(2, HookVerdict("noop", permission_decision="defer")),
    ]
    assert aggregate("PreToolUse", {}, answers).decision == "defer"
    assert aggregate("PreToolUse", {}, answers, profile="legacy").decision == "ask"
    assert aggregate("PreToolUse", {}, answers[:2]).reason == "asked"
    assert aggregate("PreToolUse", {}, []).decision is None


def test_updated_input_is_deterministic_and_drop_reported() -> None:
    answers = [
        pair(0, HookVerdict("allow", permission_decision="allow", updated_input={"command": "a"})),
        pair(1, HookVerdict("noop", updated_input={"command": "b"})),
        pair(2, HookVerdict("allow", permission_decision="allow", updated_input={"command": "c"})),
        pair(3, HookVerdict("noop")),
    ]
    d = aggregate("PreToolUse", {}, list(reversed(answers)))
    assert d.decision == "allow" and d.updated_input == {"command": "c"}
    (warning,) = d.errors
    assert warning.startswith(
        "updatedInput: 3 hook(s) rewrote the input; kept the rewrite of hook #2"
    )
    assert "#0" in warning and "#1" in warning
    ask = [*answers, pair(4, HookVerdict("noop", permission_decision="ask"))]
    d = aggregate("PreToolUse", {}, ask)
    assert d.decision == "ask" and d.updated_input is None and "kept none (ask wins)" in d.errors[0]
    only = aggregate("PreToolUse", {}, [answers[1], answers[3]])
    assert only.decision is None and only.updated_input == {"command": "b"} and only.errors == []
    deferred = aggregate(
        "PreToolUse", {}, [*answers, pair(5, HookVerdict("noop", permission_decision="defer"))]
    )
    assert deferred.updated_input is None


def test_permission_request_deny_wins() -> None:
    def pr(index: int, stdout: dict[str, Any]) -> tuple[Invocation, HookVerdict]:
        inv = make_inv("PermissionRequest", {"tool_name": "Bash"}, index=index)
        return inv, dec(stdout, inv=inv)

    allow = pr(
        0, out("PermissionRequest", decision={"behavior": "allow", "updatedInput": {"x": 1}})
    )
    deny = pr(1, out("PermissionRequest", decision={"behavior": "deny", "message": "no"}))
    deny2 = pr(
        2,
        out(
            "PermissionRequest", decision={"behavior": "deny", "message": "no2", "interrupt": True}
        ),
    )
    d = aggregate("PermissionRequest", {}, [deny2, allow, deny])
    assert d.blocked and d.decision == "deny" and d.reason == "no" and d.updated_input is None
    assert d.specific["permission_request"] == {
        "behavior": "deny",
        "message": "no",
        "interrupt": True,
    }
    d = aggregate("PermissionRequest", {}, [allow])
    assert d.decision == "allow" and d.updated_input == {"x": 1}


def test_context_messages_errors_continue_and_specific() -> None:
    event = "SessionStart"

    def ss(index: int, outcome: Any = "noop", **kw: Any) -> tuple[Invocation, HookVerdict]:
        return make_inv(event, {"source": "startup"}, index=index), HookVerdict(outcome, **kw)

    answers = [
        ss(
            0,
            additional_context=("a",),
            system_message="m0",
            specific={"sessionTitle": "t0", "watchPaths": ["/a", "/b"]},
        ),
        ss(1, "error", message="oops", error_kind="nonzero_exit"),
        ss(
            2,
            additional_context=("b", "c"),
            continue_=False,
            stop_reason="S",
            specific={"sessionTitle": "t2", "watchPaths": ["/b", "/c"], "reloadSkills": True},
        ),
        ss(3, continue_=False, stop_reason="S3"),
    ]
    d = aggregate(event, {}, list(reversed(answers)))
    assert d.additional_context == ["a", "b", "c"] and d.system_messages == ["m0"]
    assert not d.continue_ and d.stop_reason == "S"
    assert d.specific["sessionTitle"] == "t2" and d.specific["reloadSkills"] is True
    assert d.specific["watchPaths"] == ["/a", "/b", "/c"]
    assert d.errors == ["SessionStart hook error in command hook 'hook.sh#1': oops"]
    assert not d.blocked and d.decision is None


def test_first_blocker_gives_the_reason() -> None:
    answers = [
        pair(2, HookVerdict("deny", blocking=True, message="second"), "Stop"),
        pair(1, HookVerdict("deny", blocking=True, message="first"), "Stop"),
        pair(0, HookVerdict("allow"), "Stop"),
    ]
    d = aggregate("Stop", {}, answers)
    assert d.blocked and d.decision == "deny" and d.reason == "first"


def test_enforcing_continue_false_denies_pretool() -> None:
    answers = [pair(0, HookVerdict("deny", continue_=False, stop_reason="halt"))]
    assert not aggregate("PreToolUse", {}, answers).blocked
    d = aggregate("PreToolUse", {}, answers, posture="enforcing")
    assert d.blocked and d.reason == "halt"


def test_retry_any_true_and_worktree_first() -> None:
    answers = [
        pair(0, HookVerdict("noop", specific={"retry": False}), "PermissionDenied"),
        pair(1, HookVerdict("noop", specific={"retry": True}), "PermissionDenied"),
    ]
    assert aggregate("PermissionDenied", {}, answers).specific["retry"] is True
    wt = [
        pair(1, HookVerdict("allow", specific={"worktreePath": "/b"}), "WorktreeCreate"),
        pair(0, HookVerdict("allow", specific={"worktreePath": "/a"}), "WorktreeCreate"),
    ]
    assert aggregate("WorktreeCreate", {}, wt).specific["worktreePath"] == "/a"


# --------------------------------------------------------------------------- hypothesis

json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=20)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
)
FIELD_VALUES: dict[str, st.SearchStrategy[Any]] = {
    "permissionDecision": st.sampled_from(["allow", "deny", "ask", "defer", "maybe"]),
    "decision": st.one_of(
        st.fixed_dictionaries(
            {"behavior": st.sampled_from(["allow", "deny"])},
            optional={
                "updatedInput": st.dictionaries(st.text(max_size=5), json_scalars, max_size=2),
                "message": st.text(max_size=10),
                "interrupt": st.booleans(),
            },
        ),
        json_values,
    ),
    "action": st.sampled_from(["accept", "decline", "cancel", "other"]),
    "watchPaths": st.lists(st.text(max_size=8), max_size=3),
}
HSO_KEYS = sorted({k for s in CATALOG.values() for k in s.specific} | {"permissionDecisionReason"})


@st.composite
def hook_objects(draw: st.DrawFn, event: str) -> dict[str, Any]:
    obj: dict[str, Any] = draw(
        st.fixed_dictionaries(
            {},
            optional={
                "continue": st.one_of(st.booleans(), json_values),
                "stopReason": st.text(max_size=10),
                "systemMessage": st.text(max_size=10),
                "decision": st.sampled_from(["block", "approve", "deny"]),
                "reason": st.text(max_size=10),
                "terminalSequence": st.sampled_from(["\x07", "\x1b]2;t\x07", "\x1b[1m"]),
                "async": st.booleans(),
                "ok": st.one_of(st.booleans(), json_values),
            },
        )
    )
    if draw(st.booleans()):
        hso: dict[str, Any] = {"hookEventName": draw(st.sampled_from([event, event, "Stop"]))}
        for key in draw(st.lists(st.sampled_from(HSO_KEYS), max_size=4, unique=True)):
            hso[key] = draw(FIELD_VALUES.get(key, json_values))
        obj["hookSpecificOutput"] = hso
    return obj


@st.composite
def raw_results(draw: st.DrawFn, event: str) -> RawResult:
    stdout = draw(
        st.one_of(
            st.text(),
            st.text(alphabet='{}[]":,\\ 0123456789aetrunlfsNI\n'),
            hook_objects(event).map(json.dumps),
            st.tuples(hook_objects(event), hook_objects(event)).map(
                lambda p: json.dumps(p[0]) + "\n" + json.dumps(p[1])
            ),
        )
    )
    return RawResult(
        exit_code=draw(st.one_of(st.none(), st.sampled_from([0, 1, 2, 3, 127, -9]), st.integers())),
        stdout=stdout,
        stderr=draw(st.text(max_size=30)),
        http_status=draw(
            st.one_of(st.none(), st.sampled_from([200, 204, 301, 404, 500]), st.integers())
        ),
        error_kind=draw(
            st.one_of(
                st.none(), st.none(), st.sampled_from(["timeout", "cancelled", "spawn_failed"])
            )
        ),
        output=draw(
            st.one_of(
                st.none(),
                hook_objects(event),
                st.dictionaries(st.text(max_size=5), json_values, max_size=3),
            )
        ),
        pending=draw(st.booleans()) and draw(st.booleans()),
    )


@st.composite
def invocations(draw: st.DrawFn, event: str, index: int = 0) -> Invocation:
    kind = draw(st.sampled_from(TYPES))
    hook: Any = None
    if kind == "command":
        hook = draw(
            st.sampled_from(
                [
                    None,
                    CommandHook(type="command", command="c", async_=True),
                    CommandHook(type="command", command="c", asyncRewake=True),
                ]
            )
        )
    elif kind == "prompt":
        hook = PromptHook(type="prompt", prompt="p", continueOnBlock=draw(st.booleans()))
    payload = draw(
        st.fixed_dictionaries(
            {},
            optional={
                "source": st.sampled_from(["policy_settings", "clear", "startup"]),
                "tool_name": st.sampled_from(["Bash", "Write"]),
            },
        )
    )
    return make_inv(event, payload, index=index, type=kind, hook=hook)


@st.composite
def event_and_answers(
    draw: st.DrawFn, max_hooks: int = 5
) -> tuple[str, list[tuple[Invocation, RawResult]]]:
    event = draw(st.sampled_from(EVENTS))
    n = draw(st.integers(0, max_hooks))
    indices = draw(st.lists(st.integers(0, 50), min_size=n, max_size=n, unique=True))
    return event, [(draw(invocations(event, i)), draw(raw_results(event))) for i in indices]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=event_and_answers(max_hooks=1), profile=st.sampled_from(["current", "legacy"]))
def test_decode_never_raises(
    data: tuple[str, list[tuple[Invocation, RawResult]]], profile: Profile
) -> None:
    _, answers = data
    for inv, raw in answers:
        v = decode(inv, raw, profile=profile)
        assert v.outcome in ("allow", "deny", "error", "noop")
        assert_loggable(inv, raw, v)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=event_and_answers(),
    profile=st.sampled_from(["current", "legacy"]),
    posture=st.sampled_from(["compat", "enforcing"]),
    seed=st.randoms(use_true_random=False),
)
def test_aggregate_is_order_free(
    data: tuple[str, list[tuple[Invocation, RawResult]]], profile: Profile, posture: Any, seed: Any
) -> None:
    event, answers = data
    pairs = [(inv, decode(inv, raw, profile=profile)) for inv, raw in answers]
    payload = pairs[0][0].payload if pairs else {}
    first = aggregate(event, payload, pairs, posture=posture, profile=profile)
    shuffled = list(pairs)
    seed.shuffle(shuffled)
    assert aggregate(event, payload, shuffled, posture=posture, profile=profile) == first
    assert (
        aggregate(event, payload, list(reversed(pairs)), posture=posture, profile=profile) == first
    )
    encode_json(
        [first.reason, first.updated_input, first.specific, first.errors, first.additional_context]
    )


# --------------------------------------------------------------------------- render_claude round trip

words = (
    st.text(alphabet=string.ascii_letters + string.digits + " .", min_size=1, max_size=16)
    .map(str.strip)
    .filter(bool)
)
small_dicts = st.dictionaries(
    st.sampled_from(["command", "file_path", "n"]),
    st.one_of(words, st.integers(0, 9)),
    min_size=1,
    max_size=2,
)


@st.composite
def valid_outputs(draw: st.DrawFn, event: str) -> RawResult:
    """One command hook's answer that an event accepts (valid JSON, plain text or exit 2)."""
    es = CATALOG[event]
    if event == "WorktreeCreate":
        return draw(
            st.sampled_from(
                [
                    RawResult(exit_code=0, stdout="banner\n/abs/wt\n"),
                    RawResult(exit_code=0, stdout="rel/dir"),
                    RawResult(exit_code=1, stderr="fail"),
                    RawResult(exit_code=0, stdout=""),
                ]
            )
        )
    kind = draw(st.sampled_from(["json", "json", "json", "plain", "exit2", "empty"]))
    if kind == "plain":
        return RawResult(exit_code=0, stdout=draw(words))
    if kind == "empty":
        return RawResult(exit_code=draw(st.sampled_from([0, 1])), stderr=draw(words))
    obj: dict[str, Any] = {}
    hso: dict[str, Any] = {"hookEventName": event}
    if draw(st.booleans()):
        obj["systemMessage"] = draw(words)
    if draw(st.integers(0, 4)) == 0:
        obj["continue"] = False
        if draw(st.booleans()):
            obj["stopReason"] = draw(words)
    if es.top_decision and draw(st.booleans()):
        obj["decision"] = draw(st.sampled_from(["block", "approve"]))
        if draw(st.booleans()):
            obj["reason"] = draw(words)
    if "additionalContext" in es.specific and draw(st.booleans()):
        hso["additionalContext"] = draw(words)
    if event == "PreToolUse":
        if draw(st.booleans()):
            hso["permissionDecision"] = draw(st.sampled_from(["allow", "deny", "ask", "defer"]))
        if draw(st.booleans()):
            hso["permissionDecisionReason"] = draw(words)
        if draw(st.booleans()):
            hso["updatedInput"] = draw(small_dicts)
    if event == "PermissionRequest" and draw(st.booleans()):
        behavior = draw(st.sampled_from(["allow", "deny"]))
        pr: dict[str, Any] = {"behavior": behavior}
        if behavior == "allow" and draw(st.booleans()):
            pr["updatedInput"] = draw(small_dicts)
        if behavior == "deny" and draw(st.booleans()):
            pr["message"] = draw(words)
        hso["decision"] = pr
    if "action" in es.specific and draw(st.booleans()):
        hso["action"] = draw(st.sampled_from(["accept", "decline", "cancel"]))
    if "retry" in es.specific and draw(st.booleans()):
        hso["retry"] = draw(st.booleans())
    if "sessionTitle" in es.specific and draw(st.booleans()):
        hso["sessionTitle"] = draw(words)
    if len(hso) > 1:
        obj["hookSpecificOutput"] = hso
    code = 2 if kind == "exit2" else draw(st.sampled_from([0, 0, 3]))
    return RawResult(exit_code=code, stdout=json.dumps(obj) if obj else "", stderr=draw(words))


@st.composite
def decisions(draw: st.DrawFn, profile: Profile) -> tuple[str, Decision]:
    event = draw(st.sampled_from([e for e in EVENTS if not CATALOG[e].informational]))
    payload = {"source": draw(st.sampled_from(["user_settings", "startup"])), "tool_name": "Bash"}
    pairs = []
    # WorktreeCreate with no hooks cannot be rendered: an empty answer fails creation.
    for i in range(draw(st.integers(1 if event == "WorktreeCreate" else 0, 4))):
        inv = make_inv(event, payload, index=i)
        pairs.append((inv, decode(inv, draw(valid_outputs(event)), profile=profile)))
    posture: Posture = draw(st.sampled_from(["compat", "enforcing"]))
    return event, aggregate(
        event, pairs[0][0].payload if pairs else payload, pairs, posture=posture, profile=profile
    )


def comparable(d: Decision, sep: str = "\n\n") -> tuple[Any, ...]:
    return (
        d.blocked,
        d.decision,
        d.reason,
        d.updated_input,
        sep.join(d.additional_context),
        "\n".join(d.system_messages),  # one line per message, as Claude Code shows them
        d.continue_,
        d.stop_reason,
    )


def round_trip(event: str, d: Decision, profile: Profile) -> Decision:
    stdout, stderr, code = render_claude(event, d, profile=profile)
    inv = make_inv(
        event, {"source": "user_settings", "tool_name": "Bash"}, command="hookaudit eval"
    )
    v = decode(inv, RawResult(exit_code=code, stdout=stdout, stderr=stderr), profile=profile)
    return aggregate(event, inv.payload, [(inv, v)], profile=profile)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=decisions("current"))
def test_render_round_trip_current(data: tuple[str, Decision]) -> None:
    event, d = data
    back = round_trip(event, d, "current")
    # Several PreToolUse contexts are one note, a line each (Claude Code 2.1.332).
    sep = "\n" if event == "PreToolUse" else "\n\n"
    assert comparable(back, sep) == comparable(d, sep)
    for key in ("sessionTitle", "retry", "action", "worktreePath", "permission_request"):
        assert back.specific.get(key) == d.specific.get(key)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=decisions("legacy"))
def test_render_round_trip_legacy(data: tuple[str, Decision]) -> None:
    event, d = data
    back = round_trip(event, d, "legacy")
    assert back.blocked == d.blocked
    if not (
        d.blocked and event in ("TeammateIdle", "TaskCompleted", "Elicitation", "ElicitationResult")
    ):
        assert comparable(back) == comparable(d)  # exit 2 there drops the JSON in legacy


@pytest.mark.parametrize(
    ("event", "decision", "expected"),
    [
        ("Stop", Decision(), ("", "", 0)),
        (
            "TeammateIdle",
            Decision(blocked=True, decision="deny", reason="keep going"),
            ("", "keep going", 2),
        ),
        ("WorktreeCreate", Decision(specific={"worktreePath": "/wt"}), ("/wt\n", "", 0)),
        ("WorktreeCreate", Decision(blocked=True, decision="deny", reason="no"), ("", "no", 1)),
        (
            "Stop",
            Decision(blocked=True, decision="deny", reason="run tests"),
            ('{"decision":"block","reason":"run tests"}', "", 0),
        ),
        ("PostToolUse", Decision(errors=["e1"]), ("", "e1", 0)),
    ],
)
def test_render_examples(event: str, decision: Decision, expected: tuple[str, str, int]) -> None:
    assert render_claude(event, decision) == expected


def test_render_pretool_everything() -> None:
    d = Decision(
        decision="allow",
        reason="ok",
        updated_input={"command": "pwd"},
        additional_context=["a", "b"],
        system_messages=["w"],
        continue_=False,
        stop_reason="S",
    )
    stdout, _, code = render_claude("PreToolUse", d)
    assert code == 0 and json.loads(stdout) == {
        "continue": False,
        "stopReason": "S",
        "systemMessage": "w",
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "additionalContext": "a\nb",  # one note, a line each (Claude Code 2.1.332)
            "permissionDecision": "allow",
            "permissionDecisionReason": "ok",
            "updatedInput": {"command": "pwd"},
        },
    }
    legacy_defer, _, _ = render_claude("PreToolUse", Decision(decision="defer"), profile="legacy")
    assert legacy_defer == ""


def test_to_hook_run_puts_every_value_in_its_own_field() -> None:
    """`to_hook_run` builds a HookRun positionally: each observation and each part of
    the verdict must land in the field of the same meaning."""
    inv = make_inv("PreToolUse", {"tool_name": "Bash"})
    raw = RawResult(
        exit_code=2, stdout="out", stderr="err", stdout_bytes=3, stderr_bytes=4, truncated=True,
        http_status=418, duration_ms=12.5, llm=[{"model": "m"}],
    )  # fmt: skip
    verdict = HookVerdict(
        outcome="deny", message="msg", error_kind="kind", output={"o": 1}, pending=True,
        permission_decision="ask",
    )  # fmt: skip
    run = to_hook_run(inv, raw, verdict)
    assert msgspec.structs.asdict(run) == {
        "hook": inv.identity, "hook_id": inv.identity_key(), "outcome": "deny",
        "exit_code": 2, "duration_ms": 12.5, "stdout": "out", "stderr": "err",
        "stdout_bytes": 3, "stderr_bytes": 4, "truncated": True, "http_status": 418,
        "error_kind": "kind", "message": "msg", "output": {"o": 1}, "decision": "ask",
        "pending": True, "llm": [{"model": "m"}],
    }  # fmt: skip
