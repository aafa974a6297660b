"""`/compact` in the real Claude Code, driven through its terminal UI, against the engine.

`claude -p` cannot run `/compact`, so this starts the pinned binary interactively on a
pseudo-terminal (onboarding, trust and the API key answered in its config, the loopback
Messages API mock of the conformance suite as its model), says one thing, types `/compact`
and records every hook input it sends, then `/exit`. Compaction raises PreCompact, a
SubagentStop per compaction agent (with `agent_type: ""`), SessionStart (`compact`) and
PostCompact. For each
occurrence the groups the binary ran must be exactly the groups the engine plans for the
same input and settings: the binary is the oracle for which matchers an empty target runs.
"""

from __future__ import annotations

import fcntl
import json
import os
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path
from typing import Any

import pytest

from engine.plan import plan
from engine.sources import load_sources

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "conformance" / "claude_code"))

import harness  # noqa: E402
import mock_api  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


def H(label: str) -> dict[str, str]:
    return {"type": "command", "command": "{HOOK:" + label + "}"}


SETTINGS = {"hooks": {
    "SubagentStop": [
        {"hooks": [H("sub-none")]}, {"matcher": "", "hooks": [H("sub-empty")]},
        {"matcher": "*", "hooks": [H("sub-star")]}, {"matcher": "^$", "hooks": [H("sub-re-empty")]},
        {"matcher": ".+", "hooks": [H("sub-re-nonempty")]}, {"matcher": ".*", "hooks": [H("sub-re-any")]},
        {"matcher": "general-purpose", "hooks": [H("sub-gp")]},
        {"matcher": "general-purpose|Explore", "hooks": [H("sub-list")]},
    ],
    "PreCompact": [{"matcher": "manual", "hooks": [H("pre-manual")]},
                   {"matcher": "auto", "hooks": [H("pre-auto")]}],
    "PostCompact": [{"matcher": "manual", "hooks": [H("post-manual")]},
                    {"matcher": "auto", "hooks": [H("post-auto")]}],
    "SessionStart": [{"matcher": "compact", "hooks": [H("ss-compact")]},
                     {"matcher": "startup", "hooks": [H("ss-startup")]}],
    "UserPromptSubmit": [{"hooks": [H("prompt")]}],
    "Stop": [{"hooks": [H("stop")]}],
    "SessionEnd": [{"hooks": [H("end")]}],
}}  # fmt: skip


def _drive(root: Path) -> list[dict[str, Any]]:
    """Claude Code on a pty: a prompt, then `/compact`; the hook log it left."""
    sc = harness.Scenario(name="tui.compact", sources={"project": SETTINGS},
                          turns=[{"text": "hello"}, {"text": "SUMMARY"}, {"text": "ok"}])  # fmt: skip
    (root / "home" / ".claude").mkdir(parents=True)
    proj = root / "proj"
    (proj / ".claude").mkdir(parents=True)
    (root / "behaviours").mkdir()
    harness._write_sources(root, sc.sources)
    record = root / "requests.jsonl"
    record.touch()
    server, _ = mock_api.serve(harness._subst(sc.turns, root), record)
    trusted = {"hasTrustDialogAccepted": True, "hasCompletedProjectOnboarding": True}
    config = {"hasCompletedOnboarding": True, "theme": "dark", "projects": {str(proj): trusted},
              "customApiKeyResponses": {"approved": ["dummy"], "rejected": []}}  # fmt: skip
    for where in (root / "home" / ".claude.json", root / "home" / ".claude" / ".claude.json"):
        where.write_text(json.dumps(config))
    env = harness._env(root, server.server_address[1], {"TERM": "xterm-256color"})
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    p = subprocess.Popen([str(harness.claude_bin())], cwd=proj, env=env, stdin=slave,
                         stdout=slave, stderr=slave, start_new_session=True)  # fmt: skip
    os.close(slave)
    screen = bytearray()
    log = root / "hooks.jsonl"

    def until(what: bytes | None, seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            if select.select([master], [], [], 0.2)[0]:
                try:
                    screen.extend(os.read(master, 65536))
                except OSError:
                    return
            if what is not None and (what in screen or (log.exists() and what in log.read_bytes())):
                return

    def type_in(text: str) -> None:
        for ch in text:
            os.write(master, ch.encode())
            time.sleep(0.03)
        time.sleep(0.5)
        os.write(master, b"\r")

    try:
        until(b"ss-startup", 60)  # the session started (its SessionStart hook ran)
        type_in("say hi")
        until(b"hello", 60)
        type_in("/compact")
        until(b"post-manual", 90)  # compaction ended (PostCompact ran)
        time.sleep(1.0)
        type_in("/exit")
        until(b'"end"', 30)  # the session ended (its SessionEnd hook ran)
    finally:
        p.kill()
        p.wait(timeout=30)
        os.close(master)
        server.shutdown()
        server.server_close()
    assert log.exists(), bytes(screen[-3000:]).decode(errors="replace")
    return [json.loads(x) for x in log.read_text().splitlines()]


def test_compact_runs_the_groups_the_engine_plans(tmp_path: Path) -> None:
    try:
        harness.claude_bin()
    except FileNotFoundError as e:
        pytest.fail(str(e))
    logged = _drive(tmp_path)
    eff = load_sources([("project", str(tmp_path / "proj" / ".claude" / "settings.json"))])
    by_input: dict[str, tuple[dict[str, Any], set[str]]] = {}
    for entry in logged:
        key = json.dumps(entry["input"], sort_keys=True)
        by_input.setdefault(key, (entry["input"], set()))[1].add(entry["label"])
    events = []
    for inp, ran in by_input.values():
        name = inp["hook_event_name"]
        planned = plan(name, inp, json.dumps(inp).encode(), eff).invocations
        ours = {i.hook.command.rsplit(" ", 1)[-1] for i in planned}
        assert ours == ran, (name, inp.get("agent_type"), inp.get("trigger"), ran, ours)
        events.append(name)
    subs = [i for i, _ in by_input.values() if i["hook_event_name"] == "SubagentStop"]
    assert subs and {s["agent_type"] for s in subs} == {""}, subs
    assert {"PreCompact", "PostCompact", "SubagentStop"} <= set(events), events
    print(
        f"\n/compact: {len(by_input)} hook inputs; SubagentStop agent_type '' ran "
        f"{sorted(by_input[json.dumps(subs[0], sort_keys=True)][1])}"
    )
