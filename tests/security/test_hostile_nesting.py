"""Deeply nested JSON and msgpack, and oversized answers, from every untrusted source.

CPython's json and msgspec both recurse: `[` repeated 100,000 times raises RecursionError,
not their decode error, and a Raw field or a skipped unknown field recurses the same way. A
handler that catches only the decode error lets it through: a traceback in the log (a command
hook's first stdout line), "internal error" (a settings file), a crashed forwarder (a
receiver's answer). The first test holds the whole code base to the rule; the others show
the behaviour at the sites an attacker reaches first, through real processes and servers.
"""

from __future__ import annotations

import ast
import asyncio
import json
import subprocess
import sys
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from ingest.siem.formats import Formatted
from ingest.siem.http import ElasticSink, HecSink
from ingest.siem.sink import SinkDown
from tests.support import httpd

REPO = Path(__file__).resolve().parents[2]
DEEP = b"[" * 100_000
MAX_ANSWER = 32 << 20  # ingest.siem.http.MAX_ANSWER
CLI = [sys.executable, "-m", "hookaudit"]

_DECODE_ERRORS = {"DecodeError", "ValueError", "JSONDecodeError", "ValidationError"}
_COVERS = {"RecursionError", "RuntimeError", "Exception", "BaseException"}


def _caught(handler: ast.ExceptHandler) -> set[str]:
    t = handler.type
    if t is None:
        return {"BaseException"}
    out = set()
    for e in t.elts if isinstance(t, ast.Tuple) else [t]:
        if isinstance(e, ast.Attribute):
            out.add(e.attr)
        elif isinstance(e, ast.Name):
            out.add(e.id)
    return out


def _decodes(call: ast.Call) -> bool:
    """json.load(s), msgspec.json/msgpack.decode, or `.decode` of a decoder object."""
    f = call.func
    if not isinstance(f, ast.Attribute):
        return False
    if f.attr in ("loads", "load"):
        return isinstance(f.value, ast.Name) and f.value.id == "json"
    if f.attr != "decode":
        return False
    v = f.value
    if isinstance(v, ast.Attribute):
        return v.attr in ("json", "msgpack") or "dec" in v.attr.lower()
    if isinstance(v, ast.Name):
        return "dec" in v.id.lower()
    if isinstance(v, ast.Call) and isinstance(v.func, ast.Name):
        return "dec" in v.func.id.lower()
    return False


def test_every_handler_of_a_decode_error_also_handles_recursion() -> None:
    """A `try` that decodes and catches the decode error must catch RecursionError too."""
    found, bad = 0, []
    for pkg in ("engine", "ingest", "queries", "replay", "hookaudit"):
        for path in sorted((REPO / pkg).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if not isinstance(node, ast.Try):
                    continue
                calls = [
                    n
                    for stmt in node.body
                    for n in ast.walk(stmt)
                    if isinstance(n, ast.Call) and _decodes(n)
                ]
                caught = set().union(*(_caught(h) for h in node.handlers))
                if not calls or not caught & _DECODE_ERRORS:
                    continue
                found += 1
                if not caught & _COVERS:
                    bad.append(f"{path.relative_to(REPO)}:{calls[0].lineno}")
    assert found >= 35  # the rule sees the sites (40 when it was written)
    assert not bad, "decode without RecursionError: " + ", ".join(bad)


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )


def _event(tmp_path: Path) -> Path:
    ev = tmp_path / "ev.json"
    ev.write_text(
        json.dumps(
            {
                "hook_event_name": "PreToolUse",
                "session_id": "s",
                "cwd": str(tmp_path),
                "tool_name": "Bash",
                "tool_input": {"command": "ls"},
            }
        )
    )
    return ev


def test_a_command_hooks_deep_first_line_is_plain_output(tmp_path: Path) -> None:
    """The async-form check of a hook's first stdout line decoded it with only DecodeError
    caught: the RecursionError went to asyncio's exception handler as a traceback."""
    out = tmp_path / "out.txt"
    out.write_bytes(b'{"async": ' + DEEP + b"}\n")
    settings = tmp_path / "s.json"
    hook = {"type": "command", "command": f"cat {out}"}
    settings.write_text(json.dumps({"hooks": {"PreToolUse": [{"hooks": [hook]}]}}))
    r = _run(
        "eval",
        "--settings",
        f"project:{settings}",
        "--event",
        str(_event(tmp_path)),
        "--format",
        "json",
        cwd=tmp_path,
    )
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr and "RecursionError" not in r.stderr, r.stderr[:500]
    verdict = json.loads(r.stdout)
    assert verdict["blocked"] is False and verdict["decision"] is None


@pytest.mark.parametrize("lenient", [False, True])
def test_a_deep_settings_file_is_one_line_and_never_ignored(tmp_path: Path, lenient: bool) -> None:
    """Valid JSON nested past the parser's depth: refused in one line naming the file, also
    with --lenient (which ignores the files Claude Code ignores: this one it may not)."""
    deep = tmp_path / "deep.json"
    deep.write_text('{"hooks": {}, "x": ' + "[" * 3000 + "]" * 3000 + "}")
    args = ["eval", "--settings", f"project:{deep}", "--event", str(_event(tmp_path))]
    r = _run(*args, *(["--lenient"] if lenient else []), cwd=tmp_path)
    assert r.returncode == 1
    assert r.stderr.strip().splitlines() == [
        f"hookaudit eval: {deep}: cannot read: JSON nested deeper than this parser goes "
        "(~1,000 levels)"
    ]


def test_lint_says_why_a_file_is_unreadable_and_reads_what_the_engine_reads(
    tmp_path: Path,
) -> None:
    (tmp_path / "latin1.json").write_bytes(b'{"hooks": {}, "x": "caf\xe9"}')
    big = tmp_path / "big.json"  # 5 MiB of valid settings: lint read only 4 MiB of it
    big.write_text(" " * (5 << 20) + '{"hooks": {}}')
    huge = tmp_path / "huge.json"
    huge.write_text(" " * ((16 << 20) + 1) + "{}")
    r = _run("lint", "latin1.json", "big.json", "huge.json", "missing.json", cwd=tmp_path)
    assert r.returncode == 1
    assert r.stdout.splitlines() == [
        "latin1.json: not UTF-8 (invalid continuation byte at byte 23) [unreadable]",
        "huge.json: larger than 16 MiB (the engine refuses it too) [unreadable]",
        "missing.json: cannot read: No such file or directory [unreadable]",
    ]


# ---------------------------------------------------------------- a receiver's answers


class _Raw:
    """An HTTP server on loopback answering every POST with `answer(path)` bytes."""

    def __init__(self, answer: Any) -> None:
        outer = self

        class H(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                body = outer.answer(self.path)
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                if isinstance(body, bytes):
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                    return
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                try:
                    for chunk in body:
                        self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.write(b"0\r\n\r\n")
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the sink stopped reading: that is the test

            def log_message(self, *a: Any) -> None:
                pass

        self.answer = answer
        self.server = httpd.serve(H)
        self.port = self.server.server_address[1]

    def stop(self) -> None:
        httpd.stop(self.server)


def _records(n: int) -> list[Formatted]:
    return [
        Formatted(
            uid=f"u{i}",
            event_id=f"e{i}",
            seq=i,
            time_ms=1,
            severity=1,
            event="PreToolUse",
            host="h",
            text="x",
        )
        for i in range(n)
    ]


async def _noop() -> None:
    return None


def _send(sink: Any, n: int) -> str:
    async def go() -> str:
        try:
            await sink.send(_records(n), _noop)
        except SinkDown as e:
            return str(e)
        finally:
            await sink.close()
        return "delivered"

    return asyncio.run(go())


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        (b'{"items": ' + DEEP, "bulk answer unreadable"),
        (b'{"items": [' + b'{"create": {"status": 201}},' * 2 + b"{}]}", "3 items for 4 sent"),
        (b'{"errors": false}', "bulk answer unreadable"),
        (iter([b" " * (1 << 20)] * ((MAX_ANSWER >> 20) + 2)), "answer larger than 32 MiB"),
    ],
    ids=["deep", "short", "no-items", "huge"],
)
def test_elastic_answers_that_do_not_account_for_the_batch_send_it_again(
    answer: Any, why: str
) -> None:
    """Only an answer naming every item of the batch acks it; anything else is the sink down
    (the batch is sent again), never a crash and never an ack. The short answer used to be an
    `assert`, gone under `python -O`, after which the unnamed items counted as stored."""
    srv = _Raw(lambda path: answer)
    try:
        sink = ElasticSink(f"http://127.0.0.1:{srv.port}", "i", token=None, auth=None, verify=False)
        got = _send(sink, 4)
    finally:
        srv.stop()
    assert why in got, got


def test_hec_deep_answers_are_the_sink_down_not_a_crash() -> None:
    def answer(path: str) -> bytes:
        if path.endswith("/ack"):
            return b'{"acks": ' + DEEP  # unreadable ack polls: never acked, then resent
        return b'{"text": "Success", "code": 0, "ackId": 7}'

    srv = _Raw(answer)
    try:
        sink = HecSink(
            f"http://127.0.0.1:{srv.port}",
            "/services/collector/event",
            token="t",
            verify=False,
            ack_timeout=0.5,
            ack_poll=0.05,
        )
        got = _send(sink, 2)
    finally:
        srv.stop()
    assert "no indexer acknowledgement for ackId 7" in got, got

    srv = _Raw(lambda path: DEEP)
    try:
        sink = HecSink(
            f"http://127.0.0.1:{srv.port}", "/services/collector/event", token="t", verify=False
        )
        got = _send(sink, 2)
    finally:
        srv.stop()
    assert "answer is not JSON" in got, got
