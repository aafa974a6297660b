"""Lint of python hooks: does the hook's file or module exist, and does it define the callable.

Rules of this file:
- The only questions lint asks the filesystem, asked through a `Probe` (tests give their
  own): a file's text, a module's source file. Nothing is imported or executed: a module's
  top-level names are read from its syntax tree, and names bound conditionally (under
  `if`, `try`, ...) count as "anything".
- Never raises; each problem is reported through `add` as kind ``python-missing``.

Example:
    >>> found = []
    >>> lint_callable("no_such_module_here:gate", "hooks.Stop[0].hooks[0].callable", "s.json",
    ...               FILESYSTEM, lambda *a: found.append(a[1]))
    >>> found
    ['python-missing']
"""

from __future__ import annotations

import ast
import os
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["FILESYSTEM", "Add", "Probe", "lint_callable"]

Add = Callable[[str, str, str], None]


@dataclass(frozen=True)
class Probe:
    """What lint asks the filesystem: a file's text (None: unreadable), a module's source."""

    read_text: Callable[[str], str | None]
    module_source: Callable[[str], str | None]  # dotted name -> its source file, or None


def _read(path: str) -> str | None:
    """The file's text, or None: unreadable, not UTF-8, or larger than the engine reads."""
    from engine.settings import MAX_SETTINGS_BYTES
    from engine.userfiles import read_regular

    try:  # a FIFO or a device is unreadable here, never waited on or read forever
        return read_regular(path, MAX_SETTINGS_BYTES).decode("utf-8")
    except (OSError, UnicodeDecodeError, ValueError):
        return None


def _module_source(name: str) -> str | None:
    import importlib.util

    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError, AttributeError):
        return None
    if spec is None:
        return None
    return spec.origin if spec.origin and spec.origin.endswith(".py") else "<built-in>"


FILESYSTEM = Probe(read_text=_read, module_source=_module_source)


def lint_callable(spec: str, path: str, file: str, probe: Probe, add: Add) -> None:
    """Report through `add` a python hook `spec` (``module:attr`` or ``file.py:attr``) that
    would fail when it runs: its file or module missing, not Python, or without `attr`."""
    module, sep, attr = spec.rpartition(":")
    if not sep or not module or not attr:
        return  # the parser reports the form
    if module.endswith(".py"):
        where = (
            module
            if os.path.isabs(module)
            else os.path.join(os.path.dirname(os.path.abspath(file)), module)
        )
        source = probe.read_text(where)
        if source is None:
            add(
                path,
                "python-missing",
                f"{where}: no such file (or unreadable): the hook fails when it runs",
            )
            return
    else:
        origin = probe.module_source(module)
        if origin is None:
            add(path, "python-missing", f"module {module!r} not found: the hook fails when it runs")
            return
        source = probe.read_text(origin) if origin != "<built-in>" else None
        if source is None:
            return  # a compiled or namespace module: its names cannot be read without importing it
    defined = _top_level_names(source)
    if defined is None:
        add(path, "python-missing", f"{module}: not valid Python: the hook fails when it runs")
    elif "*" not in defined and attr.split(".", 1)[0] not in defined:
        add(path, "python-missing", f"{module} defines no {attr!r}: the hook fails when it runs")


def _top_level_names(source: str) -> set[str] | None:
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names |= {t.id for t in targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.If | ast.Try | ast.With | ast.For | ast.While):
            names.add("*")  # names bound conditionally: not read without importing
    return names
