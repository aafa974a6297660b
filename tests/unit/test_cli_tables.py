"""Tables for people: one line a row at 100 columns, labels no two hooks share."""

from __future__ import annotations

import io
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from queries import output
from replay.render import unique_labels


class _Rows:
    def __init__(self, columns: list[tuple[str, str]], rows: list[tuple[Any, ...]]) -> None:
        self.columns = columns
        self.rows = rows

    def batches(self, size: int = 10_000) -> Iterator[list[tuple[Any, ...]]]:
        yield list(self.rows)

    def arrow(self) -> Any:
        import pyarrow as pa

        return pa.table(
            {name: [r[i] for r in self.rows] for i, (name, _) in enumerate(self.columns)}
        )


DENIED = _Rows(
    [("ts", "TIMESTAMP WITH TIME ZONE"), ("user", "VARCHAR"), ("host", "VARCHAR"),
     ("session_id", "VARCHAR"), ("event", "VARCHAR"), ("tool", "VARCHAR"),
     ("target", "VARCHAR"), ("reason", "VARCHAR"), ("settings_id", "VARCHAR"), ("id", "VARCHAR"),
     ("n", "BIGINT")],
    [
        (datetime(2026, 3, 1, 10, 0, 0, 123000, tzinfo=UTC), "erin", "dev-laptop-02",
         "5f4aebeb-133a-473d-ae1f-dde031b4932c", "PreToolUse", "Bash",
         "git push --force origin main " * 3, "force-pushing to main/master is not allowed\nat all",
         "4f9a25d4f3539d0f", "01a2335c-8239-741f-8258-dd171b25db1f", 12345),
    ] * 5,
)  # fmt: skip


@pytest.mark.parametrize("width", [80, 100, 160])
def test_terminal_table_rows_are_one_line(
    width: int, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("COLUMNS", str(width))
    out = io.BytesIO()
    assert output._write_table(DENIED, out, 1000, to_terminal=True) == 5
    import re

    lines = [re.sub(r"\x1b\[[0-9;]*m", "", ln) for ln in out.getvalue().decode().splitlines()]
    body = [ln for ln in lines if "erin" in ln]
    assert len(body) == 5  # each row on one line, none wrapped
    assert all(len(ln) <= width for ln in lines)
    assert all("03-01 10:00:00" in ln and "12345" in ln for ln in body)
    if width < 160:
        assert "left out" in capsys.readouterr().err


def test_fit_keeps_short_columns_and_shares_the_rest() -> None:
    assert output._fit([10, 20], 100) == [None, None]
    assert output._fit([10, 100, 30], 70) == [None, 30, None]
    limits = output._fit([20, 200, 200], 100)
    assert limits[0] is None and limits[1] == limits[2] == 40


def test_unique_labels_tell_apart_hooks_cut_alike() -> None:
    long = "echo 'network tools need a ticket: use the artifact proxy' >&2; exit 2"
    hooks = {
        "a1": {"label": long, "type": "command", "if": "Bash(curl *)"},
        "b2": {"label": long, "type": "command", "if": "Bash(wget *)"},
        "c3": {"label": long + " x", "type": "command", "if": None, "matcher": None},
        "d4": {"label": long + " y", "type": "command", "if": None, "matcher": None},
        "e5": {"label": "/srv/policies/hooks.py:guard", "type": "python"},
    }
    labels = unique_labels(hooks, 34)
    assert len(set(labels.values())) == len(hooks)
    assert all(len(v) <= 34 for v in labels.values())
    assert labels["a1"].endswith("[Bash(curl *)]") and labels["e5"] == "hooks.py:guard"
