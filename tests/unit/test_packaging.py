"""The distribution names every package of the tree (an editable install hides a missing one)."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_is_in_the_distribution() -> None:
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())
    listed = set(conf["tool"]["setuptools"]["packages"])
    found = {
        ".".join(p.parent.relative_to(ROOT).parts)
        for top in ("engine", "ingest", "queries", "replay", "hookaudit")
        for p in (ROOT / top).rglob("__init__.py")
    }
    assert found - listed == set(), f"packages missing from pyproject.toml: {found - listed}"
    assert listed - found == set(), f"listed packages that do not exist: {listed - found}"
