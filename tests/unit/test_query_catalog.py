"""queries.catalog: named-query headers, parameter binding, glob and regex translation."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest

from queries.catalog import (
    QueryError,
    _parse_header,
    bind_params,
    glob_literal,
    glob_to_regex,
    load_catalog,
    parse_time,
    regex_literal,
)


@pytest.mark.parametrize(
    ("glob", "matches", "misses"),
    [
        ("**/.env", ["/srv/app/.env", "/.env", ".env"], ["/srv/app/.env.example", "/srv/.envrc"]),
        (".env", ["/srv/app/.env"], ["/srv/app/x.env"]),
        (
            "~/.ssh/**",
            ["/home/bob/.ssh/id_rsa", "/root/.ssh/config", "/Users/eve/.ssh/a/b", "~/.ssh/x"],
            ["/home/bob/ssh/id_rsa", "/srv/home/bob/.ssh/x", "/home/bob/.sshx/y"],
        ),
        ("/etc/*", ["/etc/passwd"], ["/etc/ssh/sshd_config", "/etcx/passwd"]),
        ("/etc/**", ["/etc/ssh/sshd_config", "/etc/passwd"], ["/var/etc/passwd"]),
        ("*.pem", ["/a/b/key.pem"], ["/a/b/key.pem.bak"]),
        ("/tmp/?.txt", ["/tmp/a.txt"], ["/tmp/ab.txt", "/tmp/x/a.txt"]),
        ("/tmp/[ab].txt", ["/tmp/a.txt", "/tmp/b.txt"], ["/tmp/c.txt"]),
        ("/tmp/[!ab].txt", ["/tmp/c.txt"], ["/tmp/a.txt"]),
        ("/a+b(c)|d$.txt", ["/a+b(c)|d$.txt"], ["/aab(c)|d$.txt", "/a+bc|d.txt"]),
        ("/tmp/[.txt", ["/tmp/[.txt"], ["/tmp/a.txt"]),
    ],
)
def test_glob_to_regex(glob: str, matches: list[str], misses: list[str]) -> None:
    rx = glob_to_regex(glob)
    for path in matches:
        assert re.fullmatch(rx, path), (glob, rx, path)
    for path in misses:
        assert not re.fullmatch(rx, path), (glob, rx, path)
    literal = glob_literal(glob)
    assert all(literal in p for p in matches), (glob, literal)


def test_empty_glob_is_an_error() -> None:
    with pytest.raises(QueryError, match="empty glob"):
        glob_to_regex("")


@pytest.mark.parametrize(
    ("pattern", "literal"),
    [
        (r"curl .*\|\s*(ba)?sh", "curl "),
        (r"rm -rf /", "rm -rf /"),
        ("rm|shred", ""),
        ("(?i)curl", ""),
        ("ab?c", "a"),
        ("abc+d", "abc"),
        (r"git\s+push", "push"),
        (r"\.env", ".env"),
        ("x{2}yz", "yz"),
        ("[abc]def", "def"),
        ("(foo|bar)baz", "baz"),
        (r"^\QA\E", ""),
        (r"\Qab\E?", ""),
        ("", ""),
    ],
)
def test_regex_literal(pattern: str, literal: str) -> None:
    assert regex_literal(pattern) == literal


@pytest.mark.parametrize(
    ("pattern", "texts"),
    [
        (r"curl .*\|\s*(ba)?sh", ["curl -s x | sh", "curl http://a | bash"]),
        ("ab?c", ["ac", "abc"]),
        ("abc+d", ["abcccd"]),
        ("x{2}yz", ["xxyz"]),
    ],
)
def test_regex_literal_is_in_every_match(pattern: str, texts: list[str]) -> None:
    literal = regex_literal(pattern)
    for text in texts:
        assert re.search(pattern, text)
        assert literal in text


def test_parse_time() -> None:
    now = datetime(2026, 3, 8, 12, tzinfo=UTC)
    assert parse_time("7d", now=now) == datetime(2026, 3, 1, 12, tzinfo=UTC)
    assert parse_time("90m", now=now) == datetime(2026, 3, 8, 10, 30, tzinfo=UTC)
    assert parse_time("1.5h", now=now) == datetime(2026, 3, 8, 10, 30, tzinfo=UTC)
    assert parse_time("2w", now=now) == datetime(2026, 2, 22, 12, tzinfo=UTC)
    assert parse_time("2026-03-01") == datetime(2026, 3, 1, tzinfo=UTC)
    assert parse_time("2026-03-01T10:00:00Z") == datetime(2026, 3, 1, 10, tzinfo=UTC)
    with pytest.raises(QueryError, match="bad time 'yesterday'"):
        parse_time("yesterday")


def test_header_parsing() -> None:
    q = _parse_header(
        "demo",
        "-- demo: a demo query.\n--\n-- It does things\n-- over two lines.\n--\n"
        "-- @param since timestamp optional from then\n"
        "-- @param n integer default=5 how many\n"
        "-- @param p regex required the pattern\nSELECT 1\n",
    )
    assert q.summary == "a demo query."
    assert q.description == "It does things over two lines."
    assert [(p.name, p.type, p.required, p.default) for p in q.params] == [
        ("since", "timestamp", False, None),
        ("n", "integer", False, "5"),
        ("p", "regex", True, None),
    ]
    with pytest.raises(QueryError, match="header must start"):
        _parse_header("demo", "-- other: x\nSELECT 1")
    with pytest.raises(QueryError, match="bad @param"):
        _parse_header("demo", "-- demo: x\n-- @param n float optional x\nSELECT 1")


def test_bind_params_types_and_defaults() -> None:
    cat = load_catalog()
    v = bind_params(cat["files"], {"glob": "**/.env", "since": "2026-03-01"})
    assert v["glob_literal"] == ".env"
    assert re.fullmatch(str(v["glob"]), "/x/.env")
    assert v["since"] == datetime(2026, 3, 1, tzinfo=UTC)
    assert v["limit"] == 1000 and v["access"] == "any" and v["user"] is None
    v = bind_params(cat["commands"], {"pattern": "rm -rf"})
    assert v["pattern"] == "rm -rf" and v["pattern_literal"] == "rm -rf"


@pytest.mark.parametrize(
    ("name", "given", "message"),
    [
        ("commands", {}, "missing parameter 'pattern'"),
        ("denied", {"tool": "Bash", "color": "red"}, "has no parameter 'color'"),
        ("denied", {"limit": "ten"}, "parameter 'limit': 'ten'"),
        ("slow-hooks", {"min_runs": "1.5"}, "parameter 'min_runs'"),
        ("files", {"glob": ""}, "empty glob"),
    ],
)
def test_bind_params_errors(name: str, given: dict[str, str], message: str) -> None:
    with pytest.raises(QueryError, match=re.escape(message)):
        bind_params(load_catalog()[name], given)


def test_every_query_declares_since_and_until_but_binds_them_as_parameters() -> None:
    for q in load_catalog().values():
        names = {p.name for p in q.params}
        assert {"since", "until"} <= names, q.name
        for p in q.params:
            assert f"${p.name}" in q.sql, (q.name, p.name)
        assert "{" not in q.sql.split("\n", 1)[0]  # no format placeholders
