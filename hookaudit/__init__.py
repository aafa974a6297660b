"""The command line: the root click group (`hookaudit.cli`), which loads each package's `cli.py` lazily, and the shared options (`hookaudit.options`).

The public surface is `__all__`; each name is loaded from its module on first use (PEP
562), so importing one module of the package (`hookaudit emit` starts without the other commands) loads nothing else.

Example:
    >>> import hookaudit
    >>> hookaudit.main.__name__
    'main'
"""

from __future__ import annotations

# No `typing` or `importlib` at import time: `hookaudit emit` imports this package on every
# tool call through its stdlib-only fast path (tests/unit/test_fastemit.py checks it).
TYPE_CHECKING = False  # mypy takes it as True
if TYPE_CHECKING:
    from hookaudit.cli import main
    from hookaudit.options import data_dir_option, fail

__all__ = [
    "data_dir_option",
    "fail",
    "main",
]

_WHERE = {
    "data_dir_option": "hookaudit.options",
    "fail": "hookaudit.options",
    "main": "hookaudit.cli",
}


def __getattr__(name: str) -> object:  # PEP 562; engine.lazy is imported on first use
    from engine.lazy import load

    return load(__name__, _WHERE, globals(), name)
