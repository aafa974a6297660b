"""Modules of 100-400 lines (STYLE.md): a module over 400 lines says why in its header.

A module passes when it has at most `LIMIT` lines, or when its docstring says why it is
longer in a line starting ``Longer than 400 lines:``, or when it is in `TO_SPLIT`: the
modules that were over the limit when this test was written, each with the seam to split
it at (and who was working in it then). The list is to get shorter: remove a module from
it when it is split.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("engine", "ingest", "queries", "replay", "hookaudit")
LIMIT = 400
JUSTIFIED = "Longer than 400 lines:"

# path -> (lines when listed, the seam to split at)
TO_SPLIT: dict[str, tuple[int, str]] = {}


def modules() -> dict[str, int]:
    found = {}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            if ".venv" not in path.parts:
                found[path.relative_to(ROOT).as_posix()] = len(path.read_text().splitlines())
    return found


def justified(path: str) -> bool:
    doc = ast.get_docstring(ast.parse((ROOT / path).read_text())) or ""
    return any(line.strip().startswith(JUSTIFIED) for line in doc.splitlines())


def test_no_new_module_over_the_limit() -> None:
    over = {
        p: n for p, n in modules().items() if n > LIMIT and p not in TO_SPLIT and not justified(p)
    }
    assert not over, f"over {LIMIT} lines: split at a seam, or say why ({JUSTIFIED!r}): {over}"
