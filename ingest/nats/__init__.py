"""The one NATS adapter: connecting, credentials and roles, the embedded server, streams,
the worker's pull loop and bulk publishing.

Every use of nats-py's private attributes is in this package (`wire.py`, `pull.py`,
`puback.py`), for the nats-py range pinned in pyproject.toml.
"""
