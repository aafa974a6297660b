"""Fixtures shared by the security tests."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def lair() -> Iterator[Path]:
    """A directory another uid can reach and create things in (pytest's tmp dirs are 0700)."""
    d = Path(tempfile.mkdtemp(prefix="hookaudit-lair-"))
    os.chmod(d, 0o777)
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)
