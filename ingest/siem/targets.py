"""``--to URL`` -> a `Sink`: which transport, where, with which TLS and credentials.

Example:
    >>> parse_target("syslog+tcp://127.0.0.1:6514").name
    'syslog+tcp://127.0.0.1:6514'
"""

from __future__ import annotations

import difflib
import re
import ssl
from dataclasses import dataclass
from urllib.parse import SplitResult, unquote, urlsplit

from engine.events import CATALOG
from ingest.siem.files import FileSink, StdoutSink
from ingest.siem.http import ElasticSink, HecSink, WebhookSink
from ingest.siem.sink import Sink, redact_url
from ingest.siem.syslog import RelpSink, SyslogSink

__all__ = ["DECISIONS", "SCHEMES", "TlsFiles", "parse_filter", "parse_target", "redact_url"]

SCHEMES = (
    "syslog+udp://",
    "syslog+tcp://",
    "syslog+tls://",
    "relp+tcp://",
    "relp+tls://",
    "hec+https://",
    "elastic+https://",
    "https://",
    "file://",
    "-",
)


#: The decision token of an outcome's subject (``none``: no hook decided).
DECISIONS = ("allow", "ask", "defer", "deny", "none")
_HOST_OK = re.compile(r"[A-Za-z0-9._:-]+")


def parse_filter(text: str) -> str:
    """``--filter EVENT[.DECISION]`` checked: each token a known event (decision) or ``*``,
    or ``>`` last. A typo would forward nothing, silently, so it is an error that says so.

    Example:
        >>> parse_filter("PreToolUse.deny"), parse_filter("*.deny"), parse_filter("Stop.>")
        ('PreToolUse.deny', '*.deny', 'Stop.>')
        >>> parse_filter("PretoolUse")
        Traceback (most recent call last):
        ...
        ValueError: --filter 'PretoolUse': no event 'PretoolUse' (did you mean PreToolUse?)
    """
    tokens = text.split(".")
    if len(tokens) > 2 or not all(tokens):
        raise ValueError(
            f"--filter {text!r}: expected EVENT or EVENT.DECISION, like PreToolUse.deny"
        )
    for i, (tok, known) in enumerate(zip(tokens, (sorted(CATALOG), DECISIONS), strict=False)):
        if tok == "*" or (tok == ">" and i == len(tokens) - 1) or tok in known:
            continue
        what = ("event", "decision")[i]
        near = difflib.get_close_matches(tok, known, n=1)
        hint = f"did you mean {near[0]}?" if near else f"one of: *, {', '.join(known)}"
        raise ValueError(f"--filter {text!r}: no {what} {tok!r} ({hint})")
    return text


def _split(url: str) -> SplitResult:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - a bad port raises here
    except ValueError as e:
        raise ValueError(f"--to {redact_url(url)}: {e}") from e
    if parts.hostname is not None and not _HOST_OK.fullmatch(parts.hostname):
        raise ValueError(f"--to {redact_url(url)}: bad host {parts.hostname!r}")
    return parts


@dataclass(frozen=True)
class TlsFiles:
    """--tls-ca / --tls-cert / --tls-key of the SIEM connection."""

    ca: str | None = None
    cert: str | None = None
    key: str | None = None

    def context(self) -> ssl.SSLContext:
        try:
            ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=self.ca)
        except (OSError, ssl.SSLError) as e:
            raise ValueError(f"--tls-ca {self.ca}: cannot load CA: {e}") from e
        if self.cert:
            try:
                ctx.load_cert_chain(self.cert, self.key)
            except (OSError, ssl.SSLError) as e:
                raise ValueError(f"--tls-cert {self.cert}: cannot load certificate/key: {e}") from e
        elif self.key:
            raise ValueError("--tls-key: a key needs --tls-cert too")
        return ctx


def _host_port(url: str, default_port: int) -> tuple[str, int]:
    parts = _split(url)
    port = parts.port or default_port
    if not parts.hostname:
        raise ValueError(f"--to {redact_url(url)}: expected a host, like syslog+tcp://HOST:PORT")
    return parts.hostname, port


def parse_target(
    url: str,
    *,
    tls: TlsFiles | None = None,
    token: str | None = None,
    ack_timeout: float = 60.0,
    max_file_bytes: int = 100 << 20,
    syslog_bom: bool = True,
) -> Sink:
    """The sink for `url` (one of `SCHEMES`; ``hec+http``, ``elastic+http`` and ``http`` are
    accepted too, for receivers on loopback). Raises ValueError naming what is wrong."""
    tls = tls or TlsFiles()
    if url == "-":
        return StdoutSink()
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise ValueError(f"--to {redact_url(url)!r}: expected one of {', '.join(SCHEMES)}")
    if scheme == "file":
        if not rest:
            raise ValueError("--to file://: expected a path, like file:///var/log/hookaudit.ndjson")
        return FileSink(unquote(rest), max_bytes=max_file_bytes)
    if scheme in ("syslog+udp", "syslog+tcp", "syslog+tls"):
        proto = scheme.partition("+")[2]
        host, port = _host_port(url, 6514 if proto == "tls" else 514)
        return SyslogSink(
            proto, host, port, tls=tls.context() if proto == "tls" else None, bom=syslog_bom
        )
    if scheme in ("relp+tcp", "relp+tls"):
        proto = scheme.partition("+")[2]
        host, port = _host_port(url, 2514)
        return RelpSink(
            proto, host, port, tls=tls.context() if proto == "tls" else None, bom=syslog_bom
        )
    https = scheme.endswith("https")
    verify: ssl.SSLContext | bool = tls.context() if https else False
    inner = scheme.partition("+")[2] or scheme
    if inner not in ("http", "https"):
        raise ValueError(f"--to {redact_url(url)!r}: expected one of {', '.join(SCHEMES)}")
    _host_port(f"{inner}://{rest}", 443)
    parts = urlsplit(f"{inner}://{rest}")
    base = f"{inner}://{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    if parts.hostname and ":" in parts.hostname:
        base = f"{inner}://[{parts.hostname}]" + (f":{parts.port}" if parts.port else "")
    if scheme.startswith("hec+"):
        if not token:
            raise ValueError("--to hec+…: Splunk HEC needs --token (env HOOKAUDIT_SIEM_TOKEN)")
        path = parts.path if parts.path not in ("", "/") else "/services/collector/event"
        return HecSink(base, path, token=token, verify=verify, ack_timeout=ack_timeout)
    if scheme.startswith("elastic+"):
        index = parts.path.strip("/") or "hookaudit"
        if "/" in index:
            raise ValueError(f"--to {redact_url(url)}: the path is the index name, one segment")
        auth = (unquote(parts.username), unquote(parts.password or "")) if parts.username else None
        return ElasticSink(base, index, token=token, auth=auth, verify=verify)
    if scheme in ("https", "http"):
        return WebhookSink(url, token=token, verify=verify)
    raise ValueError(f"--to {redact_url(url)!r}: expected one of {', '.join(SCHEMES)}")
