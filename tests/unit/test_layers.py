"""The layering of the README's "Code map", as import contracts (pyproject.toml,
``[tool.importlinter]``), checked here with import-linter over the real import graph.

The contracts name packages (commands on top; the engine imports nothing of ours; the log
is the bottom of `ingest`; queries and replay read the log, never the stream; the NATS
adapter knows none of its users; the stream's entry points are independent). A contract
that names a module which does not exist would pass for nothing, so every module a
contract names must be importable, and one contract known to be broken (the worker's
command does import NATS) must be reported broken.
"""

from __future__ import annotations

import importlib.util
import logging
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
from importlinter.cli import lint_imports

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "pyproject.toml"


def contracts() -> list[dict[str, object]]:
    doc = tomllib.loads(CONFIG.read_text())
    found: list[dict[str, object]] = doc["tool"]["importlinter"]["contracts"]
    return found


@pytest.fixture(autouse=True)
def _logging_kept() -> Iterator[None]:
    """lint_imports configures logging with dictConfig, which disables every logger that
    exists (ours included) for the rest of the process: put the logging state back."""
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    disabled = {
        name: lg.disabled
        for name, lg in logging.root.manager.loggerDict.items()
        if isinstance(lg, logging.Logger)
    }
    yield
    root.setLevel(level)
    root.handlers[:] = handlers
    for name, lg in logging.root.manager.loggerDict.items():
        if isinstance(lg, logging.Logger):
            lg.disabled = disabled.get(name, False)


def test_the_contracts_are_kept(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(ROOT)
    names = [str(c["name"]) for c in contracts()]
    assert len(names) >= 6, names
    code = lint_imports(config_filename=str(CONFIG), cache_dir=str(tmp_path), no_logo=True)
    assert code == 0, "an import breaks the layering: run lint-imports to see which"


def test_every_forbidden_module_exists() -> None:
    for c in contracts():
        named = [
            *c.get("source_modules", []),
            *c.get("forbidden_modules", []),
            *c.get("modules", []),
        ]  # type: ignore[misc]
        for name in named:
            assert importlib.util.find_spec(name) is not None, f"{c['name']}: {name}"


def test_a_broken_contract_is_reported(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    config = tmp_path / "broken.toml"
    config.write_text(
        '[tool.importlinter]\nroot_packages = ["ingest"]\ninclude_external_packages = true\n'
        '[[tool.importlinter.contracts]]\nname = "x"\ntype = "forbidden"\n'
        'source_modules = ["hookaudit.stream_cmd"]\nforbidden_modules = ["nats"]\n'
    )
    monkeypatch.chdir(ROOT)
    code = lint_imports(config_filename=str(config), cache_dir=str(tmp_path), no_logo=True)
    assert code == 1
