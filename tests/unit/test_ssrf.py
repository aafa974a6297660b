"""engine.executors.ssrf: allowlist, header interpolation, SSRF guard, proxy choice.

No event loop and no network: the injected resolvers never suspend, so `run` drives each
coroutine with a single `send(None)`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import ipaddress
import pickle
import re
import socket
from collections.abc import Coroutine, Mapping
from typing import Any, TypeVar

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.executors.ssrf import (
    Blocked,
    Resolver,
    Target,
    check_address,
    interpolate_headers,
    parse_host_literal,
    proxy_for,
    url_allowed,
    vet_url,
)

T = TypeVar("T")

METADATA = ipaddress.IPv4Address("169.254.169.254")
DNS: dict[str, list[str]] = {
    "internal.example": ["10.0.0.5"],
    "mixed.example": ["93.184.216.34", "10.0.0.5"],
    "mixed6.example": ["2606:4700::1111", "fd12::1"],
    "rebind.example": ["169.254.169.254"],
    "mapped.example": ["::ffff:10.0.0.1"],
    "linklocal6.example": ["fe80::1%eth0"],
    "garbage.example": ["not-an-ip"],
    "public.example": ["93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946"],
    "loopback.example": ["127.0.0.1", "::1"],
}


def run(coro: Coroutine[Any, Any, T]) -> T:
    try:
        coro.send(None)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
    coro.close()
    raise AssertionError("coroutine suspended; unit tests have no event loop")


def resolver_from(table: Mapping[str, list[str]]) -> Resolver:
    async def resolve(host: str, port: int) -> list[str]:
        name = host.removesuffix(".")  # "a.example." is the absolute spelling of "a.example"
        if name not in table:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return table[name]

    return resolve


async def no_dns(host: str, port: int) -> list[str]:
    raise AssertionError(f"resolver called for {host}:{port}")


def vet(url: str, **kw: Any) -> Target:
    kw.setdefault("patterns", None)
    kw.setdefault("resolver", resolver_from(DNS))
    return run(vet_url(url, **kw))


def blocked(url: str, **kw: Any) -> Blocked:
    with pytest.raises(Blocked) as info:
        vet(url, **kw)
    return info.value


# --------------------------------------------------------------------------- hostile table

HOSTILE = [
    # cloud metadata, in every spelling
    "http://169.254.169.254/latest/meta-data/",
    "http://169.254.169.254./",
    "http://[::ffff:a9fe:a9fe]/",
    "http://[::ffff:169.254.169.254]/",
    "http://[0:0:0:0:0:ffff:a9fe:a9fe]/",
    "http://[0000:0000:0000:0000:0000:FFFF:A9FE:A9FE]/",
    "http://2852039166/",
    "http://0251.0376.0251.0376/",
    "http://0xA9FEA9FE/",
    "http://0xa9.0xfe.0xa9.0xfe/",
    "http://0xa9.0xfe.0xa9fe/",
    "http://169.0xfea9fe/",
    "http://0251.0xfe.43518/",
    "http://0x00000a9.254.169.254/",
    "http://100.100.100.200/",
    "http://[::ffff:100.100.100.200]/",
    # private, CGNAT and the gaps the spec asks to close
    "http://10.1.1/",
    "http://192.168.1.1:8080/",
    "http://172.16.0.1/",
    "http://172.31.255.255/",
    "http://100.64.0.1/",
    "http://192.0.0.170/",
    "http://198.18.0.1/",
    "http://198.19.255.255/",
    "http://224.0.0.1/",
    "http://239.255.255.250/",
    "http://240.0.0.1/",
    "http://255.255.255.255/",
    "http://0.0.0.0/",
    "http://0/",
    "http://0.0.0.0:8080/",
    # IPv6 ranges and IPv4 embeddings
    "http://[::]/",
    "http://[fd00::1]/",
    "http://[fc00::1]/",
    "http://[fe80::1%25eth0]/",
    "http://[fe80::1]/",
    "http://[febf::1]/",
    "http://[fec0::1]/",
    "http://[ff02::1]/",
    "http://[64:ff9b::a9fe:a9fe]/",
    "http://[64:ff9b::10.0.0.1]/",
    "http://[64:ff9b:1::a9fe:a9fe]/",
    "http://[2002:a9fe:a9fe::]/",
    "http://[2002:c0a8:101::1]/",
    "http://[::a9fe:a9fe]/",
    "http://[::10.0.0.1]/",
    "http://[::ffff:0:a9fe:a9fe]/",
    "http://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/",
    # translators pointed at their own loopback: blocked even though loopback is allowed
    "http://[2002:7f00:1::]/",
    "http://[64:ff9b::7f00:1]/",
    "http://[::127.0.0.1]/",
    # names
    "http://internal.example/",
    "http://internal.example./",
    "http://INTERNAL.example/",
    "http://mixed.example/",
    "http://mixed6.example/",
    "http://rebind.example/",
    "http://mapped.example/",
    "http://linklocal6.example/",
    "http://garbage.example/",
]


@pytest.mark.parametrize("url", HOSTILE)
def test_hostile_urls_are_blocked(url: str) -> None:
    assert blocked(url).kind == "ssrf_blocked_address"


LOOPBACK = [
    "http://127.0.0.1:8080/",
    "http://127.1/",
    "http://0x7f.1/",
    "http://017700000001/",
    "http://2130706433/",
    "http://[::1]/",
    "http://[::ffff:127.0.0.1]/",
    "http://[::ffff:7f00:1]/",
    "http://loopback.example:3000/",
]


@pytest.mark.parametrize("url", LOOPBACK)
def test_loopback_allowed_by_default_and_blockable(url: str) -> None:
    assert vet(url).connect_ip in ("127.0.0.1", "::1")
    assert blocked(url, allow_loopback=False).kind == "ssrf_blocked_address"


@pytest.mark.parametrize(
    ("url", "connect_ip"),
    [
        ("http://8.8.8.8/", "8.8.8.8"),
        ("http://168.63.129.17/", "168.63.129.17"),  # the WireServer's neighbour is public
        ("http://134744072/", "8.8.8.8"),
        ("https://[2606:4700::1111]/", "2606:4700::1111"),
        ("http://[fd::1]/", "fd::1"),  # 00fd::1, not fc00::/7: the spec's prefix-text bug
        ("http://[2002:808:808::1]/", "2002:808:808::1"),
        ("http://[64:ff9b::808:808]/", "64:ff9b::808:808"),
        ("http://public.example/", "93.184.216.34"),
    ],
)
def test_public_addresses_allowed(url: str, connect_ip: str) -> None:
    assert vet(url).connect_ip == connect_ip


def test_literal_checked_without_dns() -> None:
    assert blocked("http://169.254.169.254/", resolver=no_dns).kind == "ssrf_blocked_address"
    assert vet("http://127.0.0.1:8080/", resolver=no_dns).ips == ["127.0.0.1"]


def test_every_resolved_address_is_checked_and_named() -> None:
    err = blocked("http://mixed.example/")
    assert "mixed.example" in str(err) and "10.0.0.5" in str(err)


def test_blocked_pickles_with_kind_and_message() -> None:
    err = pickle.loads(pickle.dumps(Blocked("bad_url", "HTTP hook blocked: x")))
    assert (err.kind, str(err)) == ("bad_url", "HTTP hook blocked: x")


def test_blocked_literal_message_names_host_and_address() -> None:
    err = blocked("http://2852039166/")
    assert "2852039166" in str(err) and "169.254.169.254" in str(err)


def test_target_carries_the_vetted_address() -> None:
    target = vet("https://public.example/hook")
    assert target == Target(
        url="https://public.example/hook",
        host="public.example",
        port=443,
        scheme="https",
        ips=DNS["public.example"],
        connect_ip="93.184.216.34",
    )
    with pytest.raises(dataclasses.FrozenInstanceError):
        target.connect_ip = "10.0.0.1"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("resolver_table", "host"),
    [({}, "nowhere.example"), ({"empty.example": []}, "empty.example")],
)
def test_resolution_failure(resolver_table: dict[str, list[str]], host: str) -> None:
    err = blocked(f"http://{host}/", resolver=resolver_from(resolver_table))
    assert err.kind == "dns_failure" and host in str(err)


def test_invalid_inet_aton_spelling_is_a_name() -> None:
    # 0xa9fe > 255 cannot be a leading part, so neither inet_aton nor a browser reads this
    # as an address; it goes to DNS, where it fails.
    assert parse_host_literal("0xa9fe.0xa9fe") is None
    assert blocked("http://0xa9fe.0xa9fe/").kind == "dns_failure"


@pytest.mark.parametrize(
    ("url", "kind"),
    [
        ("ftp://example.com/", "unsupported_scheme"),
        ("file:///etc/passwd", "unsupported_scheme"),
        ("gopher://127.0.0.1:6379/_INFO", "unsupported_scheme"),
        ("javascript:alert(1)", "bad_url"),
        ("//example.com/", "bad_url"),
        ("example.com/hook", "bad_url"),
        ("http:/example.com/", "bad_url"),
        ("http:///example.com/", "bad_url"),
        ("http://example.com:99999/", "bad_url"),
        ("http://example.com:0/", "bad_url"),
        ("http://example.com:8o/", "bad_url"),
        ("http://[::1/", "bad_url"),
        ("http://[1.2.3.4]/", "bad_url"),
        ("http://[evil.com]/", "bad_url"),
        ("http://exa mple.com/", "bad_url"),
        ("http://example.com\\@evil.com/", "bad_url"),
        ("http://exa\tmple.com/", "bad_url"),
        ("http://example.com/\r\nHost: evil", "bad_url"),
    ],
)
def test_bad_urls_refused(url: str, kind: str) -> None:
    assert blocked(url, resolver=no_dns).kind == kind


# --------------------------------------------------------------------------- allowlist


@pytest.mark.parametrize(
    ("url", "patterns", "allowed"),
    [
        ("https://evil.com/h", ["https://hooks.example.com/*"], False),  # case 37
        ("https://hooks.example.com/h", ["https://hooks.example.com/*"], True),
        ("https://hooks.example.com", ["https://hooks.example.com/*"], True),
        ("https://hooks.example.com.evil.com/", ["https://hooks.example.com/*"], False),
        ("https://hooks.example.com@evil.com/", ["https://hooks.example.com/*"], False),
        ("https://u:p@hooks.example.com/h", ["https://hooks.example.com/*"], False),
        ("http://localhost:@evil.example/", ["http://localhost:*"], False),
        ("http://localhost:9999/x", ["http://localhost:*"], True),
        ("http://localhost/x", ["http://localhost:*"], True),
        ("http://localhost.evil.com/", ["http://localhost:*"], False),
        ("HTTPS://HOOKS.Example.COM./h", ["https://hooks.example.com/*"], True),
        ("https://hooks.example.com/h", ["HTTPS://Hooks.Example.com./*"], True),
        ("http://hooks.example.com/h", ["https://hooks.example.com/*"], False),
        ("https://hooks.example.com:8443/h", ["https://hooks.example.com/*"], False),
        ("https://hooks.example.com:443/h", ["https://hooks.example.com/*"], True),
        ("https://hooks.example.com:8443/h", ["https://hooks.example.com:8443/*"], True),
        ("https://a.b.example.com/x", ["https://*.example.com/*"], True),
        ("https://example.com/x", ["https://*.example.com/*"], False),
        ("https://evilexample.com/x", ["https://*.example.com/*"], False),
        ("https://h.example/hooks/a/b", ["https://h.example/hooks/*"], True),
        ("https://h.example/other", ["https://h.example/hooks/*"], False),
        ("https://h.example/hooks/../admin", ["https://h.example/hooks/*"], False),
        ("https://h.example/hooks/%2e%2E/admin", ["https://h.example/hooks/*"], False),
        ("https://h.example/hooks/..%2fadmin", ["https://h.example/hooks/*"], False),
        ("https://h.example/hook", ["https://h.example/hook"], True),
        ("https://h.example/hook/", ["https://h.example/hook"], False),
        ("https://h.example/hook?x=1#f", ["https://h.example/hook"], True),
        ("https://h.example/hook", ["https://h.example/hook?token=*"], False),
        ("https://h.example/hook?token=abc", ["https://h.example/hook?token=*"], True),
        ("http://[0:0::1]:8080/", ["http://[::1]:*"], True),
        ("http://127.1:8080/", ["http://127.0.0.1:*"], True),
        ("http://any.example/", ["http://*/*"], True),
        ("http://[::1]/", ["http://*/*"], False),  # `*` never matches ":", so no IPv6 literal
        ("http://[fe80::1%25eth0]/", ["http://[fe80::1%25eth0]/*"], True),
        ("https://xn--bcher-kva.example/", ["https://*.example/*"], True),
        ("https://bücher.example/", ["https://*.example/*"], False),
        ("https://ex%61mple.com/", ["https://example.com/*"], False),
        ("https://example.com/", ["*"], False),  # unparsable pattern fails closed
        ("https://example.com/", ["https://*@example.com/*"], False),
        ("ftp://example.com/", ["ftp://example.com/*"], False),
        ("https://example.com/", None, True),
        ("https://example.com/", [], False),
        ("not a url", None, True),  # None allows everything; vet_url still refuses it
    ],
)
def test_url_allowed(url: str, patterns: list[str] | None, allowed: bool) -> None:
    assert url_allowed(url, patterns) is allowed


def test_vet_url_not_allowed_message() -> None:
    url = "https://evil.com/h"
    with pytest.raises(Blocked) as info:
        run(vet_url(url, patterns=["https://hooks.example.com/*"], resolver=no_dns))
    assert info.value.kind == "url_not_allowed"
    assert str(info.value) == (
        "HTTP hook blocked: https://evil.com/h does not match any pattern in allowedHttpHookUrls"
    )


def test_allowlist_does_not_bypass_address_check() -> None:
    err = blocked("http://internal.example:8080/", patterns=["http://internal.example:*"])
    assert err.kind == "ssrf_blocked_address"


# --------------------------------------------------------------------------- headers


def test_case_38_policy_intersection_empties_the_value() -> None:
    headers, warnings = interpolate_headers(
        {"Authorization": "Bearer $MY_TOKEN"}, ["MY_TOKEN"], ["OTHER"], {"MY_TOKEN": "s3cret"}
    )
    assert headers == {"Authorization": "Bearer "}
    assert len(warnings) == 1
    assert "MY_TOKEN" in warnings[0] and "Authorization" in warnings[0]
    assert "s3cret" not in warnings[0]


def test_case_39_crlf_stripped_after_interpolation() -> None:
    headers, warnings = interpolate_headers(
        {"X": "${MY_TOKEN}"}, ["MY_TOKEN"], None, {"MY_TOKEN": "a\r\nEvil: 1"}
    )
    assert headers == {"X": "aEvil: 1"} and warnings == []


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("Bearer ${TOK}", "Bearer t"),
        ("Bearer $TOK", "Bearer t"),
        ("$TOK$TOK", "tt"),
        ("${TOK}x", "tx"),
        ("$name", "$name"),
        ("${name}", "${name}"),
        ("${TOK", "${TOK"),
        ("$", "$"),
        ("$1", "$1"),
        ("$UNSET", ""),
        ("a$NESTEDb", "a$TOKb"),  # one pass: a value's own $TOK is not expanded
        ("nul\x00here", "nulhere"),
        ("x\r\ny\x00z", "xyz"),
    ],
)
def test_interpolation(value: str, expected: str) -> None:
    env = {"TOK": "t", "NESTED": "$TOK", "name": "lower"}
    allowed = ["TOK", "NESTED", "UNSET", "name"]
    headers, warnings = interpolate_headers({"H": value}, allowed, None, env)
    assert headers == {"H": expected} and warnings == []


def test_unlisted_variable_becomes_empty_with_warning() -> None:
    headers, warnings = interpolate_headers(
        {"X-Key": "k=${SECRET}"}, ["OTHER"], None, {"SECRET": "leak"}
    )
    assert headers == {"X-Key": "k="}
    assert len(warnings) == 1 and "SECRET" in warnings[0] and "X-Key" in warnings[0]


def test_no_allowed_env_vars_means_none() -> None:
    headers, warnings = interpolate_headers({"X": "$HOME"}, None, None, {"HOME": "/root"})
    assert headers == {"X": ""} and len(warnings) == 1


@pytest.mark.parametrize(
    "name", ["X-Evil\r\nInjected", "Bad Name", "Colon:Name", "", "Nul\x00", "Ünicode", "(x)"]
)
def test_invalid_header_names_dropped(name: str) -> None:
    headers, warnings = interpolate_headers({name: "v", "X-Ok": "v"}, None, None, {})
    assert headers == {"X-Ok": "v"}
    assert len(warnings) == 1 and repr(name) in warnings[0]


def test_token_header_names_kept() -> None:
    names = {"Content-Type": "a", "X_Weird!#$%&'*+.^`|~9": "b"}
    assert interpolate_headers(names, None, None, {}) == (names, [])


# --------------------------------------------------------------------------- proxy


@pytest.mark.parametrize(
    ("url", "env", "proxy"),
    [
        ("https://a.example/", {}, None),
        ("https://a.example/", {"HTTPS_PROXY": "http://p:1"}, "http://p:1"),
        ("http://a.example/", {"HTTPS_PROXY": "http://p:1"}, "http://p:1"),
        ("http://a.example/", {"https_proxy": "http://p:1"}, "http://p:1"),
        ("https://a.example/", {"HTTP_PROXY": "http://p:2"}, "http://p:2"),
        ("https://a.example/", {"http_proxy": "http://p:2"}, "http://p:2"),
        ("https://a.example/", {"HTTPS_PROXY": "", "HTTP_PROXY": "http://p:2"}, "http://p:2"),
        ("https://a.example/", {"HTTPS_PROXY": "http://p:1", "NO_PROXY": "*"}, None),
        ("https://a.example/", {"HTTPS_PROXY": "http://p:1", "no_proxy": "x.com, *"}, None),
        ("https://x.example.com/", {"HTTPS_PROXY": "p", "NO_PROXY": ".example.com"}, None),
        ("https://example.com/", {"HTTPS_PROXY": "p", "NO_PROXY": ".example.com"}, None),
        ("https://x.example.com/", {"HTTPS_PROXY": "p", "NO_PROXY": "*.example.com"}, None),
        ("https://x.example.com/", {"HTTPS_PROXY": "p", "NO_PROXY": "example.com"}, None),
        ("https://badexample.com/", {"HTTPS_PROXY": "p", "NO_PROXY": "example.com"}, "p"),
        ("https://Example.COM./", {"HTTPS_PROXY": "p", "NO_PROXY": "example.com."}, None),
        ("https://a.example/", {"HTTPS_PROXY": "p", "NO_PROXY": "b.example a.example"}, None),
        ("https://a.example/", {"HTTPS_PROXY": "p", "NO_PROXY": "a.example:443"}, None),
        ("https://a.example/", {"HTTPS_PROXY": "p", "NO_PROXY": "a.example:8443"}, "p"),
        ("http://10.1.2.3/", {"HTTPS_PROXY": "p", "NO_PROXY": "10.0.0.0/8"}, None),
        ("http://11.1.2.3/", {"HTTPS_PROXY": "p", "NO_PROXY": "10.0.0.0/8"}, "p"),
        ("http://127.0.0.1:8080/", {"HTTPS_PROXY": "p", "NO_PROXY": "127.0.0.1"}, None),
        ("http://[::1]:8080/", {"HTTPS_PROXY": "p", "NO_PROXY": "::1"}, None),
        ("http://[::1]:8080/", {"HTTPS_PROXY": "p", "NO_PROXY": "[::1]"}, None),
        ("http://localhost/", {"HTTPS_PROXY": "p", "NO_PROXY": "127.0.0.1"}, "p"),
    ],
)
def test_proxy_for(url: str, env: dict[str, str], proxy: str | None) -> None:
    assert proxy_for(url, env) == proxy


@pytest.mark.parametrize(
    "url", ["http://169.254.169.254/", "http://[::ffff:a9fe:a9fe]/", "http://internal.example/"]
)
def test_proxy_skips_the_address_guard(url: str) -> None:
    proxy = proxy_for(url, {"HTTPS_PROXY": "http://proxy:3128"})
    target = vet(url, proxy=proxy, resolver=no_dns)
    assert target.connect_ip == "" and target.ips == []


def test_proxy_does_not_skip_the_allowlist() -> None:
    err = blocked("https://evil.com/", patterns=[], proxy="http://proxy:3128", resolver=no_dns)
    assert err.kind == "url_not_allowed"


def test_conformance_40() -> None:
    assert blocked("http://169.254.169.254/").kind == "ssrf_blocked_address"
    assert blocked("http://[::ffff:a9fe:a9fe]/").kind == "ssrf_blocked_address"
    assert blocked("http://internal.example/").kind == "ssrf_blocked_address"
    assert vet("http://127.0.0.1:8080/").connect_ip == "127.0.0.1"


# --------------------------------------------------------------------------- literals


@pytest.mark.parametrize(
    ("host", "address"),
    [
        ("169.254.169.254", "169.254.169.254"),
        ("169.254.169.254.", "169.254.169.254"),
        ("2852039166", "169.254.169.254"),
        ("0251.0376.0251.0376", "169.254.169.254"),
        ("0xA9FEA9FE", "169.254.169.254"),
        ("0xa9.0xfe.0xa9.0xfe", "169.254.169.254"),
        ("127.1", "127.0.0.1"),
        ("10.1.1", "10.1.0.1"),
        ("010.0.0.1", "8.0.0.1"),
        ("0", "0.0.0.0"),
        ("0x", "0.0.0.0"),  # WHATWG reads an empty hex part as 0; glibc refuses it
        ("4294967295", "255.255.255.255"),
        ("[::1]", "::1"),
        ("::ffff:169.254.169.254", "::ffff:a9fe:a9fe"),
        ("[fe80::1%25eth0]", "fe80::1%eth0"),
        ("fe80::1%eth0", "fe80::1%eth0"),
    ],
)
def test_parse_host_literal(host: str, address: str) -> None:
    assert parse_host_literal(host) == ipaddress.ip_address(address)


@pytest.mark.parametrize(
    "host",
    [
        "example.com",
        "localhost",
        "4294967296",
        "256.1.1.1",
        "1.2.3.4.5",
        "08.1.1.1",
        "1..1",
        "1.2.3.4..",
        ".1.2.3",
        "[1.2.3.4]",
        "[::1",
        "١٢٧.٠.٠.١",
        "1_0.0.0.1",
        "+1.2.3.4",
        " 1.2.3.4",
        "0x1g",
        "",
    ],
)
def test_parse_host_literal_rejects_names_and_nonsense(host: str) -> None:
    assert parse_host_literal(host) is None


@pytest.mark.parametrize(
    ("ip", "allow_loopback", "reason"),
    [
        (METADATA, True, "cloud metadata"),
        ("::ffff:a9fe:a9fe", True, "IPv4-mapped"),
        ("2002:a9fe:a9fe::", True, "6to4"),
        ("64:ff9b::a9fe:a9fe", True, "NAT64"),
        ("::a9fe:a9fe", True, "IPv4-compatible"),
        ("2001::1", True, "Teredo"),
        # published cloud-metadata addresses, named in the reason (issue 11)
        ("168.63.129.16", True, "Azure WireServer"),
        ("::ffff:168.63.129.16", True, "Azure WireServer"),
        ("64:ff9b::a83f:8110", True, "Azure WireServer"),
        ("2002:a83f:8110::", True, "Azure WireServer"),
        ("100.100.100.200", True, "Alibaba"),
        ("169.254.170.2", True, "ECS"),
        ("169.254.170.23", True, "EKS"),
        ("169.254.0.23", True, "Tencent"),
        ("192.0.0.192", True, "Oracle"),
        ("fd00:ec2::254", True, "AWS IMDS IPv6"),
        ("fd20:ce::254", True, "unique local"),  # GCP's IPv6 metadata
        ("fd00:c1::a9fe:a9fe", True, "unique local"),  # Oracle's IPv6 metadata
        ("127.0.0.1", False, "loopback"),
        ("::1", False, "loopback"),
        ("localhost", True, "not an IP address"),
    ],
)
def test_check_address_reasons(
    ip: str | ipaddress.IPv4Address, allow_loopback: bool, reason: str
) -> None:
    assert reason in (check_address(ip, allow_loopback=allow_loopback) or "")


# --------------------------------------------------------------------------- properties

BLOCKED_V4 = [
    ipaddress.IPv4Network(n)
    for n in (
        "0.0.0.0/8",
        "10.0.0.0/8",
        "100.64.0.0/10",
        "169.254.0.0/16",
        "168.63.129.16/32",
        "172.16.0.0/12",
        "192.0.0.0/24",
        "192.168.0.0/16",
        "198.18.0.0/15",
        "224.0.0.0/4",
        "240.0.0.0/4",
    )
]


@st.composite
def blocked_v4(draw: st.DrawFn) -> ipaddress.IPv4Address:
    net = draw(st.sampled_from(BLOCKED_V4))
    offset = draw(st.integers(0, net.num_addresses - 1))
    return net[offset]


@given(blocked_v4(), st.booleans())
def test_blocked_v4_blocked_in_every_embedding(ip: ipaddress.IPv4Address, loop: bool) -> None:
    n = int(ip)
    spellings: list[str | ipaddress.IPv4Address | ipaddress.IPv6Address] = [
        ip,
        str(ip),
        f"::ffff:{ip}",
        ipaddress.IPv6Address(0xFFFF << 32 | n),  # IPv4-mapped
        ipaddress.IPv6Address(0xFFFF << 48 | n).exploded,  # IPv4-translated
        ipaddress.IPv6Address(0x64FF9B << 96 | n),  # NAT64
        ipaddress.IPv6Address(0x2002 << 112 | n << 80),  # 6to4
    ]
    if n > 1:
        spellings.append(ipaddress.IPv6Address(n))  # IPv4-compatible
    for spelling in spellings:
        assert check_address(spelling, allow_loopback=loop) is not None, spelling


@given(st.integers(0, 2**32 - 1))
def test_parse_host_literal_reads_every_ipv4_spelling(n: int) -> None:
    ip = ipaddress.IPv4Address(n)
    octets = ip.packed
    for spelling in (str(ip), str(n), hex(n), ".".join(f"0{b:o}" for b in octets)):
        assert parse_host_literal(spelling) == ip


@given(st.text(alphabet="0123456789abcdefxX.", max_size=24))
def test_parse_host_literal_agrees_with_inet_aton(text: str) -> None:
    ours = parse_host_literal(text)
    try:
        theirs: ipaddress.IPv4Address | None = ipaddress.IPv4Address(socket.inet_aton(text))
    except OSError:
        theirs = None
    if theirs is not None:
        assert ours == theirs
    elif ours is not None:
        # Only WHATWG's extras: one trailing dot, or an empty "0x" part read as 0.
        assert text.endswith(".") or re.search(r"(^|\.)0[xX](\.|$)", text)


@given(st.text())
def test_parse_host_literal_never_raises(text: str) -> None:
    parse_host_literal(text)


@given(st.text(), st.booleans())
def test_check_address_never_raises(text: str, loop: bool) -> None:
    result = check_address(text, allow_loopback=loop)
    assert result is None or isinstance(result, str)


@given(st.text(), st.lists(st.text(), max_size=3))
def test_url_allowed_never_raises(url: str, patterns: list[str]) -> None:
    url_allowed(url, patterns)
    url_allowed("http://" + url, ["http://" + p for p in patterns])
    url_allowed("https://example.com/" + url, ["https://example.com/" + p for p in patterns])


@given(st.text(), st.text())
def test_proxy_for_never_raises(url: str, no_proxy: str) -> None:
    proxy_for("http://" + url, {"HTTPS_PROXY": "p", "NO_PROXY": no_proxy})


@given(st.text())
def test_vet_url_raises_only_blocked(url: str) -> None:
    with contextlib.suppress(Blocked):
        vet("http://" + url, resolver=resolver_from(DNS))
