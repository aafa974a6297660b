"""Chain heads anchored on NATS catch a log rewritten on the host, hashes recomputed and
re-keyed, and a log cut short, which the local `verify` cannot see."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest
from nats.aio.client import Client

from ingest.log.reader import iter_outcomes
from ingest.log.writer import LogWriter
from ingest.nats import streams as ha_nats
from tests.conftest import NatsServer
from tests.integration.test_pipeline import publish, write_settings
from tests.support.waiting import until
from tests.support.workers import start_worker, stop


def verify(data: Path, url: str, prefix: str, key: str, *extra: str) -> subprocess.CompletedProcess[str]:  # fmt: skip
    argv = [sys.executable, "-m", "hookaudit", "verify", "--data-dir", str(data), *extra]
    if "--anchors" in extra:
        argv += ["--nats", url, "--prefix", prefix]
    env = {"HOOKAUDIT_LOG_KEY": key, "PATH": "/usr/bin:/bin"}
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env, check=False)


def rewrite(data: Path, worker: str, keep: int | None, flip: int | None) -> int:
    """What a host attacker does: the log read, one decision flipped (or the newest records
    dropped), written again from scratch by hookaudit's own writer (fresh hashes, a new key)."""
    outs = [o for o in iter_outcomes(data) if o.worker == worker]
    if flip is not None:
        o = outs[flip]
        outs[flip] = msgspec.structs.replace(o, blocked=not o.blocked, decision="allow",
                                              reason="rewritten")  # fmt: skip
    outs = outs[:keep]
    shutil.rmtree(data / "log")
    fresh = [msgspec.structs.replace(o, seq=0, prev_hash="", hash="", worker="") for o in outs]
    with LogWriter.open(data, worker, key=b"attacker's own key") as w:
        for i in range(0, len(fresh), 16):
            w.append_batch(fresh[i : i + 16])
    return len(outs)


async def test_a_rewritten_and_rekeyed_log_fails_verify_anchors(
    nats_server: NatsServer, names: ha_nats.Names, nc: Client, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    key = "the worker's log key"
    monkeypatch.setenv("HOOKAUDIT_LOG_KEY", key)
    data = tmp_path / "data"
    worker = start_worker(data, "--name", "w1", nats=nats_server.url, prefix=names.prefix,
                          settings=[write_settings(tmp_path)], batch=32, env=os.environ)  # fmt: skip
    try:
        ids = await publish(nc, names, 6)
        await until(lambda: sum(1 for _ in iter_outcomes(data)) >= len(ids))
    finally:
        summary = json.loads(stop(worker).strip().splitlines()[-1])
    assert summary["anchors"] > 0
    anchored = await ha_nats.fetch_anchors(nc.jetstream(), names)
    assert len(anchored) == summary["anchors"]

    ok = verify(data, nats_server.url, names.prefix, key, "--anchors")
    assert ok.returncode == 0, ok.stderr
    assert f"{summary['anchors']} of {summary['anchors']} anchored heads match" in ok.stdout

    n_total = rewrite(data, "w1", keep=None, flip=3)
    assert n_total == len(ids)
    local = verify(data, nats_server.url, names.prefix, "attacker's own key")
    assert local.returncode == 0, local.stderr  # every hash and HMAC recomputed: locally fine
    caught = verify(data, nats_server.url, names.prefix, "attacker's own key", "--anchors")
    assert caught.returncode == 1
    assert "history rewritten since it was anchored" in caught.stderr, caught.stderr

    n_cut = rewrite(data, "w1", keep=len(ids) - 20, flip=None)  # the newest records cut off
    local = verify(data, nats_server.url, names.prefix, "attacker's own key")
    assert local.returncode == 0, local.stderr
    cut = verify(data, nats_server.url, names.prefix, "attacker's own key", "--anchors")
    assert cut.returncode == 1 and "have no record here" in cut.stderr, cut.stderr
    print(f"anchors: {summary['anchors']} heads anchored for {len(ids)} events; a rewrite "
          f"(1 decision flipped, {n_total} records re-hashed, re-keyed) and a cut "
          f"({len(ids) - n_cut} newest records dropped) pass local verify, both fail "
          "verify --anchors")  # fmt: skip


async def test_the_default_setup_catches_a_cut_tail_with_no_step_to_forget(tmp_path: Path) -> None:
    """As the quick start runs it: `nats up`, a worker and emits with no HOOKAUDIT_LOG_KEY
    and no flag. The log gets its own key with its first record (`log/key`), the worker
    anchors its heads on the embedded server, and a plain `verify` checks both: the newest
    records cut off at a batch boundary (the batch lines left valid) fail it."""
    from tests.support.auth import hookaudit as run
    from tests.support.auth import pre_tool_use
    from tests.support.auth import start_worker as start
    from tests.support.auth import stop as halt

    data = tmp_path / "data"
    up = await run("nats", "up", "--data-dir", str(data))
    assert up.code == 0, up.stderr
    worker = start(data, "--name", "w1")
    try:
        for i in range(40):
            p = await run(
                "emit", "--data-dir", str(data), "--wait", stdin=pre_tool_use(f"echo {i}")
            )
            assert p.code == 0, p.stderr
        deadline = asyncio.get_running_loop().time() + 30
        while sum(1 for _ in iter_outcomes(data)) < 40:
            assert asyncio.get_running_loop().time() < deadline
            await asyncio.sleep(0.1)
        halt(worker)
        assert (data / "log" / "key").stat().st_mode & 0o077 == 0  # made, private
        ok = await run("verify", "--data-dir", str(data))
        assert ok.code == 0, ok.stderr
        assert "anchored heads match" in ok.stdout, ok.stdout
        # the attacker: the active segment cut back to an earlier batch line, which stays
        # valid (its HMAC signs the chain up to there): the local chain and key are fine
        (seg,) = (data / "log" / "active" / "w1").glob("*.jsonl")
        lines = seg.read_bytes().splitlines(keepends=True)
        batch_ends = [i for i, line in enumerate(lines) if line.startswith(b'{"batch":')]
        assert len(batch_ends) >= 3, "several batches"
        seg.write_bytes(b"".join(lines[: batch_ends[-3] + 1]))
        cut = await run("verify", "--data-dir", str(data))
        assert cut.code == 1, (cut.stdout, cut.stderr)
        assert "cut off" in cut.stderr, cut.stderr
        alone = await run("verify", "--data-dir", str(data), "--no-anchors")
        assert alone.code == 0, alone.stderr  # what the default missed before
    finally:
        halt(worker)
        await run("nats", "down", "--data-dir", str(data))
