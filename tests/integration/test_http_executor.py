"""HttpExecutor against real HTTP(S) servers on 127.0.0.1 (spec §6.5; cases 36-40).

The policy server is a ``ThreadingHTTPServer`` in a thread that records every request it
gets, so "nothing was sent" is checked where it matters: on the server. Name resolution
goes through injected resolvers; names end in ``.invalid`` so that any lookup that went
to the system resolver instead would fail the test.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import shutil
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import msgspec
import pytest

from engine.effects import Invocation, RawResult
from engine.executors.http import HttpExecutor
from engine.records import HookIdentity, new_event
from engine.run import Engine
from engine.settings import HttpHook, parse_settings
from engine.sources import Source, merge
from engine.verdict import decode
from tests.support import httpd

METADATA = "http://169.254.169.254/latest/meta-data/"
HUGE = 3 * 1024 * 1024
ALLOW = {"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "allow"}}
DENY = {
    "hookSpecificOutput": {
        "hookEventName": "PreToolUse",
        "permissionDecision": "deny",
        "permissionDecisionReason": "no rm",
    }
}
INPUT: dict[str, Any] = {
    "hook_event_name": "PreToolUse",
    "session_id": "s1",
    "cwd": "/tmp",
    "tool_name": "Bash",
    "tool_input": {"command": "rm -rf /"},
}


@dataclasses.dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    raw_headers: list[tuple[str, str]]
    body: bytes
    sni: str | None


class PolicyServer:
    """Routes by path; records every request (and the TLS server name, if any)."""

    def __init__(self, tls: ssl.SSLContext | None = None) -> None:
        self.requests: list[Seen] = []
        self.lock = threading.Lock()
        self.sni: dict[int, str | None] = {}
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body are two writes

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n)
                sni = getattr(self.connection, "hookaudit_sni", None)
                with server.lock:
                    server.requests.append(
                        Seen(
                            self.command,
                            self.path,
                            {k.lower(): v for k, v in self.headers.items()},
                            list(self.headers.items()),
                            body,
                            sni,
                        )
                    )
                route = self.path.rsplit("/", 1)[-1]
                server.route(self, route, body)

            do_GET = do_POST

        if tls is not None:

            def remember(sock: ssl.SSLObject | ssl.SSLSocket, name: str | None, _: Any) -> None:
                sock.hookaudit_sni = name  # type: ignore[union-attr]

            tls.sni_callback = remember
        self.httpd = httpd.serve(Handler, tls=tls)
        self.port = httpd.port(self.httpd)

    def url(self, route: str, host: str = "127.0.0.1", scheme: str = "http") -> str:
        return f"{scheme}://{host}:{self.port}/hooks/{route}"

    def close(self) -> None:
        httpd.stop(self.httpd)

    @staticmethod
    def send(h: BaseHTTPRequestHandler, status: int, body: bytes, **headers: str) -> None:
        try:
            h.send_response(status)
            for name, value in headers.items():
                h.send_header(name.replace("_", "-"), value)
            h.send_header("Content-Length", str(len(body)))
            h.end_headers()
            h.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            h.close_connection = True  # the client gave up (timeout and cap tests)

    def route(self, h: BaseHTTPRequestHandler, route: str, body: bytes) -> None:
        js = {"Content_Type": "application/json"}
        if route == "allow":
            self.send(h, 200, json.dumps(ALLOW).encode(), **js)
        elif route == "deny":
            self.send(h, 200, json.dumps(DENY).encode(), **js)
        elif route == "empty":
            self.send(h, 200, b"")
        elif route == "error500":
            self.send(h, 500, b'{"error": "boom"}', **js)
        elif route == "text":
            self.send(h, 200, b"ok", Content_Type="text/plain")
        elif route == "async":
            self.send(h, 200, b'{"async": true}', **js)
        elif route == "redirect":
            self.send(h, 302, b"", Location=METADATA)
        elif route == "slow":
            time.sleep(2.0)
            self.send(h, 200, b"{}", **js)
        elif route == "huge":
            self.send(h, 200, b"x" * HUGE)
        elif route == "echo":
            out = {
                "path": h.path,
                "headers": [[k, v] for k, v in h.headers.items()],
                "body": body.decode(),
            }
            self.send(h, 200, json.dumps({"systemMessage": json.dumps(out)}).encode(), **js)
        else:
            self.send(h, 404, b"")


@pytest.fixture(scope="module")
def server() -> Iterator[PolicyServer]:
    srv = PolicyServer()
    try:
        yield srv
    finally:
        srv.close()


@pytest.fixture
def policy(server: PolicyServer) -> PolicyServer:
    with server.lock:
        server.requests.clear()
    return server


class Resolver:
    """An injectable resolver: a fixed table, or a sequence of answers; counts calls."""

    def __init__(self, table: dict[str, list[str]] | None = None, *answers: list[str]) -> None:
        self.table = table or {}
        self.answers = list(answers)
        self.calls: list[str] = []

    async def __call__(self, host: str, port: int) -> list[str]:
        self.calls.append(host)
        if self.answers:
            return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if host in self.table:
            return self.table[host]
        raise OSError(f"unknown test host {host}")


@pytest.fixture
async def executor() -> AsyncIterator[HttpExecutor]:
    ex = HttpExecutor(environ={"MY_TOKEN": "tok-123", "SECRET": "s3cr3t", "OTHER": "o"})
    try:
        yield ex
    finally:
        await ex.aclose()


def make_inv(
    url: str,
    *,
    headers: dict[str, str] | None = None,
    allowed_env: list[str] | None = None,
    timeout: float = 5.0,
    payload: dict[str, Any] | None = None,
) -> Invocation:
    raw: dict[str, Any] = {"type": "http", "url": url, "headers": headers or {}}
    if allowed_env is not None:
        raw["allowedEnvVars"] = allowed_env
    hook = HttpHook.model_validate(raw)
    doc = payload or INPUT
    return Invocation(
        index=0,
        event=doc["hook_event_name"],
        hook=hook,
        identity=HookIdentity(type="http", source="user", url=url),
        source="user",
        matcher="Bash",
        timeout=timeout,
        payload=doc,
        input_json=json.dumps(doc).encode(),
        cwd="/tmp",
    )


def echoed(res: RawResult) -> dict[str, Any]:
    assert res.http_status == 200, res
    inner: dict[str, Any] = json.loads(json.loads(res.stdout)["systemMessage"])
    return inner


def header(res: RawResult, name: str) -> list[str]:
    return [v for k, v in echoed(res)["headers"] if k.lower() == name.lower()]


# --------------------------------------------------------------------------- answers (case 36)


async def test_allow_and_deny_bodies_are_decoded_like_stdout(
    executor: HttpExecutor, policy: PolicyServer
) -> None:
    inv = make_inv(policy.url("deny"))
    res = await executor.run(inv)
    assert (res.http_status, res.error_kind) == (200, None)
    v = decode(inv, res)
    assert (v.outcome, v.blocking, v.permission_decision) == ("deny", True, "deny")
    assert v.reason == "no rm"
    allow = await executor.run(make_inv(policy.url("allow")))
    assert decode(inv, allow).permission_decision == "allow"
    seen = policy.requests[0]
    assert seen.method == "POST"
    assert seen.body == inv.input_json  # the event JSON, byte for byte
    assert seen.headers["content-type"] == "application/json"


@pytest.mark.parametrize(
    ("route", "outcome", "kind"),
    [("empty", "noop", None), ("error500", "error", "http_status"), ("text", "error", "http_body")],
)
async def test_case_36_empty_500_and_plain_text(
    executor: HttpExecutor, policy: PolicyServer, route: str, outcome: str, kind: str | None
) -> None:
    inv = make_inv(policy.url(route))
    res = await executor.run(inv)
    assert res.error_kind is None and res.http_status is not None
    v = decode(inv, res)
    assert (v.outcome, v.blocking, v.error_kind) == (outcome, False, kind)
    assert v.additional_context == ()  # plain text is never context


async def test_async_answer_is_a_no_op(executor: HttpExecutor, policy: PolicyServer) -> None:
    inv = make_inv(policy.url("async"))
    v = decode(inv, await executor.run(inv))
    assert v.outcome == "noop" and v.specific.get("async") is True


async def test_redirect_to_metadata_is_an_answer_never_followed(
    executor: HttpExecutor, policy: PolicyServer
) -> None:
    inv = make_inv(policy.url("redirect"))
    res = await executor.run(inv)
    assert res.http_status == 302 and res.error_kind is None
    assert len(policy.requests) == 1  # no second request anywhere
    v = decode(inv, res)
    assert (v.outcome, v.error_kind, v.blocking) == ("error", "http_status", False)


async def test_timeout_cancels_without_a_decision(
    executor: HttpExecutor, policy: PolicyServer
) -> None:
    t0 = time.perf_counter()
    res = await executor.run(make_inv(policy.url("slow"), timeout=0.3))
    elapsed = time.perf_counter() - t0
    assert res.error_kind == "timeout" and res.http_status is None
    assert "0.3 s" in (res.error or "")
    assert elapsed >= 0.3  # it waited out its timeout; the slow route would answer much later


async def test_huge_body_is_capped_and_counted(policy: PolicyServer) -> None:
    ex = HttpExecutor(environ={}, body_cap=64 * 1024)
    try:
        res = await ex.run(make_inv(policy.url("huge")))
    finally:
        await ex.aclose()
    assert res.http_status == 200 and res.truncated
    assert len(res.stdout) == 64 * 1024
    assert res.stdout_bytes == HUGE
    assert "truncated" in res.stderr
    small = HttpExecutor(environ={}, body_cap=1024, discard_cap=100 * 1024)
    try:
        res = await small.run(make_inv(policy.url("huge")))
    finally:
        await small.aclose()
    # Stops reading after cap + discard cap: counted up to there, never the whole body.
    assert res.truncated and 1024 + 100 * 1024 <= res.stdout_bytes < HUGE


async def test_connection_refused_is_a_transport_error(executor: HttpExecutor) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    res = await executor.run(make_inv(f"http://127.0.0.1:{port}/h"))
    assert res.error_kind == "http_transport" and res.http_status is None
    assert f"127.0.0.1:{port}" in (res.error or "")


# --------------------------------------------------------------------------- headers (38, 39)


async def test_case_38_policy_env_allowlist_empties_the_header(
    policy: PolicyServer,
) -> None:
    ex = HttpExecutor(environ={"MY_TOKEN": "tok-123"}, env_allowlist=["OTHER"])
    try:
        res = await ex.run(
            make_inv(
                policy.url("echo"),
                headers={"Authorization": "Bearer $MY_TOKEN"},
                allowed_env=["MY_TOKEN"],
            )
        )
    finally:
        await ex.aclose()
    assert [v.strip() for v in header(res, "Authorization")] == ["Bearer"]
    assert "httpHookAllowedEnvVars" in res.stderr
    assert "tok-123" not in policy.requests[0].raw_headers.__repr__()


async def test_allowed_variable_is_sent(executor: HttpExecutor, policy: PolicyServer) -> None:
    res = await executor.run(
        make_inv(
            policy.url("echo"),
            headers={"Authorization": "Bearer ${MY_TOKEN}"},
            allowed_env=["MY_TOKEN"],
        )
    )
    assert header(res, "Authorization") == ["Bearer tok-123"]
    assert res.stderr == ""


async def test_case_39_crlf_is_stripped_no_header_injection(policy: PolicyServer) -> None:
    ex = HttpExecutor(environ={"MY_TOKEN": "a\r\nEvil: 1"})
    try:
        res = await ex.run(
            make_inv(policy.url("echo"), headers={"X": "${MY_TOKEN}"}, allowed_env=["MY_TOKEN"])
        )
    finally:
        await ex.aclose()
    assert header(res, "X") == ["aEvil: 1"]
    assert header(res, "Evil") == []


async def test_env_exfiltration_attempts_send_nothing(
    executor: HttpExecutor, policy: PolicyServer
) -> None:
    res = await executor.run(
        make_inv(
            policy.url("echo"),
            headers={
                "X-Leak": "$SECRET",
                "X-Leak2": "pre-${SECRET}-post",
                "X-Lower": "$secret",  # lower-case names are never variables
                "X-Nested": "${MY_TOKEN}",  # allowed, but its value is not expanded again
            },
            allowed_env=["MY_TOKEN"],
        )
    )
    assert header(res, "X-Leak") == [""] or header(res, "X-Leak") == []
    assert header(res, "X-Leak2") == ["pre--post"]
    assert header(res, "X-Lower") == ["$secret"]
    assert "s3cr3t" not in json.dumps(echoed(res))
    assert res.stderr.count("SECRET") == 2


async def test_nested_value_is_not_expanded_again(policy: PolicyServer) -> None:
    ex = HttpExecutor(environ={"MY_TOKEN": "$SECRET", "SECRET": "s3cr3t"})
    try:
        res = await ex.run(
            make_inv(
                policy.url("echo"),
                headers={"X": "$MY_TOKEN"},
                allowed_env=["MY_TOKEN", "SECRET"],
            )
        )
    finally:
        await ex.aclose()
    assert header(res, "X") == ["$SECRET"]


async def test_hook_headers_override_ours_but_not_framing(
    executor: HttpExecutor, policy: PolicyServer
) -> None:
    res = await executor.run(
        make_inv(
            policy.url("echo"),
            headers={
                "content-type": "application/x-policy+json",
                "Host": "evil.example",
                "Content-Length": "0",
                "Transfer-Encoding": "chunked",
                "X-Ctl": "a\x01b",
                "Bad Name": "v",
            },
        )
    )
    assert header(res, "Content-Type") == ["application/x-policy+json"]
    assert header(res, "Host") == [f"127.0.0.1:{policy.port}"]
    assert header(res, "Transfer-Encoding") == [] and header(res, "X-Ctl") == []
    assert echoed(res)["body"] == json.dumps(INPUT)
    for name in ("Host", "Content-Length", "Transfer-Encoding", "X-Ctl", "Bad Name"):
        assert repr(name) in res.stderr


# --------------------------------------------------------------------------- allowlist (37)


async def test_case_37_url_not_allowed_sends_nothing(policy: PolicyServer) -> None:
    ex = HttpExecutor(environ={}, allowed_urls=["https://hooks.example.com/*"])
    try:
        res = await ex.run(make_inv(policy.url("allow")))
    finally:
        await ex.aclose()
    assert res.error_kind == "url_not_allowed" and res.http_status is None
    assert "allowedHttpHookUrls" in (res.error or "")
    assert policy.requests == []
    v = decode(make_inv(policy.url("allow")), res)
    assert (v.outcome, v.blocking) == ("error", False)


async def test_per_invocation_policy_applies_too(
    executor: HttpExecutor, policy: PolicyServer
) -> None:
    base = make_inv(policy.url("echo"), headers={"X": "$MY_TOKEN"}, allowed_env=["MY_TOKEN"])
    denied = msgspec.structs.replace(base, allowed_http_urls=("https://hooks.example.com/*",))
    res = await executor.run(denied)
    assert res.error_kind == "url_not_allowed" and policy.requests == []
    allowed = msgspec.structs.replace(
        denied,
        allowed_http_urls=(f"http://127.0.0.1:{policy.port}/hooks/*",),
        http_env_allowlist=("OTHER",),
    )
    res = await executor.run(allowed)
    assert header(res, "X") == [""]  # MY_TOKEN is not in the policy's list
    # The userinfo trick that fools Claude Code's whole-URL glob does not match here.
    trick = msgspec.structs.replace(
        denied,
        hook=HttpHook(type="http", url=f"http://127.0.0.1:{policy.port}@evil.invalid/"),
        allowed_http_urls=("http://127.0.0.1:*",),
    )
    assert (await executor.run(trick)).error_kind == "url_not_allowed"


# --------------------------------------------------------------------------- SSRF (40)


@pytest.mark.parametrize(
    "url", [METADATA, "http://[::ffff:a9fe:a9fe]/", "http://0xA9FEA9FE/", "http://10.0.0.5/"]
)
async def test_case_40_literal_addresses_blocked(executor: HttpExecutor, url: str) -> None:
    res = await executor.run(make_inv(url))
    assert res.error_kind == "ssrf_blocked_address", res
    assert res.http_status is None


async def test_case_40_name_resolving_to_private_is_blocked_and_nothing_sent(
    policy: PolicyServer,
) -> None:
    resolver = Resolver(
        {"internal.invalid": ["10.0.0.5"], "mixed.invalid": ["127.0.0.1", "10.0.0.5"]}
    )
    ex = HttpExecutor(environ={}, resolver=resolver)
    try:
        first = await ex.run(make_inv(policy.url("allow", host="internal.invalid")))
        second = await ex.run(make_inv(policy.url("allow", host="mixed.invalid")))
    finally:
        await ex.aclose()
    assert first.error_kind == second.error_kind == "ssrf_blocked_address"
    assert "10.0.0.5" in (first.error or "") and "10.0.0.5" in (second.error or "")
    assert policy.requests == []


async def test_case_40_loopback_allowed_by_default_and_configurable(policy: PolicyServer) -> None:
    ok = HttpExecutor(environ={})
    strict = HttpExecutor(environ={}, allow_loopback=False)
    try:
        assert (await ok.run(make_inv(policy.url("allow")))).http_status == 200
        blocked = await strict.run(make_inv(policy.url("allow")))
    finally:
        await ok.aclose()
        await strict.aclose()
    assert blocked.error_kind == "ssrf_blocked_address"
    assert len(policy.requests) == 1


async def test_connects_to_the_vetted_address_without_a_second_lookup(
    policy: PolicyServer,
) -> None:
    """DNS rebinding: the first answer is checked and used; a second would be private."""
    resolver = Resolver(None, ["127.0.0.1"], ["10.0.0.5"])
    ex = HttpExecutor(environ={}, resolver=resolver)
    try:
        res = await ex.run(make_inv(policy.url("echo", host="rebind.invalid")))
    finally:
        await ex.aclose()
    assert res.http_status == 200 and res.error_kind is None
    assert resolver.calls == ["rebind.invalid"]  # exactly once
    assert header(res, "Host") == [f"rebind.invalid:{policy.port}"]
    assert len(policy.requests) == 1


async def test_concurrent_hooks_each_use_their_own_vetted_address(policy: PolicyServer) -> None:
    names = [f"h{i}.invalid" for i in range(12)]
    table = {n: ["127.0.0.1"] for n in names} | {"bad.invalid": ["10.1.2.3"]}
    ex = HttpExecutor(environ={}, resolver=Resolver(table))
    try:
        invs = [make_inv(policy.url("echo", host=n)) for n in [*names, "bad.invalid"]]
        results = await asyncio.gather(*(ex.run(i) for i in invs))
    finally:
        await ex.aclose()
    for name, res in zip(names, results[:-1], strict=True):
        assert header(res, "Host") == [f"{name}:{policy.port}"]
    assert results[-1].error_kind == "ssrf_blocked_address"
    assert len(policy.requests) == len(names)


async def test_the_pool_never_connects_without_a_vetted_pin(policy: PolicyServer) -> None:
    """White-box: a request that bypassed vetting cannot open a socket at all."""
    import httpx

    ex = HttpExecutor(environ={})
    try:
        with pytest.raises(httpx.ConnectError, match="unvetted"):
            await ex._direct_client().post(policy.url("allow"), content=b"{}")
    finally:
        await ex.aclose()
    assert policy.requests == []


async def test_dns_failure_is_blocked(executor: HttpExecutor) -> None:
    ex = HttpExecutor(environ={}, resolver=Resolver({}))
    try:
        res = await ex.run(make_inv("http://nowhere.invalid/h"))
    finally:
        await ex.aclose()
    assert res.error_kind == "dns_failure"


async def test_case_40_proxy_skips_the_guard(policy: PolicyServer) -> None:
    """With HTTP(S)_PROXY the proxy resolves; our guard is skipped and nothing is looked up."""
    resolver = Resolver({"metadata.invalid": ["169.254.169.254"]})
    env = {"HTTPS_PROXY": f"http://127.0.0.1:{policy.port}"}
    ex = HttpExecutor(environ=env, resolver=resolver)
    try:
        res = await ex.run(make_inv("http://metadata.invalid/hooks/allow"))
        bypass = HttpExecutor(environ={**env, "NO_PROXY": ".invalid"}, resolver=resolver)
        try:
            direct = await bypass.run(make_inv("http://metadata.invalid/hooks/allow"))
        finally:
            await bypass.aclose()
    finally:
        await ex.aclose()
    assert res.http_status == 200
    assert policy.requests[0].path == "http://metadata.invalid/hooks/allow"  # absolute form
    assert direct.error_kind == "ssrf_blocked_address"
    assert resolver.calls == ["metadata.invalid"]  # only the NO_PROXY (direct) request resolved
    assert len(policy.requests) == 1


async def test_settings_env_cannot_choose_a_proxy(policy: PolicyServer) -> None:
    """A group's `env` reaches header interpolation, never the proxy choice (no guard bypass)."""
    resolver = Resolver({"metadata.invalid": ["169.254.169.254"]})
    ex = HttpExecutor(environ={}, resolver=resolver)
    inv = msgspec.structs.replace(
        make_inv("http://metadata.invalid/hooks/allow"),
        env={"HTTPS_PROXY": f"http://127.0.0.1:{policy.port}", "CLAUDE_PROJECT_DIR": "/p"},
    )
    try:
        res = await ex.run(inv)
    finally:
        await ex.aclose()
    assert res.error_kind == "ssrf_blocked_address"
    assert policy.requests == []


# --------------------------------------------------------------------------- TLS


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[PolicyServer, str]]:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a test certificate")
    d = tmp_path_factory.mktemp("tls")
    cert, key = d / "cert.pem", d / "key.pem"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            "-subj", "/CN=policy.invalid", "-addext", "subjectAltName=DNS:policy.invalid",
            "-keyout", str(key), "-out", str(cert),
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    srv = PolicyServer(tls=ctx)
    try:
        yield srv, str(cert)
    finally:
        srv.close()


async def test_tls_uses_the_host_name_for_sni_and_verification(
    tls_server: tuple[PolicyServer, str],
) -> None:
    srv, cafile = tls_server
    resolver = Resolver({"policy.invalid": ["127.0.0.1"], "other.invalid": ["127.0.0.1"]})
    ex = HttpExecutor(
        environ={}, resolver=resolver, verify=ssl.create_default_context(cafile=cafile)
    )
    try:
        good = await ex.run(make_inv(srv.url("echo", host="policy.invalid", scheme="https")))
        bad = await ex.run(make_inv(srv.url("echo", host="other.invalid", scheme="https")))
    finally:
        await ex.aclose()
    assert good.http_status == 200, good
    assert header(good, "Host") == [f"policy.invalid:{srv.port}"]
    assert srv.requests[0].sni == "policy.invalid"
    # Connected to 127.0.0.1 all the same, but the certificate is not for other.invalid.
    assert bad.error_kind == "http_transport" and "certificate" in (bad.error or "").lower()


# --------------------------------------------------------------------------- misc


async def test_not_an_http_hook(executor: HttpExecutor) -> None:
    from engine.settings import CommandHook

    inv = msgspec.structs.replace(
        make_inv("http://127.0.0.1/"), hook=CommandHook(type="command", command="x")
    )
    assert (await executor.run(inv)).error_kind == "unknown_type"


async def test_executor_survives_a_new_event_loop(policy: PolicyServer) -> None:
    ex = HttpExecutor(environ={})
    assert (await ex.run(make_inv(policy.url("allow")))).http_status == 200

    def other_loop() -> RawResult:
        async def go() -> RawResult:
            try:
                return await ex.run(make_inv(policy.url("allow")))
            finally:
                await ex.aclose()

        return asyncio.run(go())

    res = await asyncio.to_thread(other_loop)
    assert res.http_status == 200
    await asyncio.sleep(0.05)  # the first loop's client is closed on this loop, meanwhile


# --------------------------------------------------------------------------- through the engine


def settings_for(url: str, tmp: Path, **extra: Any) -> Any:
    doc = {"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "http", "url": url}]}]}}
    doc.update(extra)
    return merge(
        [Source("project", str(tmp / "settings.json"), parse_settings(doc, "s.json"), str(tmp))]
    )


async def test_engine_denies_through_an_http_hook(
    executor: HttpExecutor, policy: PolicyServer, tmp_path: Path
) -> None:
    engine = Engine({"http": executor})
    eff = settings_for(policy.url("deny"), tmp_path)
    ev = new_event(INPUT)
    out = await engine.evaluate(ev, eff)
    assert out.blocked and out.decision == "deny" and out.reason == "no rm"
    assert out.runs[0].http_status == 200


async def test_engine_500_fails_open_in_compat_closed_in_enforcing(
    executor: HttpExecutor, policy: PolicyServer, tmp_path: Path
) -> None:
    eff = settings_for(policy.url("error500"), tmp_path)
    compat = await Engine({"http": executor}).evaluate(new_event(INPUT), eff)
    assert not compat.blocked and compat.runs[0].outcome == "error"
    enforcing = await Engine({"http": executor}, posture="enforcing").evaluate(
        new_event(INPUT), eff
    )
    assert enforcing.blocked


async def test_engine_blocked_url_is_recorded_as_an_error_not_sent(
    executor: HttpExecutor, policy: PolicyServer, tmp_path: Path
) -> None:
    eff = settings_for(METADATA, tmp_path)
    out = await Engine({"http": executor}).evaluate(new_event(INPUT), eff)
    assert not out.blocked
    assert out.runs[0].error_kind == "ssrf_blocked_address"


def test_an_outcome_names_the_managed_ceiling_where_it_refused(tmp_path: Path) -> None:
    """The deviation is recorded where it decided: a URL and a header variable that a
    project allowed and the managed ceiling refused (Claude Code would have sent both)."""
    seen: list[dict[str, str]] = []

    class H(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("content-length", "0")))
            seen.append({k.lower(): v for k, v in self.headers.items()})
            self.send_response(200)
            self.send_header("content-length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = httpd.serve(H)
    port = httpd.port(server)
    try:
        managed = tmp_path / "managed.json"
        managed.write_text(
            json.dumps(
                {
                    "allowedHttpHookUrls": [f"http://127.0.0.1:{port}/ok"],
                    "httpHookAllowedEnvVars": ["PUBLIC_ID"],
                }
            )
        )
        project = tmp_path / "project.json"
        hook = {"type": "http", "headers": {"X-T": "$TOKEN"}, "allowedEnvVars": ["TOKEN"]}
        project.write_text(
            json.dumps(
                {
                    "allowedHttpHookUrls": [f"http://127.0.0.1:{port}/*"],
                    "httpHookAllowedEnvVars": ["TOKEN"],
                    "hooks": {
                        "Stop": [
                            {
                                "hooks": [
                                    {**hook, "url": f"http://127.0.0.1:{port}/ok"},
                                    {**hook, "url": f"http://127.0.0.1:{port}/other"},
                                ]
                            }
                        ]
                    },
                }
            )
        )
        event = {
            "hook_event_name": "Stop",
            "session_id": "s",
            "cwd": str(tmp_path),
            "transcript_path": str(tmp_path / "t.jsonl"),
            "stop_hook_active": False,
        }

        def run_eval(*specs: str) -> dict[str, object]:
            args = [a for spec in specs for a in ("--settings", spec)]
            p = subprocess.run(
                [sys.executable, "-m", "hookaudit", "eval", *args, "--format", "json"],
                input=json.dumps(event),
                capture_output=True,
                text=True,
                env={**os.environ, "TOKEN": "s3cret"},
                timeout=60,
            )
            assert p.returncode == 0, p.stderr
            doc: dict[str, object] = json.loads(p.stdout)
            return doc

        capped = run_eval(f"managed:{managed}", f"project:{project}")
        assert sorted(capped["rules"]) == ["managed-http-env-ceiling", "managed-http-url-ceiling"]
        assert [h.get("x-t") for h in seen] == [""]  # /other refused, $TOKEN left empty
        seen.clear()
        plain = run_eval(f"project:{project}")  # no ceiling: no rule, both hooks sent
        assert plain["rules"] == []
        assert sorted(h.get("x-t", "") for h in seen) == ["s3cret", "s3cret"]
        print("managed ceiling recorded: url + env rules on the outcome; none without it")
    finally:
        httpd.stop(server)
