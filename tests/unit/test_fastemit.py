"""The fast emit's pure parts: its options, the relay wire format, and its imports."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from engine.payload import MAX_EVENT_BYTES
from ingest.emit import fast as fastemit
from ingest.emit.answer import Result
from ingest.relay.sock import decode_request, encode_answer

REPO = Path(__file__).resolve().parents[2]


def test_limits_agree_with_the_engine() -> None:
    assert fastemit.MAX_EVENT_BYTES == MAX_EVENT_BYTES


@pytest.mark.parametrize(
    ("argv", "wait", "fail", "timeout"),
    [
        ([], False, "open", 10.0),
        (["--wait", "--fail", "closed"], True, "closed", 10.0),
        (["--wait", "--fail=closed", "--timeout=2.5", "--source", "x"], True, "closed", 2.5),
        (["--timeout", "0"], False, "open", 0.0),
    ],
)
def test_known_options(argv: list[str], wait: bool, fail: str, timeout: float) -> None:
    a = fastemit.parse_args(argv)
    assert a is not None and (a.wait, a.fail, a.timeout) == (wait, fail, timeout)


@pytest.mark.parametrize(
    "argv",
    [
        ["--nats", "nats://h:4222"],
        ["--worker-key", "U"],
        ["--help"],
        ["--fail", "maybe"],
        ["--timeout", "nan"],
        ["--timeout", "-1"],
        ["--timeout", "inf"],
        ["--timeout"],
        ["--wait=1"],
        ["extra"],
    ],
)
def test_anything_else_goes_to_todays_emit(argv: list[str]) -> None:
    assert fastemit.parse_args(argv) is None


def test_request_round_trip() -> None:
    a = fastemit.parse_args(["--wait", "--fail", "closed", "--timeout", "3", "--source", "cc"])
    assert a is not None
    wire = fastemit.encode_request(a, b'{"hook_event_name":"Stop"}')
    assert wire[:4] == b"HAE1"
    n = int.from_bytes(wire[4:8], "big")
    head, rest = wire[8 : 8 + n], wire[8 + n :]
    body = rest[4 : 4 + int.from_bytes(rest[:4], "big")]
    req = decode_request(head, body)
    assert (req.wait, req.fail, req.timeout, req.source) == (True, "closed", 3.0, "cc")
    assert req.body == b'{"hook_event_name":"Stop"}'


@pytest.mark.parametrize(
    "head",
    [
        b"wait=1\nfail=closed\ntimeout=3\n",  # a field missing
        b"wait=1\nfail=closed\ntimeout=3\nsource=x\nextra=1\n",
        b"wait=2\nfail=closed\ntimeout=3\nsource=x\n",
        b"wait=1\nfail=ajar\ntimeout=3\nsource=x\n",
        b"wait=1\nfail=open\ntimeout=-3\nsource=x\n",
        b"wait=1\nwait=0\nfail=open\ntimeout=3\nsource=x\n",
        b"wait=1\nfail=open\ntimeout=abc\nsource=x\n",
    ],
)
def test_bad_requests_are_refused(head: bytes) -> None:
    with pytest.raises(ValueError):
        decode_request(head, b"{}")


def test_answer_round_trip() -> None:
    r = Result("decided", stdout='{"a": "é"}', stderr="why ✓", exit_code=2)
    assert fastemit.decode_answer(encode_answer(r)) == (
        2,
        "decided",
        '{"a": "é"}'.encode(),
        "why ✓".encode(),
    )


@pytest.mark.parametrize(
    "wire",
    [
        b"",
        b"HTTP/1.1 200 OK\r\n\r\n",
        b"HAR1\x00\x04sent" + bytes(7),  # truncated
        b"HAR1\x00\x04sent" + bytes(9),  # trailing byte
        b"HAR1\x01\x04sent" + bytes(8),  # exit 1 is never an answer
    ],
)
def test_malformed_answers_are_refused(wire: bytes) -> None:
    with pytest.raises(ValueError):
        fastemit.decode_answer(wire)


PACKAGES = ("engine", "ingest", "queries", "replay", "hookaudit")


def _module_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_the_fast_path_imports_the_standard_library_only() -> None:
    # module level; `typing` only under TYPE_CHECKING (a constant False at run time)
    assert _module_imports(REPO / "ingest" / "emit" / "fast.py") <= {
        "__future__",
        "_socket",
        "io",
        "os",
        "sys",
        "typing",
    }
    assert _module_imports(REPO / "hookaudit" / "entry.py") <= {"__future__", "sys"}
    # the packages the console script imports on the way, and every other package: their
    # __init__ is a docstring, so importing one module loads nothing else of its package
    inits = sorted(REPO.glob("*/**/__init__.py"))
    inits = [p for p in inits if p.parts[len(REPO.parts)] in PACKAGES]
    assert len(inits) >= 8
    for init in inits:
        body = ast.parse(init.read_text()).body
        assert len(body) == 1 and isinstance(body[0], ast.Expr), init
    assert fastemit.TYPE_CHECKING is False
