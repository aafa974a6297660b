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
import re
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
_SHORT = 24  # a column this narrow keeps its full width; longer ones share the rest


def _fit(widths: list[int], budget: int) -> list[int | None]:
    """Each column's max width so that one row is one line in `budget` columns (None: as is).

    Short columns (timestamps, names, counts) keep their width; the long ones (reasons,
    commands, paths) share what is left fairly: a column that needs less than an equal
    share keeps its width and leaves the rest to the others; at least 8 each.

    Example:
        >>> _fit([10, 100, 30], 70)
        [None, 30, None]
    """
    if sum(widths) <= budget:
        return [None] * len(widths)
    long = [i for i, w in enumerate(widths) if w > _SHORT]
    left = budget - sum(w for i, w in enumerate(widths) if i not in long)
    out: list[int | None] = [None] * len(widths)
    pending = sorted(long, key=lambda i: widths[i])
    while pending:
        share = max(8, left // len(pending))
        i = pending.pop(0)
        if widths[i] <= share:
            left -= widths[i]
        else:
            out[i] = share
            left -= share
    return out


def _is_id(name: str, cells: list[str]) -> bool:
    return (name == "id" or name.endswith("_id")) and all(len(c) > 12 for c in cells if c)


_TS = re.compile(r"\d{4}-(\d\d-\d\d \d\d:\d\d:\d\d)\.\d+Z")


def _shorten(columns: list[tuple[str, str]], cells: list[list[str]]) -> None:
    """For a terminal: ids by their first 8 characters, times to the second."""
    for c, (name, kind) in enumerate(columns):
        column = [r[c] for r in cells]
        if cells and _is_id(name, column):
            for r in cells:
                r[c] = r[c][:8] + "…" if len(r[c]) > 9 else r[c]
        elif kind.startswith("TIMESTAMP"):
            for r in cells:
                r[c] = _TS.sub(r"\1", r[c])


def _drop_to_fit(
    columns: list[tuple[str, str]], cells: list[list[str]], width: int
) -> tuple[list[tuple[str, str]], list[list[str]], list[str]]:
    """Leave out columns (ids first, then text from the right, counts last) until a row
    fits in one line."""

    def need(keep: list[int]) -> int:
        total = 0
        for c in keep:
            w = max([len(columns[c][0])] + [len(r[c]) for r in cells])
            total += (w if w <= _SHORT else 10) + 2
        return total

    keep = list(range(len(columns)))
    ids = [c for c in keep if _is_id(columns[c][0], [r[c] for r in cells])]
    numeric = [c for c in keep if columns[c][1] in _NUMERIC]  # counts go last
    order = ids[::-1] + [c for c in reversed(keep) if c not in ids and c not in numeric]
    order += numeric[::-1]
    dropped: list[str] = []
    while len(keep) > 1 and need(keep) > width and order:
        c = order.pop(0)
        keep.remove(c)
        dropped.append(columns[c][0])
    return [columns[c] for c in keep], [[r[c] for c in keep] for r in cells], dropped


def _write_table(rows: Rows, out: IO[bytes], max_rows: int, to_terminal: bool) -> int:
    """A table for people: one line a row in the terminal's width (long cells end in …)."""
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
    width = shutil.get_terminal_size((200, 24)).columns if to_terminal else 200
    columns = list(rows.columns)
    if to_terminal:
        _shorten(columns, cells)
        columns, cells, dropped = _drop_to_fit(columns, cells, width)
        if dropped:
            _note(
                f"{len(dropped)} column(s) left out at {width} columns: "
                f"{', '.join(dropped)} (a wider terminal, or --format json, shows them)"
            )
    names = [name for name, _ in columns]
    natural = [max([len(name)] + [len(r[c]) for r in cells]) for c, name in enumerate(names)]
    limits = _fit(natural, width - 2 * len(names))  # the padding between columns
    table = Table(header_style="bold underline", box=None, pad_edge=False, padding=(0, 1))
    for (name, kind), limit in zip(columns, limits, strict=True):
        table.add_column(
            name,
            justify="right" if kind in _NUMERIC else "left",
            no_wrap=True,
            overflow="ellipsis",
            max_width=limit,
        )
    for r in cells:
        table.add_row(*(Text(v) for v in r))  # never markup
    text = io.StringIO()
    console = Console(file=text, width=width, force_terminal=to_terminal, no_color=not to_terminal)
    console.print(table)
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
