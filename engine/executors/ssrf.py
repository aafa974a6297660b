"""Security rules for HTTP hooks: allowlist, header interpolation, SSRF guard, proxy choice.

Pure and sans-I/O except for ``system_resolver``, the one default adapter. The rules
(hooks-protocol.md §4.4, §6.5; conformance cases 37-40):

1. ``vet_url`` runs in this order: parse (absolute ``http``/``https`` only; unencoded
   whitespace, control characters and backslashes are refused), then the
   ``allowedHttpHookUrls`` allowlist, then, unless a proxy carries the request, the address
   check. A proxy does its own DNS, so the guard is skipped for proxied requests, as in CC.
2. Patterns are matched component-wise on (scheme, host, port, path[, query]), never as one
   glob over the URL string, so ``http://localhost:*`` cannot match
   ``http://localhost:@evil.example/``. With an allowlist set, URLs with userinfo, dot
   segments or a host outside ``[A-Za-z0-9._-]`` (write IDNs as ``xn--``) never match.
3. IP literals are checked without DNS, in every spelling inet_aton or a browser accepts.
   Names are resolved once; if ANY address is blocked the request is refused.
4. ``Target.connect_ip`` is the first vetted address (an IPv4-mapped one in its IPv4 form;
   ``ips`` lists them all as resolved). The executor MUST open its socket to
   ``connect_ip:port`` (Host header and TLS SNI/verification use ``host``) and never resolve
   ``host`` again; a second lookup would reopen the DNS-rebinding window.
5. Blocked: the published cloud-metadata addresses by name (169.254.169.254, 169.254.170.2,
   169.254.170.23, 169.254.0.23, 100.100.100.200, 192.0.0.192, fd00:ec2::254) and Azure's
   WireServer 168.63.129.16 (a public address); IPv4 0/8, 10/8, 100.64/10, 169.254/16, 172.16/12, 192.0.0/24, 192.168/16,
   198.18/15, 224/4, 240/4; IPv6 ``::``, fc00::/7, fe80::/10, fec0::/10, ff00::/8, NAT64
   local-use 64:ff9b:1::/48 and Teredo 2001::/32. Addresses embedding an IPv4 address
   (mapped ``::ffff:0:0/96``, translated ``::ffff:0:0:0/96``, compatible ``::/96``, NAT64
   ``64:ff9b::/96``, 6to4 ``2002::/16``) are judged by the embedded address. Loopback
   (127/8, ``::1``, and ``::ffff:127.x``) is allowed unless ``allow_loopback=False``; a
   loopback address behind a translator (6to4, NAT64, compatible) is always blocked, since it
   names the translator's own loopback. Everything else is allowed.
6. Refusals raise ``Blocked`` with a stable ``kind``; the executor records it as a
   non-blocking hook outcome, it is not a bug.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from urllib.parse import unquote, urlsplit

__all__ = [
    "Blocked",
    "Resolver",
    "Target",
    "check_address",
    "interpolate_headers",
    "narrow_patterns",
    "parse_host_literal",
    "pattern_within",
    "proxy_for",
    "system_resolver",
    "url_allowed",
    "vet_url",
]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Resolver = Callable[[str, int], Awaitable[list[str]]]


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


@dataclass(frozen=True)
class Target:
    """A vetted request target; connect to ``connect_ip`` ("" when a proxy carries it)."""

    url: str
    host: str
    port: int
    scheme: str
    ips: list[str]
    connect_ip: str


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


# --------------------------------------------------------------------------- headers

_ENV_REF = re.compile(r"\$\{([A-Z_][A-Z0-9_]*)\}|\$([A-Z_][A-Z0-9_]*)")
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_STRIP = str.maketrans("", "", "\r\n\x00")


def interpolate_headers(
    headers: Mapping[str, str],
    allowed_env_vars: Sequence[str] | None,
    policy_allowed: Sequence[str] | None,
    environ: Mapping[str, str],
) -> tuple[dict[str, str], list[str]]:
    """Expand ``$NAME``/``${NAME}`` in header values; return (headers, warnings).

    NAME must match ``[A-Z_][A-Z0-9_]*`` (``$name`` stays literal) and be in the hook's
    ``allowedEnvVars`` (intersected with ``httpHookAllowedEnvVars`` when that is set);
    an unlisted NAME becomes "" with a warning, an unset one becomes "". Expansion is one
    pass: a value containing ``$X`` is not expanded again. CR, LF and NUL are then removed
    from every value. Unlike Claude Code, which sends header names as written, a name that
    is not an RFC 9110 token is dropped with a warning.

    >>> interpolate_headers({"X": "${T}"}, ["T"], None, {"T": "a\\r\\nEvil: 1"})
    ({'X': 'aEvil: 1'}, [])
    """
    hook_allowed = set(allowed_env_vars or ())
    policy = None if policy_allowed is None else set(policy_allowed)
    out: dict[str, str] = {}
    warnings: list[str] = []
    for name, value in headers.items():
        if not _TOKEN.fullmatch(name):
            warnings.append(
                f"HTTP hook header name {name!r} is not a valid HTTP token; header dropped"
            )
            continue

        def expand(m: re.Match[str], name: str = name) -> str:
            var = m[1] or m[2]
            if var not in hook_allowed:
                where = "the hook's allowedEnvVars"
            elif policy is not None and var not in policy:
                where = "the policy httpHookAllowedEnvVars"
            else:
                return environ.get(var, "")
            warnings.append(
                f"HTTP hook header {name!r}: ${var} is not in {where}; replaced with an empty string"
            )
            return ""

        out[name] = _ENV_REF.sub(expand, value).translate(_STRIP)
    return out, warnings


# --------------------------------------------------------------------------- addresses

_Net4 = ipaddress.IPv4Network
_Net6 = ipaddress.IPv6Network
# Published cloud-metadata and host-agent addresses come first, so a refusal names them.
# All but Azure's WireServer also lie in a blocked range below (or fc00::/7 for IPv6:
# AWS fd00:ec2::254, GCP fd20:ce::254, Oracle fd00:c1::a9fe:a9fe); the WireServer is a
# public address, reachable from every Azure VM, that hands out VM extensions' secrets.
_V4_BLOCKED: tuple[tuple[_Net4, str], ...] = tuple(
    (_Net4(why.split()[-1]), why)
    for why in (
        "cloud metadata (AWS, GCP, Azure, DigitalOcean, OpenStack, ...) 169.254.169.254/32",
        "cloud metadata (AWS ECS task credentials) 169.254.170.2/32",
        "cloud metadata (AWS EKS Pod Identity) 169.254.170.23/32",
        "cloud metadata (Tencent Cloud) 169.254.0.23/32",
        "cloud metadata (Alibaba Cloud) 100.100.100.200/32",
        "cloud metadata (Oracle Cloud) 192.0.0.192/32",
        "cloud host agent (Azure WireServer) 168.63.129.16/32",
        '"this network" 0.0.0.0/8',
        "private 10.0.0.0/8",
        "shared CGNAT (Alibaba Cloud metadata) 100.64.0.0/10",
        "link-local (cloud metadata) 169.254.0.0/16",
        "private 172.16.0.0/12",
        "IETF protocol assignments 192.0.0.0/24",
        "private 192.168.0.0/16",
        "benchmarking 198.18.0.0/15",
        "multicast 224.0.0.0/4",
        "reserved or broadcast 240.0.0.0/4",
    )
)
_V4_LOOPBACK = _Net4("127.0.0.0/8")
# Teredo is blocked outright rather than by its XOR-obfuscated client address: no hook
# endpoint needs it, and a relay decides where the packets really go.
_V6_BLOCKED: tuple[tuple[_Net6, str], ...] = tuple(
    (_Net6(why.split()[-1]), why)
    for why in (
        "cloud metadata (AWS IMDS IPv6) fd00:ec2::254/128",
        "unique local fc00::/7",
        "link-local fe80::/10",
        "site-local fec0::/10",
        "multicast ff00::/8",
        "local-use NAT64 64:ff9b:1::/48",
        "Teredo 2001::/32",
    )
)
# (network, name, offset of the embedded IPv4 address in bits from the right)
_V6_EMBEDDING: tuple[tuple[_Net6, str, int], ...] = (
    (_Net6("::ffff:0:0:0/96"), "IPv4-translated", 0),
    (_Net6("::/96"), "IPv4-compatible", 0),
    (_Net6("64:ff9b::/96"), "NAT64", 0),
    (_Net6("2002::/16"), "6to4", 80),
)


def _check_v4(ip: ipaddress.IPv4Address, allow_loopback: bool) -> str | None:
    if ip in _V4_LOOPBACK:
        return None if allow_loopback else f"loopback {_V4_LOOPBACK}"
    return next((why for net, why in _V4_BLOCKED if ip in net), None)


def check_address(ip: str | IPAddress, *, allow_loopback: bool = True) -> str | None:
    """Return None if a hook may connect to ``ip``, else a short reason.

    Strings are read with ``parse_host_literal``; anything that is not an IP is blocked.
    See the module docstring, rule 5, for the table.

    >>> check_address("::ffff:169.254.169.254")
    'IPv4-mapped, embeds 169.254.169.254: cloud metadata (AWS, GCP, Azure, DigitalOcean, OpenStack, ...) 169.254.169.254/32'
    """
    addr = parse_host_literal(ip) if isinstance(ip, str) else ip
    if addr is None:
        return f"not an IP address: {ip!r}"
    if isinstance(addr, ipaddress.IPv4Address):
        return _check_v4(addr, allow_loopback)
    plain = ipaddress.IPv6Address(int(addr))  # without the zone id
    if plain == ipaddress.IPv6Address("::"):
        return "unspecified ::"
    if plain == ipaddress.IPv6Address("::1"):
        return None if allow_loopback else "loopback ::1"
    if plain.ipv4_mapped is not None:
        why = _check_v4(plain.ipv4_mapped, allow_loopback)
        return why and f"IPv4-mapped, embeds {plain.ipv4_mapped}: {why}"
    for net, why in _V6_BLOCKED:
        if plain in net:
            return why
    for net, kind, shift in _V6_EMBEDDING:
        if plain in net:
            inner = ipaddress.IPv4Address((int(plain) >> shift) & 0xFFFFFFFF)
            why = _check_v4(inner, allow_loopback=False)
            return why and f"{kind}, embeds {inner}: {why}"
    return None


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


# --------------------------------------------------------------------------- vetting


async def system_resolver(host: str, port: int) -> list[str]:
    """Resolve ``host`` to every A and AAAA address, in resolver order, without duplicates.

    Raises ``OSError`` (``socket.gaierror``) or ``UnicodeError`` on failure.

    >>> asyncio.run(system_resolver("127.0.0.1", 80))
    ['127.0.0.1']
    """
    infos = await asyncio.get_running_loop().getaddrinfo(
        host, port, family=socket.AF_UNSPEC, type=socket.SOCK_STREAM
    )
    return list(dict.fromkeys(str(info[4][0]) for info in infos))


async def vet_url(
    url: str,
    *,
    patterns: Sequence[str] | None,
    resolver: Resolver = system_resolver,
    allow_loopback: bool = True,
    proxy: str | None = None,
) -> Target:
    """Parse, allowlist and address-check ``url``; return where to connect or raise Blocked.

    With ``proxy`` set the address check is skipped (the proxy resolves the name) and
    ``connect_ip`` is "". Otherwise ``connect_ip`` is the vetted address the executor must
    connect to, without resolving the host again. DNS time limits are the caller's.

    >>> asyncio.run(vet_url("http://127.0.0.1:8080/", patterns=None)).connect_ip
    '127.0.0.1'
    """
    parsed = _parse_url(url)
    if not url_allowed(url, patterns):
        raise Blocked(
            "url_not_allowed",
            f"HTTP hook blocked: {url} does not match any pattern in allowedHttpHookUrls",
        )
    host, port = parsed.host, parsed.port

    def target(ips: list[str]) -> Target:
        first = parse_host_literal(ips[0]) if ips else None
        if isinstance(first, ipaddress.IPv6Address) and first.ipv4_mapped:
            first = first.ipv4_mapped  # an IPv6-only socket could not reach ::ffff:a.b.c.d
        return Target(url, host, port, parsed.scheme, ips, str(first) if first else "")

    if proxy is not None:
        return target([])
    literal = parse_host_literal(host)
    if literal is not None:
        why = check_address(literal, allow_loopback=allow_loopback)
        if why:
            shown = host if host == str(literal) else f"{host} (= {literal})"
            raise Blocked("ssrf_blocked_address", f"HTTP hook blocked: {shown} is {why}")
        return target([str(literal)])
    try:
        ips = list(dict.fromkeys(await resolver(host, port)))
    except (OSError, ValueError) as exc:  # gaierror is an OSError, IDNA errors ValueErrors
        raise Blocked("dns_failure", f"HTTP hook blocked: cannot resolve {host}: {exc}") from exc
    if not ips:
        raise Blocked("dns_failure", f"HTTP hook blocked: {host} resolved to no address")
    for ip in ips:
        why = check_address(ip, allow_loopback=allow_loopback)
        if why:
            raise Blocked(
                "ssrf_blocked_address", f"HTTP hook blocked: {host} resolves to {ip}, {why}"
            )
    return target(ips)


def proxy_for(url: str, environ: Mapping[str, str]) -> str | None:
    """Return the environment proxy for ``url``, or None for a direct connection.

    As in Claude Code one proxy serves both schemes: the first non-empty of
    ``HTTPS_PROXY``, ``https_proxy``, ``HTTP_PROXY``, ``http_proxy``. ``NO_PROXY`` (then
    ``no_proxy``) lists entries separated by commas or spaces: ``*`` anywhere bypasses all;
    ``.example.com``, ``*.example.com`` and ``example.com`` match the name and its
    subdomains; ``host:port`` also needs the port; IPs and CIDRs match IP-literal hosts.
    (``urllib.request.proxy_bypass_environment`` is not used: it honours ``*`` only as the
    whole value and knows no space separators, CIDRs or trailing dots.)

    >>> proxy_for("http://a.example/", {"HTTPS_PROXY": "http://p:3128", "NO_PROXY": ".internal"})
    'http://p:3128'
    """
    proxy = next(
        (
            environ[k]
            for k in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy")
            if environ.get(k)
        ),
        None,
    )
    if proxy is None:
        return None
    try:
        parsed = _parse_url(url)
    except Blocked:
        return proxy  # vet_url refuses it before anything is sent
    no_proxy = environ.get("NO_PROXY") or environ.get("no_proxy") or ""
    host = _strip_dot(parsed.host)
    literal = parse_host_literal(host)
    for entry in re.split(r"[,\s]+", no_proxy.strip().lower()):
        if entry == "*":
            return None
        if not entry:
            continue
        if literal is not None:
            try:
                if literal in ipaddress.ip_network(
                    entry.strip("[]").replace("%25", "%"), strict=False
                ):
                    return None
            except ValueError:
                continue
        else:
            name, _, want_port = entry.removeprefix("*").lstrip(".").partition(":")
            name = _strip_dot(name)
            suffix_ok = host == name or host.endswith("." + name)
            if name and suffix_ok and want_port in ("", str(parsed.port)):
                return None
    return proxy
