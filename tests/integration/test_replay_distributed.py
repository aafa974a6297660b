"""Distributed replay: jobs in separate processes (standing for machines) take segments from
a JetStream work queue on a real nats-server; the report and its digest do not depend on
how many jobs there are."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from ingest.log import LogWriter
from tests.conftest import NatsServer
from tests.integration.test_log_contract import make

BIN = Path(sys.executable).parent
HOOKS = """
import time

def slow(event):
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


def distributed(data: Path, policy: Path, url: str, jobs: int) -> tuple[dict[str, Any], list[str]]:
    coord = subprocess.Popen(replay_cmd(data, policy, "--distribute", "--nats", url),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    joiners: list[subprocess.Popen[str]] = []
    try:
        assert coord.stderr is not None
        line = coord.stderr.readline()
        m = re.search(r"--replay-id (\S+)", line)
        assert m, line
        argv = [str(BIN / "hookaudit"), "replay-join", "--replay-id", m.group(1),
                "--nats", url, "--timeout", "60"]  # fmt: skip
        joiners = [
            subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for _ in range(jobs)
        ]
        out, err = coord.communicate(timeout=180)
        assert coord.returncode == 0, err
        said = []
        for j in joiners:
            _, jerr = j.communicate(timeout=60)
            assert j.returncode == 0, jerr
            said.append(jerr.strip())
        return json.loads(out), said
    finally:
        for p in (coord, *joiners):
            if p.poll() is None:
                p.kill()
                p.wait()


def test_two_job_processes_give_the_report_of_one(nats_server: NatsServer, tmp_path: Path) -> None:
    data = tmp_path / "data"
    records = write_log(data)
    policy = settings(tmp_path)
    local = subprocess.run(replay_cmd(data, policy), capture_output=True, text=True, timeout=180)
    assert local.returncode == 0, local.stderr
    one = json.loads(local.stdout)
    assert one["events"] == records and one["changed"] > 0

    started = time.perf_counter()
    two, said = distributed(data, policy, nats_server.url, 2)
    seconds = time.perf_counter() - started
    taken = [int(re.search(r"read (\d+) segment", s).group(1)) for s in said]  # type: ignore[union-attr]
    assert sum(taken) == 13 + 4  # 13 segments, the last 4 sealed ones in halves
    assert all(t > 0 for t in taken), said  # both processes did part of the work
    single, said1 = distributed(data, policy, nats_server.url, 1)
    assert "read 17 segment(s)" in said1[0]
    for key in SAME:
        assert two[key] == one[key] == single[key], key
    print(
        f"distributed replay: {records} events; 2 jobs took {taken} of 17 work items "
        f"({seconds:.1f} s with start-up), 1 job 17; digest {one['digest'][:12]}… the same"
    )
