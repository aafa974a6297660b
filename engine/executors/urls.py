"""URL rules for HTTP hooks: parsing, and the ``allowedHttpHookUrls`` allowlist patterns.

Split from `engine.executors.ssrf` (which vets a URL with these, then its addresses).
Rules (hooks-protocol.md §4.4; conformance cases 37-40):

- Absolute ``http``/``https`` URLs only; unencoded whitespace, control characters and
  backslashes are refused (`Blocked`, kind ``bad_url``/``unsupported_scheme``).
- Patterns are matched component-wise on (scheme, host, port, path[, query]), never as one
  glob over the URL string, so ``http://localhost:*`` cannot match
  ``http://localhost:@evil.example/``. With an allowlist set, URLs with userinfo, dot
  segments or a host outside ``[A-Za-z0-9._-]`` (write IDNs as ``xn--``) never match.
- `pattern_within` / `narrow_patterns`: whether a pattern admits only URLs another admits
  (managed settings narrow a ceiling, never widen it).

Example:
    >>> url_allowed("https://api.example/v1", ["https://api.example/*"])
    True
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

__all__ = [
    "Blocked",
    "IPAddress",
    "narrow_patterns",
    "parse_host_literal",
    "pattern_within",
    "url_allowed",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


class Blocked(Exception):
    """An HTTP hook request refused before anything was sent.

    ``kind`` is stable: ``bad_url``, ``unsupported_scheme``, ``url_not_allowed``,
    ``ssrf_blocked_address`` or ``dns_failure``.

    >>> Blocked("bad_url", "HTTP hook blocked: 'x' has no host").kind
    'bad_url'
    """

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(kind, message)  # both in args, so it pickles
        self.kind = kind
        self.message = message

    def __str__(self) -> str:
        return self.message


_DEFAULT_PORTS = {"http": 80, "https": 443}
# Unencoded controls, space and backslash are where URL parsers disagree; refuse them.
_UNSAFE_URL = re.compile(r"[\x00-\x20\x7f\\]")
_PORT = re.compile(r"[0-9]{1,5}")
_MATCHABLE_HOST = re.compile(r"[a-z0-9._-]+|\[[0-9a-f:.%a-z_-]+\]")


@dataclass(frozen=True)
class _Url:
    scheme: str
    host: str  # lower-case, no brackets, as the server should see it
    port: int
    path: str
    query: str
    userinfo: bool
    netloc_host: str  # lower-case host as written in the URL, brackets kept


def _parse_url(url: str) -> _Url:
    def bad(why: str) -> Blocked:
        return Blocked("bad_url", f"HTTP hook blocked: {url!r} {why}")

    if _UNSAFE_URL.search(url):
        raise bad("contains whitespace, a control character or a backslash")
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise bad(f"is not a valid URL ({exc})") from exc
    if not parts.scheme or not url[len(parts.scheme) :].startswith("://"):
        raise bad("is not an absolute http:// or https:// URL")
    if parts.scheme not in _DEFAULT_PORTS:
        raise Blocked(
            "unsupported_scheme",
            f"HTTP hook blocked: {url!r} uses scheme {parts.scheme!r}; expected http or https",
        )
    hostport = parts.netloc.rpartition("@")[2]
    host, port_text = _split_hostport(hostport.lower())
    if host is None or port_text is None:
        raise bad("has a malformed host or port")
    if port_text == "":
        port = _DEFAULT_PORTS[parts.scheme]
    elif _PORT.fullmatch(port_text) and 0 < int(port_text) < 65536:
        port = int(port_text)
    else:
        raise bad(f"has an invalid port {port_text!r}")
    bare = host[1:-1] if host.startswith("[") else host
    if not bare:
        raise bad("has no host")
    if host.startswith("[") and not isinstance(parse_host_literal(host), ipaddress.IPv6Address):
        raise bad("has a bracketed host that is not an IPv6 address")
    return _Url(
        scheme=parts.scheme,
        host=bare,
        port=port,
        path=parts.path or "/",
        query=parts.query,
        userinfo="@" in parts.netloc,
        netloc_host=host,
    )


def _split_hostport(hostport: str) -> tuple[str | None, str | None]:
    """``[v6]:p`` / ``host:p`` / ``host`` -> (host, port text); (None, None) if malformed."""
    if hostport.startswith("["):
        end = hostport.find("]")
        rest = hostport[end + 1 :]
        if end < 0 or (rest and not rest.startswith(":")):
            return None, None
        return hostport[: end + 1], rest[1:]
    host, _, port = hostport.partition(":")
    return (host, port) if "[" not in host and "]" not in host else (None, None)


# --------------------------------------------------------------------------- allowlist


@dataclass(frozen=True)
class _Pattern:
    scheme: str
    host: re.Pattern[str] | IPAddress
    port: int | None  # None: any port
    path: re.Pattern[str] | None  # None: any path
    query: re.Pattern[str] | None  # None: query ignored


_PATTERN = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://([^/?#]*)([^?#]*)(?:\?([^#]*))?(?:#.*)?", re.S)


def _glob(text: str, star: str) -> re.Pattern[str]:
    return re.compile(star.join(re.escape(piece) for piece in text.split("*")), re.S)


def _compile_pattern(pattern: str) -> _Pattern | None:
    m = _PATTERN.fullmatch(pattern)
    if m is None or "@" in m[2]:
        return None
    scheme, (host, port_text) = m[1].lower(), _split_hostport(m[2].lower())
    if scheme not in _DEFAULT_PORTS or host is None or port_text is None or not host.strip("[]."):
        return None
    if port_text == "*":
        port = None
    elif port_text == "":
        port = _DEFAULT_PORTS[scheme]
    elif _PORT.fullmatch(port_text):
        port = int(port_text)
    else:
        return None
    host = _strip_dot(host)
    literal = parse_host_literal(host) if "*" not in host else None
    return _Pattern(
        scheme=scheme,
        host=literal if literal is not None else _glob(host, "[^@/:]*"),
        port=port,
        path=None if m[3] in ("", "/*") else _glob(m[3], ".*"),
        query=None if m[4] is None else _glob(m[4], ".*"),
    )


def _strip_dot(host: str) -> str:
    return host[:-1] if host.endswith(".") and not host.endswith("..") else host


def _has_dot_segment(path: str) -> bool:
    # Clients and servers may normalise "/a/../b" (or its %2e / %2f / \ spellings) to "/b".
    decoded = re.sub(r"%(2e|2f|5c)", lambda m: unquote(m[0]), path, flags=re.I)
    return any(seg in (".", "..") for seg in re.split(r"[/\\]", decoded))


def url_allowed(url: str, patterns: Sequence[str] | None) -> bool:
    """Return whether ``url`` matches ``allowedHttpHookUrls`` (None: all; []: none).

    Claude Code turns each pattern into one ``*`` glob over the whole URL string, so
    ``http://localhost:*`` also matches ``http://localhost:@evil.example/``. We parse both
    sides and match per component instead:

    - scheme: exact, case-insensitive;
    - host: case-insensitive, one trailing ``.`` ignored; ``*`` matches within the host only
      (never ``@``, ``/`` or ``:``, so never an IPv6 literal); a pattern host that is an IP
      literal matches any spelling of that address;
    - port: ``*`` matches any, absent means the scheme's default;
    - path: ``*`` matches anything including ``/``; no path or ``/*`` matches every path;
    - query: ignored unless the pattern has one, which then must match the whole query.

    With patterns set, a URL with userinfo, a dot segment, or a host outside
    ``[a-z0-9._-]`` (IDNs must be written ``xn--``) is refused outright. A pattern that
    does not parse (e.g. a bare ``*``) matches nothing, so mistakes fail closed.

    >>> url_allowed("https://Hooks.Example.com./h", ["https://hooks.example.com/*"])
    True
    """
    if patterns is None:
        return True
    try:
        target = _parse_url(url)
    except Blocked:
        return False
    host = _strip_dot(target.host)
    if (
        target.userinfo
        or _has_dot_segment(target.path)
        or not _MATCHABLE_HOST.fullmatch(target.netloc_host)
    ):
        return False
    literal = parse_host_literal(host)
    for text in patterns:
        p = _compile_pattern(text)
        if p is None or p.scheme != target.scheme:
            continue
        if isinstance(p.host, re.Pattern):
            host_ok = p.host.fullmatch(host) is not None
        else:
            host_ok = literal is not None and literal == p.host
        if (
            host_ok
            and p.port in (None, target.port)
            and (p.path is None or p.path.fullmatch(target.path))
            and (p.query is None or p.query.fullmatch(target.query))
        ):
            return True
    return False


# ------------------------------------------------------------------ policy ceilings

_HOST_STAR = frozenset("@/:")  # what a host `*` cannot match (see `_compile_pattern`)


@dataclass(frozen=True)
class _PatternText:
    scheme: str
    host: str
    literal: IPAddress | None
    port: int | None
    path: str  # "*" when the pattern matches every path
    query: str  # "*" when the pattern ignores the query


def _pattern_text(pattern: str) -> _PatternText | None:
    """A pattern's components as text, read exactly as `_compile_pattern` reads them."""
    if _compile_pattern(pattern) is None:
        return None
    m = _PATTERN.fullmatch(pattern)
    assert m is not None
    host, port_text = _split_hostport(m[2].lower())
    assert host is not None and port_text is not None
    scheme = m[1].lower()
    host = _strip_dot(host)
    port = None if port_text == "*" else int(port_text or _DEFAULT_PORTS[scheme])
    return _PatternText(
        scheme=scheme,
        host=host,
        literal=parse_host_literal(host) if "*" not in host else None,
        port=port,
        path="*" if m[3] in ("", "/*") else m[3],
        query="*" if m[4] is None else m[4],
    )


def _glob_within(inner: str, outer: str, barred: frozenset[str] = frozenset()) -> bool:
    """True when every string the glob `inner` matches is matched by the glob `outer`.

    Sound, not complete: `inner`'s ``*`` may only be covered by a ``*`` of `outer`, and a
    literal character by the same character or by a ``*`` that may match it (not in
    `barred`). A pair this cannot prove is treated as not within, which narrows more.

    >>> _glob_within("a*b", "*"), _glob_within("*", "a*")
    (True, False)
    """
    n, m = len(inner), len(outer)
    # ok[i][j]: inner[i:] is within outer[j:]
    ok = [[False] * (m + 1) for _ in range(n + 1)]
    ok[n][m] = True
    for j in range(m - 1, -1, -1):
        ok[n][j] = outer[j] == "*" and ok[n][j + 1]
    for i in range(n - 1, -1, -1):
        for j in range(m - 1, -1, -1):
            c, o = inner[i], outer[j]
            if o == "*":
                ok[i][j] = ok[i][j + 1] or ((c == "*" or c not in barred) and ok[i + 1][j])
            else:
                ok[i][j] = c != "*" and c == o and ok[i + 1][j + 1]
    return ok[0][0]


def pattern_within(inner: str, outer: str) -> bool:
    """True when every URL the pattern `inner` allows is allowed by the pattern `outer`.

    Conservative: False whenever inclusion cannot be shown (an IP-literal host is only
    within the same literal; a pattern that does not parse allows nothing and is within
    everything).

    >>> pattern_within("https://hooks.corp.example/h", "https://*.corp.example/*")
    True
    >>> pattern_within("https://*/*", "https://*.corp.example/*")
    False
    """
    a, b = _pattern_text(inner), _pattern_text(outer)
    if a is None:
        return True
    if b is None or a.scheme != b.scheme:
        return False
    if b.literal is not None or a.literal is not None:
        host_ok = a.literal is not None and a.literal == b.literal
    else:
        host_ok = _glob_within(a.host, b.host, _HOST_STAR)
    return (
        host_ok
        and (b.port is None or a.port == b.port)
        and (b.path == "*" or _glob_within(a.path, b.path))
        and (b.query == "*" or _glob_within(a.query, b.query))
    )


def narrow_patterns(ceiling: Sequence[str], wanted: Sequence[str]) -> list[str]:
    """The patterns of `wanted` and of `ceiling` that lie within the other list.

    Every URL the result allows is allowed by `ceiling` (and by `wanted`): a scope below
    the ceiling can narrow it, never widen it. Partial overlaps are dropped, not
    computed, so the result may allow less than the exact intersection.

    >>> narrow_patterns(["https://*.corp.example/*"], ["https://a.corp.example/h", "https://evil.example/*"])
    ['https://a.corp.example/h']
    """
    out = [w for w in wanted if any(pattern_within(w, c) for c in ceiling)]
    out += [c for c in ceiling if any(pattern_within(c, w) for w in wanted)]
    return list(dict.fromkeys(p for p in out if _compile_pattern(p) is not None))


_INET_PART = re.compile(r"0[xX][0-9a-fA-F]*|0[0-7]*|[1-9][0-9]*")


def _inet_aton(text: str) -> ipaddress.IPv4Address | None:
    parts = text.split(".")
    if len(parts) > 4:
        return None
    values: list[int] = []
    for part in parts:
        if not _INET_PART.fullmatch(part):
            return None
        if part[:2] in ("0x", "0X"):
            digits, base = part[2:].lstrip("0") or "0", 16
        elif part.startswith("0"):
            digits, base = part.lstrip("0") or "0", 8
        else:
            digits, base = part, 10
        if len(digits) > 11:  # 2**32 needs at most 11 octal digits; also bounds int()
            return None
        values.append(int(digits, base))
    *head, last = values
    if any(v > 0xFF for v in head) or last >= 1 << (8 * (4 - len(head))):
        return None
    number = last
    for i, v in enumerate(head):
        number |= v << (8 * (3 - i))
    return ipaddress.IPv4Address(number)


def parse_host_literal(host: str) -> IPAddress | None:
    """Return the address ``host`` spells, or None if it is a DNS name (or nonsense).

    Accepts bracketed or bare IPv6 with a zone id (``%25eth0`` or ``%eth0``) and every IPv4
    form inet_aton and WHATWG URL parsers accept: ``2852039166``, ``0251.0376.0251.0376``,
    ``0xa9fe.0xa9fe``, ``127.1``, ``10.1.1``, with or without one trailing dot.

    >>> parse_host_literal("0xA9FEA9FE")
    IPv4Address('169.254.169.254')
    """
    if not host.isascii():
        return None
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        if ":" not in host:
            return None
    if ":" in host:
        try:
            return ipaddress.IPv6Address(host.replace("%25", "%", 1))
        except ValueError:
            return None
    if host.endswith(".") and not host.endswith(".."):
        host = host[:-1]
    return _inet_aton(host) if host else None
