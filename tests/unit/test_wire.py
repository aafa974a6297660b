"""`hookaudit wire AGENT`: merged with what is there, idempotent, --print writes nothing,
and a bad configuration file is one line naming it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def wire(*args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOOKAUDIT_")}
    return subprocess.run(
        [sys.executable, "-m", "hookaudit", "wire", *args],
        capture_output=True, text=True, cwd=REPO, env=env, timeout=60,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("agent", "rel", "event"),
    [
        ("codex", ".codex/hooks.json", "PreToolUse"),
        ("gemini-cli", ".gemini/settings.json", "BeforeTool"),
    ],
)
def test_wiring_keeps_the_users_hooks_and_is_idempotent(
    tmp_path: Path, agent: str, rel: str, event: str
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    conf = tmp_path / "home" / rel
    conf.parent.mkdir(parents=True)
    mine = {"matcher": "x", "hooks": [{"type": "command", "command": "my-own-guard"}]}
    conf.write_text(json.dumps({"other": 1, "hooks": {event: [mine]}}))
    args = (agent, "--data-dir", str(data), "--home", str(tmp_path / "home"))
    first = wire(*args)
    assert first.returncode == 0, first.stderr
    once = conf.read_text()
    again = wire(*args)
    assert again.returncode == 0 and conf.read_text() == once
    doc = json.loads(once)
    assert doc["other"] == 1
    groups = doc["hooks"][event]
    assert groups[0] == mine and len(groups) == 2
    command = groups[1]["hooks"][0]["command"]
    assert f"emit --agent {agent.replace('-', '_')} --data-dir {data}" in command
    assert "--wait" in command and "--fail closed" in command


def test_print_writes_nothing(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    p = wire("codex", "--data-dir", str(data), "--home", str(tmp_path), "--print")
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith(f"# {tmp_path / '.codex' / 'hooks.json'}\n")
    assert json.loads(p.stdout.split("\n", 1)[1])["hooks"]["PreToolUse"]
    assert not (tmp_path / ".codex").exists()


@pytest.mark.parametrize(
    "content", ["{not json", "[]", '{"hooks": []}', '{"hooks": {"PreToolUse": 3}}']
)
def test_a_bad_configuration_is_one_line_naming_it(tmp_path: Path, content: str) -> None:
    data = tmp_path / "data"
    data.mkdir()
    conf = tmp_path / ".codex" / "hooks.json"
    conf.parent.mkdir()
    conf.write_text(content)
    p = wire("codex", "--data-dir", str(data), "--home", str(tmp_path))
    assert p.returncode == 1
    assert len(p.stderr.splitlines()) == 1 and str(conf) in p.stderr, p.stderr
    assert conf.read_text() == content  # nothing already there is lost


def test_a_fifo_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    conf = tmp_path / ".gemini" / "settings.json"
    conf.parent.mkdir()
    os.mkfifo(conf)
    p = wire("gemini_cli", "--data-dir", str(data), "--home", str(tmp_path))
    assert p.returncode == 1 and str(conf) in p.stderr


def test_a_missing_data_dir_is_an_error(tmp_path: Path) -> None:
    p = wire("codex", "--data-dir", str(tmp_path / "nope"), "--home", str(tmp_path))
    assert p.returncode != 0 and "no such data dir" in p.stderr


def test_copilot_and_cline_and_opencode_files(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    home = tmp_path / "home"
    for agent in ("copilot-cli", "cline", "opencode"):
        first = wire(agent, "--data-dir", str(data), "--home", str(home))
        assert first.returncode == 0, first.stderr
    copilot = json.loads((home / ".copilot" / "hooks" / "hookaudit.json").read_text())
    assert copilot["version"] == 1 and copilot["hooks"]["PreToolUse"][0]["timeoutSec"] == 15
    pre = home / ".cline" / "hooks" / "PreToolUse"
    assert os.access(pre, os.X_OK) and "--agent cline" in pre.read_text()
    plugin = home / ".config" / "opencode" / "plugin" / "hookaudit.js"
    assert "--agent" in plugin.read_text() and "throw new Error" in plugin.read_text()
    # a hook file of the user's own is never replaced
    mine = home / ".cline" / "hooks" / "TaskStart"
    mine.write_text("#!/bin/sh\necho mine\n")
    again = wire("cline", "--data-dir", str(data), "--home", str(home))
    assert again.returncode == 1 and str(mine) in again.stderr
    assert mine.read_text() == "#!/bin/sh\necho mine\n"


@pytest.mark.parametrize(
    "agent", ["codex", "gemini_cli", "copilot_cli", "qwen_code", "claude_code"]
)
def test_an_enforced_hook_blocks_when_hookaudit_cannot_start(agent: str, tmp_path: Path) -> None:
    """Not found (127) or a broken install (1) is exit 2 with a reason; emit's own answers
    (0, or 2 with its reason) pass through as they are."""
    import subprocess

    from ingest.wire.agents import LAYOUTS, command_for

    layout = LAYOUTS[agent]
    event = layout.enforce[0]
    stub = tmp_path / "stub"

    def run(body: str | None) -> subprocess.CompletedProcess[str]:
        exe = str(tmp_path / "missing") if body is None else str(stub)
        if body is not None:
            stub.write_text(f"#!/bin/sh\n{body}\n")
            stub.chmod(0o755)
        cmd = command_for(layout, event, tmp_path / "data", exe)
        return subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, timeout=30)

    missing = run(None)
    assert missing.returncode == 2 and missing.stderr.strip(), missing
    broken = run("echo Traceback >&2; exit 1")
    assert broken.returncode == 2, broken
    denied = run("echo 'policy: no' >&2; exit 2")
    assert (denied.returncode, denied.stderr) == (2, "policy: no\n")
    allowed = run("exit 0")
    assert (allowed.returncode, allowed.stdout, allowed.stderr) == (0, "", "")
