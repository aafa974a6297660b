"""FakeExecutor: answers from a table or a function, records what it was asked.

No event loop here: with a plain function or a table the fake never suspends, so a
single ``send(None)`` runs its coroutine to the end.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any

import pytest

from engine.effects import Executor, Invocation, RawResult
from engine.executors.fake import FakeExecutor
from engine.records import HookIdentity


def run_now(coro: Coroutine[Any, Any, RawResult]) -> RawResult:
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
    coro.close()
    raise AssertionError("the coroutine suspended")


def inv(index: int = 0, **identity: Any) -> Invocation:
    ident = HookIdentity(type=identity.pop("type", "command"), source="user", **identity)
    return Invocation(
        index=index,
        event="PreToolUse",
        hook=None,
        identity=ident,
        source="user",
        matcher="Bash",
        timeout=60,
        payload={"tool_name": "Bash"},
        input_json=b'{"tool_name":"Bash"}',
        cwd="/",
    )


def test_table_keys_by_command_url_callable_and_prompt() -> None:
    table = {
        "./block.sh": RawResult(exit_code=2, stderr="no"),
        "http://127.0.0.1:9/h": RawResult(http_status=200, stdout="{}"),
        "pkg.mod:check": RawResult(output={"continue": True}),
        "Is $ARGUMENTS safe?": RawResult(stdout='{"ok": true}'),
    }
    fake = FakeExecutor(table)
    assert run_now(fake.run(inv(command="./block.sh"))).exit_code == 2
    assert run_now(fake.run(inv(type="http", url="http://127.0.0.1:9/h"))).http_status == 200
    assert run_now(fake.run(inv(type="python", callable="pkg.mod:check"))).output == {
        "continue": True
    }
    assert run_now(fake.run(inv(type="prompt", prompt="Is $ARGUMENTS safe?"))).stdout
    assert len(fake.invocations) == 4


def test_unknown_key_raises_naming_the_hook_and_known_keys() -> None:
    fake = FakeExecutor({"./a.sh": RawResult(exit_code=0)})
    with pytest.raises(LookupError, match=r"'./b.sh' \(PreToolUse:Bash\); known keys: './a.sh'"):
        run_now(fake.run(inv(command="./b.sh")))
    assert len(fake.invocations) == 1  # recorded even when it has no answer


def test_default_answers_unknown_keys() -> None:
    fake = FakeExecutor({}, default=RawResult(exit_code=0, stdout="ok"))
    assert run_now(fake.run(inv(command="anything"))).stdout == "ok"


def test_function_sees_the_invocation_and_calls_are_recorded_in_order() -> None:
    fake = FakeExecutor(lambda i: RawResult(exit_code=i.index, stdout=i.name))
    results = [run_now(fake.run(inv(index=n, command="x"))) for n in (2, 0, 1)]
    assert [r.exit_code for r in results] == [2, 0, 1]
    assert results[0].stdout == "PreToolUse:Bash"
    assert [i.index for i in fake.invocations] == [2, 0, 1]


def test_async_function_is_awaited() -> None:
    async def answer(i: Invocation) -> RawResult:
        return RawResult(exit_code=7, pending=i.index == 1)

    fake = FakeExecutor(answer)
    res = run_now(fake.run(inv(index=1, command="x")))
    assert (res.exit_code, res.pending) == (7, True)


def test_is_an_executor() -> None:
    ex: Executor = FakeExecutor({})
    assert callable(ex.run)
    assert FakeExecutor.answer_key(inv(type="agent", prompt="p")) == "p"
    assert FakeExecutor.answer_key(inv(type="mcp_tool")) is None
