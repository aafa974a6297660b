"""Faults around the emitter: nats-server killed while events flow, a flusher killed mid-flush.

The claim under test: every event an agent raised ends up in the stream exactly once,
whatever dies when, once the server is back and the spool is flushed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from nats.js import JetStreamContext
from nats.js.errors import NotFoundError

from engine.records import HookEvent, decode_event_msgpack, encode_json, new_event
from ingest.nats import streams as ha_nats
from ingest.nats.streams import Names
from ingest.spool.store import Spool

if TYPE_CHECKING:
    from tests.conftest import NatsServer

REPO = Path(__file__).resolve().parents[2]

# 200 emitter processes on a shared CI box: allow more than the default 120 s.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def _argv(command: str, *args: str) -> list[str]:
    from hookaudit import cli

    if command in cli.COMMANDS:
        return [sys.executable, "-m", "hookaudit", command, *args]
    return [sys.executable, "-c", f"from hookaudit.emit_cmd import {command}; {command}()", *args]


@dataclass
class Proc:
    code: int
    stdout: str
    stderr: str


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("HOOKAUDIT_")}


async def run(command: str, *args: str, stdin: bytes = b"") -> Proc:
    p = await asyncio.create_subprocess_exec(
        *_argv(command, *args),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=REPO,
        env=_env(),
    )
    out, err = await asyncio.wait_for(p.communicate(stdin), 60)
    assert p.returncode is not None
    return Proc(p.returncode, out.decode(), err.decode())


def _gone(pid: int) -> bool:
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # reap it if it is our child
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def sigkill(server: NatsServer) -> None:
    os.kill(server.pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while not _gone(server.pid):
        assert time.monotonic() < deadline, "nats-server survived SIGKILL"
        time.sleep(0.01)


async def stored(js: JetStreamContext, names: Names) -> list[HookEvent]:
    try:
        info = await js.stream_info(names.events_stream)
    except NotFoundError:
        return []
    out = []
    if info.state.messages:
        for seq in range(info.state.first_seq, info.state.last_seq + 1):
            msg = await js.get_msg(names.events_stream, seq)
            assert msg.data is not None
            out.append(decode_event_msgpack(msg.data))
    return out


async def _drop_streams(url: str, names: Names) -> None:
    nc = await ha_nats.connect(url)
    try:
        js = nc.jetstream()
        for stream in (names.events_stream, names.outcomes_stream):
            with contextlib.suppress(NotFoundError):
                await js.delete_stream(stream)
    finally:
        await nc.close()


async def _read_back(url: str, names: Names) -> list[HookEvent]:
    nc = await ha_nats.connect(url)
    try:
        return await stored(nc.jetstream(), names)
    finally:
        await nc.close()


async def test_sigkill_nats_server_while_emitting_loses_and_duplicates_nothing(
    nats_server: NatsServer, names: Names, tmp_path: Path
) -> None:
    n, kill_at, restart_at, parallel = 200, 60, 120, 4
    args = ["--data-dir", str(tmp_path), "--nats", nats_server.url, "--prefix", names.prefix]
    results: dict[int, Proc] = {}
    spooled_while_down = 0
    gate = asyncio.Semaphore(parallel)

    async def emit_one(i: int) -> None:
        raw = json.dumps({"hook_event_name": "PostToolUse", "session_id": f"s{i}"}).encode()
        try:
            results[i] = await run("emit", *args, stdin=raw)
        finally:
            gate.release()

    tasks = []
    try:
        for i in range(n):
            await gate.acquire()
            if i == kill_at:
                sigkill(nats_server)  # emits are in flight right now
            if i == restart_at:
                spooled_while_down = Spool(tmp_path).status().events
                nats_server.start()  # same store, same port
            tasks.append(asyncio.create_task(emit_one(i)))
        await asyncio.gather(*tasks)
    finally:
        if _gone(nats_server.pid):
            nats_server.start()

    # Observe mode is silent when NATS is merely down; anything on stderr (an event
    # "lost" because the spool was busy, say) is a failure here, with its message.
    assert all((p.code, p.stdout, p.stderr) == (0, "", "") for p in results.values()), [
        (i, p.code, p.stdout, p.stderr)
        for i, p in results.items()
        if p.code or p.stdout or p.stderr
    ]
    assert spooled_while_down > 0  # the kill did hit; the emits after the restart
    # flushed some or all of the spool before publishing their own event.

    flush = await run("spool", "flush", *args, "--format", "json")
    assert flush.code == 0, flush.stderr
    assert Spool(tmp_path).status().events == 0

    try:
        events = await _read_back(nats_server.url, names)
    finally:
        await _drop_streams(nats_server.url, names)
    counts = Counter(ev.session_id for ev in events)
    assert sorted(counts) == sorted(f"s{i}" for i in range(n))
    assert [s for s, c in counts.items() if c != 1] == []
    assert len({ev.id for ev in events}) == n


def _checkpointed(spool: Spool) -> bool:
    for offset in spool.dir.glob("batch-*.jsonl.offset"):
        try:
            if int(offset.read_text() or 0) > 0:
                return True
        except (FileNotFoundError, ValueError):
            pass
    return False


async def test_flusher_killed_mid_flush_then_flushed_again(
    nats_server: NatsServer, names: Names, tmp_path: Path
) -> None:
    total = 20_000
    spool = Spool(tmp_path)
    spool.append(new_event({"hook_event_name": "Stop", "session_id": "s0"}))
    with open(spool.events_path, "ab") as f:  # as 20 000 appends would, without 20 000 fsyncs
        for i in range(1, total):
            f.write(encode_json(new_event({"hook_event_name": "Stop", "session_id": f"s{i}"})))
            f.write(b"\n")
    args = ["--data-dir", str(tmp_path), "--nats", nats_server.url, "--prefix", names.prefix]

    p = await asyncio.create_subprocess_exec(
        *_argv("spool", "flush", *args),
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
        cwd=REPO,
        env=_env(),
    )
    nc = await ha_nats.connect(nats_server.url)
    try:
        js = nc.jetstream()
        deadline = time.monotonic() + 60
        while not _checkpointed(spool):  # kill it once it has recorded some progress
            assert time.monotonic() < deadline and p.returncode is None, "no checkpoint"
            await asyncio.sleep(0.005)
        p.kill()
        await p.wait()
        stored_before = (await js.stream_info(names.events_stream)).state.messages
        assert 0 < stored_before < total

        again = await run("spool", "flush", *args, "--format", "json")
        assert again.code == 0, again.stderr
        report = json.loads(again.stdout)
        events = await stored(js, names)
    finally:
        await nc.close()
        await _drop_streams(nats_server.url, names)

    assert [ev.session_id for ev in events] == [f"s{i}" for i in range(total)]
    assert report["remaining"] == 0 and spool.status().events == 0
    # The second flush resumed from the checkpoint: it re-sent (as duplicates) only
    # what was acked after it, not everything the first flush had published.
    assert report["published"] + report["duplicates"] < total
    assert report["published"] == total - stored_before


async def test_appends_racing_flushes_lose_nothing(
    nats_server: NatsServer, names: Names, tmp_path: Path
) -> None:
    # Appenders (threads, each append under flock) race a loop of flushes that rename
    # the spool under them: every event must end up in the stream exactly once.
    from ingest.emit.emitter import Target
    from ingest.emit.publish import Publisher

    spool = Spool(tmp_path)
    per_thread, threads = 300, 4

    def append_many(t: int) -> None:
        for i in range(per_thread):
            spool.append(new_event({"hook_event_name": "Stop", "session_id": f"t{t}-{i}"}))

    nc = await ha_nats.connect(nats_server.url)
    try:
        publish = Publisher(nc, Target(data_dir=tmp_path, prefix=names.prefix))
        writers = [asyncio.to_thread(append_many, t) for t in range(threads)]
        done = asyncio.gather(*writers)
        flushes = 0
        while not done.done():
            report = await spool.flush(publish, wait_lock=5.0)
            assert report.error is None
            flushes += 1
            await asyncio.sleep(0.01)
        await done
        report = await spool.flush(publish, wait_lock=5.0)
        assert (report.error, report.remaining) == (None, 0)
        events = await stored(nc.jetstream(), names)
    finally:
        await nc.close()
        await _drop_streams(nats_server.url, names)

    assert flushes > 1
    counts = Counter(ev.session_id for ev in events)
    assert len(counts) == per_thread * threads
    assert set(counts.values()) == {1}
    assert spool.status().events == 0


def _hold_flock(path: Path) -> subprocess.Popen[bytes]:
    """Another process holding `path`'s flock (a hung appender, or a hostile neighbour)."""
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys, time\n"
            f"fd = os.open({str(path)!r}, os.O_RDWR | os.O_CREAT, 0o600)\n"
            "fcntl.flock(fd, fcntl.LOCK_EX)\n"
            "print('held', flush=True)\n"
            "time.sleep(120)\n",
        ],
        stdout=subprocess.PIPE,
    )
    assert holder.stdout is not None and holder.stdout.readline() == b"held\n"
    return holder


async def test_an_event_is_spooled_even_while_another_process_holds_the_spool_lock(
    tmp_path: Path,
) -> None:
    # The append lock is held for longer than an appender waits for it (a hung appender,
    # a flush stuck on a slow disk, or a neighbour holding it on purpose) while NATS is
    # down: the event must still reach the spool, never be reported "lost" and dropped.
    from ingest.spool.store import APPEND_LOCK_WAIT

    spool = Spool(tmp_path)
    spool.dir.mkdir(mode=0o700)
    down = f"nats://127.0.0.1:{_free_port()}"
    args = ["--data-dir", str(tmp_path), "--nats", down]
    holder = _hold_flock(spool.dir / "lock")
    try:
        observed = await run(
            "emit", *args, stdin=json.dumps({"hook_event_name": "Stop", "session_id": "o"}).encode()
        )
        waiting = await run(
            "emit",
            *args,
            "--wait",
            "--fail",
            "closed",
            stdin=json.dumps(
                {
                    "hook_event_name": "PreToolUse",
                    "session_id": "w",
                    "tool_name": "Bash",
                    "tool_input": {"command": "ls"},
                }
            ).encode(),
        )
        held_for = APPEND_LOCK_WAIT
    finally:
        holder.kill()
        holder.wait()
        assert holder.stdout is not None
        holder.stdout.close()
    print(f"spool lock held > {held_for}s: observe exit {observed.code}, wait exit {waiting.code}")
    assert (observed.code, observed.stdout, observed.stderr) == (0, "", "")
    assert waiting.code == 0 and '"permissionDecision":"deny"' in waiting.stdout
    assert "lost" not in waiting.stderr
    assert spool.status().events == 2
    assert _spooled_sessions(spool) == ["o", "w"]


def _spooled_sessions(spool: Spool) -> list[str]:
    from engine.records import decode_event_json

    out = []
    for path in spool.dir.iterdir():
        if path.suffix == ".jsonl" and not path.name.startswith("rejects"):
            out += [decode_event_json(line).session_id for line in path.read_bytes().splitlines()]
    return sorted(out)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_lines_written_aside_are_counted_listed_and_flushed(
    nats_server: NatsServer, names: Names, tmp_path: Path
) -> None:
    from ingest.emit.emitter import Target
    from ingest.emit.publish import Publisher

    spool = Spool(tmp_path)
    spool.append(new_event({"hook_event_name": "Stop", "session_id": "before"}))
    holder = _hold_flock(spool.dir / "lock")
    try:
        spool.append(new_event({"hook_event_name": "Stop", "session_id": "aside"}))
        spool.reject(b"not json\n", "test reject", source="test")
        st = spool.status()
        assert (st.events, st.rejected_lines) == (2, 1)
        [rejected] = spool.rejected_lines()
        assert rejected["reason"] == "test reject" and rejected["size"] == len(b"not json")
    finally:
        holder.kill()
        holder.wait()
        assert holder.stdout is not None
        holder.stdout.close()
    nc = await ha_nats.connect(nats_server.url)
    try:
        report = await spool.flush(Publisher(nc, Target(data_dir=tmp_path, prefix=names.prefix)))
        events = await stored(nc.jetstream(), names)
    finally:
        await nc.close()
        await _drop_streams(nats_server.url, names)
    assert (report.published, report.remaining, report.error) == (2, 0, None)
    assert sorted(str(ev.session_id) for ev in events) == ["aside", "before"]
    assert spool.status().events == 0
    assert not list(spool.dir.glob(".*.part"))
