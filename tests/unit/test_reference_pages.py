"""The generated reference pages under docs/reference/ are what the code says today."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from hookaudit.reference import pages

DOCS = Path(__file__).resolve().parents[2] / "docs" / "reference"


def test_every_reference_page_is_current() -> None:
    for name, text in pages().items():
        path = DOCS / name
        assert path.exists(), f"{path} missing: python -m hookaudit.reference docs/reference"
        assert path.read_text() == text, (
            f"{path} is stale: python -m hookaudit.reference docs/reference"
        )


def test_the_pages_do_not_depend_on_who_generates_them(tmp_path: Path) -> None:
    """Another HOME, terminal width and data dir give the same pages."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOOKAUDIT_")}
    env |= {"HOME": str(tmp_path), "COLUMNS": "37", "HOOKAUDIT_DATA_DIR": str(tmp_path / "d")}
    subprocess.run(
        [sys.executable, "-m", "hookaudit.reference", str(tmp_path / "ref")],
        check=True, env=env, capture_output=True, cwd=DOCS.parents[1],
    )  # fmt: skip
    for name, text in pages().items():
        assert (tmp_path / "ref" / name).read_text() == text, name
