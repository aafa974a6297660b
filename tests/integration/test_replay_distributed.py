"""Distributed replay: jobs in separate processes (standing for machines) take segments from
a JetStream work queue on a real nats-server; the report and its digest do not depend on
how many jobs there are, nor on a job that dies or hangs mid-run (its segments are
delivered again to another job and counted once). On the authenticated embedded server the
coordinator and the jobs run with their own roles (replay, replay-join); other keys are
refused in one line."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ingest.log.writer import LogWriter
from ingest.nats import embedded
from ingest.nats.auth import auth_dir
from replay.workqueue import STREAM
from tests.conftest import NatsServer
from tests.integration.test_log_contract import make
from tests.support.waiting import wait_for

BIN = Path(sys.executable).parent
HOOKS = """
import os
import pathlib
import time

HERE = pathlib.Path(__file__).parent

def slow(event):
    (HERE / f"ran.{os.getpid()}").touch()  # this process has begun evaluating
    if os.environ.get("REPLAY_TEST_VICTIM"):
        time.sleep(120)  # the victim hangs in its first segment until the test kills it
    time.sleep(0.004)  # a few ms an event: the jobs' shares of the work overlap in time
    return {"decision": "block", "reason": "new policy"} if "/1" in str(event) else None
"""


def write_log(data: Path) -> int:
    """Two chains, eleven sealed segments and two active ones; the number of records."""
    n = 0
    for worker, sealed, size in (("w1", 7, 30), ("w2", 4, 25)):
        with LogWriter.open(data, worker) as w:
            for _ in range(sealed):
                w.append_batch([make(n + i, worker) for i in range(size)])
                n += size
                w.seal()
            w.append_batch([make(n + i, worker) for i in range(5)])
            n += 5
    return n


def settings(tmp: Path) -> Path:
    (tmp / "hooks.py").write_text(HOOKS)
    doc = {"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [
        {"type": "python", "callable": f"{tmp}/hooks.py:slow"}]}]}}  # fmt: skip
    path = tmp / "new.json"
    path.write_text(json.dumps(doc))
    return path


def replay_cmd(data: Path, policy: Path, *extra: str) -> list[str]:
    return [str(BIN / "hookaudit"), "replay", "--data-dir", str(data), "--settings",
            f"project:{policy}", "--format", "json", "--store", "none", *extra]  # fmt: skip


SAME = ("digest", "events", "selected", "changed", "counterfactual", "transitions")


def env(victim: bool = False) -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith(("HOOKAUDIT_", "REPLAY_TEST"))}
    return {**e, "REPLAY_TEST_VICTIM": "1"} if victim else e


def join_cmd(replay_id: str, *extra: str) -> list[str]:
    return [str(BIN / "hookaudit"), "replay-join", "--replay-id", replay_id, "--timeout", "60",
            *extra]  # fmt: skip


def distributed(
    data: Path,
    policy: Path,
    jobs: int,
    nats: tuple[str, ...] = (),
    *,
    coord_extra: tuple[str, ...] = (),
    join_nats: tuple[str, ...] | None = None,
    victims: int = 0,
    meanwhile: Callable[[str, list[subprocess.Popen[str]]], None] | None = None,
) -> tuple[dict[str, Any], list[str], str]:
    """The report of a replay run by `jobs` replay-join processes (the first `victims` of
    them hang in their first segment); `meanwhile(replay_id, joiners)` runs once they are
    started. `join_nats`: the jobs' connection flags, if not the coordinator's. Returns the report, each surviving job's last stderr line, the coordinator's
    stderr."""
    coord = subprocess.Popen(replay_cmd(data, policy, "--distribute", *nats, *coord_extra),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    joiners: list[subprocess.Popen[str]] = []
    try:
        assert coord.stderr is not None
        line = coord.stderr.readline()
        m = re.search(r"--replay-id (\S+)", line)
        assert m, line
        joiners = [
            subprocess.Popen(join_cmd(m.group(1), *(nats if join_nats is None else join_nats)),
                             stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=env(k < victims))
            for k in range(jobs)
        ]  # fmt: skip
        if meanwhile is not None:
            meanwhile(m.group(1), joiners)
        out, err = coord.communicate(timeout=180)
        assert coord.returncode == 0, err
        said = []
        for j in joiners[victims:]:
            _, jerr = j.communicate(timeout=60)
            assert j.returncode == 0, jerr
            said.append(jerr.strip().splitlines()[-1])
        return json.loads(out), said, err
    finally:
        reap(coord, *joiners)


def reap(*procs: subprocess.Popen[str] | None) -> None:
    """Kill what still runs (a stopped process too) and close every pipe."""
    for p in procs:
        if p is None:
            continue
        if p.poll() is None:
            p.kill()
            p.wait()
        for stream in (p.stdout, p.stderr):
            if stream is not None:
                stream.close()


def local(data: Path, policy: Path) -> dict[str, Any]:
    done = subprocess.run(replay_cmd(data, policy), capture_output=True, text=True, timeout=180,
                          env=env())  # fmt: skip
    assert done.returncode == 0, done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def taken(said: str) -> int:
    m = re.search(r"read (\d+) segment", said)
    assert m, said
    return int(m.group(1))


async def operators_stream(url: str, *, check: bool = False) -> bool:
    """HOOK_REPLAY as an operator may have made it (other limits than the coordinator's);
    with `check`: whether it is still so."""
    import nats as nats_py
    from nats.js.api import RetentionPolicy, StreamConfig

    nc = await nats_py.connect(url)
    try:
        js = nc.jetstream()
        if check:
            return (await js.stream_info(STREAM)).config.description == "the operator's"
        with contextlib.suppress(nats_py.js.errors.NotFoundError):
            await js.delete_stream(STREAM)
        await js.add_stream(StreamConfig(name=STREAM, subjects=["hookaudit.replay.*.segs"],
                                         retention=RetentionPolicy.WORK_QUEUE,
                                         description="the operator's", max_age=30 * 86400))  # fmt: skip
        return True
    finally:
        await nc.close()


def test_two_job_processes_give_the_report_of_one(nats_server: NatsServer, tmp_path: Path) -> None:
    data = tmp_path / "data"
    records = write_log(data)
    policy = settings(tmp_path)
    one = local(data, policy)
    assert one["events"] == records and one["changed"] > 0

    url = ("--nats", nats_server.url)
    asyncio.run(operators_stream(nats_server.url))
    started = time.perf_counter()
    two, said, _ = distributed(data, policy, 2, url)
    seconds = time.perf_counter() - started
    shares = [taken(s) for s in said]
    assert sum(shares) == 13 + 4  # 13 segments, the last 4 sealed ones in halves
    assert all(t > 0 for t in shares), said  # both processes did part of the work
    single, said1, _ = distributed(data, policy, 1, url)
    assert "read 17 segment(s)" in said1[0]
    for key in SAME:
        assert two[key] == one[key] == single[key], key
    assert asyncio.run(operators_stream(nats_server.url, check=True))  # used, left as it was
    print(
        f"distributed replay: {records} events; 2 jobs took {shares} of 17 work items "
        f"({seconds:.1f} s with start-up), 1 job 17; digest {one['digest'][:12]}… the same"
    )


@pytest.mark.parametrize("how", [signal.SIGKILL, signal.SIGSTOP], ids=["killed", "hung"])
def test_a_job_that_dies_or_hangs_mid_segment_is_run_again_and_counted_once(
    nats_server: NatsServer, tmp_path: Path, how: signal.Signals
) -> None:
    data = tmp_path / "data"
    records = write_log(data)
    policy = settings(tmp_path)
    one = local(data, policy)
    for f in tmp_path.glob("ran.*"):
        f.unlink()
    stopped: list[subprocess.Popen[str]] = []

    def strike(_rid: str, joiners: list[subprocess.Popen[str]]) -> None:
        victim = joiners[0]
        wait_for(lambda: (tmp_path / f"ran.{victim.pid}").exists(), 120)  # holding a segment
        victim.send_signal(how)  # SIGSTOP: alive, silent, never answers
        stopped.append(victim)

    url = ("--nats", nats_server.url)
    wait = ("--ack-wait", "3", "--job-timeout", "120")
    try:
        got, said, err = distributed(data, policy, 2, url, coord_extra=wait, victims=1,
                                     meanwhile=strike)  # fmt: skip
    finally:
        reap(*stopped)
    survivor = taken(said[0])
    # the victim's segments came back to the survivor (in the part it was running, or in
    # a part of its own after it had reported)
    assert survivor >= 17, (said, err)
    for key in SAME:
        assert got[key] == one[key], key
    assert got["events"] == records
    print(
        f"distributed replay, one of 2 jobs {how.name} mid-segment: the survivor read "
        f"{survivor} of 17 work items; events {got['events']} of {records}, "
        f"digest {got['digest'][:12]}… the local one"
    )


def test_a_replay_whose_jobs_make_no_progress_fails_in_one_line(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    """Its only job hangs in a hook while its process lives (it keeps its segments): the
    coordinator gives up after --job-timeout without progress, in one line."""
    data = tmp_path / "data"
    write_log(data)
    policy = settings(tmp_path)
    cmd = replay_cmd(data, policy, "--distribute", "--nats", nats_server.url,
                     "--ack-wait", "2", "--job-timeout", "8")  # fmt: skip
    coord = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    job: subprocess.Popen[str] | None = None
    try:
        assert coord.stderr is not None
        m = re.search(r"--replay-id (\S+)", coord.stderr.readline())
        assert m
        job = subprocess.Popen(join_cmd(m.group(1), "--nats", nats_server.url),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=env(victim=True))  # fmt: skip
        out, err = coord.communicate(timeout=180)
    finally:
        reap(coord, job)
    assert coord.returncode == 1 and not out
    last = err.strip().splitlines()[-1]
    assert "Traceback" not in err, err
    assert re.fullmatch(r"hookaudit replay: replay jobs made no progress for 8 s \(0 of 17 "
                        r"segment\(s\) done; waiting for job\(s\) none reported\)", last), err  # fmt: skip
    print(f"no progress: {last}")


def test_a_segment_every_job_dies_on_fails_the_replay_in_one_line(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    """Jobs that each die holding a segment, one after another: once a segment was handed
    out --max-deliver times, the next pull makes JetStream say so and the coordinator fails
    naming it."""
    data = tmp_path / "data"
    write_log(data)
    policy = settings(tmp_path)
    cmd = replay_cmd(data, policy, "--distribute", "--nats", nats_server.url,
                     "--ack-wait", "2", "--max-deliver", "2", "--job-timeout", "120")  # fmt: skip
    coord = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    victims: list[subprocess.Popen[str]] = []
    try:
        assert coord.stderr is not None
        m = re.search(r"--replay-id (\S+)", coord.stderr.readline())
        assert m
        while coord.poll() is None and len(victims) < 10:
            v = subprocess.Popen(join_cmd(m.group(1), "--nats", nats_server.url),
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 env=env(victim=True))  # fmt: skip
            victims.append(v)
            marker = tmp_path / f"ran.{v.pid}"
            wait_for(lambda: marker.exists() or coord.poll() is not None, 120)  # noqa: B023
            v.send_signal(signal.SIGKILL)
            v.wait()
            time.sleep(3)  # past the ack wait: what it held is delivered again
        out, err = coord.communicate(timeout=120)
    finally:
        reap(coord, *victims)
    assert coord.returncode == 1 and not out, err
    assert "Traceback" not in err, err
    last = err.strip().splitlines()[-1]
    assert re.fullmatch(r"hookaudit replay: segment \S+ was delivered 2 times and no job "
                        r"finished it \(each job that took it died or gave it back\)", last), err  # fmt: skip
    print(f"max deliver: {len(victims)} jobs killed; {last}")


def test_a_result_over_max_payload_fails_the_job_in_one_line(tmp_path: Path) -> None:
    """--store changed sends the outcomes to store with a part's result: on a server with a
    small max_payload the job says so instead of losing its connection."""
    import socket

    data = tmp_path / "data"
    write_log(data)
    policy = settings(tmp_path)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    conf = tmp_path / "small.conf"
    conf.write_text(f"listen: 127.0.0.1:{port}\nmax_payload: 8192\n"
                    f"jetstream {{ store_dir: {tmp_path / 'store'} }}\n")  # fmt: skip
    log = (tmp_path / "nats.log").open("wb")
    server = subprocess.Popen([embedded.find_nats_server(), "-c", str(conf)], stdout=log,
                              stderr=subprocess.STDOUT)  # fmt: skip
    coord: subprocess.Popen[str] | None = None
    try:
        wait_for(lambda: b"Server is ready" in (tmp_path / "nats.log").read_bytes(), 30, "nats")
        url = f"nats://127.0.0.1:{port}"
        coord = subprocess.Popen(
            replay_cmd(data, policy, "--distribute", "--nats", url, "--store", "changed"),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert coord.stderr is not None
        m = re.search(r"--replay-id (\S+)", coord.stderr.readline())
        assert m
        job = subprocess.run(join_cmd(m.group(1), "--nats", url), capture_output=True,
                             text=True, timeout=180, env=env())  # fmt: skip
    finally:
        reap(coord)
        server.send_signal(signal.SIGTERM)
        server.wait(30)
        log.close()
    assert job.returncode == 1 and "Traceback" not in job.stderr, job.stderr
    (line,) = job.stderr.strip().splitlines()
    assert re.fullmatch(r"hookaudit replay-join: the result of \d+ segment\(s\) is \d+ bytes, "
                        r"over the NATS server's max_payload of 8192: replay with --store "
                        r"none, or raise max_payload", line), line  # fmt: skip
    print(f"max_payload: {line}")


def test_roles_on_the_authenticated_embedded_server(tmp_path: Path) -> None:
    """The coordinator and its jobs use the data dir's embedded server with their own role
    keys (no --nats); the worker's key cannot join, the job's key cannot coordinate."""
    data = tmp_path / "data"
    write_log(data)
    policy = settings(tmp_path)
    one = local(data, policy)
    srv = embedded.start_embedded(data, auth=True)
    keys = auth_dir(data)
    try:
        refusals: list[str] = []

        def wrong_key_first(rid: str, _joiners: list[subprocess.Popen[str]]) -> None:
            p = subprocess.run(
                join_cmd(rid, "--nats", srv.url, "--nkey", str(keys / "worker.nk")),
                capture_output=True, text=True, timeout=120, env=env(),
            )  # fmt: skip
            assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
            refusals.append(p.stderr.strip().splitlines()[-1])

        got, said, _ = distributed(data, policy, 2, ("--data-dir", str(data)),
                                   meanwhile=wrong_key_first)  # fmt: skip
        for key in SAME:
            assert got[key] == one[key], key
        assert sum(taken(s) for s in said) == 17
        (refusal,) = refusals
        assert re.fullmatch(r"hookaudit replay-join: NATS refused this replay job: permissions "
                            r"violation for publish to \S+\.join\"? \(it needs the replay-join "
                            r"role's key\)", refusal, re.I), refusal  # fmt: skip
        coord = subprocess.run(
            replay_cmd(data, policy, "--distribute", "--nats", srv.url, "--nkey",
                       str(keys / "replay-join.nk")),
            capture_output=True, text=True, timeout=120, env=env(),
        )  # fmt: skip
        assert coord.returncode == 1
        last = coord.stderr.strip().splitlines()[-1]
        assert "Traceback" not in coord.stderr
        assert re.fullmatch(r"hookaudit replay: NATS refused the coordinator: permissions "
                            r"violation for publish to \S+STREAM\.CREATE\S+ \(it needs the "
                            r"replay role's key\)", last, re.I), coord.stderr  # fmt: skip
        print(f"roles: wrong join key -> {refusal!r}; wrong coordinator key -> {last!r}")
    finally:
        embedded.stop_embedded(data)
