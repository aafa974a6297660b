"""`hookaudit backfill` of other agents' session files through a real worker: each call is
recorded as that agent's, observed, and `hookaudit query unchecked` lists the calls no live
hook decided, and not those a live hook did."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.relay import Stack, hookaudit, write_settings

TRANSCRIPTS = Path(__file__).resolve().parents[1] / "fixtures" / "agents" / "transcripts"
pytestmark = pytest.mark.slow


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    s = Stack(data=tmp_path / "data", settings=write_settings(tmp_path))
    s.nats_up()
    s.start_worker()
    try:
        s.wait_decided()
        yield s
    finally:
        s.stop()


def test_unchecked_lists_the_agents_calls_no_live_hook_decided(stack: Stack) -> None:
    # the denied runs' calls were decided live: their hook inputs, as the binaries sent them
    for agent in ("codex", "gemini_cli", "qwen_code"):
        live = (TRANSCRIPTS / f"{agent}-denied.hook.json").read_bytes()
        p = stack.emit("--agent", agent, stdin=live)
        assert p.returncode == 0, p.stderr
    p = hookaudit("backfill", "--data-dir", str(stack.data), str(TRANSCRIPTS))
    assert p.returncode == 0, p.stderr
    assert b"6 tool call(s): 3 ran, 3 refused" in p.stderr, p.stderr
    # the other events: Codex's 7 (two session starts, prompts and stops, one result),
    # Gemini CLI's 7 (two starts, prompts and stops, one result), Qwen Code's 9 (two
    # starts, prompts and stops, a result, and the empty prompt sending each result back)
    assert b"23 other event(s)" in p.stderr, p.stderr
    again = hookaudit("backfill", "--data-dir", str(stack.data), str(TRANSCRIPTS))
    assert b"published 0 (29 already there)" in again.stderr, again.stderr
    import time

    deadline = time.monotonic() + 60
    rows: list[dict[str, object]] = []
    while time.monotonic() < deadline:
        q = hookaudit("query", "unchecked", "--data-dir", str(stack.data), "--format", "json")
        assert q.returncode == 0, q.stderr
        rows = json.loads(q.stdout)
        if len(rows) == 3:
            break
        time.sleep(0.5)
    assert sorted((r["agent"], r["tool"], r["ran"]) for r in rows) == [
        ("codex", "Bash", True), ("gemini_cli", "Bash", True), ("qwen_code", "Bash", True),
    ]  # fmt: skip
    s = hookaudit("sql", "--data-dir", str(stack.data), "--format", "json",
                  "SELECT agent, decided_by FROM outcomes WHERE source = 'backfill'")  # fmt: skip
    seen = json.loads(s.stdout)
    assert len(seen) == 29 and {r["decided_by"] for r in seen} == {"observed"}
    agents = [r["agent"] for r in seen]
    assert (agents.count("codex"), agents.count("gemini_cli"), agents.count("qwen_code")) == (
        9, 9, 11,
    )  # fmt: skip
