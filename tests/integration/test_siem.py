"""`hookaudit siem` end to end: real nats-server, the CLI as a subprocess, receivers on loopback."""

from __future__ import annotations

import json
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from tests.support import httpd
from tests.support.siem import (
    Forwarder,
    Receiver,
    free_port,
    make_outcomes,
    publish,
)
from tests.support.waiting import wait_for
from tests.unit.test_siem_formats import ocsf_errors

pytestmark = pytest.mark.slow


def lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines()]


async def test_contract_ocsf_to_file_resumes_after_restart(
    nats_server: Any, nc: Any, names: Any, tmp_path: Path
) -> None:
    out = tmp_path / "ocsf.ndjson"
    await publish(nc, names, make_outcomes(9))
    fwd = Forwarder(
        nats_server.url,
        names,
        tmp_path / "d",
        "--name",
        "t",
        "--format",
        "ocsf",
        "--to",
        f"file://{out}",
    ).start()
    wait_for(lambda: len(lines(out)) >= 12, what="12 OCSF records (9 outcomes, 3 denials)")
    rc, err = fwd.stop()
    assert rc == 0, err
    recs = lines(out)
    assert len(recs) == 12
    for r in recs:
        assert {"class_uid", "activity_id", "type_uid", "time", "metadata"} <= set(r)
        assert (
            isinstance(r["time"], int)
            and r["metadata"]["uid"]
            and r["metadata"]["original_event_uid"]
        )
        assert ocsf_errors(r) == []
    assert Counter(r["class_uid"] for r in recs)[2004] == 3
    assert len({r["metadata"]["uid"] for r in recs}) == 12
    # Resume: only what was published while it was down is written after the restart.
    await publish(nc, names, make_outcomes(5, start=100))
    fwd.start()
    wait_for(lambda: len(lines(out)) >= 12 + 5 + 1, what="the 5 new outcomes (1 denial)")
    time.sleep(0.5)
    st = fwd.status()
    fwd.stop()
    recs = lines(out)
    assert len(recs) == 18
    seqs = Counter(r["metadata"]["sequence"] for r in recs if r["class_uid"] != 2004)
    assert sorted(seqs) == list(range(1, 15)) and set(seqs.values()) == {1}
    (s,) = st["sinks"]
    assert (s["name"], s["sent"], s["lag"], s["parked"], s["running"]) == ("t", 18, 0, 0, True)


async def test_one_process_per_sink_and_running_means_running(
    nats_server: Any, nc: Any, names: Any, tmp_path: Path
) -> None:
    """A second process of one sink is refused (it would overwrite the counters); `running`
    is the sink's lock held, not a pid in status.json (pids are reused); a damaged
    status.json is reported by `status` (exit 1, the sink still listed) and set aside by
    the next start, which counts from zero."""
    import os
    import subprocess
    import sys

    out, d = tmp_path / "o.ndjson", tmp_path / "d"
    await publish(nc, names, make_outcomes(3))
    args = ("--name", "one", "--format", "json", "--to", f"file://{out}")
    first = Forwarder(nats_server.url, names, d, *args).start()
    wait_for(lambda: len(lines(out)) >= 3, what="3 outcomes")
    second = Forwarder(nats_server.url, names, d, *args).start()
    assert second.proc is not None and second.proc.wait(timeout=30) == 1
    err = second.proc.communicate()[1].decode()
    assert f"sink 'one' is already running in {d} (pid {first.proc.pid})" in err, err  # type: ignore[union-attr]
    (s,) = first.status()["sinks"]
    assert (s["running"], s["pid"]) == (True, first.proc.pid)  # type: ignore[union-attr]
    assert first.stop()[0] == 0
    status_file = d / "siem" / "one" / "status.json"
    c = json.loads(status_file.read_text())
    status_file.write_text(json.dumps({**c, "pid": os.getpid()}))  # a live pid, not the sink
    (s,) = first.status()["sinks"]
    assert (s["running"], s["pid"], s["sent"]) == (False, None, 3)
    status_file.write_text('{"name": 5, "sent": ')
    cmd = [sys.executable, "-m", "hookaudit", "siem", "status", "--nats", nats_server.url,
           "--prefix", names.prefix, "--data-dir", str(d)]  # fmt: skip
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert p.returncode == 1 and f"{status_file}: unreadable" in p.stderr, p.stderr
    assert "Traceback" not in p.stderr and json.loads(p.stdout)["sinks"][0]["name"] == "one"
    await publish(nc, names, make_outcomes(2, start=50))
    first.start()
    wait_for(lambda: len(lines(out)) >= 5, what="2 more outcomes")
    time.sleep(0.5)
    (s,) = first.status()["sinks"]
    rc, err = first.stop()
    assert rc == 0 and "moved to status.json.bad, counting from zero" in err, err
    assert s["sent"] == 2 and (d / "siem" / "one" / "status.json.bad").exists()


async def test_a_sink_started_before_the_streams_waits_for_them(
    nats_server: Any, nc: Any, names: Any, tmp_path: Path
) -> None:
    """A sink is a service (systemd starts it beside the workers, which make the streams):
    it waits for the outcomes stream instead of exiting, then forwards from the start."""
    out = tmp_path / "ocsf.ndjson"
    fwd = Forwarder(nats_server.url, names, tmp_path / "d", "--name", "early", "--format",
                    "ocsf", "--to", f"file://{out}").start()  # fmt: skip
    try:
        time.sleep(2.5)  # several tries at the missing stream
        assert fwd.proc is not None and fwd.proc.poll() is None, fwd.stop()
        await publish(nc, names, make_outcomes(3))  # provisions, then publishes
        wait_for(lambda: len(lines(out)) >= 4, what="3 outcomes (1 denial) after the wait")
    finally:
        rc, err = fwd.stop()
    assert rc == 0, err
    assert err.count("does not exist yet: waiting") == 1, err  # said once
    assert "Traceback" not in err and len(lines(out)) == 4


async def test_hostile_values_in_cef_are_escaped_and_bounded(
    nats_server: Any, nc: Any, names: Any, tmp_path: Path
) -> None:
    out = tmp_path / "cef.log"
    await publish(nc, names, make_outcomes(6, hostile=True))
    fwd = Forwarder(
        nats_server.url,
        names,
        tmp_path / "d",
        "--name",
        "h",
        "--format",
        "cef",
        "--to",
        f"file://{out}",
    ).start()
    wait_for(lambda: out.exists() and out.read_bytes().count(b"\n") >= 6, what="6 CEF lines")
    fwd.stop()
    raw = out.read_bytes()
    rows = raw.split(b"\n")[:-1]
    assert len(rows) == 6
    for row in rows:
        text = row.decode("utf-8")  # valid UTF-8 even for the non-UTF-8 command
        assert text.startswith("CEF:0|hookaudit|hookaudit|") and "\r" not in text
        assert len(row) < 16 * 1024  # a 1 MiB command is cut to CEF's 4000-character field
    assert b'cs5=a|b\\=c\\\\d\\r\\nx]"' in rows[0]


def hec_receiver(*, never_ack_first: bool = True) -> tuple[Receiver, dict[str, Any]]:
    st: dict[str, Any] = {
        "batches": {},
        "next": 0,
        "events": [],
        "polls": 0,
        "acked": set(),
        "channels": set(),
        "bad_auth": 0,
    }

    def handle(path: str, body: bytes, headers: dict[str, str]) -> tuple[int, Any]:
        if headers.get("Authorization") != "Splunk tok-123":
            st["bad_auth"] += 1
            return 401, {"text": "Invalid token", "code": 4}
        channel = headers.get("X-Splunk-Request-Channel")
        if not channel:
            return 400, {"text": "Data channel is missing", "code": 10}
        st["channels"].add(channel)
        if path.startswith("/services/collector/ack"):
            st["polls"] += 1
            acks = json.loads(body)["acks"]
            # ack 0 never comes (the batch must be sent again); the others on the 2nd poll
            out = {}
            for a in acks:
                seen = st.setdefault(f"polled{a}", 0) + 1
                st[f"polled{a}"] = seen
                ok = not (never_ack_first and a == 0) and seen >= 2
                if ok and a in st["batches"]:
                    st["acked"].add(a)
                out[str(a)] = ok
            return 200, {"acks": out}
        if b"toolu_13" in body:
            return 400, {"text": "Invalid data format", "code": 6, "invalid-event-number": 0}
        dec, events, i, text = json.JSONDecoder(), [], 0, body.decode()
        while i < len(text):
            obj, i = dec.raw_decode(text, i)
            events.append(obj)
        ack = st["next"]
        st["next"] += 1
        st["batches"][ack] = events
        return 200, {"text": "Success", "code": 0, "ackId": ack}

    return Receiver(handle), st


async def test_hec_indexer_ack_resends_unacked_batch_and_parks_rejected(
    nats_server: Any, nc: Any, names: Any, tmp_path: Path
) -> None:
    recv, st = hec_receiver()
    recv.start()
    try:
        await publish(nc, names, make_outcomes(30))
        fwd = Forwarder(
            nats_server.url,
            names,
            tmp_path / "d",
            "--name",
            "splunk",
            "--format",
            "ecs",
            "--to",
            f"hec+http://127.0.0.1:{recv.port}",
            "--batch",
            "10",
            "--ack-timeout",
            "1.5",
            env={"HOOKAUDIT_SIEM_TOKEN": "tok-123"},
        ).start()

        def acked_seqs() -> Counter[int]:
            return Counter(
                e["fields"]["hookaudit_seq"] for a in st["acked"] for e in st["batches"][a]
            )

        wait_for(lambda: len(acked_seqs()) >= 29, what="29 indexer-acknowledged events")
        time.sleep(0.5)
        status = fwd.status()
        fwd.stop()
    finally:
        recv.stop()
    got = acked_seqs()
    assert sorted(got) == [s for s in range(1, 31) if s != 14]  # toolu_13 is seq 14: parked
    assert set(got.values()) == {1}  # acknowledged once each
    assert 0 not in st["acked"] and st["batches"][0]  # the unacked first batch went again
    assert st["polls"] > 0 and len(st["channels"]) == 1 and st["bad_auth"] == 0
    e = st["batches"][1][0]
    assert e["sourcetype"] == "hookaudit:ecs" and e["event"]["event"]["module"] == "hookaudit"
    (s,) = status["sinks"]
    assert s["sent"] == 29 and s["parked"] == 1 and s["failed"] >= 1 and s["lag"] == 0
    assert "Invalid data format" in s["parked_records"][0]["reason"]


def bulk_receiver() -> tuple[Receiver, dict[str, Any]]:
    st: dict[str, Any] = {"docs": {}, "requests": 0, "throttled": set(), "creates": Counter()}

    def handle(path: str, body: bytes, headers: dict[str, str]) -> tuple[int, Any]:
        assert path == "/_bulk", path
        st["requests"] += 1
        rows = body.decode().splitlines()
        items = []
        for action, doc in zip(rows[::2], rows[1::2], strict=True):
            meta = json.loads(action)["create"]
            _id, d = meta["_id"], json.loads(doc)
            st["creates"][_id] += 1
            tu = d["unmapped"]["payload"]["tool_use_id"]
            if _id in st["docs"]:
                items.append(
                    {
                        "create": {
                            "_id": _id,
                            "status": 409,
                            "error": {
                                "type": "version_conflict_engine_exception",
                                "reason": "exists",
                            },
                        }
                    }
                )
            elif tu == "toolu_4" and _id not in st["throttled"]:
                st["throttled"].add(_id)
                items.append(
                    {
                        "create": {
                            "_id": _id,
                            "status": 429,
                            "error": {
                                "type": "es_rejected_execution_exception",
                                "reason": "queue full",
                            },
                        }
                    }
                )
            elif tu == "toolu_7":
                items.append(
                    {
                        "create": {
                            "_id": _id,
                            "status": 400,
                            "error": {
                                "type": "mapper_parsing_exception",
                                "reason": "failed to parse [time]",
                            },
                        }
                    }
                )
            else:
                st["docs"][_id] = (meta["_index"], d)
                items.append({"create": {"_id": _id, "status": 201}})
        return 200, {"took": 1, "errors": True, "items": items}

    return Receiver(handle), st


async def test_elastic_bulk_per_item_retry_and_park(
    nats_server: Any, nc: Any, names: Any, tmp_path: Path
) -> None:
    recv, st = bulk_receiver()
    recv.start()
    try:
        await publish(nc, names, make_outcomes(12))
        fwd = Forwarder(
            nats_server.url,
            names,
            tmp_path / "d",
            "--name",
            "es",
            "--format",
            "ocsf",
            "--to",
            f"elastic+http://127.0.0.1:{recv.port}/audit",
        ).start()
        # 12 outcomes, 4 denials -> 16 records; toolu_7 (allowed) is rejected: 15 stored
        wait_for(lambda: len(st["docs"]) >= 15, what="15 documents")
        time.sleep(0.5)
        status = fwd.status()
        fwd.stop()
    finally:
        recv.stop()
    assert len(st["docs"]) == 15
    for _id, (index, doc) in st["docs"].items():
        assert index == "audit" and doc["metadata"]["uid"] == _id and ocsf_errors(doc) == []
    assert st["throttled"] and all(st["creates"][i] == 2 for i in st["throttled"])
    (s,) = status["sinks"]
    assert s["sent"] == 15 and s["parked"] == 1 and s["retried"] >= 1
    assert "mapper_parsing_exception" in s["parked_records"][0]["reason"]


def webhook_receiver(delay: float = 0.0) -> tuple[Receiver, list[dict[str, Any]]]:
    got: list[dict[str, Any]] = []

    def handle(path: str, body: bytes, headers: dict[str, str]) -> tuple[int, Any]:
        assert headers["Content-Type"] == "application/x-ndjson"
        if delay:
            time.sleep(delay)
        got.extend(json.loads(x) for x in body.splitlines())
        return 200, {"ok": True}

    return Receiver(handle), got


async def test_a_receivers_answer_cannot_forge_log_lines(
    nats_server: Any, nc: Any, names: Any, tmp_path: Path
) -> None:
    """A receiver's error body goes into the warning and `last_error`: its CR/LF and
    terminal escapes must not make a line of their own in the sink's log."""
    from http.server import BaseHTTPRequestHandler

    forged = b"busy\r\n2026-12-03 08:00:00,000 hookaudit.siem CRITICAL forged\x1b[2J\x85end"
    answers: list[int] = []

    class H(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            status = 503 if len(answers) < 2 else 200
            answers.append(status)
            body = forged if status == 503 else b"{}"
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a: Any) -> None:
            pass

    server = httpd.serve(H)
    try:
        await publish(nc, names, make_outcomes(3))
        url = f"http://127.0.0.1:{server.server_address[1]}/in"
        fwd = Forwarder(nats_server.url, names, tmp_path / "d", "--name", "h", "--format",
                        "json", "--to", url).start()  # fmt: skip
        wait_for(lambda: answers.count(200) >= 1, what="the send after two 503s")
        time.sleep(0.5)
        (s,) = fwd.status()["sinks"]
        rc, err = fwd.stop()
    finally:
        httpd.stop(server)
    assert rc == 0 and s["sent"] == 3 and s["failed"] == 2, (s, err)
    assert "forged" in err and "CRITICAL forged" in s["last_error"]
    assert not any(line.startswith("2026-12-03 08:00:00") for line in err.splitlines()), err
    assert "\x1b" not in err and "\r" not in err and "\x85" not in err
    assert not any(c in s["last_error"] for c in "\r\n\x1b\x85")


async def test_receiver_down_then_back_everything_once(
    nats_server: Any, nc: Any, names: Any, tmp_path: Path
) -> None:
    port = free_port()
    recv, got = webhook_receiver()
    recv.port = port
    fwd = Forwarder(
        nats_server.url,
        names,
        tmp_path / "d",
        "--name",
        "hook",
        "--format",
        "json",
        "--to",
        f"http://127.0.0.1:{port}/ingest",
        "--batch",
        "50",
    ).start()
    await publish(nc, names, make_outcomes(300))
    time.sleep(4)  # the receiver is down: connection refused, back-off
    down = fwd.status()["sinks"][0]
    assert down["failed"] >= 2 and down["sent"] == 0 and down["lag"] == 300
    assert "ConnectError" in (down["last_error"] or "")
    recv.start()
    try:
        wait_for(lambda: len(got) >= 300, timeout=60, what="300 records after the outage")
        time.sleep(0.5)
        fwd.stop()
    finally:
        recv.stop()
    seqs = Counter(r["seq"] for r in got)
    assert sorted(seqs) == list(range(1, 301)) and set(seqs.values()) == {1}


async def test_sigkill_mid_batch_loses_nothing(
    nats_server: Any, nc: Any, names: Any, tmp_path: Path
) -> None:
    recv, got = webhook_receiver(delay=0.05)
    recv.start()
    n = 1500
    outcomes = make_outcomes(n)
    try:
        await publish(nc, names, outcomes)
        fwd = Forwarder(
            nats_server.url,
            names,
            tmp_path / "d",
            "--name",
            "k",
            "--format",
            "json",
            "--to",
            f"http://127.0.0.1:{recv.port}/",
            "--batch",
            "40",
            "--ack-wait",
            "2",
        )
        for _ in range(4):
            fwd.start()
            time.sleep(0.8)
            fwd.stop(signal.SIGKILL)
        fwd.start()
        want = {o.event.id for o in outcomes}
        wait_for(lambda: want <= {r["event_id"] for r in got}, timeout=90, what="every event")
        fwd.stop()
    finally:
        recv.stop()
    ids = Counter(r["event_id"] for r in got)
    assert set(ids) == want
    dupes = sum(c - 1 for c in ids.values())
    print(json.dumps({"events": n, "delivered": len(got), "duplicates": dupes}))
    assert dupes <= 4 * 40  # at most the batch in hand at each kill is sent twice


def test_bad_usage_is_exit_2(tmp_path: Path) -> None:
    import subprocess
    import sys

    for args, why in [
        (["--name", "x"], "needs --name and --to"),
        (["--name", "x", "--to", "gopher://h"], "expected one of"),
        (["--name", "a b", "--to", "-"], "--name"),
        (["--name", "x", "--to", "hec+https://h:8088"], "needs --token"),
        (["--name", "x", "--to", "-", "--redact", "bad"], "NAME=REGEX"),
        (["--name", "x", "--to", "-", "--filter", "PretoolUse"], "did you mean PreToolUse?"),
        (["--name", "x", "--to", "syslog+tcp://[::1"], "--to syslog+tcp://[::1: Invalid"),
    ]:
        p = subprocess.run(
            [sys.executable, "-m", "hookaudit", "siem", "--data-dir", str(tmp_path), *args],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert p.returncode == 2, (args, p.stderr)
        assert why in p.stderr and "Traceback" not in p.stderr


async def test_siem_role_on_the_authenticated_embedded_server(tmp_path: Path) -> None:
    """No --nats, no key given: the forwarder finds the data dir's server and its siem key."""
    import subprocess
    import sys

    import nats as nats_py

    from ingest.nats import embedded
    from ingest.nats import streams as ha_nats
    from ingest.nats.auth import role_credentials

    d = tmp_path / "d"
    srv = embedded.start_embedded(d)
    try:
        assert srv.auth
        nc = await nats_py.connect(srv.url, nkeys_seed=str(role_credentials(d, "worker")))
        try:
            await publish(nc, ha_nats.names(), make_outcomes(4))
        finally:
            await nc.close()
        out = tmp_path / "out.ndjson"
        base = [sys.executable, "-m", "hookaudit", "siem"]
        p = subprocess.Popen(
            [
                *base,
                "--data-dir",
                str(d),
                "--name",
                "r",
                "--format",
                "json",
                "--to",
                f"file://{out}",
            ],
            stderr=subprocess.PIPE,
        )
        try:
            wait_for(lambda: len(lines(out)) >= 4, what="4 records through the siem role")
            counters = d / "siem" / "r" / "status.json"
            wait_for(lambda: json.loads(counters.read_text())["messages"] == 4, what="counters")
            st = subprocess.run(
                [*base, "status", "--data-dir", str(d)], capture_output=True, text=True, timeout=60
            )
        finally:
            p.terminate()
            _, err = p.communicate(timeout=30)
        assert p.returncode == 0, err
        assert st.returncode == 0, st.stderr
        (s,) = json.loads(st.stdout)["sinks"]
        assert (s["sent"], s["lag"]) == (4, 0)
        # The siem role reads outcomes only: it may not consume the events stream.
        nc = await nats_py.connect(srv.url, nkeys_seed=str(role_credentials(d, "siem")))
        try:
            with pytest.raises(Exception):  # noqa: B017 - a permission error or a timeout
                await nc.jetstream().consumer_info("HOOK_EVENTS", "workers", timeout=1)
        finally:
            await nc.close()
    finally:
        embedded.stop_embedded(d)


def flaky_receiver(status: int, times: int) -> tuple[Receiver, dict[str, Any]]:
    """Answers `status` (with a Location for a 3xx) to the first `times` requests, then
    takes everything: an NDJSON webhook, HEC without indexer acks, and Elastic bulk."""
    st: dict[str, Any] = {"answered": Counter(), "records": []}

    def handle(path: str, body: bytes, headers: dict[str, str]) -> tuple[int, Any]:
        if st["answered"][status] < times:
            st["answered"][status] += 1
            return status, {"text": "not now"}
        st["answered"][200] += 1
        if path.startswith("/_bulk"):
            docs = body.splitlines()[1::2]
            st["records"] += [json.loads(d) for d in docs]
            return 200, {"items": [{"create": {"status": 201}} for _ in docs]}
        if path.startswith("/services/collector"):
            dec, i, text = json.JSONDecoder(), 0, body.decode()
            while i < len(text):
                obj, i = dec.raw_decode(text, i)
                st["records"].append(obj)
            return 200, {"text": "Success", "code": 0}
        st["records"] += [json.loads(x) for x in body.splitlines()]
        return 200, {"ok": True}

    return Receiver(handle, location="https://siem.example/in"), st


@pytest.mark.parametrize(
    ("kind", "status"),
    [
        ("webhook", 301),
        ("webhook", 302),
        ("webhook", 303),
        ("webhook", 307),
        ("webhook", 308),
        ("webhook", 408),
        ("webhook", 429),
        ("webhook", 500),
        ("webhook", 503),
        ("hec", 302),
        ("hec", 503),
        ("elastic", 302),
    ],
)
async def test_a_receiver_not_taking_records_now_is_retried_never_parked(
    nats_server: Any, nc: Any, names: Any, tmp_path: Path, kind: str, status: int
) -> None:
    """A redirect (HTTP to HTTPS, a load balancer), 408, 429 or 5xx says "not now": the
    batch goes again after a back-off and nothing is parked; once the receiver takes
    records every one arrives, once."""
    recv, st = flaky_receiver(status, times=2)
    recv.start()
    base = f"http://127.0.0.1:{recv.port}"
    to = {"webhook": f"{base}/in", "hec": f"hec+{base}", "elastic": f"elastic+{base}/audit"}
    try:
        await publish(nc, names, make_outcomes(5, start=1))  # toolu_1..5: none denied
        fwd = Forwarder(nats_server.url, names, tmp_path / "d", "--name", "s", "--format",
                        "json" if kind == "webhook" else "ecs", "--to", to[kind],
                        env={"HOOKAUDIT_SIEM_TOKEN": "t"}).start()  # fmt: skip
        wait_for(lambda: len(st["records"]) >= 5, what=f"5 records after two {status}s")
        time.sleep(0.3)
        (s,) = fwd.status()["sinks"]
        rc, err = fwd.stop()
    finally:
        recv.stop()
    assert rc == 0, err
    assert st["answered"][status] == 2 and len(st["records"]) == 5, st
    assert s["parked"] == 0 and s["sent"] == 5 and s["failed"] >= 2, s
    assert f"HTTP {status}" in (s["last_error"] or "") or f"HTTP {status}" in err
    if 300 <= status < 400:
        assert "redirects to https://siem.example/in" in err, err
