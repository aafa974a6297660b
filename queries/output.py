"""Output formats of `hookaudit query` and `hookaudit sql`: table, json, jsonl, csv, parquet.

Rules of this file:
- One decorator, `output_options`, gives a command `--format` and `--output`; one function,
  `write_result`, writes any `Rows` in the chosen format. No duckdb here: a result is a list of
  (column, DuckDB type name) and batches of row tuples (`queries.db.Result`).
- `table` is for people (rich, in the terminal's width); the others are for machines.
  `json` is one JSON list of row objects, `jsonl` one object a line; timestamps are
  ISO-8601 in UTC, JSON-typed columns are embedded as JSON values, decimals are numbers,
  intervals ISO-8601 durations, blobs base64. In `csv`, lists and structs are JSON text,
  intervals seconds and blobs hex.
- Rows are streamed in batches, so a large result never sits in memory twice (`table`, which
  must measure its columns, stops at `--max-rows` and says so on stderr).

Example:
    >>> write_result(rows, "json", None)
    [{"n": 3}]
"""

from __future__ import annotations

import csv
import io
import os
import shutil
import sys
from collections.abc import Callable, Iterator
from datetime import date, datetime, time, timedelta
from pathlib import Path
from typing import IO, Any, Protocol

import msgspec

__all__ = [
    "FORMATS",
    "OutputError",
    "Rows",
    "check_writable",
    "render_value",
    "write_result",
]

FORMATS = ("table", "json", "jsonl", "csv", "parquet")


class Rows(Protocol):
    """What `write_result` needs from a query result (`queries.db.Result` is one)."""

    columns: list[tuple[str, str]]

    def batches(self, size: int = ...) -> Iterator[list[tuple[Any, ...]]]: ...

    def arrow(self) -> Any: ...


def check_writable(path: Path | None) -> str | None:
    """Why `path` cannot be written as an output file, or None when it can (or is None).

    Checked before the work that produces the output, so a long query or replay never
    ends in a traceback over a typo in ``--output``. Nothing is created.

    Example:
        >>> check_writable(Path("/nonexistent/x.csv"))
        "/nonexistent/x.csv: directory /nonexistent does not exist"
    """
    import os

    if path is None:
        return None
    if str(path) == "":
        return "empty output path"
    if path.is_dir():
        return f"{path}: is a directory"
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        return f"{path}: directory {parent} does not exist"
    if path.exists():
        if not os.access(path, os.W_OK):
            return f"{path}: not writable"
    elif not os.access(parent, os.W_OK | os.X_OK):
        return f"{path}: directory {parent} is not writable"
    return None


_encoder = msgspec.json.Encoder(decimal_format="number")
_json_value = msgspec.json.Decoder()


def _jsonable(kind: str) -> Callable[[Any], Any]:
    """How a value of this DuckDB type goes into JSON (msgspec encodes the rest natively)."""
    if kind == "JSON":

        def parse(v: Any) -> Any:
            if not isinstance(v, str):
                return v
            try:
                return _json_value.decode(v)
            except msgspec.DecodeError:
                return v

        return parse
    return lambda v: v


def _rows_as_dicts(rows: Rows) -> Iterator[list[dict[str, Any]]]:
    names = [c for c, _ in rows.columns]
    conv = [_jsonable(t) for _, t in rows.columns]
    for batch in rows.batches():
        yield [
            {n: (None if v is None else f(v)) for n, f, v in zip(names, conv, row, strict=True)}
            for row in batch
        ]


def _write_json(rows: Rows, out: IO[bytes]) -> int:
    n = 0
    out.write(b"[")
    for batch in _rows_as_dicts(rows):
        for obj in batch:
            out.write(b"\n" if n == 0 else b",\n")
            out.write(_encoder.encode(obj))
            n += 1
    out.write(b"\n]\n" if n else b"]\n")
    return n


def _write_jsonl(rows: Rows, out: IO[bytes]) -> int:
    n = 0
    for batch in _rows_as_dicts(rows):
        for obj in batch:
            out.write(_encoder.encode(obj) + b"\n")
            n += 1
    return n


def _csv_value(v: Any) -> Any:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, datetime | date | time):
        return v.isoformat()
    if isinstance(v, timedelta):
        return v.total_seconds()
    if isinstance(v, bytes):
        return v.hex()
    if isinstance(v, list | dict | tuple):
        return _encoder.encode(v).decode()
    return v


def _write_csv(rows: Rows, out: IO[bytes]) -> int:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([c for c, _ in rows.columns])
    n = 0
    for batch in rows.batches():
        w.writerows([_csv_value(v) for v in row] for row in batch)
        n += len(batch)
        out.write(buf.getvalue().encode())
        buf.seek(0)
        buf.truncate()
    out.write(buf.getvalue().encode())
    return n


def render_value(v: Any) -> str:
    """A value as a table cell: short timestamps, trimmed floats, compact JSON.

    Example:
        >>> render_value(0.0058890001)
        '0.005889'
    """
    if v is None:
        return ""
    if isinstance(v, datetime):
        text = v.isoformat(sep=" ", timespec="milliseconds")
        return text[:-6] + "Z" if text.endswith("+00:00") else text
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return f"{v:,.1f}" if abs(v) >= 1000 else f"{v:.4g}"
    if isinstance(v, list | dict | tuple):
        return _encoder.encode(v).decode()
    return str(v)


_NUMERIC = ("BIGINT", "INTEGER", "DOUBLE", "HUGEINT", "FLOAT", "SMALLINT", "UBIGINT", "DECIMAL")


def _is_id(name: str, cells: list[str]) -> bool:
    return (name == "id" or name.endswith("_id")) and all(len(c) > 12 for c in cells if c)


def _styled() -> bool:
    """Whether a terminal table may carry styles (bold, underline): not with NO_COLOR set
    (https://no-color.org: any non-empty value)."""
    return not os.environ.get("NO_COLOR")


def _write_table(rows: Rows, out: IO[bytes], max_rows: int, to_terminal: bool) -> int:
    """A table for people. Nothing a reader copies is cut: every cell is written whole.

    On a terminal, the rows are one line each when they fit its width; when they do not,
    each row is a stack of `column  value` lines (long values wrap), so no column is left
    out and no id or number loses characters. Piped, the table is as wide as its widest
    row. Times keep their zone (UTC, ``Z``).
    """
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    cells: list[list[str]] = []
    n = 0
    for batch in rows.batches():
        for row in batch:
            if len(cells) < max_rows:
                cells.append([" ".join(render_value(v).split()) for v in row])
            n += 1
    columns = list(rows.columns)
    names = [name for name, _ in columns]
    natural = [max([len(name)] + [len(r[c]) for r in cells]) for c, name in enumerate(names)]
    needed = sum(natural) + 2 * max(0, len(names) - 1)
    width = shutil.get_terminal_size((80, 24)).columns if to_terminal else max(needed, 1)
    styled = to_terminal and _styled()
    header = "bold underline" if styled else ""
    text = io.StringIO()
    console = Console(
        file=text, width=width, force_terminal=styled, no_color=True, highlight=False,
        soft_wrap=False,
    )  # fmt: skip
    if needed <= width:
        table = Table(header_style=header, box=None, pad_edge=False, padding=(0, 1))
        for name, kind in columns:
            table.add_column(name, justify="right" if kind in _NUMERIC else "left", no_wrap=True)
        for r in cells:
            table.add_row(*(Text(v) for v in r))  # never markup
        console.print(table)
    else:
        label = max(len(name) for name in names)
        for i, r in enumerate(cells, 1):
            grid = Table.grid(padding=(0, 2))
            grid.add_column(no_wrap=True, width=label, style="bold" if styled else "")
            grid.add_column(overflow="fold")
            for name, value in zip(names, r, strict=True):
                grid.add_row(Text(name), Text(value))
            console.print(Text(f"── {i} ──", style=header))
            console.print(grid)
    out.write(text.getvalue().encode())
    if n > len(cells):
        _note(f"showing {len(cells)} of {n} rows (--max-rows, or --format jsonl for all)")
    return n


def write_result(rows: Rows, fmt: str, output: Path | None, *, max_rows: int = 1000) -> int:
    """Write `rows` to `output` (stdout when None) in `fmt`; return the number of rows.

    Parquet needs `output`. Raises OutputError for that and for an output that cannot be
    written, and the result's own error (QueryError) when the query fails while rows are read.

    Example:
        >>> write_result(rows, "jsonl", Path("out.jsonl"))
        3
    """
    if fmt == "parquet" and output is None:
        raise OutputError("--format parquet needs --output FILE")
    problem = check_writable(output)
    if problem is not None:
        raise OutputError(problem)
    try:
        return _write(rows, fmt, output, max_rows)
    except OSError as exc:
        raise OutputError(f"{output or 'stdout'}: {exc.strerror or exc}") from exc


class OutputError(Exception):
    """The output cannot be written as asked: the command says it in one line and exits 1."""


def _note(message: str) -> None:
    """One line for the reader on stderr (what the table leaves out)."""
    sys.stderr.write(f"hookaudit: {message}\n")
    sys.stderr.flush()


def _write(rows: Rows, fmt: str, output: Path | None, max_rows: int) -> int:
    if fmt == "parquet":
        import pyarrow.parquet as pq

        assert output is not None
        table = rows.arrow()
        pq.write_table(table, output, compression="zstd")
        return int(table.num_rows)
    target = open(output, "wb") if output is not None else sys.stdout.buffer  # noqa: SIM115
    try:
        if fmt == "json":
            return _write_json(rows, target)
        if fmt == "jsonl":
            return _write_jsonl(rows, target)
        if fmt == "csv":
            return _write_csv(rows, target)
        return _write_table(rows, target, max_rows, output is None and sys.stdout.isatty())
    finally:
        if output is not None:
            target.close()
        else:
            target.flush()
