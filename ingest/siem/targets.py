"""``--to URL`` -> a `Sink`: which transport, where, with which TLS and credentials.

Example:
    >>> parse_target("syslog+tcp://127.0.0.1:6514").name
    'syslog+tcp://127.0.0.1:6514'
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

from ingest.siem.files import FileSink, StdoutSink
from ingest.siem.http import ElasticSink, HecSink, WebhookSink
from ingest.siem.sink import Sink
from ingest.siem.syslog import SyslogSink

__all__ = ["SCHEMES", "TlsFiles", "parse_target", "redact_url"]

SCHEMES = (
    "syslog+udp://",
    "syslog+tcp://",
    "syslog+tls://",
    "hec+https://",
    "elastic+https://",
    "https://",
    "file://",
    "-",
)


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


def redact_url(url: str) -> str:
    """`url` without its password, for status and errors.

    Example:
        >>> redact_url("elastic+https://u:pw@h:9200/i")
        'elastic+https://u:***@h:9200/i'
    """
    parts = urlsplit(url)
    if parts.password is None:
        return url
    return url.replace(f":{parts.password}@", ":***@", 1)


def _host_port(url: str, default_port: int) -> tuple[str, int]:
    parts = urlsplit(url)
    try:
        port = parts.port or default_port
    except ValueError as e:
        raise ValueError(f"--to {url}: bad port") from e
    if not parts.hostname:
        raise ValueError(f"--to {url}: expected a host, like syslog+tcp://HOST:PORT")
    return parts.hostname, port


def parse_target(
    url: str,
    *,
    tls: TlsFiles | None = None,
    token: str | None = None,
    ack_timeout: float = 60.0,
    max_file_bytes: int = 100 << 20,
) -> Sink:
    """The sink for `url` (one of `SCHEMES`; ``hec+http``, ``elastic+http`` and ``http`` are
    accepted too, for receivers on loopback). Raises ValueError naming what is wrong."""
    tls = tls or TlsFiles()
    if url == "-":
        return StdoutSink()
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise ValueError(f"--to {url!r}: expected one of {', '.join(SCHEMES)}")
    if scheme == "file":
        if not rest:
            raise ValueError("--to file://: expected a path, like file:///var/log/hookaudit.ndjson")
        return FileSink(unquote(rest), max_bytes=max_file_bytes)
    if scheme in ("syslog+udp", "syslog+tcp", "syslog+tls"):
        proto = scheme.partition("+")[2]
        host, port = _host_port(url, 6514 if proto == "tls" else 514)
        return SyslogSink(proto, host, port, tls=tls.context() if proto == "tls" else None)
    https = scheme.endswith("https")
    verify: ssl.SSLContext | bool = tls.context() if https else False
    inner = scheme.partition("+")[2] or scheme
    if inner not in ("http", "https"):
        raise ValueError(f"--to {url!r}: expected one of {', '.join(SCHEMES)}")
    parts = urlsplit(f"{inner}://{rest}")
    _host_port(f"{inner}://{rest}", 443)
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
    raise ValueError(f"--to {url!r}: expected one of {', '.join(SCHEMES)}")
