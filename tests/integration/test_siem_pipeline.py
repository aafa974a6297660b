"""The forwarder's pipeline: the next batch is fetched and formatted while one is being sent,
but nothing is acked to JetStream before the receiver took it, and records go out in order.

Real nats-server, `hookaudit siem` as a subprocess, a webhook receiver on loopback that holds
or refuses a batch on purpose.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.support.siem import (
    Forwarder,
    Receiver,
    make_outcomes,
    publish,
)
from tests.support.waiting import until, wait_for

pytestmark = pytest.mark.slow


class Gate:
    """A webhook receiver whose `hold`-th request waits until `release`, and whose
    `refuse`-th request answers 503 without storing anything."""

    def __init__(self, *, hold: int = 0, refuse: int = 0) -> None:
        self.hold, self.refuse = hold, refuse
        self.requests = 0
        self.held = threading.Event()
        self.go = threading.Event()
        self.seqs: list[int] = []
        self.lock = threading.Lock()

    def handle(self, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, Any]:
        with self.lock:
            self.requests += 1
            n = self.requests
        if n == self.hold:
            self.held.set()
            self.go.wait(60)
        if n == self.refuse:
            return 503, {"error": "busy"}
        with self.lock:
            self.seqs.extend(json.loads(x)["seq"] for x in body.splitlines())
        return 200, {"ok": True}

    def receiver(self) -> Receiver:
        return Receiver(self.handle)


async def consumer(nc: Any, names: Any, name: str) -> Any:
    return await nc.jetstream().consumer_info(names.outcomes_stream, f"siem-{name}")


def webhook(url: str, names: Any, d: Path, port: int, name: str, batch: int) -> Forwarder:
    # ack_wait far beyond the tests' waits: a message seen twice was nak'd, not timed out
    return Forwarder(
        url,
        names,
        d,
        "--name",
        name,
        "--format",
        "json",
        "--to",
        f"http://127.0.0.1:{port}/in",
        "--batch",
        str(batch),
        "--ack-wait",
        "600",
    )


async def test_next_batch_is_fetched_while_one_is_held_but_nothing_acked_early(
    nats_server: Any, nc: Any, names: Any, tmp_path: Path
) -> None:
    gate = Gate(hold=1)
    recv = gate.receiver().start()
    await publish(nc, names, make_outcomes(60))
    fwd = webhook(nats_server.url, names, tmp_path / "d", recv.port, "hold", 10).start()
    try:
        wait_for(gate.held.is_set, what="the first batch at the receiver")

        async def behind() -> bool:  # the batch in hand plus those fetched behind it
            return bool((await consumer(nc, names, "hold")).num_ack_pending >= 20)

        await until(behind, what="a second batch fetched while the first is held")
        info = await consumer(nc, names, "hold")
        assert info.ack_floor.stream_seq == 0  # nothing acked: the receiver has not answered
        assert gate.seqs == []
        gate.go.set()
        wait_for(lambda: len(gate.seqs) >= 60, what="60 records")

        async def all_acked() -> bool:
            return bool((await consumer(nc, names, "hold")).ack_floor.stream_seq == 60)

        await until(all_acked, what="every message acked")
    finally:
        gate.go.set()
        rc, err = fwd.stop()
        recv.stop()
    assert rc == 0, err
    assert gate.seqs == list(range(1, 61))  # in stream order, once each


async def test_refused_batch_mid_window_goes_again_in_order(
    nats_server: Any, nc: Any, names: Any, tmp_path: Path
) -> None:
    gate = Gate(hold=2, refuse=2)  # the second batch is held (batches pile up behind), then 503
    recv = gate.receiver().start()
    await publish(nc, names, make_outcomes(50))
    fwd = webhook(nats_server.url, names, tmp_path / "d", recv.port, "refuse", 10).start()
    try:
        wait_for(gate.held.is_set, what="the second batch at the receiver")

        async def floor_10() -> bool:
            info = await consumer(nc, names, "refuse")
            return bool(info.ack_floor.stream_seq == 10 and info.num_ack_pending >= 20)

        await until(floor_10, what="batch 1 acked, batch 2 in hand, batch 3 fetched")
        gate.go.set()  # batch 2 is refused now: it must go again before batch 3
        wait_for(lambda: len(gate.seqs) >= 50, what="50 records")

        async def all_acked() -> bool:
            return bool((await consumer(nc, names, "refuse")).ack_floor.stream_seq == 50)

        await until(all_acked, what="every message acked")
        st = fwd.status()["sinks"][0]
    finally:
        gate.go.set()
        rc, err = fwd.stop()
        recv.stop()
    assert rc == 0, err
    assert gate.seqs == list(range(1, 51))
    assert st["sent"] == 50 and st["retried"] == 10 and st["failed"] == 1


async def test_sigterm_with_batches_queued_hands_them_back(
    nats_server: Any, nc: Any, names: Any, tmp_path: Path
) -> None:
    gate = Gate(hold=1)
    recv = gate.receiver().start()
    await publish(nc, names, make_outcomes(40))
    fwd = webhook(nats_server.url, names, tmp_path / "d", recv.port, "term", 10).start()
    try:
        wait_for(gate.held.is_set, what="the first batch at the receiver")

        async def behind() -> bool:
            return bool((await consumer(nc, names, "term")).num_ack_pending >= 20)

        await until(behind, what="batches fetched behind the held one")
        assert fwd.proc is not None
        fwd.proc.terminate()  # finishes the send in hand; the queued batches go back unsent
        time.sleep(0.5)
        gate.go.set()
        rc, err = fwd.stop()
        assert rc == 0, err
        assert gate.seqs == list(range(1, 11))
        assert (await consumer(nc, names, "term")).ack_floor.stream_seq == 10
        fwd.start()  # the queued batches were nak'd: the next run takes them at once
        wait_for(lambda: len(gate.seqs) >= 40, timeout=120, what="the rest after a restart")
        time.sleep(0.5)
    finally:
        gate.go.set()
        fwd.stop()
        recv.stop()
    assert gate.seqs == list(range(1, 41))


async def test_hec_sends_the_next_batch_while_one_waits_for_an_ack_that_never_comes(
    nats_server: Any, nc: Any, names: Any, tmp_path: Path
) -> None:
    posts: list[list[int]] = []  # the seqs of each POST, in arrival order
    acked: set[int] = set()
    st = {"next": 0}

    def handle(path: str, body: bytes, headers: dict[str, str]) -> tuple[int, Any]:
        if path.startswith("/services/collector/ack"):
            out = {}
            for a in json.loads(body)["acks"]:
                out[str(a)] = a != 0  # the first batch's ack never comes
                if a != 0:
                    acked.add(a)
            return 200, {"acks": out}
        dec, seqs, i, text = json.JSONDecoder(), [], 0, body.decode()
        while i < len(text):
            obj, i = dec.raw_decode(text, i)
            seqs.append(obj["fields"]["hookaudit_seq"])
        posts.append(seqs)
        ack, st["next"] = st["next"], st["next"] + 1
        return 200, {"text": "Success", "code": 0, "ackId": ack}

    recv = Receiver(handle).start()
    await publish(nc, names, make_outcomes(40))
    fwd = Forwarder(
        nats_server.url,
        names,
        tmp_path / "d",
        "--name",
        "hec",
        "--format",
        "ecs",
        "--to",
        f"hec+http://127.0.0.1:{recv.port}",
        "--batch",
        "10",
        # long enough that the second batch is acked well before the first one's ack
        # times out, even on a loaded machine (4 s did not always hold under CI's load)
        "--ack-timeout",
        "12",
        "--ack-wait",
        "600",
        env={"HOOKAUDIT_SIEM_TOKEN": "tok"},
    ).start()
    try:
        wait_for(lambda: 1 in acked, what="the second batch indexer-acked")
        # The first batch still waits for its ack: none of its messages is acked to JetStream.
        assert (await consumer(nc, names, "hec")).ack_floor.stream_seq == 0
        assert posts[0] == list(range(1, 11)) and posts[1] == list(range(11, 21))
        wait_for(lambda: len(acked) >= 4, what="every batch but the first indexer-acked")

        async def all_acked() -> bool:
            return bool((await consumer(nc, names, "hec")).ack_floor.stream_seq == 40)

        await until(all_acked, what="the first batch re-sent, acked, and everything acked")
        wait_for(lambda: fwd.status()["sinks"][0]["sent"] == 40, what="status: 40 sent")
        st_ = fwd.status()["sinks"][0]
    finally:
        rc, err = fwd.stop()
        recv.stop()
    assert rc == 0, err
    delivered = [s for k, p in enumerate(posts) if k in acked for s in p]
    assert sorted(delivered) == list(range(1, 41))  # every event indexer-acked, once
    assert sum(p == list(range(1, 11)) for p in posts) >= 2  # the unacked batch went again
    assert st_["sent"] == 40 and st_["failed"] >= 1
