"""Backfill held to the real binaries: each agent that keeps a session file (Codex CLI's
rollout, Gemini CLI's and Qwen Code's chat files) is run wired, a call allowed and one
denied; then `hookaudit backfill`'s reading of the file it wrote must give every hook input
the binary sent (recorded verbatim by the live hooks), event by event and field by field,
but for what the file does not keep (`NOT_KEPT`, documented in docs/agents/index.md)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ingest.backfill import Scan
from ingest.backfill_agents import AgentCall, scan_agent_file
from ingest.backfill_events import parse_time
from tests.agents.runners import run
from tests.support.agents import deployment, sql
from tests.support.relay import Stack
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow

#: agent -> where its session files are under the home, the events its file does not show
#: (the hook's own name), and the fields each event's input has that the file does not keep
#: (besides `timestamp`, the hook's own time: a rebuilt one is the file entry's)
SESSION_FILES: dict[str, tuple[str, set[str], dict[str, set[str]]]] = {
    "codex": (".codex/sessions/**/rollout-*.jsonl", {"SessionEnd"}, {}),
    "gemini_cli": (".gemini/tmp/*/chats/*.jsonl", {"SessionEnd", "PreCompress"}, {}),
    "qwen_code": (
        ".qwen/projects/*/chats/*.jsonl",
        {"SessionEnd"},
        {
            "SessionStart": {"permission_mode"},
            "UserPromptSubmit": {"permission_mode"},
            "PreToolUse": {"permission_mode", "tool_use_id"},
            "PostToolUse": {"permission_mode", "tool_use_id", "duration_ms"},
            "Stop": {"permission_mode", "background_tasks", "crons", "context_usage",
                     "context_limit", "input_tokens"},
        },
    ),
}  # fmt: skip


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    yield from deployment(tmp_path)


def _live(data: Path, agent: str) -> list[dict[str, Any]]:
    rows = sql(data, "SELECT agent_payload FROM events WHERE agent = "
                     f"'{agent}' AND agent_payload IS NOT NULL ORDER BY ts, id")  # fmt: skip
    return [x if isinstance(x := r["agent_payload"], dict) else json.loads(x) for r in rows]


@pytest.mark.parametrize("outcome", ["allowed", "denied"])
@pytest.mark.parametrize("agent", list(SESSION_FILES))
def test_backfill_gives_what_the_binary_sent(
    agent: str, outcome: str, tmp_path: Path, stack: Stack
) -> None:
    pattern, not_shown, not_kept = SESSION_FILES[agent]
    command = f"echo hookaudit-probe{'; echo hookaudit-denied' if outcome == 'denied' else ''}"
    r = run(agent, tmp_path, stack.data, command)
    assert r.results, (r.proc.stdout[-2000:], r.proc.stderr[-2000:])
    if agent != "qwen_code":  # the end comes as the agent exits, recorded without waiting
        wait_for(lambda: any(x.get("hook_event_name") == "SessionEnd"
                             for x in _live(stack.data, agent)), 60, "SessionEnd")  # fmt: skip
    live = _live(stack.data, agent)
    (session_file,) = (tmp_path / "home").glob(pattern)
    scan, calls = Scan(), list[AgentCall]()
    assert scan_agent_file(session_file, scan, calls) == agent
    assert scan.skipped == 0
    rebuilt = [*scan.events, *calls]
    compared: list[str] = []
    for name in dict.fromkeys(x["hook_event_name"] for x in live):
        sent = [x for x in live if x["hook_event_name"] == name]
        got = sorted((e for e in rebuilt if e.hook["hook_event_name"] == name),
                     key=lambda e: e.ts)  # fmt: skip
        if name in not_shown:
            assert got == [], (name, [e.hook for e in got])
            continue
        assert len(got) == len(sent), (name, [e.hook for e in got], sent)
        for mine, theirs in zip(got, sent, strict=True):
            missing = not_kept.get(name, set())
            assert list(mine.hook) == [k for k in theirs if k not in missing], (
                name,
                mine.hook,
                theirs,
            )
            for key, value in mine.hook.items():
                if key != "timestamp":
                    assert value == theirs[key], (name, key, value, theirs[key])
            if "timestamp" in theirs:
                gap = abs((mine.ts - parse_time(theirs["timestamp"])).total_seconds())
                assert gap < 2, (name, mine.hook["timestamp"], theirs["timestamp"])
            compared.append(name)
    assert {e.hook["hook_event_name"] for e in rebuilt} <= set(compared), compared
    assert {"PreToolUse", "BeforeTool"} & set(compared), compared
