"""Faults around the worker, with real processes on the session nats-server (issue 16, item 7).

The claim: every event JetStream acknowledged to a publisher reaches the log, whatever
happens to the workers or the disk under the log; a copy stored twice (an event
re-delivered after a crash between append and ack) is dropped by the log's dedup rule.
Each test prints sent / logged / duplicated / lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import random
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from nats.aio.client import Client

from ingest.log.dedup import first_copies
from ingest.log.reader import iter_outcomes
from ingest.log.verifier import verify
from ingest.nats import streams as ha_nats
from tests.support.faults import (
    WorkerProc,
    consumer_state,
    copies,
    event,
    publish,
    tally,
    wait_logged,
)

if TYPE_CHECKING:
    from tests.conftest import NatsServer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

# A short ack wait, so a killed worker's events come back in seconds (the consumer is
# provisioned by the test before the workers start; they leave it as it is).
ACK_WAIT = 2.0


async def test_workers_sigkilled_repeatedly_during_ingest(
    nats_server: NatsServer, nc: Client, names: ha_nats.Names, tmp_path: Path
) -> None:
    await sigkill_workers(nats_server, nc, names, tmp_path, n=6000, kills=8)


@pytest.mark.soak
@pytest.mark.timeout(1800)
async def test_soak_workers_sigkilled_during_a_long_ingest(
    nats_server: NatsServer, nc: Client, names: ha_nats.Names, tmp_path: Path
) -> None:
    await sigkill_workers(nats_server, nc, names, tmp_path, n=60_000, kills=80)


async def sigkill_workers(
    nats_server: NatsServer,
    nc: Client,
    names: ha_nats.Names,
    tmp_path: Path,
    *,
    n: int,
    kills: int,
) -> None:
    """Two workers, one of them SIGKILLed (and started again) `kills` times while `n`
    events flow; nothing acknowledged may be lost, and no chain may store an event twice."""
    js = nc.jetstream()
    await ha_nats.provision(js, prefix=names.prefix, ack_wait=ACK_WAIT)
    data = tmp_path / "data"
    workers = [WorkerProc(data, nats_server.url, names, f"w{i}", "--batch", "64") for i in (1, 2)]
    for w in workers:
        w.start()
    events = [event(i) for i in range(n)]
    want = {ev.id for ev in events}
    rng = random.Random(16)

    async def feed() -> None:  # paced, so that the kills land while events flow
        for k in range(0, n, 150):
            await publish(js, names, events[k : k + 150])
            await asyncio.sleep(0.3)

    try:
        feeding = asyncio.create_task(feed())
        for _ in range(kills):
            await asyncio.sleep(rng.uniform(1.2, 1.8))  # past a restarted worker's start-up
            victim = rng.choice(workers)
            if victim.alive():
                victim.sigkill()  # mid-batch: appended, maybe answered, not acked
            victim.start()  # as a supervisor would (Restart=always)
        await feeding
        seen = await wait_logged(data, want, timeout=90 + n / 500)
        state = consumer_state(await js.consumer_info(names.events_stream, names.worker_consumer))
    finally:
        codes = [w.stop() for w in workers]
    t = tally(want, seen)
    kept = {o.event.id for o in first_copies(iter_outcomes(data))}
    print(t.line("workers SIGKILLed", f"{sum(w.kills for w in workers)} kills; consumer {state}"))
    assert codes == [0, 0], [w.stderr()[-2000:] for w in workers]
    assert t.lost == 0, f"{t.lost} acknowledged events never reached the log"
    assert kept == want  # the dedup rule keeps one copy of each
    per_chain = {w: [o.event.id for o in iter_outcomes(data, worker=w)] for w in ("w1", "w2")}
    for w, ids in per_chain.items():  # a chain never stores an event twice
        assert len(ids) == len(set(ids)), w
    report = verify(data)
    assert report.ok, report.to_dict()


# -- disk full under the log -------------------------------------------------------------


@contextlib.contextmanager
def small_filesystem(where: Path, size: str) -> Iterator[Path]:
    """A tmpfs of `size` mounted at `where` (the test runs as root, as CI does)."""
    where.mkdir(parents=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(where)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, f"mounting a tmpfs needs root: {done.stderr.strip()}"
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def fill(fs: Path) -> Path:
    """Take every free byte of `fs` with one file; returns it (delete it to free the space)."""
    filler = fs / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for chunk in (1 << 16, 1 << 12, 1 << 8, 1):
            block = b"\0" * chunk
            while True:
                try:
                    os.write(fd, block)
                except OSError as exc:
                    assert exc.errno == errno.ENOSPC, exc
                    break
    finally:
        os.close(fd)
    return filler


async def test_disk_full_under_the_log_stops_acking_and_recovers(
    nats_server: NatsServer, nc: Client, names: ha_nats.Names, tmp_path: Path
) -> None:
    js = nc.jetstream()
    await ha_nats.provision(js, prefix=names.prefix)
    with small_filesystem(tmp_path / "disk", "4m") as fs:
        data = fs / "data"
        worker = WorkerProc(data, nats_server.url, names, "w1", "--batch", "32")
        worker.err_path = tmp_path / "w1.stderr"
        worker.start()
        try:
            # Records of ~9 KiB: none fits in the slack of a page once the disk is full.
            before = [event(i, pad=8192) for i in range(100)]
            await publish(js, names, before)
            seen = await wait_logged(data, {ev.id for ev in before}, timeout=60)
            assert len(seen) == len(before), worker.stderr()
            filler = fill(fs)

            during = [event(i, pad=8192) for i in range(100, 300)]
            await publish(js, names, during)
            deadline = time.monotonic() + 30
            while "log not writable" not in worker.stderr():
                assert time.monotonic() < deadline and worker.alive(), worker.stderr()
                await asyncio.sleep(0.1)
            await asyncio.sleep(3.0)  # well past a commit: nothing may move meanwhile
            stuck = copies(data)
            info = await js.consumer_info(names.events_stream, names.worker_consumer)
            held = consumer_state(info)
            assert worker.alive(), worker.stderr()
            assert len(stuck) == len(before)  # nothing appended while the disk is full
            # ... and nothing acked: every event sent meanwhile is pending or held.
            assert held["pending"] + held["ack_pending"] == len(during), held
            assert held["ack_pending"] > 0, held

            filler.unlink()  # space returns
            want = {ev.id for ev in before + during}
            seen = await wait_logged(data, want, timeout=60)
        finally:
            code = worker.stop()
        err = worker.stderr()
        t = tally(want, seen)
        print(t.line("disk full", f"while full: {held}"))
        lines = [ln for ln in err.splitlines() if "log not writable" in ln]
        print(lines[0] if lines else err[-500:])
        assert len(lines) == 1, err  # said once, in one line, naming why
        assert "No space left on device" in lines[0] and "none acked" in lines[0]
        assert "log writable again" in err, err
        assert code == 0, err
        assert t.lost == 0 and t.duplicated == 0
        report = verify(data)
        assert report.ok, report.to_dict()
