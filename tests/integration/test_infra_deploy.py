"""infra/compose and infra/systemd: what they mount exists, what they run is a real command.

No container runtime runs here (the docker client has no daemon and no registry is
reachable), so the compose file is checked as far as that allows: `docker-compose config`
(Debian's docker-compose) validates it against the compose schema, `setup.sh` makes what
it mounts, every mounted file exists, and every hookaudit command it runs parses (its
subcommand's `--help` works and names every option it passes). The systemd units are
checked by `systemd-analyze verify` with the binaries pointed at this venv.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from nats.aio.client import Client

from ingest.nats import embedded
from ingest.nats.streams import Names
from tests.conftest import NatsServer

ROOT = Path(__file__).resolve().parents[2]
INFRA = ROOT / "infra"
BIN = Path(sys.executable).parent
UNITS = sorted((INFRA / "systemd").glob("*.service"))


def _need(tool: str, package: str) -> str:
    found = shutil.which(tool)
    assert found, f"{tool} not found: install the Debian package {package} (./install.sh)"
    return found


def _check_hookaudit(argv: list[str]) -> None:
    """`hookaudit SUB… --help` works and lists every --option of argv."""
    assert argv[0] == "hookaudit", argv
    sub = [a for a in argv[1:4] if re.fullmatch(r"[a-z]+", a)]
    while sub:  # the longest prefix of words that is a command
        p = subprocess.run([str(BIN / "hookaudit"), *sub, "--help"], capture_output=True,
                           text=True, timeout=60, check=False)  # fmt: skip
        if p.returncode == 0 and f"hookaudit {' '.join(sub)} [" in p.stdout:
            break
        sub.pop()
    assert sub, f"not a hookaudit command: {argv}"
    for opt in (a.split("=", 1)[0] for a in argv if a.startswith("--")):
        assert re.search(rf"{re.escape(opt)}\b", p.stdout), f"{argv}: {opt} not in --help"


@pytest.fixture(scope="module")
def compose(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of infra/ with setup.sh run in it (certificates, keys, hookaudit.env)."""
    copy = tmp_path_factory.mktemp("infra") / "infra"
    shutil.copytree(INFRA, copy)
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"}
    p = subprocess.run([str(copy / "compose" / "setup.sh")], env=env, capture_output=True,
                       text=True, timeout=120, check=False)  # fmt: skip
    assert p.returncode == 0, p.stderr
    return copy / "compose" / "compose.yaml"


def test_docker_compose_accepts_the_file(compose: Path) -> None:
    tool = _need("docker-compose", "docker-compose")
    p = subprocess.run([tool, "-f", str(compose), "config", "-q"], capture_output=True,
                       text=True, timeout=60, check=False)  # fmt: skip
    assert p.returncode == 0, p.stderr


def test_compose_runs_three_nodes_two_workers_and_serve(compose: Path) -> None:
    services = yaml.safe_load(compose.read_text())["services"]
    nodes = [s for s in services.values() if str(s.get("image", "")).startswith("nats:")]
    assert len(nodes) == 3
    confs = {s["command"][-1] for s in nodes}
    assert confs == {f"/etc/hookaudit/nats/node{i}.conf" for i in (1, 2, 3)}
    commands = [s["command"] for s in services.values() if s.get("image") == "hookaudit:local"]
    assert sum(c[1] == "worker" for c in commands) == 2
    assert sum(c[1] == "serve" for c in commands) == 1
    assert ["hookaudit", "nats", "provision", "--replicas", "3", "--max-age", "72"] in commands
    names = {c[c.index("--name") + 1] for c in commands if c[1] == "worker"}
    assert len(names) == 2  # two chains, never one chain written by two workers
    role = {"worker": "worker", "nats": "worker", "serve": "emitter"}
    for svc in services.values():  # the cluster has the role accounts: each service its seed
        if svc.get("image") == "hookaudit:local":
            seed = svc["environment"]["HOOKAUDIT_NATS_NKEY"]
            assert seed == f"/etc/hookaudit/keys/{role[svc['command'][1]]}.nk", svc["command"]
            assert (compose.parent / "keys" / Path(seed).name).is_file()
            assert svc["environment"]["HOOKAUDIT_NATS_URL"].count("tls://") == 3
    for svc in nodes:
        assert "./keys/users.conf:/etc/hookaudit/nats/users.conf:ro" in svc["volumes"]


def test_every_mounted_file_exists_and_every_command_is_real(compose: Path) -> None:
    doc = yaml.safe_load(compose.read_text())
    here = compose.parent
    for name, svc in doc["services"].items():
        for vol in svc.get("volumes", []):
            src = vol.split(":", 1)[0]
            if src.startswith((".", "/")):
                assert (here / src).exists(), f"{name}: {src} does not exist"
            else:
                assert src in doc["volumes"], f"{name}: volume {src} is not declared"
        if svc.get("image") == "hookaudit:local":
            _check_hookaudit(svc["command"])
            assert (here / svc["env_file"]).is_file()
            build = (INFRA / "compose" / svc["build"]["context"]).resolve()  # the repo
            assert build == ROOT
            dockerfile = (build / svc["build"]["dockerfile"]).read_text()
            for src in re.findall(r"^COPY (\S+)", dockerfile, re.M):
                assert (build / src).exists(), f"Dockerfile: COPY {src}: no such file"
        else:  # the node config it runs is the shipped one, which nats-server accepts
            conf = next(v for v in svc["volumes"] if v.endswith(svc["command"][-1] + ":ro"))
            assert (here / conf.split(":")[0]).resolve().parent.name == "cluster"


def _conf_for_test(conf: Path, tls: Path, tmp: Path) -> Path:
    out = tmp / conf.name
    out.write_text(conf.read_text().replace("/etc/hookaudit/nats/tls", str(tls)))
    return out


def test_the_certificates_setup_makes_fit_the_node_configs(compose: Path, tmp_path: Path) -> None:
    tls = compose.parent / "tls"
    shutil.copy(compose.parent / "keys" / "users.conf", tmp_path / "users.conf")  # setup's keys
    for i in (1, 2, 3):
        conf = _conf_for_test(INFRA / "nats" / "cluster" / f"node{i}.conf", tls, tmp_path)
        p = subprocess.run([embedded.find_nats_server(), "-t", "-c", str(conf)],
                           capture_output=True, text=True, timeout=30, check=False)  # fmt: skip
        assert p.returncode == 0, p.stderr


@pytest.fixture(scope="module")
def units(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """The shipped units with /opt/hookaudit/bin pointed at this venv, instances named."""
    d = tmp_path_factory.mktemp("units")
    out = []
    for unit in UNITS:
        text = unit.read_text().replace("/opt/hookaudit/bin", str(BIN))
        name = unit.name.replace("@.", "@1.")
        (d / name).write_text(text)
        out.append(d / name)
    return out


def test_systemd_analyze_verify_accepts_every_unit(units: list[Path]) -> None:
    tool = _need("systemd-analyze", "systemd")
    assert {u.name.split("@")[0].removesuffix(".service") for u in units} == {
        "hookaudit-nats", "hookaudit-worker", "hookaudit-serve", "hookaudit-siem",
        "hookaudit-relay",
    }  # fmt: skip
    p = subprocess.run([tool, "verify", *map(str, units)], capture_output=True, text=True,
                       timeout=60, check=False, cwd=units[0].parent)  # fmt: skip
    assert p.returncode == 0 and not p.stderr.strip(), p.stderr


def test_every_unit_runs_a_real_command(units: list[Path]) -> None:
    for unit in units:
        for line in re.findall(r"^ExecStart=(.+)$", unit.read_text(), re.M):
            argv = shlex.split(line)
            assert Path(argv[0]).is_file(), f"{unit.name}: {argv[0]}"
            if Path(argv[0]).name == "hookaudit":
                _check_hookaudit(["hookaudit", *argv[1:]])
            else:
                assert Path(argv[0]).name == "nats-server" and argv[1:] == [
                    "-c", "/etc/hookaudit/nats/node.conf"
                ]  # fmt: skip


async def test_nats_provision_creates_the_streams(
    nats_server: NatsServer, names: Names, nc: Client
) -> None:
    argv = [str(BIN / "hookaudit"), "nats", "provision", "--nats", nats_server.url,
            "--prefix", names.prefix, "--max-age", "2", "--replicas", "1"]  # fmt: skip
    for _ in range(2):  # idempotent
        p = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
        assert p.returncode == 0, p.stderr
        assert "provisioned: streams with 1 replica(s), kept 2 h" in p.stdout
    js = nc.jetstream()
    for stream in (names.events_stream, names.outcomes_stream):
        config = (await js.stream_info(stream)).config
        assert config.num_replicas == 1 and config.max_age == 7200
    anchors = (await js.stream_info(names.anchors_stream)).config
    assert anchors.deny_delete and anchors.deny_purge and not anchors.max_age
    ci = await js.consumer_info(names.events_stream, names.worker_consumer)
    assert ci.config.durable_name == names.worker_consumer
    p = subprocess.run([*argv[:-1], "9"], capture_output=True, text=True, timeout=60, check=False)
    assert p.returncode == 2 and "9 is not in the range" in p.stderr
