"""`once` hooks (spec §4.2): honoured only for skill hooks, removed after a successful run."""

from __future__ import annotations

import json
from pathlib import Path

from engine.records import new_event
from engine.run import Engine
from engine.sources import load_sources


def hooks_file(path: Path, command: str) -> Path:
    path.write_text(
        json.dumps(
            {
                "hooks": {
                    "PreToolUse": [
                        {
                            "matcher": "Bash",
                            "hooks": [{"type": "command", "command": command, "once": True}],
                        }
                    ]
                }
            }
        )
    )
    return path


def event(session: str) -> object:
    return new_event(
        {
            "hook_event_name": "PreToolUse",
            "session_id": session,
            "cwd": "/tmp",
            "tool_name": "Bash",
            "tool_input": {"command": "ls"},
        }
    )


async def test_skill_once_hook_runs_once_per_session(tmp_path: Path) -> None:
    counter = tmp_path / "count"
    skill = hooks_file(tmp_path / "skill.json", f"echo x >> {counter}")
    eff = load_sources([("skill", str(skill))])
    engine = Engine()
    for session in ("a", "a", "a", "b"):
        await engine.evaluate(event(session), eff)  # type: ignore[arg-type]
    await engine.aclose()
    assert counter.read_text().count("x") == 2  # once in session a, once in session b


async def test_failed_once_hook_runs_again(tmp_path: Path) -> None:
    counter = tmp_path / "count"
    skill = hooks_file(tmp_path / "skill.json", f"echo x >> {counter}; exit 1")
    eff = load_sources([("skill", str(skill))])
    engine = Engine()
    for _ in range(3):
        await engine.evaluate(event("a"), eff)  # type: ignore[arg-type]
    await engine.aclose()
    assert counter.read_text().count("x") == 3


async def test_once_in_a_settings_file_is_ignored_like_claude_code(tmp_path: Path) -> None:
    counter = tmp_path / "count"
    settings = hooks_file(tmp_path / "settings.json", f"echo x >> {counter}")
    eff = load_sources([("project", str(settings))])
    engine = Engine()
    for _ in range(3):
        await engine.evaluate(event("a"), eff)  # type: ignore[arg-type]
    await engine.aclose()
    assert counter.read_text().count("x") == 3
