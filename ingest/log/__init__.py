"""The append-only log of Outcomes, its one owner: layout, writer, seal, verify, schema,
readers, dedup.

Nothing else opens a segment file: the worker appends through `writer.LogWriter`, queries
and replay find segments with `layout.segments` and read them with the readers here, and
the dedup rule every reader applies is in `dedup`. The package imports the engine's records
and nothing of NATS, the wire protocol or the CLI (an import contract holds it).
"""
