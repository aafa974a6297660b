"""Nothing outside the log spells segment paths, and the dedup key comes without pyarrow.

What the log may import is an import-linter contract in pyproject.toml (tests/unit/test_layers.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LOG = ROOT / "ingest" / "log"


def test_the_key_alone_does_not_import_pyarrow() -> None:
    """`hookaudit emit` imports the protocol, which takes the dedup key from the log."""
    code = "import sys, ingest.protocol; print('pyarrow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_no_module_outside_the_log_spells_segment_paths() -> None:
    """Segment paths are the layout's: no other package builds them from strings."""
    spelled = []
    for pkg in ("queries", "replay", "ingest"):
        for p in (ROOT / pkg).rglob("*.py"):
            if LOG in p.parents:
                continue
            text = p.read_text()
            for needle in ('/ "sealed"', '/ "active"', '/ "manifest"', '"*.parquet"', '"*.jsonl"'):
                if needle in text:
                    spelled.append(f"{p.relative_to(ROOT)}: {needle}")
    assert not spelled, spelled
