"""Active JSONL segments as Arrow tables with declared types, for `queries.db`'s views.

Split from `queries.db` (whose header has the rules): every line is checked with the log's
own decoder (`decode_outcome_json`), so a line is readable here iff it is for
`iter_outcomes`; an unreadable one is reported and left out.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import msgspec
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from engine.records import decode_outcome_json
from ingest.log.layout import Segment, sealed_copy
from ingest.log.reader import active_data
from queries.columns import (
    EVENT_COLUMNS,
    LINE_SCHEMA,
    LOG_COLUMNS,
    OUTCOME_SCHEMA,
    RUN_COLUMNS,
    RUN_SCHEMA,
    TOOL_INPUT_COLUMNS,
    tool_input_values,
)
from queries.scan import _Problems

_logger = logging.getLogger(__name__)

# ----------------------------------------------------------------------------- active segments


@dataclass
class _ActiveSegment:
    """The readable lines of one active segment: checked, not yet parsed."""

    path: str
    data: bytes  # the file's bytes up to its last newline
    spans: list[tuple[int, int]]  # (start, end) of each readable line in `data`, no newline
    numbers: list[int]  # their line numbers, from 1
    tool: list[tuple[str | None, str | None, str | None]]  # their command, file_path, url
    whole: bool  # every line of `data` is readable

    def text(self) -> bytes:
        """The readable lines, each ending in a newline."""
        if self.whole:
            return self.data
        return b"".join(self.data[a : b + 1] for a, b in self.spans)


def _read_active(
    segs: Sequence[Segment], problems: _Problems
) -> tuple[list[_ActiveSegment], list[Segment]]:
    """Check every line of the active segments with the log's decoder; an unreadable line is
    reported and left out. Also returns the segments sealed since they were listed.

    The tool_input columns come from the decoded records (`tool_input_values`), the other
    columns from `_parse_lines`.
    """
    out: list[_ActiveSegment] = []
    moved: list[Segment] = []
    for seg in segs:
        try:
            got = active_data(seg)
        except OSError as exc:
            problems(str(seg.path), 0, f"cannot read segment: {exc}")
            continue
        if got is None:  # sealed meanwhile: its Parquet copy holds the same records
            sealed = sealed_copy(seg)
            if sealed.path.exists():
                moved.append(sealed)
            continue
        part = _ActiveSegment(str(seg.path), got.data, [], [], [], got.whole)
        view = memoryview(part.data)
        for n, pos, nl in got.spans:
            try:
                o = decode_outcome_json(cast(bytes, view[pos:nl]))
            except msgspec.DecodeError as exc:
                problems(part.path, n, str(exc))
                part.whole = False
            else:
                part.spans.append((pos, nl))
                part.numbers.append(n)
                part.tool.append(tool_input_values(o))
        if part.spans:
            out.append(part)
    return out, moved


_JSON_PARSE = pj.ParseOptions(explicit_schema=LINE_SCHEMA, unexpected_field_behavior="ignore")
_JSON_READ = pj.ReadOptions(block_size=8 << 20)


def _read_json(data: bytes) -> Any:
    return pj.read_json(pa.BufferReader(data), read_options=_JSON_READ, parse_options=_JSON_PARSE)


def _parse_lines(part: _ActiveSegment, problems: _Problems) -> Any:
    """The segment's readable lines as a LINE_SCHEMA table (pyarrow's multithreaded reader).

    A line the log's decoder accepts but pyarrow cannot type (not expected) is reported and
    dropped with its tool values, so every list of `part` stays aligned with the table.
    """
    try:
        return _read_json(part.text())
    except pa.ArrowInvalid:
        pass
    tables, keep = [], []
    for (a, b), n in zip(part.spans, part.numbers, strict=True):
        try:
            line = pa.BufferReader(part.data[a : b + 1])
            tables.append(pj.read_json(line, parse_options=_JSON_PARSE))
            keep.append(True)
        except pa.ArrowInvalid as exc:
            problems(part.path, n, f"unexpected types: {exc}")
            keep.append(False)
    part.spans = [x for x, k in zip(part.spans, keep, strict=True) if k]
    part.numbers = [x for x, k in zip(part.numbers, keep, strict=True) if k]
    part.tool = [x for x, k in zip(part.tool, keep, strict=True) if k]
    part.whole = False
    return pa.concat_tables(tables) if tables else LINE_SCHEMA.empty_table()


def _record_strings(part: _ActiveSegment) -> Any:
    """The segment's readable lines as a large_string array over one buffer, no copy: each
    keeps its newline, which the views trim (`_ACTIVE_RECORD`)."""
    data = part.text()
    offsets, pos = [0], 0
    for a, b in part.spans:
        pos += b - a + 1
        offsets.append(pos)
    return pa.LargeStringArray.from_buffers(
        len(part.spans), pa.array(offsets, type=pa.int64()).buffers()[1], pa.py_buffer(data)
    )


def _load_active(con: Any, segs: Sequence[Segment], problems: _Problems) -> list[Segment]:
    """Parse the active segments' readable lines once, typed by `LINE_SCHEMA`, into two Arrow
    tables registered with DuckDB: `_ha_active` (the columns of a sealed segment + record)
    and `_ha_active_runs` (one row a HookRun). Returns the segments sealed meanwhile."""
    parts, moved = _read_active(segs, problems)
    parsed = [_parse_lines(p, problems) for p in parts]
    lines = pa.concat_tables(parsed).combine_chunks() if parsed else LINE_SCHEMA.empty_table()
    tool = [t for p in parts for t in p.tool]
    records = [_record_strings(p) for p in parts if p.spans]
    event = lines.column("event").combine_chunks()
    cols: dict[str, Any] = {}
    for name in LOG_COLUMNS:
        typ = OUTCOME_SCHEMA.field(name).type
        if name in TOOL_INPUT_COLUMNS:
            k = TOOL_INPUT_COLUMNS.index(name)
            cols[name] = pa.array([t[k] for t in tool], type=typ)
        elif name == "n_runs":
            cols[name] = pc.list_value_length(lines.column("runs")).fill_null(0).cast(typ)
        elif name == "agent":  # a record from before agents were recorded is Claude Code's
            cols[name] = event.field(name).fill_null("claude_code")
        elif name == "agent_tool":  # Claude Code's own tool name is the canonical one
            cols[name] = pc.coalesce(event.field(name), event.field("tool_name"))
        elif name in EVENT_COLUMNS:
            cols[name] = event.field(name)
        else:
            cols[name] = lines.column(name)
    cols["record"] = pa.chunked_array(records, type=pa.large_string())
    outcomes = pa.table([cols[f.name] for f in OUTCOME_SCHEMA], schema=OUTCOME_SCHEMA)
    con.register("_ha_active", outcomes)
    con.register("_ha_active_runs", _active_runs(lines, outcomes))
    return moved


def _active_runs(lines: Any, outcomes: Any) -> Any:
    """One row per element of the lines' `runs` lists, with the columns of RUN_SCHEMA."""
    runs = (
        lines.column("runs").combine_chunks()
        if lines.num_rows
        else pa.array([], LINE_SCHEMA.field("runs").type)
    )
    flat = pc.list_flatten(runs)
    owner = pc.list_parent_indices(runs)
    offsets = runs.offsets.cast(pa.int64())
    position = pc.add(pa.array(range(len(flat)), type=pa.int64()), offsets[0])
    index = pc.add(pc.subtract(position, pc.take(offsets, owner)), 1)
    out: dict[str, Any] = {}
    for name, typ, _, expr in RUN_COLUMNS:
        if name == "run":
            out[name] = index.cast(typ)
        elif expr.startswith("x.hook."):
            out[name] = flat.field("hook").field(name)
        elif expr.startswith("x."):
            out[name] = flat.field(name)
        else:
            out[name] = pc.take(outcomes.column(name), owner)
    return pa.table([out[f.name] for f in RUN_SCHEMA], schema=RUN_SCHEMA)
