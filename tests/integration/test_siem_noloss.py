"""Nothing lost: every event acknowledged into HOOK_OUTCOMES reaches the receiver across a
receiver outage and repeated SIGKILLs of the sink process; and HTTPS to the HTTP receivers
(HEC, Elastic bulk, webhook) with a CA made in the test.

The outage test publishes while it runs (an id counts once JetStream acknowledged it), takes
the receiver down, SIGKILLs the forwarder during and after the outage, and then asks for
every published id at the receiver: a missing id fails the test; duplicates (the batch in
hand at a kill, sent again) are counted and printed. The 10-minute outage of the issue is
the same test with ``-m soak``.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from engine.records import encode_msgpack
from ingest.nats import streams as ha_nats
from ingest.siem.state import read_counters
from tests.support.siem import (
    Forwarder,
    Receiver,
    free_port,
    make_ca,
    make_outcomes,
    server_context,
)
from tests.support.waiting import wait_for

pytestmark = pytest.mark.slow


def webhook(got: list[dict[str, Any]]) -> Any:
    def handle(path: str, body: bytes, headers: dict[str, str]) -> tuple[int, Any]:
        got.extend(json.loads(x) for x in body.splitlines())
        return 200, {"ok": True}

    return handle


def started(fwd: Forwarder, name: str) -> None:
    def running() -> bool:
        c = read_counters(fwd.data_dir, name)
        return c is not None and fwd.proc is not None and c.pid == fwd.proc.pid

    wait_for(running, timeout=60, what=f"forwarder {name} running")


async def _outage_and_kills(
    nats_server: Any,
    nc: Any,
    names: Any,
    tmp_path: Path,
    *,
    outage: float,
    kill_every: float,
    after: float,
    rate: float,
) -> dict[str, Any]:
    got: list[dict[str, Any]] = []
    port = free_port()
    recv = Receiver(webhook(got), port).start()
    js = nc.jetstream()
    await ha_nats.provision(js, prefix=names.prefix)
    acked: list[str] = []
    stop_publishing = asyncio.Event()

    async def publisher() -> None:
        i = 0
        while not stop_publishing.is_set():
            for o in make_outcomes(10, start=i):
                subject = ha_nats.outcome_subject(names, o.event.event, o.decision or "none")
                await js.publish(subject, encode_msgpack(o), headers={"Nats-Msg-Id": o.event.id})
                acked.append(o.event.id)  # acknowledged into HOOK_OUTCOMES
            i += 10
            await asyncio.sleep(10 / rate)

    fwd = Forwarder(
        nats_server.url,
        names,
        tmp_path / "d",
        "--name",
        "noloss",
        "--format",
        "json",
        "--to",
        f"http://127.0.0.1:{port}/in",
        "--batch",
        "50",
        "--ack-wait",
        "3",
    ).start()
    pub = asyncio.create_task(publisher())
    kills = 0
    try:
        await asyncio.sleep(2)
        recv.stop()  # the receiver goes down
        t_down = time.monotonic()
        while time.monotonic() - t_down < outage:
            await asyncio.sleep(min(kill_every, outage - (time.monotonic() - t_down)))
            fwd.stop(signal.SIGKILL)
            kills += 1
            fwd.start()
        recv = Receiver(webhook(got), port).start()  # back, same port
        t_up = time.monotonic()
        while time.monotonic() - t_up < after:
            await asyncio.sleep(kill_every / 2)
            fwd.stop(signal.SIGKILL)  # killed mid-batch while it catches up
            kills += 1
            fwd.start()
        stop_publishing.set()
        await pub
        want = set(acked)
        wait_for(
            lambda: want <= {r["event_id"] for r in got},
            timeout=120 + outage / 2,
            what=f"every one of {len(want)} acknowledged events at the receiver",
        )
        started(fwd, "noloss")  # a SIGTERM before its handler is set would just kill it
        rc, err = fwd.stop()
        assert rc == 0, err
    finally:
        stop_publishing.set()
        recv.stop()
    ids = Counter(r["event_id"] for r in got)
    missing = set(acked) - set(ids)
    assert not missing, f"{len(missing)} acknowledged events never arrived: {sorted(missing)[:5]}"
    assert set(ids) <= set(acked)  # nothing the receiver got that was never published
    report = {
        "published": len(acked),
        "received": len(got),
        "distinct": len(ids),
        "duplicates": sum(c - 1 for c in ids.values()),
        "kills": kills,
        "outage_s": outage,
    }
    print(json.dumps(report))
    return report


@pytest.mark.timeout(300)
async def test_outage_and_sigkills_lose_nothing(
    nats_server: Any, nc: Any, names: Any, tmp_path: Path
) -> None:
    r = await _outage_and_kills(
        nats_server, nc, names, tmp_path, outage=6, kill_every=2, after=3, rate=100
    )
    assert r["kills"] >= 4 and r["published"] >= 500


@pytest.mark.soak
@pytest.mark.timeout(1800)
async def test_ten_minute_outage_and_sigkills_lose_nothing(
    nats_server: Any, nc: Any, names: Any, tmp_path: Path
) -> None:
    r = await _outage_and_kills(
        nats_server, nc, names, tmp_path, outage=600, kill_every=60, after=60, rate=50
    )
    assert r["kills"] >= 11


# --- HTTPS to the HTTP receivers -----------------------------------------------------------


def _hec(got: list[str]) -> Any:
    st = {"next": 0}

    def handle(path: str, body: bytes, headers: dict[str, str]) -> tuple[int, Any]:
        if headers.get("Authorization") != "Splunk tok":
            return 401, {"text": "Invalid token", "code": 4}
        if path.startswith("/services/collector/ack"):
            return 200, {"acks": {str(a): True for a in json.loads(body)["acks"]}}
        dec, text, pos = json.JSONDecoder(), body.decode(), 0
        while pos < len(text):  # HEC batches are JSON objects one after the other
            obj, pos = dec.raw_decode(text, pos)
            got.append(obj["event"]["event_id"])
        st["next"] += 1
        return 200, {"text": "Success", "code": 0, "ackId": st["next"]}

    return handle


def _bulk(got: list[str]) -> Any:
    def handle(path: str, body: bytes, headers: dict[str, str]) -> tuple[int, Any]:
        rows = [json.loads(x) for x in body.splitlines()]
        items = []
        for action, doc in zip(rows[::2], rows[1::2], strict=True):
            got.append(doc["event_id"])
            items.append({"create": {"_id": action["create"]["_id"], "status": 201}})
        return 200, {"errors": False, "items": items}

    return handle


def _hook(got: list[str]) -> Any:
    def handle(path: str, body: bytes, headers: dict[str, str]) -> tuple[int, Any]:
        got.extend(json.loads(x)["event_id"] for x in body.splitlines())
        return 200, {"ok": True}

    return handle


@pytest.mark.parametrize(
    ("scheme", "receiver"),
    [("hec+https", _hec), ("elastic+https", _bulk), ("https", _hook)],
)
async def test_https_receivers_with_a_ca_of_the_test(
    nats_server: Any, nc: Any, names: Any, tmp_path: Path, scheme: str, receiver: Any
) -> None:
    ca, cert, key = make_ca(tmp_path)
    got: list[str] = []
    recv = Receiver(receiver(got), tls=server_context(cert, key)).start()
    outcomes = make_outcomes(40)
    js = nc.jetstream()
    await ha_nats.provision(js, prefix=names.prefix)
    for o in outcomes:
        await js.publish(ha_nats.outcome_subject(names, "PreToolUse", "allow"), encode_msgpack(o))
    path = {"hec+https": "", "elastic+https": "/hookaudit", "https": "/in"}[scheme]
    url = f"{scheme}://127.0.0.1:{recv.port}{path}"
    common = ["--format", "json", "--to", url, "--token", "tok", "--batch", "16"]
    try:
        # Without the CA the receiver's certificate is refused: nothing sent, nothing lost.
        untrusted = Forwarder(nats_server.url, names, tmp_path / "du", "--name", "u", *common)
        untrusted.start()

        def refused() -> bool:
            if not (tmp_path / "du").is_dir():  # the sink makes its data dir as it starts
                return False
            sinks = untrusted.status()["sinks"]
            return bool(sinks) and "CERTIFICATE_VERIFY_FAILED" in (sinks[0]["last_error"] or "")

        wait_for(refused, timeout=30, what="a certificate error in siem status")
        s = untrusted.status()["sinks"][0]
        assert s["sent"] == 0 and s["lag"] == 40, s
        untrusted.stop()
        assert got == []
        fwd = Forwarder(
            nats_server.url, names, tmp_path / "d", "--name", "t", *common, "--tls-ca", str(ca)
        ).start()
        want = {o.event.id for o in outcomes}
        wait_for(lambda: want <= set(got), timeout=60, what="40 events over HTTPS")
        started(fwd, "t")
        rc, err = fwd.stop()
        assert rc == 0, err
    finally:
        recv.stop()
    assert Counter(got) == Counter(want)
