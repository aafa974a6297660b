"""`hookaudit emit` through the local relay: the agent-facing fast path (stdlib only).

Rules of this file:
- Stdlib only, and only what a bare interpreter has loaded or can load in microseconds
  (`os`, `sys`, `_socket`): `hookaudit emit` runs on every tool call, and its cold start
  is the latency it adds to each one. Nothing here imports hookaudit's other modules
  unless the relay cannot be used; then `direct` hands over to today's emit, in process,
  or the relay failed; then the answer is worded by `engine.failclosed` (stdlib only),
  the one wording every emit path uses.
- The relay (`hookaudit relay`, `ingest/relay/server.py`) holds the NATS credentials, publishes,
  verifies the worker's signed reply and renders the answer; this side only proves who
  the relay is (the kernel's SO_PEERCRED uid of the peer must be the expected one) and
  prints what it says, byte for byte as today's emit would.
- Fail closed means closed: a relay that answers as the wrong uid, breaks the protocol,
  stays silent past the deadline or hangs up without an answer gets the `--fail` answer
  (closed: exit 2 and a reason on stderr; never a traceback, never exit 1). A relay that
  is not there at all (no socket, nobody listening) is no failure: today's emit runs
  instead, with its own publishing, signature check, spool and fail modes.
- Anything this parser does not know (another option, a bad value, --help) goes to
  today's emit too, so options, errors and help stay one definition (click's).

Longer than 400 lines: the agent's fast path is one file on purpose. Every further module
is one more path search and load on every tool call (`hookaudit/entry.py`, 35 lines, costs
0.1-0.3 ms of self time under ``python -X importtime``, against about 18 ms for
``python -I -S -c pass``, load average 7-11); the client, the options it knows and the
wire format it speaks change together, and the relay's side of that format is
`ingest.relay.sock`.

Wire format on the unix socket (one request a connection; integers big-endian):
``HAE1`` len32 head len32 body -> ``HAR1`` code8 len8 status len32 stdout len32 stderr,
where head is ``key=value`` lines (wait, fail, timeout, source) and body the raw input.

Example:
    >>> parse_args(["--wait", "--fail", "closed", "--timeout=3"]).timeout
    3.0
    >>> parse_args(["--nats", "nats://h:4222"]) is None
    True
"""

from __future__ import annotations

import _socket
import io
import os
import sys

TYPE_CHECKING = False  # mypy takes it as True; importing `typing` costs start-up time
if TYPE_CHECKING:
    from typing import Any, BinaryIO

__all__ = [
    "AGENTS",
    "ENV_RELAY",
    "ENV_RELAY_UID",
    "MAX_EVENT_BYTES",
    "Args",
    "data_dir",
    "decode_answer",
    "encode_request",
    "main",
    "parse_args",
    "relay_path",
]

#: The relay's socket (default ``<data-dir>/relay/emit.sock``); ``off`` disables the relay.
ENV_RELAY = "HOOKAUDIT_RELAY"
#: The uid the relay must run as (default: this process's own uid).
ENV_RELAY_UID = "HOOKAUDIT_RELAY_UID"
#: As `engine.payload.MAX_EVENT_BYTES` (a unit test checks they agree).
MAX_EVENT_BYTES = 8 * 1024 * 1024
#: the agents `--agent` names (`engine.dialects.registry.AGENTS`; a test holds them equal)
AGENTS = (
    "claude_code", "codex", "gemini_cli", "copilot_cli", "qwen_code", "opencode", "cline",
)  # fmt: skip
REQUEST_MAGIC = b"HAE1"
ANSWER_MAGIC = b"HAR1"
#: Past the relay's own bounds (publish, spool, notice), how long to wait for it.
SLACK = 15.0
WAIT_SLACK = 2.0
_MAX_ANSWER = 1 << 24


class Args:
    """The options of `hookaudit emit` this fast path knows; None from `parse_args` else."""

    __slots__ = ("agent", "data_dir", "fail", "source", "timeout", "wait")

    def __init__(self) -> None:
        self.wait = False
        self.timeout = 10.0
        self.fail = "open"
        self.source = "claude-code"
        self.agent = "claude_code"
        self.data_dir: str | None = None


def parse_args(argv: list[str]) -> Args | None:
    """`emit`'s options, or None when anything is unknown or invalid (today's emit decides).

    Example:
        >>> parse_args(["--timeout", "-1"]) is None
        True
    """
    a = Args()
    i = 0
    while i < len(argv):
        arg = argv[i]
        name, eq, value = arg.partition("=")
        if name == "--wait" and not eq:
            a.wait = True
            i += 1
            continue
        if name not in ("--timeout", "--fail", "--source", "--data-dir", "--agent"):
            return None
        if not eq:
            if i + 1 >= len(argv):
                return None
            value = argv[i + 1]
            i += 1
        i += 1
        if name == "--timeout":
            try:
                a.timeout = float(value)
            except ValueError:
                return None
            if not a.timeout >= 0 or a.timeout == float("inf"):
                return None
        elif name == "--fail":
            if value not in ("open", "closed"):
                return None
            a.fail = value
        elif name == "--source":
            a.source = value
        elif name == "--agent":
            value = value.replace("-", "_")
            if value not in AGENTS:
                return None  # today's emit names the known ones
            a.agent = value
        else:
            a.data_dir = value
    return a


def data_dir(given: str | None) -> str:
    """As `ingest.protocol.default_data_dir`: --data-dir, $HOOKAUDIT_DATA_DIR, XDG, ~."""
    d = given or os.environ.get("HOOKAUDIT_DATA_DIR")
    if not d:
        xdg = os.environ.get("XDG_DATA_HOME") or os.path.join(
            os.path.expanduser("~"), ".local", "share"
        )
        d = os.path.join(xdg, "hookaudit")
    return os.path.abspath(d)


def relay_path(given_dir: str | None) -> str | None:
    """The relay socket to try, or None when ``$HOOKAUDIT_RELAY=off``."""
    env = os.environ.get(ENV_RELAY)
    if env == "off":
        return None
    if env:
        return os.path.abspath(env)
    return os.path.join(data_dir(given_dir), "relay", "emit.sock")


def process_age() -> float:
    """Seconds since this process started (exec), from the kernel: the interpreter's own
    start-up is on emit's clock. Claude Code's hook timeout runs from the spawn, and under
    load start-up alone took over a second, so a `--timeout` counted from emit's first line
    could answer after it. 0.0 where /proc cannot tell.

    Example:
        >>> 0.0 <= process_age() < 3600
        True
    """
    try:
        with open("/proc/self/stat", "rb") as f:
            stat = f.read()
        # field 22 (starttime, clock ticks since boot), counted after the ")" of the name
        start_ticks = int(stat[stat.rindex(b")") + 2 :].split()[19])
        with open("/proc/uptime", "rb") as f:  # seconds since boot, as starttime counts
            uptime = float(f.read().split()[0])
        age = uptime - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return 0.0
    return min(max(age, 0.0), 3600.0)


def encode_request(a: Args, body: bytes, age: float = 0.0) -> bytes:
    """One request: the options as ``key=value`` lines, then the raw input. `age`: how
    long this process has run (its start-up), so the relay's deadline counts it too.

    Example:
        >>> encode_request(Args(), b"{}")[:8]
        b'HAE1\\x00\\x00\\x001'
    """
    project = os.environ.get("CLAUDE_PROJECT_DIR", "")
    if len(project) > 1024 or "\n" in project or "\r" in project:
        project = ""  # not a path a head line can carry: the worker falls back to cwd
    head = (
        f"wait={int(a.wait)}\nfail={a.fail}\ntimeout={a.timeout!r}\nsource={a.source}\n"
        + (f"age={age!r}\n" if age else "")
        + (f"agent={a.agent}\n" if a.agent != "claude_code" else "")
        + (f"project_dir={project}\n" if project else "")
    ).encode("utf-8", "surrogateescape")
    return REQUEST_MAGIC + len(head).to_bytes(4, "big") + head + len(body).to_bytes(4, "big") + body


def decode_answer(data: bytes) -> tuple[int, str, bytes, bytes]:
    """(exit code, status, stdout, stderr) of a complete answer; ValueError if malformed.

    Example:
        >>> decode_answer(b"HAR1\\x00\\x04sent" + bytes(8))
        (0, 'sent', b'', b'')
    """
    if len(data) < 6 or data[:4] != ANSWER_MAGIC:
        raise ValueError("not a relay answer")
    code, n = data[4], data[5]
    status = data[6 : 6 + n].decode("ascii")
    at = 6 + n
    parts: list[bytes] = []
    for _ in range(2):
        if len(data) < at + 4:
            raise ValueError("truncated answer")
        size = int.from_bytes(data[at : at + 4], "big")
        at += 4
        if len(data) < at + size:
            raise ValueError("truncated answer")
        parts.append(data[at : at + size])
        at += size
    if at != len(data) or code not in (0, 2):
        raise ValueError("malformed answer")
    return code, status, parts[0], parts[1]


def _answer_size(data: bytes) -> int | None:
    """The full size of the answer `data` begins, once enough of it has arrived."""
    if len(data) < 6:
        return None
    at = 6 + data[5]
    for _ in range(2):
        if len(data) < at + 4:
            return None
        at += 4 + int.from_bytes(data[at : at + 4], "big")
    return at


class _Fault(Exception):
    """The relay could not be trusted or did not answer: the fail mode decides."""


class _Absent(Exception):
    """Nobody listens on the relay socket: today's emit runs instead."""


def _connect(path: str, deadline: float) -> _socket.socket:
    s = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    s.settimeout(deadline)
    target = path
    dir_fd = -1
    if len(path.encode()) > 100:  # sun_path holds 108 bytes: reach it through the dir
        dir_fd = os.open(os.path.dirname(path), os.O_PATH | os.O_CLOEXEC)
        target = f"/proc/self/fd/{dir_fd}/{os.path.basename(path)}"
    try:
        s.connect(target)
    except (FileNotFoundError, ConnectionRefusedError, NotADirectoryError) as e:
        s.close()
        raise _Absent(str(e)) from e
    except OSError as e:
        s.close()
        raise _Fault(f"cannot reach the relay at {path}: {e.strerror or e}") from e
    finally:
        if dir_fd >= 0:
            os.close(dir_fd)
    return s


def _expected_uid() -> int:
    text = os.environ.get(ENV_RELAY_UID)
    if not text:
        return os.getuid()
    try:
        return int(text)
    except ValueError:
        import pwd

        try:
            return pwd.getpwnam(text).pw_uid
        except KeyError:
            raise _Fault(f"${ENV_RELAY_UID}={text!r}: no such user") from None


def _check_peer(s: _socket.socket, path: str) -> None:
    cred = s.getsockopt(_socket.SOL_SOCKET, _socket.SO_PEERCRED, 12)
    uid = int.from_bytes(cred[4:8], sys.byteorder)
    want = _expected_uid()
    if uid != want:
        raise _Fault(
            f"the relay at {path} runs as uid {uid}, not uid {want}: its answer is not trusted"
        )


def _ask(path: str, a: Args, body: bytes) -> tuple[int, str, bytes, bytes]:
    # With --wait the relay answers within --timeout (its own budget); a relay silent past
    # that plus a little is a failure, answered per --fail before Claude Code's hook timeout.
    age = process_age() if a.wait else 0.0  # the answer is due `timeout` after our start
    bound = max(0.0, a.timeout - age) + WAIT_SLACK if a.wait else SLACK
    s = _connect(path, bound)
    try:
        _check_peer(s, path)
        try:
            s.sendall(encode_request(a, body, age))
            s.shutdown(_socket.SHUT_WR)
            chunks: list[bytes] = []
            got = b""
            while True:
                chunk = s.recv(1 << 16)
                if not chunk:
                    break
                chunks.append(chunk)
                got = b"".join(chunks)
                if len(got) > _MAX_ANSWER:
                    raise _Fault(f"the relay at {path} sent an answer larger than allowed")
        except TimeoutError:
            raise _Fault(f"no answer from the relay at {path} within {bound:g}s") from None
        except OSError as e:
            raise _Fault(f"the relay at {path} failed: {e.strerror or e}") from e
        if not got:
            raise _Fault(f"the relay at {path} closed the connection without an answer")
        try:
            return decode_answer(got)
        except (ValueError, UnicodeDecodeError) as e:
            raise _Fault(f"the relay at {path} sent a malformed answer: {e}") from None
    finally:
        s.close()


def _read_stdin(limit: int) -> bytes:
    chunks: list[bytes] = []
    left = limit + 1
    while left > 0:
        try:
            chunk = os.read(0, min(left, 1 << 20))
        except OSError:  # no stdin at all (closed fd): today's emit says so
            break
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _write(fd: int, data: bytes) -> None:
    if data and not data.endswith(b"\n"):
        data += b"\n"
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(fd, view) :]
    except OSError:
        pass  # the agent closed the pipe; the exit code still speaks


def _fail(a: Args, reason: str) -> None:
    """The answer without a relay decision, in `engine.failclosed`'s wording per `--fail`.

    Closed: exit 2 with the reason for every event (PreToolUse included: Claude Code
    denies on exit 2 and feeds the reason to Claude), so no parsing of the input is
    needed here; open: proceed with one line on stderr. The relay failed, so the start-up
    is already lost: the wording is imported from the engine (stdlib only), as today's
    emit uses it. Should even that import fail, the answer is still exit 2 when closed.
    """
    try:
        _package_root()
        from engine.failclosed import closed_reason, open_reason
    except Exception as e:  # a broken install must not open a closed gate
        reason = f"{reason} (and cannot load hookaudit: {type(e).__name__})"
        if a.fail == "closed" and a.agent == "cline":
            _write(1, b'{"cancel":true,"errorMessage":"hookaudit emit: cannot load hookaudit"}')
            _write(2, f"hookaudit emit: {reason}".encode("utf-8", "replace"))
            os._exit(0)
        _write(2, f"hookaudit emit: {reason}".encode("utf-8", "replace"))
        os._exit(2 if a.fail == "closed" else 0)
    if a.fail == "closed":
        why = closed_reason(reason)
        if a.agent == "cline":  # Cline obeys no exit code: only its cancel blocks
            from engine.failclosed import cline_cancel

            _write(1, cline_cancel(why).encode("utf-8", "replace"))
            _write(2, why.encode("utf-8", "replace"))
            os._exit(0)
        _write(2, why.encode("utf-8", "replace"))
        os._exit(2)
    _write(2, open_reason(reason).encode("utf-8", "replace"))
    os._exit(0)


def _package_root() -> None:
    """Put the package root on sys.path, and take ingest/ off it.

    Run as a script (``python -I -S .../ingest/emit/fast.py``), sys.path[0] is ingest/emit/,
    whose modules (`options`, `stdin`, ...) would shadow top-level names: the package root (two
    levels up) goes there instead.
    """
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    root = os.path.dirname(os.path.dirname(here))
    if root not in sys.path:
        sys.path.insert(0, root)


def direct(argv: list[str], raw: bytes | None) -> None:
    """Run today's `hookaudit emit` in this process, `raw` standing for what stdin held.

    Under ``python -S`` the installed packages are not on sys.path yet: `site` is run
    first. Does not return (the command exits).
    """
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    if "site" not in sys.modules:
        import site

        site.main()
    _package_root()
    if raw is not None:
        stdin = _chain(raw, sys.stdin.buffer if sys.stdin is not None else None)
        sys.stdin = io.TextIOWrapper(io.BufferedReader(stdin))
    from hookaudit.cli import main as cli_main

    cli_main(["emit", *argv])


def _chain(head: bytes, rest: BinaryIO | None) -> io.RawIOBase:
    """A raw stream: `head` (already read), then the rest of the real stdin."""

    class Chain(io.RawIOBase):
        def __init__(self) -> None:
            super().__init__()
            self._head = memoryview(head)

        def readable(self) -> bool:
            return True

        def readinto(self, buf: Any) -> int:
            if self._head:
                n = min(len(buf), len(self._head))
                buf[:n] = self._head[:n]
                self._head = self._head[n:]
                return n
            if rest is None:
                return 0
            data = rest.read(len(buf))
            buf[: len(data)] = data
            return len(data)

    return Chain()


def main(argv: list[str] | None = None) -> None:
    """`hookaudit emit ARGS`: through the relay when one listens, else today's emit.

    Example:
        $ echo '{"hook_event_name":"Stop"}' | hookaudit emit --wait --fail closed
    """
    args = sys.argv[2:] if argv is None else argv
    a = parse_args(args)
    if a is None:
        direct(args, None)
        return
    path = relay_path(a.data_dir)
    if path is None or (_has_fd(0) and os.isatty(0)):
        direct(args, None)
        return
    raw = _read_stdin(MAX_EVENT_BYTES)
    if len(raw) > MAX_EVENT_BYTES:  # today's emit drains it and records its size and hash
        direct(args, raw)
        return
    try:
        code, _status, out, err = _ask(path, a, raw)
    except _Absent:
        direct(args, raw)
        return
    except _Fault as e:
        _fail(a, str(e))
        return
    _write(1, out)
    _write(2, err)
    os._exit(code)


def _has_fd(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


if __name__ == "__main__":  # python -I -S .../ingest/emit/fast.py ARGS (the leanest hook)
    main(sys.argv[1:])
