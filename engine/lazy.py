"""Every package's public surface, loaded lazily (PEP 562): one lookup for all of them.

Rules of this file:
- Imports nothing at module level, not even `typing` or `importlib`, and no package
  `__init__` imports it at module level: each calls it from its `__getattr__`, so
  `hookaudit emit`, which passes through `hookaudit/__init__.py` and `ingest/__init__.py`
  on every tool call, loads none of it (`tests/unit/test_fastemit.py` checks both).
- A package names its surface in `__all__` and where each name lives in a table; a name
  is imported from its module on first use, then kept in the package's namespace, so the
  next lookup is a plain attribute and never comes here again.
- It lives in the engine because the engine imports nothing of ours: every package may
  import it without breaking a layer.

Example:
    >>> ns = {}
    >>> load("pkg", {"dumps": "json"}, ns, "dumps").__module__, "dumps" in ns
    ('json', True)
"""

from __future__ import annotations

TYPE_CHECKING = False  # mypy takes it as True; importing `typing` costs start-up time
if TYPE_CHECKING:
    from collections.abc import Mapping, MutableMapping

__all__ = ["load"]


def load(
    package: str, where: Mapping[str, str], namespace: MutableMapping[str, object], name: str
) -> object:
    """`name` of `package`, imported from the module `where` names, and kept in `namespace`.

    A package's whole `__getattr__` is ``return load(__name__, _WHERE, globals(), name)``.
    """
    module = where.get(name)
    if module is None:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    namespace[name] = value
    return value
