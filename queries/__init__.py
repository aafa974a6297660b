"""Queries: DuckDB views over the log (through `ingest.log`), the named query catalog, detections.

The public surface is `__all__`; each name is loaded from its module on first use (PEP
562), so importing one module of the package (the CLI loads DuckDB only when a query runs) loads nothing else.

Example:
    >>> import queries
    >>> queries.open_db.__name__
    'open_db'
"""

from __future__ import annotations

TYPE_CHECKING = False  # mypy takes it as True; importing `typing` costs start-up time

if TYPE_CHECKING:
    from queries.catalog import Catalog, NamedQuery, load_catalog
    from queries.db import PUBLIC_VIEWS, QueryError, Result, open_db, run_named, run_sql

__all__ = [
    "PUBLIC_VIEWS",
    "Catalog",
    "NamedQuery",
    "QueryError",
    "Result",
    "load_catalog",
    "open_db",
    "run_named",
    "run_sql",
]

_WHERE = {
    "Catalog": "queries.catalog",
    "NamedQuery": "queries.catalog",
    "PUBLIC_VIEWS": "queries.db",
    "QueryError": "queries.db",
    "Result": "queries.db",
    "load_catalog": "queries.catalog",
    "open_db": "queries.db",
    "run_named": "queries.db",
    "run_sql": "queries.db",
}


def __getattr__(name: str) -> object:  # PEP 562; engine.lazy is imported on first use
    from engine.lazy import load

    return load(__name__, _WHERE, globals(), name)
