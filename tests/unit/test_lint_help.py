"""`hookaudit lint --help` lists every kind of finding the checks can report."""

from __future__ import annotations

import re
from pathlib import Path

from click.testing import CliRunner

from hookaudit.lint_cmd import lint_cmd

ENGINE = Path(__file__).resolve().parents[2] / "engine"


def test_every_kind_of_finding_is_in_the_help() -> None:
    source = (ENGINE / "lint.py").read_text() + (ENGINE / "lint_python.py").read_text()
    kinds = set(re.findall(r'add\(\s*[^,()]+(?:\([^()]*\))?,\s*"([a-z]+(?:-[a-z]+)*)"', source))
    kinds |= set(re.findall(r'kind="([a-z]+(?:-[a-z]+)*)"', source))
    assert {"unknown-key", "empty", "unreadable", "timeout-fails-open"} <= kinds, kinds
    shown = CliRunner().invoke(lint_cmd, ["--help"]).output
    missing = sorted(k for k in kinds if f"  {k} " not in shown)
    assert not missing, f"lint --help does not list: {missing}"


def test_a_mistyped_event_name_is_named_with_the_one_meant() -> None:
    import click
    import pytest

    from hookaudit.replay_cmd import _check_events

    with pytest.raises(click.BadParameter, match="did you mean 'PreToolUse'"):
        _check_events(("PreTooluse",))


def test_every_format_option_is_the_shared_one() -> None:
    """One --format for every command (hookaudit.options.format_option): same name, same
    destination, a default shown, and choices listed."""
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "hookaudit"
    for path in root.glob("*.py"):
        if path.name == "options.py":
            continue
        assert not re.search(r'click\.option\(\s*"--format"', path.read_text()), path.name
