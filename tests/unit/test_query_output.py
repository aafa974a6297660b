"""queries.output: every format, from a fake result (no DuckDB involved)."""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import click
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from hookaudit.options import output_options
from queries.output import OutputError, render_value, write_result

TS = datetime(2026, 3, 1, 10, 0, 20, 123456, tzinfo=UTC)


class Fake:
    """A result in the shape of queries.db.Result."""

    def __init__(self, columns: list[tuple[str, str]], rows: list[tuple[Any, ...]]) -> None:
        self.columns = columns
        self.rows = rows

    def batches(self, size: int = 2) -> Iterator[list[tuple[Any, ...]]]:
        for i in range(0, len(self.rows), size):
            yield self.rows[i : i + size]

    def arrow(self) -> Any:
        return pa.table({c: [r[i] for r in self.rows] for i, (c, _) in enumerate(self.columns)})


def sample() -> Fake:
    return Fake(
        [
            ("ts", "TIMESTAMP WITH TIME ZONE"),
            ("n", "BIGINT"),
            ("ms", "DOUBLE"),
            ("payload", "JSON"),
            ("errors", "VARCHAR[]"),
            ("ok", "BOOLEAN"),
            ("note", "VARCHAR"),
        ],
        [
            (TS, 1, 0.5, '{"a": [1, 2]}', ["x"], True, "[bold]not markup[/bold]"),
            (TS + timedelta(seconds=1), 2, None, None, [], False, None),
            (TS + timedelta(seconds=2), 3, 1234.5, "not json", None, None, "a,b"),
        ],
    )


def test_json_is_a_list_of_row_objects(tmp_path: Path) -> None:
    out = tmp_path / "o.json"
    assert write_result(sample(), "json", out) == 3
    rows = json.loads(out.read_text())
    assert rows[0] == {
        "ts": "2026-03-01T10:00:20.123456Z",
        "n": 1,
        "ms": 0.5,
        "payload": {"a": [1, 2]},
        "errors": ["x"],
        "ok": True,
        "note": "[bold]not markup[/bold]",
    }
    assert rows[1]["payload"] is None and rows[2]["payload"] == "not json"


def test_json_empty_is_an_empty_list(tmp_path: Path) -> None:
    out = tmp_path / "o.json"
    assert write_result(Fake([("n", "BIGINT")], []), "json", out) == 0
    assert json.loads(out.read_text()) == []


def test_jsonl_one_object_a_line(tmp_path: Path) -> None:
    out = tmp_path / "o.jsonl"
    write_result(sample(), "jsonl", out)
    lines = out.read_text().splitlines()
    assert [json.loads(line)["n"] for line in lines] == [1, 2, 3]


def test_csv(tmp_path: Path) -> None:
    out = tmp_path / "o.csv"
    write_result(sample(), "csv", out)
    with out.open(newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["ts", "n", "ms", "payload", "errors", "ok", "note"]
    assert rows[1] == [
        "2026-03-01T10:00:20.123456+00:00",
        "1",
        "0.5",
        '{"a": [1, 2]}',
        '["x"]',
        "true",
        "[bold]not markup[/bold]",
    ]
    assert rows[3][-1] == "a,b" and rows[2][2] == ""


def test_parquet_needs_output(tmp_path: Path) -> None:
    with pytest.raises(OutputError, match="--output"):
        write_result(sample(), "parquet", None)
    out = tmp_path / "o.parquet"
    assert write_result(sample(), "parquet", out) == 3
    assert pq.read_table(out).column("n").to_pylist() == [1, 2, 3]


def test_table_is_readable_and_never_markup(tmp_path: Path) -> None:
    out = tmp_path / "o.txt"
    write_result(sample(), "table", out)
    text = out.read_text()
    assert "2026-03-01 10:00:20.123Z" in text
    assert "[bold]not markup[/bold]" in text
    assert "1,234.5" in text


def test_table_stops_at_max_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "o.txt"
    assert write_result(sample(), "table", out, max_rows=1) == 3
    assert "showing 1 of 3 rows" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (None, ""),
        (True, "true"),
        (0.0058890001, "0.005889"),
        (12345.678, "12,345.7"),
        ([1, "a"], '[1,"a"]'),
        ({"k": None}, '{"k":null}'),
        (Decimal("1.5"), "1.5"),
        (datetime(2026, 3, 1, tzinfo=UTC), "2026-03-01 00:00:00.000Z"),
    ],
)
def test_render_value(value: Any, text: str) -> None:
    assert render_value(value) == text


def test_output_options_decorator() -> None:
    seen: dict[str, Any] = {}

    @click.command()
    @output_options
    def cmd(fmt: str, output: Path | None, max_rows: int) -> None:
        seen.update(fmt=fmt, output=output, max_rows=max_rows)

    res = CliRunner().invoke(cmd, ["--format", "jsonl", "-o", "x.jsonl", "--max-rows", "5"])
    assert res.exit_code == 0, res.output
    assert seen == {"fmt": "jsonl", "output": Path("x.jsonl"), "max_rows": 5}
    assert CliRunner().invoke(cmd, ["--format", "xml"]).exit_code == 2
