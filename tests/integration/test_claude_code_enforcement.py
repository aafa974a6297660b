"""The real Claude Code, wired by the shipped managed settings, enforced by hookaudit end to end.

The conformance suite compares the engine with Claude Code hook by hook; this runs the
deployment: the pinned `claude -p` (against the loopback mock of the Messages API) with
infra/claude/managed-settings.serve.json or managed-settings.emit.json as its managed
settings, a real `serve` or `emit`, a real worker enforcing infra/policies/security.json,
on the embedded NATS with its role keys. The only change to a snippet is serve's port
(127.0.0.1:8787 becomes a free port, in the URLs and in allowedHttpHookUrls).

The model asks for three tool calls: `rm -rf` of a canary directory outside the project, a
Write of the project's `.env`, then a harmless `echo`. The policy denies the first two.
A hookaudit that failed open would let Claude Code delete the canary or write the file:
both are checked on disk, beside what Claude Code told the model (the deny reasons in its
tool results) and what the log holds (every PreToolUse of the session, decided by the policy
as the agent was told, under Claude Code's own session id).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from ingest.log.reader import iter_outcomes

REPO = Path(__file__).resolve().parents[2]
CONFORMANCE = REPO / "tests" / "conformance" / "claude_code"
sys.path.insert(0, str(CONFORMANCE))

import harness  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
BIN = Path(sys.executable).parent
TOKEN = "e2e-" + uuid.uuid4().hex


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def hookaudit_env(data: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOOKAUDIT_")}
    return {**env, "HOOKAUDIT_DATA_DIR": str(data), "PATH": f"{BIN}:{env['PATH']}"}


class Deployment:
    """`nats up`, a worker with the shipped policy, and serve (`via == "serve"`)."""

    def __init__(self, root: Path, via: str) -> None:
        self.root, self.via = root, via
        self.data = root / "data"
        self.env = hookaudit_env(self.data)
        self.procs: list[subprocess.Popen[bytes]] = []
        self.port = free_port()

    def run(self, *args: str) -> None:
        p = subprocess.run([str(BIN / "hookaudit"), *args], env=self.env, capture_output=True,
                           timeout=120, check=False)  # fmt: skip
        assert p.returncode == 0, (args, p.stderr.decode())

    def start(self, name: str, *args: str, env: dict[str, str] | None = None) -> None:
        with (self.root / f"{name}.log").open("ab") as log:
            self.procs.append(
                subprocess.Popen(
                    [str(BIN / "hookaudit"), *args], env=env or self.env, stdout=log, stderr=log
                )
            )

    def up(self, *, serve: bool = True) -> None:
        self.run("nats", "up")
        policy = REPO / "infra" / "policies" / "security.json"
        self.start("worker", "worker", "--strict", "--settings", f"project:{policy}")
        if self.via == "serve" and serve:
            self.start("serve", "serve", "--listen", f"127.0.0.1:{self.port}", "--fail", "closed",
                       env={**self.env, "HOOKAUDIT_SERVE_TOKEN": TOKEN})  # fmt: skip
        self.wait_decided()

    def wait_decided(self) -> None:
        """Until the worker answers an emitted event (its first may wait for JetStream)."""
        ping = json.dumps({"hook_event_name": "PreToolUse", "session_id": "ping", "cwd": "/tmp",
                           "tool_name": "Bash", "tool_input": {"command": "true"}}).encode()  # fmt: skip
        deadline = time.monotonic() + 60
        while True:
            p = subprocess.run([str(BIN / "hookaudit"), "emit", "--wait", "--timeout", "5"],
                               input=ping, env=self.env, capture_output=True, timeout=30,
                               check=False)  # fmt: skip
            if p.returncode == 0 and not p.stdout:
                break
            assert time.monotonic() < deadline, p.stderr.decode()
            time.sleep(0.3)
        if self.via == "serve" and any("serve" in p.args for p in self.procs):  # type: ignore[operator]
            while True:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=2):
                        return
                except OSError:
                    assert time.monotonic() < deadline, (self.root / "serve.log").read_text()
                    time.sleep(0.2)

    def down(self) -> str:
        out = ""
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait(timeout=10)
        for name in ("worker", "serve"):
            log = self.root / f"{name}.log"
            if log.exists():
                out += f"--- {name}\n{log.read_text(errors='replace')[-3000:]}"
        subprocess.run([str(BIN / "hookaudit"), "nats", "down"], env=self.env,
                       capture_output=True, timeout=60, check=False)  # fmt: skip
        return out


@pytest.fixture
def root() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="hookaudit-cc-e2e-"))
    yield d
    if not os.environ.get("HOOKAUDIT_TEST_KEEP"):
        subprocess.run(["rm", "-rf", str(d)], check=False, timeout=60)


def unchecked(dep: Deployment, home: Path, n_calls: int) -> list[dict]:
    """`hookaudit backfill` of Claude Code's transcripts, then `hookaudit query unchecked`."""
    p = subprocess.run([str(BIN / "hookaudit"), "backfill", str(home / ".claude" / "projects")],
                       env=dep.env, capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert p.returncode == 0 and f" {n_calls} tool call(s)" in p.stderr, p.stderr
    deadline = time.monotonic() + 30
    while True:  # the worker records them (observed)
        backfilled = [
            o
            for o in iter_outcomes(dep.data)
            if o.event.source == "backfill" and o.event.event == "PreToolUse"
        ]
        if len(backfilled) >= n_calls or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert len(backfilled) == n_calls and {o.decided_by for o in backfilled} == {"observed"}
    q = subprocess.run([str(BIN / "hookaudit"), "query", "unchecked", "--format", "json"],
                       env=dep.env, capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert q.returncode == 0, q.stderr
    return json.loads(q.stdout)


def managed_settings(via: str, port: int) -> str:
    text = (REPO / "infra" / "claude" / f"managed-settings.{via}.json").read_text()
    return text.replace("127.0.0.1:8787", f"127.0.0.1:{port}")


def tool_results(arm: harness.Arm) -> list[str]:
    """What Claude Code gave the model back for each tool call, in order."""
    return [
        json.dumps(b.get("content"))
        for e in arm.stream
        if e.get("type") == "user"
        for b in (e.get("message") or {}).get("content") or []
        if isinstance(b, dict) and b.get("type") == "tool_result"
    ]


def play(via: str, dep: Deployment, root: Path, canary: Path, marker: str) -> harness.Arm:
    """Claude Code with the shipped snippet as its managed settings, three tool calls."""
    sc = harness.Scenario(
        name=f"e2e.{via}",
        sources={"managed": managed_settings(via, dep.port)},
        turns=[
            {
                "tools": [
                    {
                        "name": "Bash",
                        "input": {"command": f"rm -rf {canary}", "description": "clean up"},
                    }
                ]
            },
            {
                "tools": [
                    {
                        "name": "Write",
                        "input": {"file_path": "{ROOT}/proj/.env", "content": "TOKEN=1\n"},
                    }
                ]
            },
            {
                "tools": [
                    {
                        "name": "Bash",
                        "input": {"command": f"echo {marker}", "description": "say it"},
                    }
                ]
            },
            {"text": "done"},
        ],
        args=["--allowedTools", "Bash,Write,Edit,Read"],
        env={"HOOKAUDIT_TOKEN": TOKEN, "HOOKAUDIT_DATA_DIR": str(dep.data)},
    )
    run = root / "claude"
    run.mkdir()
    binary = claude()
    with harness._managed_lock(True):
        return harness.run_claude(sc, run, sc.sources, binary)


def claude() -> Path:
    try:
        return harness.claude_bin()
    except FileNotFoundError as e:
        pytest.fail(str(e))


def make_canary(root: Path) -> Path:
    canary = root / "outside" / "canary"  # outside the project Claude Code runs in
    canary.mkdir(parents=True)
    (canary / "keep").write_text("still here\n")
    return canary


@pytest.mark.parametrize("via", ["serve", "emit"])
def test_claude_code_is_enforced_through_the_shipped_snippet(
    via: str, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The hooks run with Claude Code's PATH (the harness passes this process's): hookaudit on it
    monkeypatch.setenv("PATH", f"{BIN}:{os.environ['PATH']}")
    canary = make_canary(root)
    marker = f"e2e-ok-{uuid.uuid4().hex[:8]}"
    dep = Deployment(root, via)
    dep.up()
    try:
        arm = play(via, dep, root, canary, marker)
        # Every call of the transcript was decided live: backfill finds no gap.
        gaps = unchecked(dep, root / "claude" / "home", 3)
    finally:
        logs = dep.down()
    assert gaps == [], gaps
    # Nothing the policy denies happened.
    assert (canary / "keep").read_text() == "still here\n", "rm -rf ran: enforcement failed open"
    assert not (root / "claude" / "proj" / ".env").exists(), ".env written: failed open"
    assert arm.rc == 0, (arm.stderr[-2000:], logs)

    told = tool_results(arm)
    assert len(told) == 3, (told, logs)
    assert "rm -rf outside the project" in told[0], told[0]
    assert "writing .env files is not allowed" in told[1], told[1]
    assert marker in told[2], told[2]

    session = next(e["session_id"] for e in arm.stream if e.get("session_id"))
    records = [
        o
        for o in iter_outcomes(dep.data)
        if o.event.session_id == session and o.event.source != "backfill"
    ]
    pre = [o for o in records if o.event.event == "PreToolUse"]
    assert [o.event.tool_name for o in pre] == ["Bash", "Write", "Bash"], (pre, logs)
    assert [o.blocked for o in pre] == [True, True, False], pre
    assert all(o.decided_by == "policy" for o in pre), [o.decided_by for o in pre]
    seen = {o.event.event for o in records}
    assert {"SessionStart", "UserPromptSubmit", "PreToolUse", "PostToolUse", "Stop"} <= seen, seen
    print(f"\n{via}: {len(records)} events of Claude Code session {session} logged "
          f"({', '.join(sorted(seen))}); denied {[o.event.tool_name for o in pre if o.blocked]}, "
          f"sources {sorted({o.event.source for o in records})}")  # fmt: skip


def test_emit_snippet_blocks_when_hookaudit_cannot_start(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """hookaudit not on the PATH Claude Code runs hooks with (an IDE's, a service's): the
    command exits 127, which Claude Code treats as a non-blocking error. The snippet's
    `|| exit 2` turns that into a block: nothing runs that the policy was not asked about."""
    monkeypatch.setenv("PATH", "/usr/local/bin:/usr/bin:/bin")
    assert subprocess.run(["sh", "-c", "command -v hookaudit"], capture_output=True,
                          check=False).returncode != 0  # fmt: skip
    canary = make_canary(root)
    dep = Deployment(root, "emit")  # no deployment is needed: the hook cannot start
    arm = play("emit", dep, root, canary, "never")
    assert (canary / "keep").read_text() == "still here\n", "rm -rf ran: the hook failed open"
    assert not (root / "claude" / "proj" / ".env").exists(), ".env written: failed open"
    told = tool_results(arm)
    assert len(told) == 3, told
    assert all("hookaudit" in t and "not found" in t for t in told), told
    print(f"\nhookaudit missing: all 3 tool calls blocked: {told[0][:120]}")


def test_serve_snippet_fails_open_when_serve_is_down(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Claude Code's rule, pinned: an http hook that cannot connect is a non-blocking error,
    so with serve unreachable every call runs (the canary goes). No answer of serve's can
    change that; the README says so where it tells which snippet fails closed (emit's). If
    a Claude Code release blocks here, this fails and the README is to be updated."""
    monkeypatch.setenv("PATH", f"{BIN}:{os.environ['PATH']}")
    canary = make_canary(root)
    dep = Deployment(root, "serve")
    dep.up(serve=False)  # the worker runs; nothing listens on serve's port
    try:
        arm = play("serve", dep, root, canary, "down-marker")
        told = tool_results(arm)
        # What backfill makes of it: the three calls ran, none was decided live, and the
        # policy would have denied two.
        gaps = unchecked(dep, root / "claude" / "home", 3)
    finally:
        logs = dep.down()
    assert len(told) == 3, told
    assert not canary.exists(), "Claude Code blocked with serve down: update the README"
    assert (root / "claude" / "proj" / ".env").exists()
    assert "down-marker" in told[2], told
    assert [(g["tool"], g["ran"], g["policy"]) for g in gaps] == [
        ("Bash", True, "deny"), ("Write", True, "deny"), ("Bash", True, "allow")
    ], (gaps, logs)  # fmt: skip
    assert "rm -rf outside the project" in gaps[0]["reason"], gaps[0]
    print("\nserve down: Claude Code ran all 3 calls:", [t[:60] for t in told])
    print("backfill + query unchecked:", [(g["tool"], g["target"][-30:], g["ran"], g["policy"])
                                          for g in gaps])  # fmt: skip
