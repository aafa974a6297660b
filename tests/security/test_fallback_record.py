"""The record shows what the agent experienced, and nothing refused vanishes.

Real `emit` processes, a real nats-server and a real worker: an event answered by the
fallback while NATS was down (spooled), an event whose decision did not arrive in time
(a notice follows it), and a 10 MB event (refused, kept, recorded) all end up in the log
with `decided_by` telling policy from fallback, and in the `rejects` view.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from nats.aio.client import Client

from ingest.log.reader import iter_outcomes
from ingest.nats import streams as ha_nats
from queries.db import open_db
from tests.support import workers

REPO = Path(__file__).resolve().parents[2]
HOOKS = """
def guard(event):
    if "rm -rf /" in str((event.get("tool_input") or {}).get("command", "")):
        return {"hookSpecificOutput": {"hookEventName": "PreToolUse",
                "permissionDecision": "deny", "permissionDecisionReason": "no"}}
    return None
"""


def pretool(command: str) -> bytes:
    doc = {
        "hook_event_name": "PreToolUse",
        "tool_name": "Bash",
        "session_id": "s",
        "cwd": "/tmp",
        "tool_input": {"command": command},
    }
    return json.dumps(doc).encode()


def cli(*args: str, stdin: bytes = b"") -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "hookaudit", *args],
        input=stdin,
        capture_output=True,
        cwd=REPO,
        timeout=120,
    )


def start_worker(tmp_path: Path, up: list[str]) -> subprocess.Popen[bytes]:
    """A real worker with the python guard (denies `rm -rf /`) as its only policy."""
    (tmp_path / "hooks.py").write_text(HOOKS)
    settings = tmp_path / "settings.json"
    hook = {"type": "python", "callable": "hooks.py:guard"}
    settings.write_text(json.dumps({"hooks": {"PreToolUse": [{"matcher": "*", "hooks": [hook]}]}}))
    return workers.start_worker(Path(up[1]), *up[2:], settings=[settings], env=os.environ)


async def test_fallback_answers_and_refused_input_are_recorded(
    nats_server: Any, tmp_path: Path
) -> None:
    prefix = f"fb{time.time_ns() % 10**9}"
    data = tmp_path / "data"
    down = ["--data-dir", str(data), "--nats", "nats://127.0.0.1:1", "--prefix", prefix]
    up = ["--data-dir", str(data), "--nats", nats_server.url, "--prefix", prefix]

    # 1. NATS down: the agent is denied by --fail closed; the event is spooled with that answer
    p = cli("emit", *down, "--wait", "--fail", "closed", stdin=pretool("ls spooled"))
    assert (
        p.returncode == 0
        and json.loads(p.stdout)["hookSpecificOutput"]["permissionDecision"] == "deny"
    )
    # 1b. NATS down, observe mode: spooled; nobody waits, so its record will be `observed`
    assert cli("emit", *down, stdin=pretool("rm -rf / observed")).returncode == 0
    # 1c. malformed input, failing closed: blocked (exit 2); its stub says so
    p = cli("emit", *down, "--wait", "--fail", "closed", stdin=b'{"hook_event_name": "PreToolUse"')
    assert p.returncode == 2, p.stderr
    # 1d. Cline, failing closed: its block is a cancel with exit 0, and blocks all the same
    cline = (REPO / "tests/fixtures/agents/cline-3.0.65/PreToolUse.json").read_bytes()
    p = cli("emit", *down, "--agent", "cline", "--wait", "--fail", "closed", stdin=cline)
    assert p.returncode == 0 and json.loads(p.stdout)["cancel"] is True, p.stderr
    # 2. a 10 MB event in observe mode: refused, kept, and its stub spooled for the log
    big = pretool("x" * 10_000_000)
    p = cli("emit", *down, stdin=big)
    assert p.returncode == 0 and "exceeds the limit" in p.stderr.decode()
    status = json.loads(cli("spool", "status", "--data-dir", str(data), "--format", "json").stdout)
    assert (status["events"], status["rejects"], status["rejected_inputs"]) == (5, 2, 2)
    listed = cli(
        "spool", "rejects", "--data-dir", str(data), "--format", "jsonl"
    ).stdout.splitlines()
    [kept] = [x for x in map(json.loads, listed) if x["size"] > 1000]
    assert (kept["size"], kept["sha256"]) == (len(big), hashlib.sha256(big).hexdigest())

    nc = Client()
    await nc.connect(nats_server.url)
    await ha_nats.provision(nc.jetstream(), prefix=prefix)
    # 3. NATS up, no worker yet: the decision cannot arrive in time; a notice follows
    p = cli("emit", *up, "--wait", "--timeout", "0.5", "--fail", "closed", stdin=pretool("ls late"))
    assert json.loads(p.stdout)["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert cli("spool", "flush", *up).returncode == 0

    worker = start_worker(tmp_path, up)
    try:
        deadline = time.monotonic() + 60
        while len(list(iter_outcomes(data))) < 7:
            assert time.monotonic() < deadline, "the worker did not record 7 outcomes"
            await asyncio.sleep(0.2)
        # a normal decision afterwards, to see policy next to fallback
        p = cli("emit", *up, "--wait", "--fail", "closed", stdin=pretool("rm -rf /"))
        assert json.loads(p.stdout)["hookSpecificOutput"]["permissionDecision"] == "deny"
        # observe mode with NATS up: published, never waited for
        assert cli("emit", *up, stdin=pretool("rm -rf / live")).returncode == 0
        while len(list(iter_outcomes(data))) < 9:
            assert time.monotonic() < deadline, "the worker did not record 9 outcomes"
            await asyncio.sleep(0.2)
    finally:
        worker.send_signal(signal.SIGTERM)
        _, err = worker.communicate(timeout=30)
        await nc.close()
    assert worker.returncode == 0, err.decode()

    con = open_db(data)
    rows = con.execute(
        "SELECT command, decided_by, blocked, decision FROM outcomes ORDER BY seq"
    ).fetchall()
    by = {(c or "", d): (b, dec) for c, d, b, dec in rows}
    # what the agent got, not what the policy (which allows `ls`) would have said
    assert by[("ls spooled", "fallback")] == (True, "deny")
    assert by[("ls late", "fallback")] == (True, "deny")
    assert by[("ls late", "policy")] == (False, None)  # the worker's own, later verdict
    assert by[("rm -rf /", "policy")] == (True, "deny")
    # nobody waited: the policy's verdict is kept, but the record says it was not enforced
    assert by[("rm -rf / observed", "observed")] == (True, "deny")
    assert by[("rm -rf / live", "observed")] == (True, "deny")
    [policy_note] = [
        o.errors for o in iter_outcomes(data) if o.event.tool_name and "spooled" in o.event.payload
    ]
    assert any("policy decision not seen by the agent" in e for e in policy_note)
    # refused input: the record says what the agent got (blocked when failing closed)
    refused = con.execute(
        "SELECT agent, blocked, decision FROM outcomes WHERE decided_by = 'rejected' ORDER BY seq"
    ).fetchall()
    assert sorted(refused) == [("claude_code", False, None), ("claude_code", True, "deny")]
    cancelled = con.execute(
        "SELECT decided_by, blocked, decision FROM outcomes WHERE agent = 'cline'"
    ).fetchall()
    assert ("fallback", True, "deny") in cancelled, cancelled
    [(stage, size, digest, reason, session)] = con.execute(
        "SELECT stage, size, sha256, reason, session_id FROM rejects WHERE size > 1000"
    ).fetchall()
    assert (stage, size, digest) == ("emit", len(big), hashlib.sha256(big).hexdigest())
    assert session == "s"  # the session it claims, so the session's queries find it
    counts = dict(con.execute("SELECT decided_by, count(*) FROM outcomes GROUP BY 1").fetchall())
    print(
        f"record: spooled fallback deny and late-decision notice recorded as fallback, "
        f"policy verdicts kept beside them; 10 MB event recorded ({reason[:50]}...); "
        f"decided_by counts {counts}"
    )


class _LosePubAcks:
    """A TCP hop to the real server that forwards everything until the client publishes,
    then drops what the server sends back: the event is stored, its PubAck lost."""

    def __init__(self) -> None:
        self.tasks: set[asyncio.Task[None]] = set()
        self.writers: list[asyncio.StreamWriter] = []
        self.server: asyncio.Server | None = None

    async def start(self, host: str, port: int) -> int:
        async def handle(cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
            sr, sw = await asyncio.open_connection(host, port)
            self.writers += [cw, sw]
            published = False

            async def up() -> None:
                nonlocal published
                while data := await cr.read(65536):
                    published = published or b"PUB " in data  # PUB or HPUB
                    sw.write(data)
                    await sw.drain()

            async def down() -> None:
                while data := await sr.read(65536):
                    if not published:
                        cw.write(data)
                        await cw.drain()

            for coro in (up(), down()):
                t = asyncio.ensure_future(coro)
                self.tasks.add(t)

        self.server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port_: int = self.server.sockets[0].getsockname()[1]
        return port_

    async def close(self) -> None:
        assert self.server is not None
        self.server.close()
        for t in self.tasks:
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        for w in self.writers:
            w.close()
            with contextlib.suppress(Exception):
                await w.wait_closed()
        await self.server.wait_closed()


async def test_a_lost_puback_still_records_the_fallback_the_agent_got(
    nats_server: Any, tmp_path: Path
) -> None:
    """The event reaches the stream but its PubAck never comes back: emit denies (fail
    closed) and spools the event. Sent again under the event's id, JetStream would drop
    the spooled copy as a duplicate and the log would hold only the policy's allow."""
    prefix = f"pa{time.time_ns() % 10**9}"
    data = tmp_path / "data"
    host, port = nats_server.url.removeprefix("nats://").rsplit(":", 1)
    hop = _LosePubAcks()
    hop_port = await hop.start(host, int(port))
    nc = Client()
    await nc.connect(nats_server.url)
    try:
        await ha_nats.provision(nc.jetstream(), prefix=prefix)
        via = [
            "--data-dir",
            str(data),
            "--nats",
            f"nats://127.0.0.1:{hop_port}",
            "--prefix",
            prefix,
        ]
        up = ["--data-dir", str(data), "--nats", nats_server.url, "--prefix", prefix]
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "hookaudit",
            "emit",
            *via,
            "--wait",
            "--fail",
            "closed",
            "--timeout",
            "5",
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=REPO,
        )
        out, err = await asyncio.wait_for(proc.communicate(pretool("ls acked-lost")), 60)
        assert json.loads(out)["hookSpecificOutput"]["permissionDecision"] == "deny", err
        assert b"no PubAck" in out + err
        flushed = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "hookaudit",
            "spool",
            "flush",
            *up,
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        _, f_err = await flushed.communicate()
        assert flushed.returncode == 0, f_err
        worker = start_worker(tmp_path, up)
        try:
            deadline = time.monotonic() + 60
            while len(list(iter_outcomes(data))) < 2:
                assert time.monotonic() < deadline, "expected the policy record and the notice"
                await asyncio.sleep(0.2)
        finally:
            worker.send_signal(signal.SIGTERM)
            worker.communicate(timeout=30)
    finally:
        await hop.close()
        await nc.close()
    rows = (
        open_db(data)
        .execute(
            "SELECT decided_by, blocked, decision FROM outcomes WHERE command = 'ls acked-lost'"
        )
        .fetchall()
    )
    assert sorted(rows) == [("fallback", True, "deny"), ("policy", False, None)], rows
    print("lost PubAck: agent denied (fail closed); log holds policy allow + fallback deny notice")
