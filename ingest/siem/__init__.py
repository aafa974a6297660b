"""SIEM streaming: outcomes from NATS to syslog, files, HEC, Elastic or webhooks, in CEF/ECS/OCSF.

The public surface is `__all__`; each name is loaded from its module on first use (PEP
562), so importing one module of the package (the forwarder loads only the sink it sends to) loads nothing else.

Example:
    >>> import ingest.siem
    >>> ingest.siem.Forwarder.__name__
    'Forwarder'
"""

from __future__ import annotations

TYPE_CHECKING = False  # mypy takes it as True; importing `typing` costs start-up time

if TYPE_CHECKING:
    from ingest.siem.formats import FORMATS, format_view
    from ingest.siem.forward import Forwarder
    from ingest.siem.sink import Sink
    from ingest.siem.targets import parse_target
    from ingest.siem.view import View, build_view

__all__ = [
    "FORMATS",
    "Forwarder",
    "Sink",
    "View",
    "build_view",
    "format_view",
    "parse_target",
]

_WHERE = {
    "FORMATS": "ingest.siem.formats",
    "Forwarder": "ingest.siem.forward",
    "Sink": "ingest.siem.sink",
    "View": "ingest.siem.view",
    "build_view": "ingest.siem.view",
    "format_view": "ingest.siem.formats",
    "parse_target": "ingest.siem.targets",
}


def __getattr__(name: str) -> object:  # PEP 562; engine.lazy is imported on first use
    from engine.lazy import load

    return load(__name__, _WHERE, globals(), name)
