"""Security rules for HTTP hooks: the SSRF guard (`vet_url`) and proxy choice.

URL parsing and the allowlist patterns are `engine.executors.urls`, header interpolation
`engine.executors.headers` (both re-exported here for the http executor).

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

from engine.executors.headers import interpolate_headers
from engine.executors.urls import (
    Blocked,
    IPAddress,
    _parse_url,
    _strip_dot,
    narrow_patterns,
    parse_host_literal,
    pattern_within,
    url_allowed,
)

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

Resolver = Callable[[str, int], Awaitable[list[str]]]


@dataclass(frozen=True)
class Target:
    """A vetted request target; connect to ``connect_ip`` ("" when a proxy carries it)."""

    url: str
    host: str
    port: int
    scheme: str
    ips: list[str]
    connect_ip: str


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
