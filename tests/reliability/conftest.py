"""A real 3-node NATS JetStream cluster on loopback, built from infra/nats/cluster/.

The shipped node configs are the templates: the test swaps only what must differ on one
machine (ports, the route addresses, the store and certificate directories), so a change to
infra/ is a change to what these tests run. Certificates come from the shipped gen-certs.sh.
With ``accounts=True`` (the fault tests) the nodes keep their ``include "users.conf"`` and
get the role accounts of `ingest.nats.auth` (one fresh nkey per role, as
``hookaudit nats keys`` writes them): no anonymous client, each client with its role's seed.
Every node is started by the test and stopped by PID.
"""

from __future__ import annotations

import contextlib
import re
import signal
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from ingest.nats.auth import Role, authorization_block, ensure_keys_in
from ingest.nats.embedded import find_nats_server

REPO = Path(__file__).resolve().parents[2]
CLUSTER = REPO / "infra" / "nats" / "cluster"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Node:
    name: str
    conf: Path
    client_port: int
    route_port: int
    http_port: int
    log: Path
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"tls://127.0.0.1:{self.client_port}"

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                [find_nats_server(), "-c", str(self.conf)], stdout=out, stderr=out
            )

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()

    def healthy(self) -> bool:
        """JetStream is up on this node and it knows the meta leader (/healthz answers ok)."""
        try:
            with urllib.request.urlopen(
                f"http://127.0.0.1:{self.http_port}/healthz", timeout=1
            ) as r:
                return bool(r.status == 200)
        except OSError:
            return False


@dataclass
class Cluster:
    nodes: list[Node]
    tls: Path
    auth: Path | None = None  # the role seeds (<role>.nk), None for an open cluster
    ca: Path = field(init=False)

    def __post_init__(self) -> None:
        self.ca = self.tls / "ca.pem"

    def seed(self, role: Role) -> str:
        """The nkey seed file of `role` (a cluster with accounts only)."""
        assert self.auth is not None, "this cluster runs without accounts"
        return str(self.auth / f"{role}.nk")

    @property
    def urls(self) -> str:
        return ",".join(n.url for n in self.nodes if n.proc and n.proc.poll() is None)

    def wait_healthy(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not all(n.healthy() for n in self.nodes if n.proc and n.proc.poll() is None):
            if time.monotonic() > deadline:
                logs = "\n".join(n.log.read_text()[-1500:] for n in self.nodes)
                raise AssertionError(f"cluster not healthy after {timeout}s:\n{logs}")
            time.sleep(0.2)


def node_config(
    template: str, *, tls: Path, store: Path, nodes: list[Node], me: Node, accounts: bool = True
) -> str:
    """The shipped node config with this machine's ports, paths and route addresses
    (without its ``include "users.conf"`` when not `accounts`: an open cluster, TLS only)."""
    conf = template.replace("/etc/hookaudit/nats/tls", str(tls))
    if not accounts:
        conf = conf.replace('include "users.conf"', "")
    assert accounts == ('include "users.conf"' in conf), "the node configs include users.conf"
    conf = conf.replace("/var/lib/hookaudit/nats", str(store))
    conf = conf.replace("listen: 0.0.0.0:4222", f"listen: 127.0.0.1:{me.client_port}")
    conf = conf.replace("listen: 0.0.0.0:6222", f"listen: 127.0.0.1:{me.route_port}")
    conf = conf.replace("http: 127.0.0.1:8222", f"http: 127.0.0.1:{me.http_port}")
    for n in nodes:  # routes and what each node advertises (client_advertise, advertise)
        conf = conf.replace(f"{n.name}:6222", f"127.0.0.1:{n.route_port}")
        conf = conf.replace(f"{n.name}:4222", f"127.0.0.1:{n.client_port}")
    assert "0.0.0.0" not in conf and not re.search(r"nats-\d:[46]222", conf), conf
    return conf


@contextlib.contextmanager
def run_cluster(tmp: Path, *, accounts: bool = False) -> Iterator[Cluster]:
    """Three nodes from the shipped configs; `accounts`: with the role accounts (users.conf
    beside the node configs, where their ``include`` finds it; the seeds in ``tmp/auth``)."""
    tls = tmp / "tls"
    auth: Path | None = None
    if accounts:
        auth = tmp / "auth"
        (tmp / "users.conf").write_text(authorization_block(ensure_keys_in(auth)))
    subprocess.run(
        [str(CLUSTER / "gen-certs.sh"), str(tls), "nats-1", "nats-2", "nats-3"],
        check=True,
        capture_output=True,
    )
    nodes = [
        Node(
            f"nats-{i}",
            tmp / f"node{i}.conf",
            free_port(),
            free_port(),
            free_port(),
            tmp / f"node{i}.log",
        )
        for i in (1, 2, 3)
    ]
    for i, node in enumerate(nodes, start=1):
        template = (CLUSTER / f"node{i}.conf").read_text()
        store = tmp / f"store{i}"
        node.conf.write_text(
            node_config(template, tls=tls, store=store, nodes=nodes, me=node, accounts=accounts)
        )
    cluster = Cluster(nodes, tls, auth)
    try:
        for node in nodes:
            node.start()
        cluster.wait_healthy()
        yield cluster
    finally:
        for node in nodes:
            node.stop()


@pytest.fixture
def nats_cluster(tmp_path: Path) -> Iterator[Cluster]:
    """Three JetStream nodes from infra/nats/cluster/: TLS on clients and routes, the role
    accounts (`Cluster.seed(role)`)."""
    with run_cluster(tmp_path / "cluster", accounts=True) as cluster:
        yield cluster
