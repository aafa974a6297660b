"""The wheel holds every package of the tree (an editable install hides a missing one)."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_is_in_the_wheel(tmp_path: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("hookaudit-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    found = {
        str(p.relative_to(ROOT))
        for top in ("engine", "ingest", "queries", "replay", "hookaudit", "infra")
        for p in (ROOT / top).rglob("__init__.py")
    }
    assert found - names == set(), f"packages missing from the wheel: {found - names}"
