"""Python hooks through the engine: each hook runs exactly once, sync or async, mixed or not."""

from __future__ import annotations

import json
from pathlib import Path

from engine.records import new_event
from engine.run import Engine
from engine.sources import load_sources

HOOKS = """
CALLS = []

def sync_hook(event):
    CALLS.append("sync")
    return None

async def async_hook(event):
    CALLS.append("async")
    return {"hookSpecificOutput": {"hookEventName": "PreToolUse",
            "permissionDecision": "deny", "permissionDecisionReason": "async says no"}}

def returns_awaitable(event):
    CALLS.append("awaitable")
    return async_hook(event)
"""


def setup(tmp_path: Path, *names: str) -> tuple[object, list[str]]:
    (tmp_path / "h.py").write_text(HOOKS)
    hooks = [{"type": "python", "callable": f"h.py:{n}"} for n in names]
    (tmp_path / "s.json").write_text(json.dumps({"hooks": {"PreToolUse": [{"hooks": hooks}]}}))
    eff = load_sources([("project", str(tmp_path / "s.json"))])
    from engine.executors.python import _load_file

    calls: list[str] = _load_file(str(tmp_path / "h.py")).CALLS
    return eff, calls


def event() -> object:
    return new_event(
        {
            "hook_event_name": "PreToolUse",
            "session_id": "s",
            "cwd": "/tmp",
            "tool_name": "Bash",
            "tool_input": {"command": "ls"},
        }
    )


async def test_mixed_sync_and_async_hooks_each_run_once(tmp_path: Path) -> None:
    eff, calls = setup(tmp_path, "sync_hook", "async_hook")
    engine = Engine()
    out = await engine.evaluate(event(), eff)  # type: ignore[arg-type]
    await engine.aclose()
    assert sorted(calls) == ["async", "sync"]
    assert out.decision == "deny" and out.reason == "async says no"


async def test_sync_only_hooks_are_answered_inline_once(tmp_path: Path) -> None:
    eff, calls = setup(tmp_path, "sync_hook")
    engine = Engine()
    started = engine.start(event(), eff)  # type: ignore[arg-type]
    await engine.aclose()
    assert not hasattr(started, "__await__") and calls == ["sync"]


async def test_sync_function_returning_an_awaitable_is_an_error_run_once(tmp_path: Path) -> None:
    eff, calls = setup(tmp_path, "returns_awaitable")
    engine = Engine()
    out = await engine.evaluate(event(), eff)  # type: ignore[arg-type]
    await engine.aclose()
    assert calls == ["awaitable"]
    assert out.runs[0].error_kind == "python_bad_return" and not out.blocked
