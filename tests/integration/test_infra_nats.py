"""Every nats-server config under infra/nats is valid, and its roles are the embedded server's."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from ingest.nats import embedded
from ingest.nats.auth import ROLES, authorization_block

INFRA = Path(__file__).resolve().parents[2] / "infra" / "nats"
CONFIGS = sorted(INFRA.rglob("*.conf"))


def test_there_are_configs_to_check() -> None:
    assert {p.name for p in CONFIGS} >= {"single.conf", "auth.conf", "users.conf"}


TLS_DIR = "/etc/hookaudit/nats/tls"  # where the cluster configs expect their certificates


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Certificates from the shipped gen-certs.sh, for the configs that name TLS files."""
    d = tmp_path_factory.mktemp("tls")
    subprocess.run(
        [str(INFRA / "cluster" / "gen-certs.sh"), str(d)],
        check=True,
        capture_output=True,
        timeout=60,
    )
    return d


@pytest.mark.parametrize("conf", CONFIGS, ids=[str(p.relative_to(INFRA)) for p in CONFIGS])
def test_nats_server_accepts(conf: Path, certs: Path, tmp_path: Path) -> None:
    text = conf.read_text()
    if TLS_DIR in text:  # the same config, with the certificates where this test made them
        conf = tmp_path / conf.name
        conf.write_text(text.replace(TLS_DIR, str(certs)))
        if 'include "users.conf"' in text:  # the role accounts, next to it as installed
            shutil.copy(INFRA / "users.conf", tmp_path / "users.conf")
    p = subprocess.run(
        [embedded.find_nats_server(), "-t", "-c", str(conf)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert p.returncode == 0 and "is valid" in p.stderr, p.stderr


def test_users_conf_has_the_embedded_servers_roles_and_permissions() -> None:
    text = (INFRA / "users.conf").read_text()
    keys = re.findall(r'"nkey": "(U[A-Z2-7]{55})"', text)
    assert len(keys) == len(ROLES)
    body = text[text.index("authorization {") :]
    assert body == authorization_block(dict(zip(ROLES, keys, strict=True)))


def test_nats_keys_writes_a_users_conf_the_server_accepts(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from hookaudit.natskeys_cmd import keys_cmd

    r = CliRunner().invoke(keys_cmd, ["--dir", str(tmp_path / "k")])
    assert r.exit_code == 0, r.output
    conf = tmp_path / "k" / "server.conf"  # nats-server includes relative to the config
    conf.write_text('listen: 127.0.0.1:4222\ninclude "users.conf"\n')
    p = subprocess.run(
        [embedded.find_nats_server(), "-t", "-c", str(conf)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert p.returncode == 0, p.stderr
    assert sorted(x.name for x in (tmp_path / "k").iterdir()) == sorted(
        [f"{r}.nk" for r in ROLES] + ["reply.nk", "reply.pub", "users.conf", "server.conf"]
    )
    made = [x for x in (tmp_path / "k").iterdir() if x.name != "server.conf"]
    assert all((x.stat().st_mode & 0o777) == 0o600 for x in made)


def test_the_cluster_nodes_have_the_role_accounts() -> None:
    for i in (1, 2, 3):
        assert 'include "users.conf"' in (INFRA / "cluster" / f"node{i}.conf").read_text()
