"""Each agent has its page in the docs site, with its table, naming the version the tests
pin: a version bumped in tests/agents/PINNED (or Claude Code's PINNED) without its page
fails here."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from engine.dialects.registry import AGENTS

REPO = Path(__file__).resolve().parents[2]
PAGES = {"claude_code": "claude-code", "codex": "codex", "gemini_cli": "gemini-cli",
         "copilot_cli": "copilot-cli", "qwen_code": "qwen-code", "opencode": "opencode",
         "cline": "cline"}  # fmt: skip


def _pinned() -> dict[str, str]:
    rows = (REPO / "tests/agents/PINNED").read_text().splitlines()
    found = {r.split()[0]: r.split()[2] for r in rows if r.strip() and not r.startswith("#")}
    found["claude_code"] = (REPO / "tests/conformance/claude_code/PINNED").read_text().strip()
    return found


def test_every_agent_has_a_page() -> None:
    assert set(PAGES) == set(AGENTS)
    nav = (REPO / "mkdocs.yml").read_text()
    for page in PAGES.values():
        assert f"agents/{page}.md" in nav, page


@pytest.mark.parametrize("agent", AGENTS)
def test_a_page_names_the_version_tested(agent: str) -> None:
    text = (REPO / "docs" / "agents" / f"{PAGES[agent]}.md").read_text()
    m = re.search(r"^\| version tested \| ([^ |]+)", text, re.M)
    assert m is not None, f"{PAGES[agent]}.md: no 'version tested' row"
    assert m.group(1) == _pinned()[agent], (agent, m.group(1))
    for row in ("a deny is", "a failure is", "events that wait for the decision", "tools"):
        assert f"\n| {row} |" in text, (agent, row)
