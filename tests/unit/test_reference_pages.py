"""The generated reference pages under docs/reference/ are what the code says today, as a
fresh process writes them, whoever runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from hookaudit.reference import pages

DOCS = Path(__file__).resolve().parents[2] / "docs" / "reference"


def _generated(tmp_path: Path, **env_extra: str) -> dict[str, str]:
    """The pages as a fresh process writes them (nothing another test changed in this one)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOOKAUDIT_")}
    env |= env_extra
    subprocess.run(
        [sys.executable, "-m", "hookaudit.reference", str(tmp_path / "ref")],
        check=True, env=env, capture_output=True, cwd=DOCS.parents[1],
    )  # fmt: skip
    return {p.name: p.read_text() for p in (tmp_path / "ref").glob("*.md")}


def test_every_reference_page_is_current(tmp_path: Path) -> None:
    written = _generated(tmp_path)
    assert set(written) == set(pages())
    for name, text in written.items():
        path = DOCS / name
        assert path.exists(), f"{path} missing: python -m hookaudit.reference docs/reference"
        stale = f"{path} is stale: python -m hookaudit.reference docs/reference"
        assert path.read_text() == text, stale


def test_the_pages_do_not_depend_on_who_generates_them(tmp_path: Path) -> None:
    """Another HOME, terminal width and data dir give the same pages."""
    other = _generated(
        tmp_path, HOME=str(tmp_path), COLUMNS="37", HOOKAUDIT_DATA_DIR=str(tmp_path / "d")
    )
    assert set(other) == set(pages())
    for name, text in other.items():
        assert (DOCS / name).read_text() == text, name


def test_every_settings_key_described_is_a_key_the_parser_reads() -> None:
    """A line for a key the models no longer have would document a key that does nothing
    (the other way, a key without a line, fails the page's generation)."""
    from engine import settings as st
    from hookaudit.reference_settings import KEYS

    for model, key in KEYS:
        fields = getattr(st, model).model_fields
        assert key in {info.alias or name for name, info in fields.items()}, (model, key)
