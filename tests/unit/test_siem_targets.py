"""`--to URL` and `--filter` of `hookaudit siem`: each scheme's sink, one-line errors for bad
input (never a traceback), and no credential in a sink's name or an error."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.events import CATALOG
from ingest.siem.files import FileSink, StdoutSink
from ingest.siem.http import ElasticSink, HecSink, WebhookSink
from ingest.siem.sink import redact_url
from ingest.siem.syslog import SyslogSink
from ingest.siem.targets import DECISIONS, SCHEMES, parse_filter, parse_target


@pytest.mark.parametrize(
    ("url", "kind", "name"),
    [
        ("syslog+tcp://127.0.0.1:6514", SyslogSink, "syslog+tcp://127.0.0.1:6514"),
        ("syslog+udp://127.0.0.1", SyslogSink, "syslog+udp://127.0.0.1:514"),
        ("syslog+tls://siem.example", SyslogSink, "syslog+tls://siem.example:6514"),
        ("syslog+tcp://[::1]:601", SyslogSink, "syslog+tcp://::1:601"),
        ("hec+https://splunk:8088", HecSink, "hec+https://splunk:8088"),
        ("elastic+https://es:9200/audit", ElasticSink, "elastic+https://es:9200/audit"),
        ("elastic+http://127.0.0.1:9200", ElasticSink, "elastic+http://127.0.0.1:9200/hookaudit"),
        ("https://h/hook", WebhookSink, "https://h/hook"),
        ("file:///var/log/a.ndjson", FileSink, "file:///var/log/a.ndjson"),
        ("-", StdoutSink, None),
    ],
)
def test_each_scheme_gives_its_sink(url: str, kind: type, name: str | None) -> None:
    sink = parse_target(url, token="t")
    assert isinstance(sink, kind)
    if name is not None:
        assert sink.name == name


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("gopher://x", "expected one of"),
        ("syslog+tcp://", "expected a host"),
        ("syslog+tcp://127.0.0.1:99999", "Port out of range"),
        ("syslog+tcp://127.0.0.1:x", "Port could not be cast"),
        ("syslog+tcp://[::1", "Invalid IPv6 URL"),
        ("syslog+tcp://h%0d%0a:1", "bad host"),
        ("hec+https://h:1/x y", None),  # the path is the HEC endpoint: allowed
        ("https://ev il/", "bad host"),
        ("elastic+https://h:1/a/b", "one segment"),
        ("file://", "expected a path"),
    ],
)
def test_bad_urls_are_one_line_errors_naming_the_url(url: str, says: str | None) -> None:
    if says is None:
        parse_target(url, token="t")
        return
    with pytest.raises(ValueError) as e:
        parse_target(url, token="t")
    msg = str(e.value)
    assert says in msg and msg.startswith("--to ") and "\n" not in msg


def test_hec_needs_a_token() -> None:
    with pytest.raises(ValueError, match="needs --token"):
        parse_target("hec+https://splunk:8088")


def test_no_password_or_query_in_names_or_errors() -> None:
    hook = parse_target("https://u:s3cret@h/hook?token=t0ken")
    assert "s3cret" not in hook.name and "t0ken" not in hook.name
    assert hook.name == "https://u:***@h/hook?…"
    for bad in ("gopher://u:s3cret@h/", "https://u:s3cret@[::1/", "syslog+tcp://u:s3cret@:1"):
        with pytest.raises(ValueError) as e:
            parse_target(bad)
        assert "s3cret" not in str(e.value), bad


@given(st.sampled_from(["", *(s for s in SCHEMES if s != "-")]), st.text(max_size=200))
@settings(max_examples=200, deadline=None)
def test_any_text_is_a_sink_or_a_value_error(scheme: str, text: str) -> None:
    try:
        parse_target(scheme + text, token="t")
    except ValueError as e:
        assert "\n" not in str(e).replace(text, "")


@given(st.from_regex(r"Z[a-z0-9]{8,20}", fullmatch=True), st.text(alphabet="@:/?#[]%", max_size=20))
@settings(max_examples=300, deadline=None)
def test_redact_url_never_shows_a_password(password: str, junk: str) -> None:
    """Whether the rest parses or not, neither the password nor a query's token shows."""
    for url in (f"https://user:{password}@host{junk}/x", f"https://host{junk}/x?q={password}"):
        assert password not in redact_url(url), url


@pytest.mark.parametrize(
    "ok", ["PreToolUse", "PreToolUse.deny", "*.deny", "Stop.*", "Stop.>", ">", "*", "Setup.none"]
)
def test_filters_that_name_real_subjects(ok: str) -> None:
    assert parse_filter(ok) == ok


@pytest.mark.parametrize(
    ("bad", "says"),
    [
        ("PretoolUse.deny", "did you mean PreToolUse?"),
        ("PreToolUse.denied", "did you mean deny?"),
        ("Pre>ToolUse", "no event"),
        (">.deny", "no event '>'"),
        ("PreToolUse.deny.x", "expected EVENT or EVENT.DECISION"),
        ("PreToolUse.", "expected EVENT"),
        ("", "expected EVENT"),
        ("Pre ToolUse", "no event"),
        ("PreToolUse.de ny", "no decision"),
    ],
)
def test_filters_that_would_forward_nothing_are_errors(bad: str, says: str) -> None:
    with pytest.raises(ValueError) as e:
        parse_filter(bad)
    assert says in str(e.value) and str(e.value).startswith(f"--filter {bad!r}")


@given(st.text(max_size=80))
@settings(max_examples=400, deadline=None)
def test_a_filter_that_passes_is_made_of_known_tokens(text: str) -> None:
    try:
        parse_filter(text)
    except ValueError:
        return
    tokens = text.split(".")
    assert tokens[0] in CATALOG or tokens[0] in ("*", ">")
    assert len(tokens) == 1 or tokens[1] in (*DECISIONS, "*", ">")


def test_only_a_4xx_that_refuses_the_records_parks_them() -> None:
    """Every status from 0 to 999: parked (for good) only for a 4xx other than 401, 403,
    408 and 429; a 2xx is delivered; everything else (1xx, every 3xx redirect, 5xx, odd
    numbers) is the receiver not taking records now, to be sent again."""
    from ingest.siem.http import _retryable, rejects_record

    for status in range(1000):
        parks = rejects_record(status)
        assert parks == (400 <= status < 500 and status not in (401, 403, 408, 429)), status
        assert _retryable(status) == (not parks and not 200 <= status < 300), status
