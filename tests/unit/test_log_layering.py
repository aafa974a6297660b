"""The log package imports the engine's records and nothing of NATS, the protocol, the CLI,
queries or replay; and nothing outside it opens segment files by path."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LOG = ROOT / "ingest" / "log"
FORBIDDEN = (
    "nats",
    "ingest.protocol",
    "ingest.cli",
    "ingest.nats",
    "queries",
    "replay",
    "duckdb",
    "hookaudit",
)


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_log_modules_import_nothing_forbidden() -> None:
    bad = {
        f"{p.name}: {name}"
        for p in LOG.glob("*.py")
        for name in _imports(p)
        if any(name == f or name.startswith(f + ".") for f in FORBIDDEN)
    }
    assert not bad, bad


def test_importing_the_whole_log_loads_no_forbidden_module() -> None:
    code = (
        "import sys, importlib, pkgutil, ingest.log as L\n"
        "for m in pkgutil.iter_modules(L.__path__): importlib.import_module('ingest.log.' + m.name)\n"
        f"bad = [m for m in sys.modules if any(m == f or m.startswith(f + '.') for f in {FORBIDDEN!r})]\n"
        "print(bad)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


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
