"""The stream: emit and serve put hook events on NATS, the worker decides and appends to the log (`ingest.log`).

The public surface is `__all__`; each name is loaded from its module on first use (PEP
562), so importing one module of the package (`hookaudit emit` imports `ingest.emit.emitter` on every tool call) loads nothing else.

Example:
    >>> import ingest
    >>> ingest.Worker.__name__
    'Worker'
"""

from __future__ import annotations

# No `typing` or `importlib` at import time: `hookaudit emit` imports this package on every
# tool call through its stdlib-only fast path (tests/unit/test_fastemit.py checks it).
TYPE_CHECKING = False  # mypy takes it as True
if TYPE_CHECKING:
    from ingest.emit.emitter import EmitOptions
    from ingest.nats.options import NatsArgs, connect_options
    from ingest.nats.streams import ConnectOptions, Names, connect, names, provision
    from ingest.serve.server import HttpServer, ServeOptions
    from ingest.worker.loop import Worker

__all__ = [
    "ConnectOptions",
    "EmitOptions",
    "HttpServer",
    "Names",
    "NatsArgs",
    "ServeOptions",
    "Worker",
    "connect",
    "connect_options",
    "names",
    "provision",
]

_WHERE = {
    "ConnectOptions": "ingest.nats.streams",
    "EmitOptions": "ingest.emit.emitter",
    "HttpServer": "ingest.serve.server",
    "Names": "ingest.nats.streams",
    "NatsArgs": "ingest.nats.options",
    "ServeOptions": "ingest.serve.server",
    "Worker": "ingest.worker.loop",
    "connect": "ingest.nats.streams",
    "connect_options": "ingest.nats.options",
    "names": "ingest.nats.streams",
    "provision": "ingest.nats.streams",
}


def __getattr__(name: str) -> object:  # PEP 562; engine.lazy is imported on first use
    from engine.lazy import load

    return load(__name__, _WHERE, globals(), name)
