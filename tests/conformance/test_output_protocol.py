"""Spec §8 conformance cases about reading hook answers and combining them.

Each test is one case of spec §8 (its text in the docstring), checked at the pure
core: Invocations and RawResults are built by hand, decoded with `decode` and
combined with `aggregate`. Cases marked L in the spec run under both profiles.

Cases left out here, and why:
- 18 (a permissions.deny rule beats a hook allow): rules are applied after the hooks,
  outside this core; the test below only checks that the hooks' answer is a plain allow.
- 23 (the Stop block cap of 8): the count of consecutive blocks is session state; the
  pure part (every Stop exit 2 blocks) is checked.
- 29, 30 (SessionEnd budget, UserPromptSubmit timeout): timing is the executor's; the
  pure part (a cancelled or timed-out hook decides nothing) is checked.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from engine.aggregate import Decision, aggregate
from engine.decode import Profile, decode
from engine.effects import Invocation, RawResult
from engine.hook_verdict import HookVerdict, to_hook_run
from engine.records import HookIdentity
from engine.settings import AgentHook, CommandHook, PromptHook

BOTH: list[Profile] = ["current", "legacy"]


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
        command=command if type == "command" else None,
        url="http://127.0.0.1:9/h" if type == "http" else None,
        prompt="Is this safe? $ARGUMENTS" if type in ("prompt", "agent") else None,
        is_async=bool(getattr(hook, "async_", False) or getattr(hook, "asyncRewake", False)),
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


def run(
    event: str,
    answers: list[tuple[Invocation, RawResult]],
    *,
    profile: Profile = "current",
    posture: Any = "compat",
) -> tuple[Decision, list[HookVerdict]]:
    verdicts = [decode(inv, raw, profile=profile) for inv, raw in answers]
    for (inv, raw), v in zip(answers, verdicts, strict=True):
        to_hook_run(inv, raw, v)  # every verdict must make a record
    payload = answers[0][0].payload if answers else {"hook_event_name": event}
    pairs = [(inv, v) for (inv, _), v in zip(answers, verdicts, strict=True)]
    return aggregate(event, payload, pairs, posture=posture, profile=profile), verdicts


def js(obj: Any) -> str:
    return json.dumps(obj)


BASH = {"tool_name": "Bash", "tool_input": {"command": "rm -rf x"}, "tool_use_id": "t1"}


def pre_deny(reason: str = "R") -> str:
    return js(
        {
            "hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "permissionDecision": "deny",
                "permissionDecisionReason": reason,
            }
        }
    )


def pre(decision: str, **extra: Any) -> str:
    return js(
        {
            "hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "permissionDecision": decision,
                **extra,
            }
        }
    )


@pytest.mark.parametrize("profile", BOTH)
def test_case_08_exit2_blocks_with_stderr(profile: Profile) -> None:
    """PreToolUse Bash, `rm -rf x`, exit 2, stderr `no rm` → blocked; Claude sees `no rm`."""
    d, (v,) = run(
        "PreToolUse",
        [(make_inv("PreToolUse", BASH), RawResult(exit_code=2, stderr="no rm\n"))],
        profile=profile,
    )
    assert d.blocked and d.decision == "deny"
    assert v.outcome == "deny" and v.blocking
    if profile == "current":
        assert d.reason == "no rm"
    else:
        assert d.reason == "[hook.sh]: no rm"


@pytest.mark.parametrize("profile", BOTH)
def test_case_09_exit1_is_non_blocking(profile: Profile) -> None:
    """exit 1, stderr `oops`, no stdout → non-blocking error
    `Failed with non-blocking status code: oops`; the tool executes."""
    d, (v,) = run(
        "PreToolUse",
        [(make_inv("PreToolUse", BASH), RawResult(exit_code=1, stderr="oops\n"))],
        profile=profile,
    )
    assert v.outcome == "error" and not v.blocking
    assert v.message == "Failed with non-blocking status code: oops"
    assert not d.blocked and d.decision is None
    assert any("Failed with non-blocking status code: oops" in e for e in d.errors)


def test_case_09_current_takes_first_stderr_line_legacy_all() -> None:
    """Current prints the first stderr line; legacy the whole trimmed stderr (§3.5)."""
    raw = RawResult(exit_code=1, stderr="oops\nmore\n")
    inv = make_inv("PreToolUse", BASH)
    assert decode(inv, raw).message == "Failed with non-blocking status code: oops"
    assert decode(inv, raw, profile="legacy").message == (
        "Failed with non-blocking status code: oops\nmore"
    )
    empty = decode(inv, RawResult(exit_code=1))
    assert empty.message == "Failed with non-blocking status code: No stderr output"


@pytest.mark.parametrize("profile", BOTH)
def test_case_10_json_deny(profile: Profile) -> None:
    """exit 0 with permissionDecision deny and reason R → blocked; R shown to Claude."""
    d, _ = run(
        "PreToolUse",
        [(make_inv("PreToolUse", BASH), RawResult(exit_code=0, stdout=pre_deny()))],
        profile=profile,
    )
    assert d.blocked and d.decision == "deny" and d.reason == "R"


@pytest.mark.parametrize("profile", BOTH)
def test_case_11_exit2_with_allow_json(profile: Profile) -> None:
    """exit 2 and stdout `{…"permissionDecision":"allow"}` → current: blocked.
    L v2.1.88: allowed (fixed in 2.1.90)."""
    raw = RawResult(exit_code=2, stdout=pre("allow"), stderr="nope")
    d, (v,) = run("PreToolUse", [(make_inv("PreToolUse", BASH), raw)], profile=profile)
    if profile == "current":
        assert d.blocked and d.decision == "deny" and d.reason == "nope"
        assert v.permission_decision == "deny"
    else:
        assert not d.blocked and d.decision == "allow"


@pytest.mark.parametrize("profile", BOTH)
def test_case_12_exit3_with_json_deny(profile: Profile) -> None:
    """exit 3 and valid JSON deny → denied; not reported as an error."""
    raw = RawResult(exit_code=3, stdout=pre_deny(), stderr="whatever")
    d, (v,) = run("PreToolUse", [(make_inv("PreToolUse", BASH), raw)], profile=profile)
    assert d.blocked and d.reason == "R"
    assert v.error_kind is None and d.errors == []


@pytest.mark.parametrize("profile", BOTH)
def test_case_13_profile_text_before_json(profile: Profile) -> None:
    """exit 0, stdout `Shell ready\\n{…deny…}` → plain text, no decision, tool executes."""
    raw = RawResult(exit_code=0, stdout="Shell ready\n" + pre_deny())
    d, (v,) = run("PreToolUse", [(make_inv("PreToolUse", BASH), raw)], profile=profile)
    assert not d.blocked and d.decision is None
    assert v.outcome == "noop" and v.output is None and d.additional_context == []


@pytest.mark.parametrize("profile", BOTH)
def test_case_14_unknown_decision_value(profile: Profile) -> None:
    """exit 0, `{"decision":"maybe"}` → validation error (non-blocking); tool executes."""
    raw = RawResult(exit_code=0, stdout='{"decision":"maybe"}')
    d, (v,) = run("PreToolUse", [(make_inv("PreToolUse", BASH), raw)], profile=profile)
    assert v.outcome == "error" and v.error_kind == "schema"
    assert v.message is not None and "decision" in v.message and "maybe" in v.message
    assert not d.blocked and len(d.errors) == 1


@pytest.mark.parametrize("profile", BOTH)
def test_case_15_deprecated_block_form(profile: Profile) -> None:
    """exit 0, `{"decision":"block","reason":"r"}` → denied with r (deprecated form)."""
    raw = RawResult(exit_code=0, stdout='{"decision":"block","reason":"r"}')
    d, _ = run("PreToolUse", [(make_inv("PreToolUse", BASH), raw)], profile=profile)
    assert d.blocked and d.decision == "deny" and d.reason == "r"


@pytest.mark.parametrize("profile", BOTH)
def test_case_16_allow_and_exit2(profile: Profile) -> None:
    """Two PreToolUse hooks: A returns allow, B exits 2 → denied; A still ran."""
    a = make_inv("PreToolUse", BASH, index=0, command="a.sh")
    b = make_inv("PreToolUse", BASH, index=1, command="b.sh")
    d, (va, vb) = run(
        "PreToolUse",
        [(a, RawResult(exit_code=0, stdout=pre("allow"))), (b, RawResult(exit_code=2, stderr="B"))],
        profile=profile,
    )
    assert va.outcome == "allow" and vb.outcome == "deny"
    assert d.blocked and d.decision == "deny"
    assert d.reason == ("B" if profile == "current" else "[b.sh]: B")


def test_case_17_defer_beats_ask() -> None:
    """Two hooks under -p: A returns defer, B returns ask → deferred."""
    a = make_inv("PreToolUse", BASH, index=0)
    b = make_inv("PreToolUse", BASH, index=1)
    d, _ = run(
        "PreToolUse",
        [
            (a, RawResult(exit_code=0, stdout=pre("defer"))),
            (b, RawResult(exit_code=0, stdout=pre("ask"))),
        ],
    )
    assert d.decision == "defer" and not d.blocked


def test_case_17_legacy_has_no_defer() -> None:
    """Legacy (v2.1.88) knows no `defer`: it fails the schema, and ask wins."""
    a = make_inv("PreToolUse", BASH, index=0)
    b = make_inv("PreToolUse", BASH, index=1)
    d, (va, _) = run(
        "PreToolUse",
        [
            (a, RawResult(exit_code=0, stdout=pre("defer"))),
            (b, RawResult(exit_code=0, stdout=pre("ask"))),
        ],
        profile="legacy",
    )
    assert va.error_kind == "schema" and d.decision == "ask"


def test_case_18_hook_allow_is_only_an_allow() -> None:
    """`permissions.deny:["Bash(rm *)"]` plus a hook that returns allow → denied by the rule.

    The rule is applied after the hooks, outside this core; here the hooks' answer is
    a plain allow that does not block, so the rule layer decides."""
    d, _ = run(
        "PreToolUse", [(make_inv("PreToolUse", BASH), RawResult(exit_code=0, stdout=pre("allow")))]
    )
    assert d.decision == "allow" and not d.blocked


@pytest.mark.parametrize("profile", BOTH)
def test_case_19_updated_input_replaces(profile: Profile) -> None:
    """Bash `{command:"ls",description:"d"}`, allow plus `updatedInput:{command:"pwd"}` →
    runs `pwd`, and `description` is gone (replaced, not merged)."""
    payload = {"tool_name": "Bash", "tool_input": {"command": "ls", "description": "d"}}
    raw = RawResult(exit_code=0, stdout=pre("allow", updatedInput={"command": "pwd"}))
    d, _ = run("PreToolUse", [(make_inv("PreToolUse", payload), raw)], profile=profile)
    assert d.decision == "allow" and d.updated_input == {"command": "pwd"}


@pytest.mark.parametrize("profile", BOTH)
def test_case_20_plain_stdout_is_context(profile: Profile) -> None:
    """UserPromptSubmit, prompt `hi`, exit 0, stdout `ctx` → `ctx` injected; prompt processed."""
    inv = make_inv("UserPromptSubmit", {"prompt": "hi"})
    d, _ = run("UserPromptSubmit", [(inv, RawResult(exit_code=0, stdout="ctx\n"))], profile=profile)
    assert d.additional_context == ["ctx"] and not d.blocked


@pytest.mark.parametrize("profile", BOTH)
def test_case_21_prompt_block(profile: Profile) -> None:
    """UserPromptSubmit `hi`, `{"decision":"block","reason":"no"}` → prompt erased; `no`
    shown to the user only. (agent-core does not stop the prompt; posture changes only
    PreToolUse, so the Decision is the same under `enforcing`.)"""
    inv = make_inv("UserPromptSubmit", {"prompt": "hi"})
    raw = RawResult(exit_code=0, stdout='{"decision":"block","reason":"no"}')
    for posture in ("compat", "enforcing"):
        d, _ = run("UserPromptSubmit", [(inv, raw)], profile=profile, posture=posture)
        assert d.blocked and d.reason == "no"


@pytest.mark.parametrize("profile", BOTH)
def test_case_22_stop_block_feeds_reason(profile: Profile) -> None:
    """Stop, `stop_hook_active:false`, `{"decision":"block","reason":"run tests"}` →
    Claude continues with "run tests"."""
    inv = make_inv("Stop", {"stop_hook_active": False})
    raw = RawResult(exit_code=0, stdout='{"decision":"block","reason":"run tests"}')
    d, _ = run("Stop", [(inv, raw)], profile=profile)
    assert d.blocked and d.reason == "run tests" and d.continue_


def test_case_23_stop_exit2_blocks_each_time() -> None:
    """A Stop hook that always exits 2 → the turn ends after 8 consecutive blocks.

    The cap counts blocks across turns (session state, not this core). The pure part:
    each Stop exit 2 blocks, with stderr as Claude's next instruction."""
    d, _ = run("Stop", [(make_inv("Stop"), RawResult(exit_code=2, stderr="again"))])
    assert d.blocked and d.reason == "again"


@pytest.mark.parametrize("profile", BOTH)
def test_case_24_continue_wins_over_decision(profile: Profile) -> None:
    """PostToolUse, `{"continue":false,"stopReason":"S","decision":"block","reason":"x"}` →
    processing stops; the user sees S; `continue` wins over `decision`."""
    raw = RawResult(
        exit_code=0,
        stdout=js({"continue": False, "stopReason": "S", "decision": "block", "reason": "x"}),
    )
    d, _ = run("PostToolUse", [(make_inv("PostToolUse", BASH), raw)], profile=profile)
    assert not d.continue_ and d.stop_reason == "S"


@pytest.mark.parametrize("profile", BOTH)
def test_case_25_post_tool_use_exit2_is_feedback(profile: Profile) -> None:
    """PostToolUse Write, exit 2, stderr `lint failed` → the file is already written;
    Claude sees `lint failed`."""
    inv = make_inv("PostToolUse", {"tool_name": "Write"})
    d, _ = run(
        "PostToolUse", [(inv, RawResult(exit_code=2, stderr="lint failed"))], profile=profile
    )
    assert d.blocked and d.reason is not None and d.reason.endswith("lint failed")


@pytest.mark.parametrize("profile", BOTH)
def test_case_26_permission_request_ignores_exit2(profile: Profile) -> None:
    """PermissionRequest Bash, exit 2, no JSON → flow unchanged; stderr discarded."""
    inv = make_inv("PermissionRequest", {"tool_name": "Bash"})
    d, (v,) = run(
        "PermissionRequest", [(inv, RawResult(exit_code=2, stderr="no"))], profile=profile
    )
    assert not d.blocked and d.decision is None and d.reason is None and d.errors == []
    assert not v.blocking


@pytest.mark.parametrize("profile", BOTH)
def test_case_27_permission_request_allow_rewrites(profile: Profile) -> None:
    """PermissionRequest `rm -rf node_modules`,
    `decision:{behavior:"allow",updatedInput:{command:"npm run lint"}}` → no prompt;
    `npm run lint` runs."""
    inv = make_inv(
        "PermissionRequest", {"tool_name": "Bash", "tool_input": {"command": "rm -rf node_modules"}}
    )
    out = {
        "hookSpecificOutput": {
            "hookEventName": "PermissionRequest",
            "decision": {"behavior": "allow", "updatedInput": {"command": "npm run lint"}},
        }
    }
    d, _ = run(
        "PermissionRequest", [(inv, RawResult(exit_code=0, stdout=js(out)))], profile=profile
    )
    assert d.decision == "allow" and not d.blocked
    assert d.updated_input == {"command": "npm run lint"}
    assert d.specific["permission_request"]["behavior"] == "allow"


@pytest.mark.parametrize("profile", BOTH)
def test_case_28_permission_denied_retry(profile: Profile) -> None:
    """PermissionDenied with a classifier verdict, `retry:true` → the denial stands; a
    message says the model may retry."""
    inv = make_inv("PermissionDenied", {"tool_name": "Bash", "reason": "classifier"})
    out = {"hookSpecificOutput": {"hookEventName": "PermissionDenied", "retry": True}}
    d, _ = run("PermissionDenied", [(inv, RawResult(exit_code=0, stdout=js(out)))], profile=profile)
    assert d.specific["retry"] is True and not d.blocked


def test_case_29_cancelled_session_end_decides_nothing() -> None:
    """SessionEnd command sleeping 3 s → cancelled at about 1.5 s.

    The budget is the executor's. The pure part: a cancelled hook decides nothing."""
    inv = make_inv("SessionEnd", {"reason": "other"})
    d, (v,) = run("SessionEnd", [(inv, RawResult(error_kind="cancelled", error="Hook cancelled"))])
    assert v.outcome == "error" and v.error_kind == "cancelled"
    assert not d.blocked and d.decision is None


@pytest.mark.parametrize("profile", BOTH)
def test_case_30_timed_out_prompt_hook_gives_no_context(profile: Profile) -> None:
    """UserPromptSubmit command sleeping 40 s → cancelled at 30 s (L: 600 s); the prompt
    goes on without its context. Pure part: output of a timed-out hook is thrown away."""
    inv = make_inv("UserPromptSubmit", {"prompt": "hi"})
    raw = RawResult(error_kind="timeout", stdout="late context", exit_code=None)
    d, _ = run("UserPromptSubmit", [(inv, raw)], profile=profile)
    assert not d.blocked and d.additional_context == []


def test_case_36_http_bodies_and_statuses() -> None:
    """An HTTP hook on PreToolUse: 200 with an empty body / 500 / 200 `ok` (plain text)
    → no-op success / non-blocking / non-blocking (not context)."""
    inv = make_inv("PreToolUse", BASH, type="http")
    empty = decode(inv, RawResult(http_status=200, stdout=""))
    assert empty.outcome == "noop" and empty.error_kind is None
    failed = decode(inv, RawResult(http_status=500, stdout=pre_deny()))
    assert failed.outcome == "error" and failed.error_kind == "http_status" and not failed.blocking
    plain = decode(inv, RawResult(http_status=200, stdout="ok"))
    assert plain.outcome == "error" and plain.error_kind == "http_body"
    assert plain.additional_context == ()
    d = aggregate("PreToolUse", inv.payload, [(inv, empty), (inv, failed), (inv, plain)])
    assert not d.blocked and d.additional_context == [] and len(d.errors) == 2
    # A 2xx JSON body is read as exit-0 JSON; a status can never block.
    assert decode(inv, RawResult(http_status=200, stdout=pre_deny())).blocking
    assert decode(inv, RawResult(http_status=200, stdout='{"async": true}')).outcome == "noop"


def test_case_41_config_async_context_next_turn() -> None:
    """PostToolUse `async:true` on Write, printing PostToolUse additionalContext T after
    5 s → the tool result comes back at once; T goes to Claude on the next turn."""
    hook = CommandHook(type="command", command="slow.sh", async_=True)
    inv = make_inv("PostToolUse", {"tool_name": "Write"}, hook=hook)
    at_once = decode(inv, RawResult(pending=True))
    assert at_once.pending and at_once.outcome == "noop" and not at_once.additional_context
    out = {"hookSpecificOutput": {"hookEventName": "PostToolUse", "additionalContext": "T"}}
    later = decode(inv, RawResult(exit_code=0, stdout=js(out)))
    assert later.additional_context == ("T",) and later.specific["async"] is True
    # Decision fields have no effect once backgrounded.
    blocking = decode(inv, RawResult(exit_code=0, stdout='{"decision":"block","reason":"x"}'))
    assert not blocking.blocking


def test_case_42_self_declared_async() -> None:
    """A command hook with no `async` prints `{"async":true}` first, then a JSON line with
    additionalContext and exits 0 after 20 s → success at once; context on a later turn."""
    inv = make_inv("PostToolUse", {"tool_name": "Write"})
    at_once = decode(inv, RawResult(pending=True))
    assert at_once.outcome == "noop" and at_once.pending
    ctx = {"hookSpecificOutput": {"hookEventName": "PostToolUse", "additionalContext": "late"}}
    done = decode(inv, RawResult(exit_code=0, stdout='{"async":true}\n' + js(ctx) + "\n"))
    assert done.additional_context == ("late",) and not done.blocking
    # Only the declaration, then the process ended: success, nothing further.
    only = decode(inv, RawResult(exit_code=0, stdout='{"async": true, "asyncTimeout": 15000}'))
    assert only.outcome == "noop" and not only.blocking and only.specific["async"] is True


def test_case_43_async_rewake() -> None:
    """`asyncRewake:true`, exits 2, stderr `tests red` → Claude is woken with a system
    reminder containing `tests red`."""
    hook = CommandHook(type="command", command="tests.sh", asyncRewake=True)
    inv = make_inv("PostToolUse", {"tool_name": "Write"}, hook=hook)
    v = decode(inv, RawResult(exit_code=2, stderr="tests red"))
    assert "tests red" in v.specific["rewake"]
    assert v.specific["rewake"].startswith(
        'Stop hook blocking error from command "PostToolUse:Write"'
    )
    d = aggregate("PostToolUse", inv.payload, [(inv, v)])
    assert d.specific["rewake"] == [v.specific["rewake"]] and not d.blocked
    assert decode(inv, RawResult(exit_code=0, stdout="ok")).specific == {"async": True}


@pytest.mark.parametrize("profile", BOTH)
def test_case_44_worktree_create(profile: Profile) -> None:
    """WorktreeCreate `name:"x"`, exit 0 with stdout `banner\\n/abs/wt` / exit 1 → path
    `/abs/wt` (L: the whole trimmed stdout) / creation fails."""
    inv = make_inv("WorktreeCreate", {"name": "x"})
    d, _ = run(
        "WorktreeCreate",
        [(inv, RawResult(exit_code=0, stdout="banner\n/abs/wt\n"))],
        profile=profile,
    )
    expected = "/abs/wt" if profile == "current" else "banner\n/abs/wt"
    assert d.specific["worktreePath"] == expected and not d.blocked
    d, _ = run("WorktreeCreate", [(inv, RawResult(exit_code=1, stderr="boom"))], profile=profile)
    assert d.blocked and d.reason == "boom"


def test_case_44_worktree_ansi_and_missing_path() -> None:
    """Current strips ANSI codes; no path from any hook fails creation (§3.4)."""
    inv = make_inv("WorktreeCreate", {"name": "x"})
    v = decode(
        inv, RawResult(exit_code=0, stdout="\x1b[32mready\x1b[0m\n\x1b[1m/abs/wt\x1b[0m\n\n")
    )
    assert v.specific["worktreePath"] == "/abs/wt"
    d, _ = run("WorktreeCreate", [(inv, RawResult(exit_code=0, stdout=""))])
    assert d.blocked and d.decision == "deny"


def test_case_45_config_change_policy_settings_applies() -> None:
    """ConfigChange `source:"policy_settings"`, exit 2 → the change still applies."""
    inv = make_inv("ConfigChange", {"source": "policy_settings"})
    d, (v,) = run("ConfigChange", [(inv, RawResult(exit_code=2, stderr="no"))])
    assert not d.blocked and not v.blocking
    other = make_inv("ConfigChange", {"source": "user_settings"})
    d, _ = run("ConfigChange", [(other, RawResult(exit_code=2, stderr="no"))])
    assert d.blocked


@pytest.mark.parametrize("profile", BOTH)
def test_case_46_task_created_block_ignores_continue(profile: Profile) -> None:
    """TaskCreated, `{"decision":"block","reason":"need ticket","continue":false}` → the
    task is deleted; the reason goes to Claude as the tool error; Claude keeps working."""
    inv = make_inv("TaskCreated", {"task_id": "1", "task_subject": "s"})
    raw = RawResult(
        exit_code=0, stdout=js({"decision": "block", "reason": "need ticket", "continue": False})
    )
    d, _ = run("TaskCreated", [(inv, raw)], profile=profile)
    assert d.blocked and d.reason == "need ticket" and d.continue_


def test_case_47_prompt_hook_ok_false() -> None:
    """Prompt hook on PreToolUse, the model returns `{"ok":false,"reason":"r"}` → denied,
    the turn ends. With `continueOnBlock:true`, r becomes the tool error and the turn
    continues."""
    hook = PromptHook(type="prompt", prompt="safe?")
    inv = make_inv("PreToolUse", BASH, type="prompt", hook=hook)
    d, _ = run("PreToolUse", [(inv, RawResult(stdout='{"ok":false,"reason":"r"}'))])
    assert d.blocked and d.decision == "deny" and d.reason == "r" and not d.continue_
    cob = make_inv(
        "PreToolUse",
        BASH,
        type="prompt",
        hook=PromptHook(type="prompt", prompt="safe?", continueOnBlock=True),
    )
    d, _ = run("PreToolUse", [(cob, RawResult(stdout='{"ok":false,"reason":"r"}'))])
    assert d.blocked and d.reason == "r" and d.continue_
    agent = make_inv("PreToolUse", BASH, type="agent", hook=AgentHook(type="agent", prompt="safe?"))
    d, _ = run("PreToolUse", [(agent, RawResult(stdout='{"ok":false,"reason":"r"}'))])
    assert d.blocked and d.continue_  # agent hooks act as continueOnBlock


def test_case_47_legacy_messages() -> None:
    """Legacy ok:false: a prompt hook blocks and stops continuation; an agent only blocks."""
    inv = make_inv("PreToolUse", BASH, type="prompt", hook=PromptHook(type="prompt", prompt="p"))
    d, _ = run(
        "PreToolUse", [(inv, RawResult(stdout='{"ok":false,"reason":"r"}'))], profile="legacy"
    )
    assert d.blocked and d.reason == "Prompt hook condition was not met: r" and not d.continue_
    agent = make_inv("PreToolUse", BASH, type="agent", hook=AgentHook(type="agent", prompt="p"))
    d, _ = run(
        "PreToolUse", [(agent, RawResult(stdout='{"ok":false,"reason":"r"}'))], profile="legacy"
    )
    assert d.blocked and d.reason == "Agent hook condition was not met: r" and d.continue_


@pytest.mark.parametrize(
    ("raw", "kind", "htype"),
    [
        (RawResult(error_kind="timeout"), "timeout", "command"),
        (RawResult(error_kind="spawn_failed"), "spawn_failed", "command"),
        (RawResult(exit_code=1, stderr="x"), "nonzero_exit", "command"),
        (RawResult(exit_code=0, stdout='{"decision":"maybe"}'), "schema", "command"),
        (RawResult(http_status=503), "http_status", "http"),
        (RawResult(http_status=200, stdout="not json"), "http_body", "http"),
        (RawResult(stdout='{"ok":"yes"}'), "bad_verdict", "prompt"),
        (RawResult(), "unknown_type", "wasm"),
    ],
)
def test_case_51_enforcing_denies_on_error(raw: RawResult, kind: str, htype: str) -> None:
    """agent-core PreToolUse, the hook times out (or fails in any other way) → tool
    denied. CC (compat): the tool proceeds."""
    inv = make_inv("PreToolUse", BASH, type=htype, command="x")
    compat, (v,) = run("PreToolUse", [(inv, raw)])
    assert v.outcome == "error" and v.error_kind == kind
    assert not compat.blocked
    enforcing, _ = run("PreToolUse", [(inv, raw)], posture="enforcing")
    assert enforcing.blocked and enforcing.decision == "deny"
    assert enforcing.reason is not None
    assert f"hook error ({kind}) in {htype} hook" in enforcing.reason
    assert "denied by enforcing posture" in enforcing.reason


def test_case_51_enforcing_named_example() -> None:
    """The reason names the failure kind and the executor type."""
    inv = make_inv("PreToolUse", BASH, command="x")
    d, _ = run("PreToolUse", [(inv, RawResult(error_kind="timeout"))], posture="enforcing")
    assert d.reason == "hook error (timeout) in command hook 'x' — denied by enforcing posture"
    # Other events are unchanged by posture.
    stop = make_inv("Stop")
    d, _ = run("Stop", [(stop, RawResult(error_kind="timeout"))], posture="enforcing")
    assert not d.blocked


def test_case_52_elicitation_exit2_ignores_hso() -> None:
    """Elicitation form, exit 2 and stdout with `action:"accept"` → declined;
    `hookSpecificOutput` ignored; stderr shown nowhere."""
    inv = make_inv("Elicitation", {"mcp_server_name": "srv", "message": "m", "mode": "form"})
    out = {
        "hookSpecificOutput": {
            "hookEventName": "Elicitation",
            "action": "accept",
            "content": {"a": 1},
        }
    }
    d, (v,) = run("Elicitation", [(inv, RawResult(exit_code=2, stdout=js(out), stderr="hidden"))])
    assert v.blocking and "action" not in v.specific
    assert d.blocked and d.specific["action"] == "decline" and "content" not in d.specific
    accepted, _ = run("Elicitation", [(inv, RawResult(exit_code=0, stdout=js(out)))])
    assert accepted.specific["action"] == "accept" and accepted.specific["content"] == {"a": 1}
