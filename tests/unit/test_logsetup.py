"""One event, one log line: `OneLineFormatter` over hostile messages and tracebacks."""

from __future__ import annotations

import io
import logging

from hypothesis import given
from hypothesis import strategies as st

from ingest.logsetup import FORMAT, OneLineFormatter


def _logger() -> tuple[logging.Logger, io.StringIO]:
    out = io.StringIO()
    h = logging.StreamHandler(out)
    h.setFormatter(OneLineFormatter(FORMAT))
    log = logging.Logger("hookaudit.test")
    log.addHandler(h)
    return log, out


@given(st.text(max_size=300))
def test_any_message_is_one_line(text: str) -> None:
    log, out = _logger()
    log.warning("event %s refused", text)
    assert out.getvalue().count("\n") == 1 and out.getvalue().endswith("\n")
    assert not any(ord(c) < 0x20 and c != "\n" for c in out.getvalue())


def test_a_traceback_keeps_its_lines_indented_so_none_reads_as_a_log_line() -> None:
    log, out = _logger()
    try:
        raise ValueError("bad\n2026-12-03 09:00:00,000 hookaudit CRITICAL forged")
    except ValueError:
        log.exception("request %s: internal error", "/hooks\x1b[2J")
    first, *rest = out.getvalue().splitlines()
    assert first.endswith("request /hooks\\x1b[2J: internal error")
    assert rest and all(line.startswith("    ") for line in rest)
    assert any("Traceback" in line for line in rest)
