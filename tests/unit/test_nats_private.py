"""nats-py's private parts are touched in one module, and only on a tested nats-py version."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from nats.aio.client import Client
from nats.aio.subscription import Subscription
from nats.protocol.parser import Parser

from ingest.nats.wire import TESTED, UntestedNats, check_version

ROOT = Path(__file__).resolve().parents[2]
WIRE = ROOT / "ingest" / "nats" / "wire.py"


def _private_names() -> set[str]:
    """Every private attribute a nats-py client, subscription or parser has."""
    names: set[str] = set()
    for obj in (Client(), Subscription(Client(), 1), Parser()):
        names |= {n for n in vars(obj) if n.startswith("_") and not n.startswith("__")}
    for cls in (Client, Subscription, Parser):
        names |= {n for n in vars(cls) if n.startswith("_") and not n.startswith("__")}
    return names


def test_only_the_wire_module_touches_nats_private_attributes() -> None:
    private = _private_names()
    assert {"_server_pool", "_process_msg", "_id", "_ps"} <= private
    touched = []
    for pkg in ("engine", "ingest", "queries", "replay", "hookaudit"):
        for path in (ROOT / pkg).rglob("*.py"):
            if path == WIRE:
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if (
                    isinstance(node, ast.Attribute)
                    and node.attr in private
                    and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"))
                ):
                    touched.append(f"{path.relative_to(ROOT)}:{node.lineno} .{node.attr}")
    assert not touched, touched


def test_the_installed_nats_py_is_a_tested_one() -> None:
    check_version()
    assert TESTED


@pytest.mark.parametrize("version", ["2.9.0", "2.17.0", "3.0.0", "", "x.y", "2"])
def test_an_untested_version_is_refused_by_name(version: str) -> None:
    with pytest.raises(UntestedNats, match=f"nats-py {version} is not a version"):
        check_version(version)
