"""Faults on a 3-node JetStream cluster (R3 streams, TLS, the role accounts): a node killed
during ingest.

The claim: every event JetStream acknowledged to a publisher reaches the log exactly once,
whatever node dies while events flow, with a worker connected through the node list. Every
client holds its own role's key, as deployed: events are published with the emitter's, the
streams provisioned and consumed with the worker's, the consumer inspected with the
analyst's. Each test prints sent / logged / duplicated / lost.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import nats.errors
import pytest

from engine.records import encode_msgpack, new_event
from ingest.log.reader import iter_outcomes
from ingest.log.verifier import verify
from ingest.nats import streams as ha_nats
from ingest.protocol import MSG_ID

if TYPE_CHECKING:
    from conftest import Cluster
    from nats.aio.client import Client

    from ingest.nats.auth import Role

pytestmark = [pytest.mark.slow, pytest.mark.cluster, pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parents[2]
POLICY = REPO / "infra" / "policies" / "security.json"
N_EVENTS = int(__import__("os").environ.get("HOOKAUDIT_FAULT_EVENTS", "50000"))


def _event(i: int) -> tuple[str, bytes]:
    raw = {
        "hook_event_name": "PreToolUse",
        "session_id": f"s{i // 50}",
        "cwd": "/tmp/p",
        "transcript_path": "/tmp/p/t.jsonl",
        "tool_name": "Bash",
        "tool_input": {"command": "rm -rf /" if i % 97 == 0 else f"ls -la dir{i}"},
        "tool_use_id": f"toolu_{i:08d}",
    }
    ev = new_event(raw, source="test", host="h1", user="u1")
    return ev.id, encode_msgpack(ev)


async def _publish_all(js: object, events: list[tuple[str, bytes]], on_progress: object) -> int:
    """Publish every event until JetStream acknowledges it (a re-send after a lost ack is
    dropped by the stream's duplicate window). Returns how many publishes were retried."""
    names = ha_nats.names("")
    subject = ha_nats.event_subject(names, "PreToolUse")
    retried = 0
    queue: asyncio.Queue[tuple[str, bytes]] = asyncio.Queue()
    for e in events:
        queue.put_nowait(e)
    done = 0

    async def one() -> None:
        nonlocal retried, done
        while True:
            try:
                eid, data = queue.get_nowait()
            except asyncio.QueueEmpty:
                return
            while True:
                try:
                    await js.publish(subject, data, headers={MSG_ID: eid}, timeout=5)  # type: ignore[attr-defined]
                    break
                except Exception:  # timeout, no responders while a leader is elected
                    retried += 1
                    await asyncio.sleep(0.2)
            done += 1
            on_progress(done)  # type: ignore[operator]

    await asyncio.gather(*(one() for _ in range(128)))
    return retried


def _stream_leader(cluster: Cluster, info: object) -> str:
    return str(info.cluster.leader)  # type: ignore[attr-defined]


async def _connect(cluster: Cluster, role: Role) -> Client:
    return await ha_nats.connect(
        cluster.urls, tls_ca=str(cluster.ca), nkey_seed=cluster.seed(role), name=f"fault-{role}"
    )


async def _roles_are_enforced(cluster: Cluster) -> None:
    """The cluster runs the accounts: no anonymous client; the emitter may not read a stream."""
    with pytest.raises(ha_nats.Unavailable, match="authorization violation"):
        await ha_nats.connect(cluster.urls, tls_ca=str(cluster.ca), name="anonymous")
    nc = await _connect(cluster, "emitter")
    try:
        with pytest.raises(nats.errors.Error):  # no responders: the API subject is denied
            await nc.jetstream(timeout=5).stream_info(ha_nats.names("").events_stream)
    finally:
        await nc.close()


async def test_kill_one_node_of_three_during_ingest(nats_cluster: Cluster, tmp_path: Path) -> None:
    cluster = nats_cluster
    await _roles_are_enforced(cluster)
    wc = await _connect(cluster, "worker")  # provisions, as `hookaudit worker` does
    # As the worker does: a freshly formed cluster on a loaded machine may take longer than
    # one API timeout to place three R3 streams (seen at a load average of 20).
    deadline = time.monotonic() + 60
    while True:
        try:
            await ha_nats.provision(wc.jetstream(), replicas=3)
            break
        except ha_nats.Unavailable:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(1.0)
    info = await wc.jetstream().stream_info(ha_nats.names("").events_stream)
    await wc.close()
    assert info.config.num_replicas == 3
    leader = _stream_leader(cluster, info)
    nc = await _connect(cluster, "emitter")
    js = nc.jetstream()

    data = tmp_path / "data"
    worker_log = (tmp_path / "worker.log").open("ab")

    def argv() -> list[str]:
        return [
            sys.executable,
            "-m",
            "hookaudit",
            "worker",
            "--data-dir",
            str(data),
            "--nats",
            cluster.urls,
            "--tls-ca",
            str(cluster.ca),
            "--nkey",
            cluster.seed("worker"),
            "--settings",
            f"project:{POLICY}",
            "--name",
            "w1",
        ]

    # The worker runs as under infra/systemd (Restart=always): a worker that exits on a
    # stalled connection is started again, and what it held is redelivered.
    holder: dict[str, subprocess.Popen[bytes]] = {}
    restarts = 0

    def supervise() -> subprocess.Popen[bytes]:
        nonlocal restarts
        w = holder.get("w")
        if w is None or w.poll() is not None:
            if w is not None:
                restarts += 1
            holder["w"] = subprocess.Popen(argv(), stdout=subprocess.DEVNULL, stderr=worker_log)
        return holder["w"]

    supervise()
    events = [_event(i) for i in range(N_EVENTS)]
    killed: list[str] = []

    def on_progress(n: int) -> None:
        # Kill the events stream's leader (the node that must hand over) at 40%.
        if n == N_EVENTS * 2 // 5 and not killed:
            for node in cluster.nodes:
                if node.name == leader:
                    node.kill()
                    killed.append(node.name)

    t0 = time.monotonic()
    try:
        retried = await _publish_all(js, events, on_progress)
        sent = len(events)
        published_in = time.monotonic() - t0
        want = {eid for eid, _ in events}
        # Wait until every event is logged, the worker died, or the log stopped growing
        # for 90 s (a stalled worker exits after 30 s and is started again).
        seen: Counter[str] = Counter()
        last, last_change = -1, time.monotonic()
        while time.monotonic() - last_change < 90:
            seen = Counter(o.event.id for o in iter_outcomes(data) if o.replay_id is None)
            if want <= seen.keys():
                break
            supervise()
            if len(seen) != last:
                last, last_change = len(seen), time.monotonic()
            await asyncio.sleep(1.0)
        if not want <= seen.keys():
            try:
                ac = await _connect(cluster, "analyst")
                ci = await ac.jetstream().consumer_info(ha_nats.names("").events_stream, "workers")
                await ac.close()
                print(
                    f"\nconsumer after stall: leader {ci.cluster.leader if ci.cluster else None}, "
                    f"pending {ci.num_pending}, ack pending {ci.num_ack_pending}, "
                    f"redelivered {ci.num_redelivered}, waiting {ci.num_waiting}, "
                    f"delivered {ci.delivered}, ack floor {ci.ack_floor}"
                )
            except Exception as exc:
                print(f"\nconsumer info failed after stall: {exc!r}")
            for node in cluster.nodes:
                if node.proc and node.proc.poll() is None:
                    with urllib.request.urlopen(
                        f"http://127.0.0.1:{node.http_port}/connz?subs=1"
                    ) as r:
                        conns = json.load(r)["connections"]
                    print(
                        node.name,
                        [
                            (
                                c.get("name"),
                                c.get("subscriptions"),
                                c.get("in_msgs"),
                                c.get("pending_bytes"),
                            )
                            for c in conns
                        ],
                    )
    finally:
        await nc.close()
        worker = holder["w"]
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=60)
        worker_log.close()
    err = (tmp_path / "worker.log").read_bytes()
    logged = len(want & seen.keys())
    duplicated = sum(c - 1 for c in seen.values() if c > 1)
    lost = sent - logged
    print(
        f"\ncluster fault: killed {killed} (stream leader) at {N_EVENTS * 2 // 5} of {sent}; "
        f"sent {sent}, logged {logged}, duplicated {duplicated}, lost {lost}, "
        f"publishes retried {retried}, worker restarts {restarts}, published in {published_in:.1f}s"
    )
    assert killed == [leader]
    print("worker stderr:", err.decode()[-3000:])
    assert worker.returncode == 0, err.decode()[-2000:]
    assert lost == 0, f"{lost} acknowledged events never reached the log"
    assert not seen.keys() - want
    report = verify(data)
    assert report.ok, report


def test_distributed_replay_on_the_cluster_with_a_job_killed(
    nats_cluster: Cluster, tmp_path: Path
) -> None:
    """`replay --distribute` and two `replay-join` jobs on the cluster over TLS, each with
    its own role's key (replay, replay-join), as deployed: one job SIGKILLed in the middle
    of its first segment; the survivor runs its segments again, and the report equals a
    local replay's."""
    from tests.integration import test_replay_distributed as rd

    data = tmp_path / "data"
    records = rd.write_log(data)
    policy = rd.settings(tmp_path)
    one = rd.local(data, policy)
    for f in tmp_path.glob("ran.*"):
        f.unlink()
    cluster = nats_cluster
    via = ("--nats", cluster.urls, "--tls-ca", str(cluster.ca))

    def strike(_rid: str, joiners: list[subprocess.Popen[str]]) -> None:
        victim = joiners[0]
        rd.wait_for(lambda: (tmp_path / f"ran.{victim.pid}").exists())
        victim.send_signal(signal.SIGKILL)

    got, said, err = rd.distributed(
        data, policy, 2, (*via, "--nkey", cluster.seed("replay")),
        join_nats=(*via, "--nkey", cluster.seed("replay-join")),
        coord_extra=("--ack-wait", "3", "--job-timeout", "120"), victims=1, meanwhile=strike,
    )  # fmt: skip
    survivor = rd.taken(said[0])
    assert survivor >= 17, (said, err)
    for key in rd.SAME:
        assert got[key] == one[key], key
    assert got["events"] == records
    print(
        f"\ndistributed replay on the 3-node TLS cluster with the role keys, one of 2 jobs "
        f"SIGKILLed: the survivor read {survivor} of 17 work items; events {got['events']} of "
        f"{records}, digest {got['digest'][:12]}… the local one"
    )
