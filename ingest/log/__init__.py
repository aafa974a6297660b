"""The append-only log of Outcomes, its one owner: layout, writer, seal, verify, schema, readers, dedup.

Nothing else opens a segment file: the worker appends through `LogWriter`, `queries.db`
and `replay` find segments with `segments` and read them with the readers here, and the
dedup rule every reader applies is `ingest.log.dedup`. The package imports the engine's
records and nothing of NATS, the wire protocol or the CLI (a test checks it).

Modules: `layout` (paths), `files` (durable private I/O, the writer's lock), `lines`
(a record's bytes, hash, key, batch hmac), `reader`, `scan` (replay's fast sealed reader),
`schema` (sealed columns), `manifest`, `seal`, `verifier` and `findings`, `writer`, `dedup`. Names are
imported from their module on first use, so `hookaudit emit` (which needs only
`ingest.log.lines`) never imports pyarrow.
"""

from __future__ import annotations

TYPE_CHECKING = False  # mypy takes it as True; importing `typing` costs start-up time

if TYPE_CHECKING:
    from ingest.log.dedup import (
        EVENT_PARTITION,
        KEY_PARTITION,
        LOG_ORDER_SQL,
        first_copies,
        first_live,
        log_order,
        sql_copy,
    )
    from ingest.log.findings import VerifyError, VerifyReport
    from ingest.log.layout import (
        Segment,
        SegmentKind,
        has_log,
        runs_path,
        sealed_copy,
        segments,
    )
    from ingest.log.lines import KEY_ENV, env_key, idempotency_key, key_digest, recompute_hash
    from ingest.log.manifest import (
        ManifestEntry,
        ManifestLine,
        manifest_hmac,
        read_manifest,
        sealed_mismatches,
    )
    from ingest.log.reader import (
        ActiveData,
        OnCorrupt,
        active_data,
        iter_outcomes,
        iter_raw_lines,
        lookup_in,
        lookup_many_in,
        read_segment,
    )
    from ingest.log.schema import (
        BASE_SCHEMA,
        RUN_COLUMNS,
        RUN_SCHEMA,
        SCHEMA,
        SEALED_EXTRA_COLUMNS,
        runs_table,
        sealed_write_options,
        tool_input_values,
    )
    from ingest.log.verifier import verify
    from ingest.log.writer import (
        DEFAULT_MAX_AGE_S,
        DEFAULT_MAX_BYTES,
        Appended,
        LogWriter,
        writer_pid,
    )

__all__ = [
    "BASE_SCHEMA",
    "DEFAULT_MAX_AGE_S",
    "DEFAULT_MAX_BYTES",
    "EVENT_PARTITION",
    "KEY_ENV",
    "KEY_PARTITION",
    "LOG_ORDER_SQL",
    "RUN_COLUMNS",
    "RUN_SCHEMA",
    "SCHEMA",
    "SEALED_EXTRA_COLUMNS",
    "ActiveData",
    "Appended",
    "LogWriter",
    "ManifestEntry",
    "ManifestLine",
    "OnCorrupt",
    "Segment",
    "SegmentKind",
    "VerifyError",
    "VerifyReport",
    "active_data",
    "env_key",
    "first_copies",
    "first_live",
    "has_log",
    "idempotency_key",
    "iter_outcomes",
    "iter_raw_lines",
    "key_digest",
    "log_order",
    "lookup_in",
    "lookup_many_in",
    "manifest_hmac",
    "read_manifest",
    "read_segment",
    "recompute_hash",
    "runs_path",
    "runs_table",
    "sealed_copy",
    "sealed_mismatches",
    "sealed_write_options",
    "segments",
    "sql_copy",
    "tool_input_values",
    "verify",
    "writer_pid",
]

_WHERE = {
    "ActiveData": "ingest.log.reader",
    "Appended": "ingest.log.writer",
    "BASE_SCHEMA": "ingest.log.schema",
    "DEFAULT_MAX_AGE_S": "ingest.log.writer",
    "DEFAULT_MAX_BYTES": "ingest.log.writer",
    "EVENT_PARTITION": "ingest.log.dedup",
    "KEY_ENV": "ingest.log.lines",
    "KEY_PARTITION": "ingest.log.dedup",
    "LOG_ORDER_SQL": "ingest.log.dedup",
    "LogWriter": "ingest.log.writer",
    "ManifestEntry": "ingest.log.manifest",
    "ManifestLine": "ingest.log.manifest",
    "OnCorrupt": "ingest.log.reader",
    "RUN_COLUMNS": "ingest.log.schema",
    "RUN_SCHEMA": "ingest.log.schema",
    "SCHEMA": "ingest.log.schema",
    "SEALED_EXTRA_COLUMNS": "ingest.log.schema",
    "Segment": "ingest.log.layout",
    "SegmentKind": "ingest.log.layout",
    "VerifyError": "ingest.log.findings",
    "VerifyReport": "ingest.log.findings",
    "active_data": "ingest.log.reader",
    "env_key": "ingest.log.lines",
    "first_copies": "ingest.log.dedup",
    "first_live": "ingest.log.dedup",
    "has_log": "ingest.log.layout",
    "idempotency_key": "ingest.log.lines",
    "iter_outcomes": "ingest.log.reader",
    "iter_raw_lines": "ingest.log.reader",
    "key_digest": "ingest.log.lines",
    "log_order": "ingest.log.dedup",
    "lookup_in": "ingest.log.reader",
    "lookup_many_in": "ingest.log.reader",
    "manifest_hmac": "ingest.log.manifest",
    "read_manifest": "ingest.log.manifest",
    "sealed_mismatches": "ingest.log.manifest",
    "read_segment": "ingest.log.reader",
    "recompute_hash": "ingest.log.lines",
    "runs_path": "ingest.log.layout",
    "runs_table": "ingest.log.schema",
    "sealed_copy": "ingest.log.layout",
    "sealed_write_options": "ingest.log.schema",
    "segments": "ingest.log.layout",
    "sql_copy": "ingest.log.dedup",
    "tool_input_values": "ingest.log.schema",
    "verify": "ingest.log.verifier",
    "writer_pid": "ingest.log.writer",
}


def __getattr__(name: str) -> object:  # PEP 562; engine.lazy is imported on first use
    from engine.lazy import load

    return load(__name__, _WHERE, globals(), name)
