"""infra/claude/ snippets: the observe one wires every event Claude Code fires, and lints clean."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.events import CATALOG
from engine.lint import lint_path
from ingest.wire.claude_code import NOT_WIRED

SNIPPETS = Path(__file__).resolve().parents[2] / "infra" / "claude"

# every event Claude Code fires, but those a hook would break (WorktreeCreate: its hook must
# create the worktree and print its path)
CLAUDE_EVENTS = {s.name for s in CATALOG.values() if s.origin in ("claude", "claude-new")} - set(
    NOT_WIRED
)


@pytest.mark.parametrize("name", ["settings.observe.json", "settings.enforce.json"])
def test_every_claude_code_event_is_published(name: str) -> None:
    hooks = json.loads((SNIPPETS / name).read_text())["hooks"]
    assert set(hooks) == CLAUDE_EVENTS
    for event, groups in hooks.items():
        commands = [h["command"] for g in groups for h in g["hooks"]]
        assert any(c.startswith("hookaudit emit") for c in commands), event


def test_enforce_waits_and_fails_closed_on_pretooluse() -> None:
    hooks = json.loads((SNIPPETS / "settings.enforce.json").read_text())["hooks"]
    command = hooks["PreToolUse"][0]["hooks"][0]["command"]
    assert "--wait" in command and "--fail closed" in command


@pytest.mark.parametrize("path", sorted(SNIPPETS.glob("*.json")), ids=lambda p: p.name)
def test_snippets_lint_clean(path: Path) -> None:
    assert lint_path(path) == []


def test_the_files_are_what_the_generator_writes() -> None:
    from ingest.wire.claude_code import render, snippets

    docs = snippets()
    assert {p.name for p in SNIPPETS.glob("*.json")} >= set(docs)
    for name, doc in docs.items():
        assert (SNIPPETS / name).read_text() == render(doc), (
            f"{name} is stale: run python -m ingest.wire.claude_code infra/claude"
        )


@pytest.mark.parametrize("name", ["managed-settings.emit.json", "managed-settings.serve.json"])
def test_managed_snippets_wire_every_event(name: str) -> None:
    doc = json.loads((SNIPPETS / name).read_text())
    assert doc["allowManagedHooksOnly"] is True
    hooks = doc["hooks"]
    assert set(hooks) == CLAUDE_EVENTS
    for event, groups in hooks.items():
        (hook,) = [h for g in groups for h in g["hooks"]]
        takes_http = "http" in CATALOG[event].hook_types
        if name.endswith("serve.json") and takes_http:
            assert hook["type"] == "http" and hook["url"].endswith(f"/hooks/{event}"), event
            assert hook["url"].startswith(doc["allowedHttpHookUrls"][0].rstrip("*")), event
            assert hook["allowedEnvVars"] == doc["httpHookAllowedEnvVars"], event
        else:
            assert hook["type"] == "command" and hook["command"].startswith("hookaudit emit"), event
    pre = hooks["PreToolUse"][0]["hooks"][0]
    if pre["type"] == "command":
        assert "--wait" in pre["command"] and "--fail closed" in pre["command"]


@pytest.mark.parametrize("path", sorted(SNIPPETS.glob("*.json")), ids=lambda p: p.name)
def test_every_shipped_http_hook_names_its_event_in_the_url(path: Path) -> None:
    """At /hooks serve must read the body to know the event, so a malformed or oversized
    body is a 400/413 and Claude Code runs the call; at /hooks/<Event> serve answers it
    with that event's blocking JSON (tests/integration/test_serve.py drives both)."""
    doc = json.loads(path.read_text())
    for event, groups in doc.get("hooks", {}).items():
        for group in groups:
            for hook in group["hooks"]:
                if hook["type"] == "http":
                    assert hook["url"].endswith(f"/hooks/{event}"), (event, hook["url"])
