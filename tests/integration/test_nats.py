"""ingest.nats.streams and ingest.nats.embedded against a real nats-server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import os
import socket
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec
import nats.errors
import pytest
from nats.aio.client import Client
from nats.js import api as js_api

from engine.errors import SettingsError
from ingest.nats import embedded
from ingest.nats import streams as ha_nats
from ingest.nats.streams import Names, ProvisionError, Unavailable

if TYPE_CHECKING:
    from tests.conftest import NatsServer


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return not Path(f"/proc/{pid}").exists()
    return False


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- embedded server -------------------------------------------------------------------


def test_embedded_up_status_up_down(tmp_path: Path) -> None:
    srv = embedded.start_embedded(tmp_path)
    try:
        assert srv.url == f"nats://127.0.0.1:{srv.port}"
        record = msgspec.json.decode((tmp_path / "nats" / "server.json").read_bytes())
        assert record["pid"] == srv.pid
        assert set(record) >= {"url", "pid", "port", "store", "started"}
        assert Path(srv.store) == (tmp_path / "nats" / "store").resolve()

        status = embedded.embedded_status(tmp_path)
        assert status is not None
        assert status["pid"] == srv.pid
        assert status["accepting"] is True

        again = embedded.start_embedded(tmp_path)
        assert again == srv  # idempotent: the live server, not a second one
    finally:
        stopped = embedded.stop_embedded(tmp_path)

    assert stopped is True
    assert _gone(srv.pid)
    assert not (tmp_path / "nats" / "server.json").exists()
    assert embedded.embedded_status(tmp_path) is None
    assert embedded.stop_embedded(tmp_path) is False
    assert "Server is ready" in (tmp_path / "nats" / "nats-server.log").read_text()


def test_stop_never_signals_a_pid_that_is_not_our_server(tmp_path: Path) -> None:
    ndir = tmp_path / "nats"
    ndir.mkdir()
    stale = embedded.EmbeddedServer(
        url="nats://127.0.0.1:1", pid=os.getpid(), port=1, store=str(ndir / "store"), started=""
    )
    (ndir / "server.json").write_bytes(msgspec.json.encode(stale))

    assert embedded.embedded_status(tmp_path) is None
    assert embedded.stop_embedded(tmp_path) is False  # and we are still alive
    assert not (ndir / "server.json").exists()


def test_start_on_a_taken_port_says_so_in_one_line(tmp_path: Path, nats_server: NatsServer) -> None:
    with pytest.raises(Unavailable, match=rf"^port {nats_server.port} on 127.0.0.1 is in use") as e:
        embedded.start_embedded(tmp_path, port=nats_server.port)  # port already taken
    assert "\n" not in str(e.value)
    assert embedded.embedded_status(tmp_path) is None


def test_start_failure_names_the_servers_reason_not_its_banner(tmp_path: Path) -> None:
    (tmp_path / "nats").mkdir()
    (tmp_path / "nats" / "store").write_text("not a directory")  # JetStream cannot start
    with pytest.raises(
        Unavailable, match=r"exited .* while starting: .*\(full log: .*nats-server\.log\)"
    ) as e:
        embedded.start_embedded(tmp_path)
    assert "\n" not in str(e.value) and "Starting nats-server" not in str(e.value)


def test_find_nats_server_explains_a_bad_override(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Path(embedded.find_nats_server()).name == "nats-server"
    monkeypatch.setenv(embedded.ENV_NATS_SERVER, "/nonexistent/nats-server")
    with pytest.raises(Unavailable, match="HOOKAUDIT_NATS_SERVER"):
        embedded.find_nats_server()


def test_resolve_url_precedence(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, nats_server: NatsServer
) -> None:
    monkeypatch.delenv(embedded.ENV_NATS_URL, raising=False)
    monkeypatch.delenv(embedded.ENV_DATA_DIR, raising=False)
    live_dir, dead_dir = nats_server.data_dir, tmp_path

    with pytest.raises(Unavailable, match="hookaudit nats up"):
        embedded.resolve_url(None, None)
    with pytest.raises(Unavailable, match=r"hookaudit nats up --data-dir"):
        embedded.resolve_url(None, dead_dir)

    monkeypatch.setenv(embedded.ENV_DATA_DIR, str(live_dir))
    assert embedded.resolve_url(None, None) == nats_server.url
    with pytest.raises(Unavailable):  # the argument beats the environment
        embedded.resolve_url(None, dead_dir)

    monkeypatch.setenv(embedded.ENV_NATS_URL, "nats://127.0.0.1:5")
    assert embedded.resolve_url(None, live_dir) == "nats://127.0.0.1:5"
    assert embedded.resolve_url("nats://127.0.0.1:6", live_dir) == "nats://127.0.0.1:6"


def test_restart_keeps_url_and_store(nats_server: NatsServer, names: Names) -> None:
    async def publish() -> None:
        nc = await ha_nats.connect(nats_server.url)
        try:
            js = nc.jetstream()
            await ha_nats.provision(js, prefix=names.prefix)
            await js.publish(ha_nats.event_subject(names, "Stop"), b"x")
        finally:
            await nc.close()

    async def count() -> int:
        nc = await ha_nats.connect(nats_server.url)
        try:
            info = await nc.jetstream().stream_info(names.events_stream)
            return int(info.state.messages)
        finally:
            await nc.close()

    asyncio.run(publish())
    url, pid = nats_server.url, nats_server.pid
    nats_server.restart()
    assert nats_server.url == url
    assert nats_server.pid != pid
    assert _gone(pid)
    assert asyncio.run(count()) == 1


# -- connecting ------------------------------------------------------------------------


async def test_connect_failure_is_unavailable_and_quick() -> None:
    port = _closed_port()
    # it gives up (no endless reconnecting): the 30 s limit is never met
    with pytest.raises(Unavailable, match=rf"cannot connect to NATS at nats://127\.0\.0\.1:{port}"):
        await asyncio.wait_for(ha_nats.connect(f"nats://127.0.0.1:{port}", connect_timeout=0.5), 30)


async def test_connect_failure_hides_the_password() -> None:
    port = _closed_port()
    with pytest.raises(Unavailable) as info:
        await ha_nats.connect(f"nats://alice:s3cret@127.0.0.1:{port}")
    assert "s3cret" not in str(info.value)
    assert "alice:***@127.0.0.1" in str(info.value)


async def test_connect_accepts_a_comma_separated_list(nats_server: NatsServer) -> None:
    nc = await ha_nats.connect(f"nats://127.0.0.1:{_closed_port()}, {nats_server.url}")
    try:
        assert nc.is_connected
        assert nc.connected_url is not None
        assert nc.connected_url.port == nats_server.port
    finally:
        await nc.close()


async def test_connect_names_a_missing_credentials_file(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope.creds")
    with pytest.raises(SettingsError, match=r"nope\.creds: --creds: file not found"):
        await ha_nats.connect("nats://127.0.0.1:4222", creds=missing)


# -- provisioning ----------------------------------------------------------------------


async def test_provision_is_idempotent(nc: Client, names: Names) -> None:
    js = nc.jetstream()
    await ha_nats.provision(js, prefix=names.prefix)
    await ha_nats.provision(js, prefix=names.prefix)

    events = await js.stream_info(names.events_stream)
    assert events.config.subjects == [names.events_subjects]
    assert events.config.storage == js_api.StorageType.FILE
    assert events.config.retention == js_api.RetentionPolicy.LIMITS
    assert events.config.duplicate_window == 120.0
    outcomes = await js.stream_info(names.outcomes_stream)
    assert outcomes.config.subjects == [names.outcomes_subjects]

    consumer = await js.consumer_info(names.events_stream, names.worker_consumer)
    assert consumer.config.ack_policy == js_api.AckPolicy.EXPLICIT
    assert consumer.config.ack_wait == 30.0
    assert consumer.config.max_ack_pending == ha_nats.MAX_ACK_PENDING
    assert consumer.config.filter_subject == names.events_subjects
    assert consumer.config.deliver_policy == js_api.DeliverPolicy.ALL


async def test_provision_leaves_compatible_tuning_alone(nc: Client, names: Names) -> None:
    js = nc.jetstream()
    await js.add_stream(
        name=names.events_stream,
        subjects=[names.events_subjects],
        storage=js_api.StorageType.FILE,
        max_age=3600.0,
    )
    await ha_nats.provision(js, prefix=names.prefix)
    assert (await js.stream_info(names.events_stream)).config.max_age == 3600.0


async def test_provision_rejects_an_incompatible_stream(nc: Client, names: Names) -> None:
    js = nc.jetstream()
    await js.add_stream(
        name=names.events_stream,
        subjects=[f"{names.prefix}.elsewhere.>"],
        storage=js_api.StorageType.MEMORY,
    )
    with pytest.raises(ProvisionError) as info:
        await ha_nats.provision(js, prefix=names.prefix)
    message = str(info.value)
    assert names.events_stream in message
    assert "subjects" in message
    assert "storage memory (want file)" in message


async def test_provision_rejects_an_incompatible_consumer(nc: Client, names: Names) -> None:
    js = nc.jetstream()
    await js.add_stream(
        name=names.events_stream,
        subjects=[names.events_subjects],
        storage=js_api.StorageType.FILE,
    )
    await js.add_consumer(
        names.events_stream,
        durable_name=names.worker_consumer,
        ack_policy=js_api.AckPolicy.NONE,
        filter_subject=ha_nats.event_subject(names, "Stop"),
    )
    with pytest.raises(ProvisionError, match=rf"consumer workers on stream {names.events_stream}"):
        await ha_nats.provision(js, prefix=names.prefix)


async def test_provision_reports_overlapping_subjects(nc: Client, names: Names) -> None:
    js = nc.jetstream()
    squatter = f"{names.prefix.upper()}_SQUATTER"
    await js.add_stream(name=squatter, subjects=[names.events_subjects])
    with pytest.raises(ProvisionError, match=rf"stream {names.events_stream}: .*overlap"):
        await ha_nats.provision(js, prefix=names.prefix)


# -- publishing and consuming ----------------------------------------------------------


async def test_same_msg_id_is_stored_once(nc: Client, names: Names) -> None:
    js = nc.jetstream()
    await ha_nats.provision(js, prefix=names.prefix)
    subject = ha_nats.event_subject(names, "PreToolUse")
    headers = {"Nats-Msg-Id": "0190f3c2-0000-7000-8000-000000000001"}

    first = await js.publish(subject, b"event", headers=headers)
    second = await js.publish(subject, b"event", headers=headers)

    assert not first.duplicate
    assert second.duplicate
    assert second.seq == first.seq
    assert (await js.stream_info(names.events_stream)).state.messages == 1


async def test_worker_consumer_delivers_and_explicit_ack_works(nc: Client, names: Names) -> None:
    js = nc.jetstream()
    await ha_nats.provision(js, prefix=names.prefix)
    for i, event in enumerate(["SessionStart", "PreToolUse", "Stop"]):
        await js.publish(ha_nats.event_subject(names, event), f"{i}".encode())
    # Outcomes live on their own stream; the worker consumer must not see them.
    await js.publish(ha_nats.outcome_subject(names, "Stop", "allow"), b"outcome")

    sub = await js.pull_subscribe_bind(names.worker_consumer, stream=names.events_stream)
    try:
        msgs = await sub.fetch(10, timeout=2)
        assert [m.data for m in msgs] == [b"0", b"1", b"2"]
        await msgs[0].ack()
        await msgs[1].ack()
        await msgs[2].nak()  # a worker that could not append: redelivered, not lost

        again = await sub.fetch(1, timeout=2)
        assert again[0].data == b"2"
        assert again[0].metadata.num_delivered == 2
        await again[0].ack_sync()

        info = await js.consumer_info(names.events_stream, names.worker_consumer)
        assert info.num_ack_pending == 0
        assert info.num_pending == 0
        with pytest.raises(nats.errors.TimeoutError):
            await sub.fetch(1, timeout=0.3)
    finally:
        await sub.unsubscribe()


# -- names and subjects (pure; here to keep this work in the files it owns) ------------


def test_names_and_subjects() -> None:
    assert ha_nats.names() == Names()
    assert ha_nats.names().events_subjects == ha_nats.EVENTS_SUBJECTS
    assert ha_nats.names().outcomes_subjects == ha_nats.OUTCOMES_SUBJECTS
    t = ha_nats.names("T1")
    assert (t.events_stream, t.outcomes_stream) == ("T1_HOOK_EVENTS", "T1_HOOK_OUTCOMES")
    assert t.events_subjects == "t1.hooks.events.>"
    assert t.worker_consumer == "workers"
    with pytest.raises(ValueError, match="prefix"):
        ha_nats.names("a.b")

    n = Names()
    assert ha_nats.event_subject(n, "PreToolUse") == "hooks.events.PreToolUse"
    assert ha_nats.event_subject(n, "x.>*") == "hooks.events.x___"
    assert ha_nats.event_subject(n, "") == "hooks.events._"
    assert ha_nats.outcome_subject(n, "Stop", "ask me") == "hooks.outcomes.Stop.ask_me"


def test_split_urls() -> None:
    assert ha_nats.split_urls(" nats://a:1 ,nats://b:2,") == ("nats://a:1", "nats://b:2")
    assert ha_nats.split_urls(["nats://a:1", "nats://b:2,nats://c:3"]) == (
        "nats://a:1",
        "nats://b:2",
        "nats://c:3",
    )
    with pytest.raises(ValueError, match="NATS URL"):
        ha_nats.split_urls(" , ")
