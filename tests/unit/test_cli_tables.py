"""Tables for people: nothing cut, a row a line when it fits, stacked when it does not;
labels no two hooks share."""

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


def _plain(data: bytes) -> list[str]:
    import re

    return [re.sub(r"\x1b\[[0-9;]*m", "", ln) for ln in data.decode().splitlines()]


WHOLE = (
    "2026-03-01 10:00:00.123Z", "5f4aebeb-133a-473d-ae1f-dde031b4932c",
    "01a2335c-8239-741f-8258-dd171b25db1f", "4f9a25d4f3539d0f", "12345",
)  # fmt: skip


@pytest.mark.parametrize("width", [60, 80, 100, 160])
def test_a_narrow_terminal_stacks_each_row_and_cuts_nothing(
    width: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", str(width))
    monkeypatch.delenv("NO_COLOR", raising=False)
    out = io.BytesIO()
    assert output._write_table(DENIED, out, 1000, to_terminal=True) == 5
    lines = _plain(out.getvalue())
    assert all(len(ln.rstrip()) <= width for ln in lines)
    text = "\n".join(lines)
    assert "…" not in text
    for value in WHOLE:  # ids, numbers and times with their zone, whole
        assert text.count(value) == 5, value
    for name, _ in DENIED.columns:  # no column left out
        assert sum(1 for ln in lines if ln.startswith(name + " ")) >= 5, name


def test_a_wide_terminal_has_one_line_a_row(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "400")
    out = io.BytesIO()
    output._write_table(DENIED, out, 1000, to_terminal=True)
    body = [ln for ln in _plain(out.getvalue()) if "erin" in ln]
    assert len(body) == 5 and all(all(v in ln for v in WHOLE) for ln in body)


def test_piped_output_is_as_wide_as_its_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    out = io.BytesIO()
    output._write_table(DENIED, out, 1000, to_terminal=False)
    data = out.getvalue()
    assert b"\x1b[" not in data  # no styles in a pipe
    body = [ln for ln in data.decode().splitlines() if "erin" in ln]
    assert len(body) == 5 and all(all(v in ln for v in WHOLE) for ln in body)


def test_no_color_means_no_styles_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.setenv("NO_COLOR", "1")
    out = io.BytesIO()
    output._write_table(DENIED, out, 1000, to_terminal=True)
    assert b"\x1b[" not in out.getvalue()


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
