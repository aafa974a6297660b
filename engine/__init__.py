"""The hook engine: settings in, a decision out, executors at the edge.

The engine imports nothing else of hookaudit's, nor NATS or DuckDB (an import contract in
pyproject.toml holds it). Import names from their modules: `engine.run.Engine` decides,
`engine.records` has the records every other package stores and sends.
"""
