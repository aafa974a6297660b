"""The embedded nats-server's roles, tried as an attacker on the same machine would.

A real server per module (`start_embedded` with its default: role nkeys, no anonymous
clients). Each test prints what it tried and what held.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import nats
import nats.errors
import pytest
from nats.aio.client import Client
from nats.js import api as js_api

from engine.records import encode_msgpack, new_event
from ingest.nats import embedded
from ingest.nats import streams as ha_nats
from ingest.nats.auth import Role, inbox_prefix, public_key, role_credentials
from ingest.protocol import MSG_ID

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(scope="module")
def auth_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    d = tmp_path_factory.mktemp("auth-server")
    srv = embedded.start_embedded(d)
    assert srv.auth

    async def provision() -> None:
        nc = await nats.connect(srv.url, nkeys_seed=str(role_credentials(d, "worker")))
        try:
            await ha_nats.provision(nc.jetstream())
        finally:
            await nc.close()

    asyncio.run(provision())
    try:
        yield d
    finally:
        embedded.stop_embedded(d)


class Session:
    """One client of a role, keeping the server's async errors (permission violations)."""

    def __init__(self) -> None:
        self.errors: list[str] = []
        self.nc = Client()

    async def open(self, d: Path, role: Role | None) -> Session:
        rec = embedded.live_server(d)
        assert rec is not None

        async def on_error(e: Exception) -> None:
            self.errors.append(str(e))

        seed = None if role is None else str(role_credentials(d, role))
        # as hookaudit's clients do: replies under the key's own inbox prefix
        inbox = "_INBOX" if seed is None else inbox_prefix(public_key(Path(seed).read_bytes()))
        await self.nc.connect(
            rec.url,
            nkeys_seed=seed,
            inbox_prefix=inbox,
            error_cb=on_error,
            allow_reconnect=False,
            max_reconnect_attempts=0,
            connect_timeout=2,
        )
        return self

    def violated(self, what: str) -> bool:
        return any(
            "permissions violation" in e.lower() and what.lower() in e.lower() for e in self.errors
        )


@pytest.fixture
async def session(auth_dir: Path) -> AsyncIterator[Session]:
    s = Session()
    try:
        yield s
    finally:
        if s.nc.is_connected:
            await s.nc.close()


async def _events_in_stream(d: Path) -> int:
    s = await Session().open(d, "analyst")
    try:
        info = await s.nc.jetstream().stream_info(ha_nats.EVENTS_STREAM)
        return int(info.state.messages)
    finally:
        await s.nc.close()


async def _settle(nc: Client) -> None:
    await nc.flush()
    await asyncio.sleep(0.2)  # the server's -ERR for a denied SUB/PUB follows asynchronously


async def test_anonymous_and_unknown_clients_are_refused(auth_dir: Path) -> None:
    rec = embedded.live_server(auth_dir)
    assert rec is not None
    co = ha_nats.ConnectOptions(servers=(rec.url,))
    with pytest.raises(ha_nats.Unavailable, match="authorization violation"):
        await co.connect()
    print(f"anonymous: refused by {rec.url}")


async def test_an_emitter_publishes_and_gets_its_puback(auth_dir: Path, session: Session) -> None:
    await session.open(auth_dir, "emitter")
    before = await _events_in_stream(auth_dir)
    ev = new_event({"hook_event_name": "Stop", "session_id": "s"}, source="test")
    ack = await session.nc.jetstream().publish(
        "hooks.events.Stop", encode_msgpack(ev), headers={MSG_ID: ev.id}
    )
    assert ack.stream == ha_nats.EVENTS_STREAM
    assert await _events_in_stream(auth_dir) == before + 1
    print("emitter: publish hooks.events.Stop stored, PubAck received")


async def test_an_emitter_cannot_read_events(auth_dir: Path, session: Session) -> None:
    await session.open(auth_dir, "emitter")
    seen: list[bytes] = []

    async def grab(msg: object) -> None:
        seen.append(getattr(msg, "data", b""))

    await session.nc.subscribe("hooks.events.>", cb=grab)
    await session.nc.subscribe("hooks.outcomes.>", cb=grab)
    await _settle(session.nc)
    other = await Session().open(auth_dir, "emitter")
    try:
        await other.nc.jetstream().publish("hooks.events.Stop", b"secret prompt")
    finally:
        await other.nc.close()
    await asyncio.sleep(0.2)
    assert session.violated('Subscription to "hooks.events.>"'), session.errors
    assert session.violated('Subscription to "hooks.outcomes.>"'), session.errors
    assert seen == []

    js = session.nc.jetstream(timeout=1.0)
    for attempt in (
        lambda: js.stream_info(ha_nats.EVENTS_STREAM),
        lambda: js.get_msg(ha_nats.EVENTS_STREAM, 1),
        lambda: js.add_consumer(ha_nats.EVENTS_STREAM, js_api.ConsumerConfig(name="spy")),
        lambda: js.pull_subscribe("hooks.events.>", durable="spy2", stream=ha_nats.EVENTS_STREAM),
    ):
        with pytest.raises((nats.errors.Error, asyncio.TimeoutError)):
            await attempt()
    await _settle(session.nc)
    assert session.violated("$JS.API.STREAM.INFO.HOOK_EVENTS"), session.errors
    assert session.violated("$JS.API.CONSUMER.CREATE.HOOK_EVENTS"), session.errors
    print("emitter: subscribe events/outcomes, stream info, msg get, consumer create: all denied")


async def test_an_emitter_cannot_purge_or_delete(auth_dir: Path, session: Session) -> None:
    await session.open(auth_dir, "emitter")
    before = await _events_in_stream(auth_dir)
    js = session.nc.jetstream(timeout=1.0)
    for attempt in (
        lambda: js.purge_stream(ha_nats.EVENTS_STREAM),
        lambda: js.delete_stream(ha_nats.EVENTS_STREAM),
        lambda: js.delete_msg(ha_nats.EVENTS_STREAM, 1),
        lambda: js.delete_consumer(ha_nats.EVENTS_STREAM, ha_nats.WORKER_CONSUMER),
    ):
        with pytest.raises((nats.errors.Error, asyncio.TimeoutError)):
            await attempt()
    await _settle(session.nc)
    assert session.violated("$JS.API.STREAM.PURGE.HOOK_EVENTS"), session.errors
    assert await _events_in_stream(auth_dir) == before
    print(f"emitter: purge/delete stream, delete msg/consumer denied; {before} events kept")


async def test_an_emitter_cannot_answer_another_emitters_inbox(
    auth_dir: Path, session: Session
) -> None:
    await session.open(auth_dir, "emitter")
    victim = await Session().open(auth_dir, "emitter")
    try:
        inbox = victim.nc.new_inbox()
        sub = await victim.nc.subscribe(inbox)
        await victim.nc.flush()
        await session.nc.publish(inbox, b"forged allow")
        await _settle(session.nc)
        with pytest.raises(nats.errors.TimeoutError):
            await sub.next_msg(timeout=0.3)
    finally:
        await victim.nc.close()
    assert session.violated(f'Publish to "{inbox}"'), session.errors
    print(f"emitter: publish to another emitter's inbox {inbox}: denied, nothing delivered")


async def test_a_worker_may_consume_but_not_destroy(auth_dir: Path, session: Session) -> None:
    await session.open(auth_dir, "worker")
    before = await _events_in_stream(auth_dir)
    js = session.nc.jetstream(timeout=1.0)
    info = await js.consumer_info(ha_nats.EVENTS_STREAM, ha_nats.WORKER_CONSUMER)
    assert info.name == ha_nats.WORKER_CONSUMER
    for attempt in (
        lambda: js.purge_stream(ha_nats.EVENTS_STREAM),
        lambda: js.delete_stream(ha_nats.OUTCOMES_STREAM),
        lambda: js.delete_msg(ha_nats.EVENTS_STREAM, 1),
    ):
        with pytest.raises((nats.errors.Error, asyncio.TimeoutError)):
            await attempt()
    await _settle(session.nc)
    assert session.violated("$JS.API.STREAM.PURGE.HOOK_EVENTS"), session.errors
    assert await _events_in_stream(auth_dir) == before
    print("worker: consumer info ok; purge, stream delete, msg delete denied")


async def test_siem_reads_outcomes_through_its_durable_and_nothing_else(
    auth_dir: Path, session: Session
) -> None:
    worker = await Session().open(auth_dir, "worker")
    try:
        await worker.nc.jetstream().publish("hooks.outcomes.Stop.none", b"outcome-1")
    finally:
        await worker.nc.close()
    await session.open(auth_dir, "siem")
    js = session.nc.jetstream(timeout=2.0)
    sub = await js.pull_subscribe(
        "hooks.outcomes.>", durable="siem", stream=ha_nats.OUTCOMES_STREAM
    )
    msgs = await sub.fetch(1, timeout=2.0)
    assert msgs[0].data == b"outcome-1"
    await msgs[0].ack()
    with pytest.raises((nats.errors.Error, asyncio.TimeoutError)):
        await js.stream_info(ha_nats.EVENTS_STREAM)
    await session.nc.publish("hooks.events.Stop", b"injected")
    await _settle(session.nc)
    assert session.violated("$JS.API.STREAM.INFO.HOOK_EVENTS"), session.errors
    assert session.violated('Publish to "hooks.events.Stop"'), session.errors
    print("siem: durable on HOOK_OUTCOMES read+acked; events stream and publishing denied")


async def test_analyst_is_read_only(auth_dir: Path, session: Session) -> None:
    await session.open(auth_dir, "analyst")
    js = session.nc.jetstream(timeout=1.0)
    before = (await js.stream_info(ha_nats.EVENTS_STREAM)).state.messages
    await session.nc.publish("hooks.events.Stop", b"injected")
    with pytest.raises((nats.errors.Error, asyncio.TimeoutError)):
        await js.purge_stream(ha_nats.EVENTS_STREAM)
    await _settle(session.nc)
    assert session.violated('Publish to "hooks.events.Stop"'), session.errors
    assert (await js.stream_info(ha_nats.EVENTS_STREAM)).state.messages == before
    print("analyst: stream info ok; publish and purge denied")


async def test_a_worker_cannot_remove_or_shrink_the_anchored_heads(
    auth_dir: Path, session: Session
) -> None:
    """The worker's key (on the host the anchors guard against) may add heads, never drop
    them: no purge, no delete, no stream update (new limits would evict old heads)."""
    await session.open(auth_dir, "worker")
    js = session.nc.jetstream(timeout=1.0)
    await js.publish(
        ha_nats.anchor_subject(ha_nats.Names(), "w-test"),
        b'{"worker":"w-test","seq":1,"head":"00"}',
    )
    info = await js.stream_info(ha_nats.ANCHORS_STREAM)
    before = info.state.messages
    assert before >= 1 and info.config.deny_delete and info.config.deny_purge
    shrunk = config_with(info.config, max_msgs=1)
    for attempt in (
        lambda: js.purge_stream(ha_nats.ANCHORS_STREAM),
        lambda: js.delete_stream(ha_nats.ANCHORS_STREAM),
        lambda: js.delete_msg(ha_nats.ANCHORS_STREAM, 1),
        lambda: js.update_stream(shrunk),
    ):
        with pytest.raises((nats.errors.Error, asyncio.TimeoutError)):
            await attempt()
    await _settle(session.nc)
    assert session.violated("$JS.API.STREAM.UPDATE.HOOK_ANCHORS"), session.errors
    after = await js.stream_info(ha_nats.ANCHORS_STREAM)
    assert after.state.messages == before and after.config.max_msgs != 1
    print(f"worker: anchor published; purge, delete, msg delete, update denied; {before} kept")


def config_with(config: Any, **changes: Any) -> Any:
    import dataclasses

    return dataclasses.replace(config, **changes)


async def test_an_emitter_reads_only_its_own_inbox(auth_dir: Path, session: Session) -> None:
    await session.open(auth_dir, "emitter")
    await session.nc.subscribe("_INBOX.>")
    await session.nc.subscribe("_INBOX.someone-else.>")
    await _settle(session.nc)
    assert session.violated('subscription to "_INBOX.>"'), session.errors
    assert session.violated('subscription to "_INBOX.someone-else.>"'), session.errors
    print("emitter: subscribing to every inbox or another's refused; its own prefix works")


async def test_the_replay_roles_reach_no_hook_stream(auth_dir: Path, session: Session) -> None:
    """A distributed replay's coordinator (replay) and jobs (replay-join) see only
    HOOK_REPLAY; a job can neither make nor remove a queue, nor pose as the coordinator."""
    await session.open(auth_dir, "replay-join")
    js = session.nc.jetstream(timeout=1.0)
    queue = js_api.StreamConfig(name="HOOK_REPLAY", subjects=["hookaudit.replay.*.segs"])
    for attempt in (
        lambda: js.stream_info(ha_nats.EVENTS_STREAM),
        lambda: js.add_stream(queue),
        lambda: js.delete_stream("HOOK_REPLAY"),
        lambda: js.add_consumer("HOOK_REPLAY", js_api.ConsumerConfig(durable_name="spy")),
    ):
        with pytest.raises((nats.errors.Error, asyncio.TimeoutError)):
            await attempt()
    await session.nc.subscribe("hookaudit.replay.*.join")  # a forged coordinator
    await session.nc.publish("hookaudit.replay.x.segs", b"forged work")
    await _settle(session.nc)
    for subject in ("$JS.API.STREAM.INFO.HOOK_EVENTS", "$JS.API.STREAM.CREATE.HOOK_REPLAY",
                    "$JS.API.STREAM.DELETE.HOOK_REPLAY", "$JS.API.CONSUMER",
                    'subscription to "hookaudit.replay.*.join"',
                    'publish to "hookaudit.replay.x.segs"'):  # fmt: skip
        assert session.violated(subject), (subject, session.errors)

    coord = await Session().open(auth_dir, "replay")
    try:
        js = coord.nc.jetstream(timeout=1.0)
        for denied in (
            lambda: js.stream_info(ha_nats.EVENTS_STREAM),
            lambda: js.get_msg(ha_nats.EVENTS_STREAM, 1),
            lambda: js.purge_stream(ha_nats.EVENTS_STREAM),
            lambda: js.delete_stream("HOOK_REPLAY"),
        ):
            with pytest.raises((nats.errors.Error, asyncio.TimeoutError)):
                await denied()
        await coord.nc.subscribe("hooks.outcomes.>")
        await coord.nc.publish("hooks.events.Stop", b"forged event")
        await _settle(coord.nc)
        for subject in ("$JS.API.STREAM.INFO.HOOK_EVENTS", "$JS.API.STREAM.MSG.GET.HOOK_EVENTS",
                        "$JS.API.STREAM.PURGE.HOOK_EVENTS", "$JS.API.STREAM.DELETE.HOOK_REPLAY",
                        'subscription to "hooks.outcomes.>"',
                        'publish to "hooks.events.Stop"'):  # fmt: skip
            assert coord.violated(subject), (subject, coord.errors)
    finally:
        await coord.nc.close()
    print("replay-join: hook stream info, queue create/delete, consumer create, posing as the "
          "coordinator, queueing work: denied; replay: hook streams read/purge, HOOK_REPLAY "
          "delete, outcomes, events: denied")  # fmt: skip
