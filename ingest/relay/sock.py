"""The relay's unix socket: where it is, who is at the other end, and the wire format.

Rules of this file:
- The wire format is `ingest.emit.fast`'s (one request a connection; integers big-endian):
  ``HAE1`` len32 head len32 body -> ``HAR1`` code8 len8 status len32 stdout len32
  stderr. Every length is bounded before it is read (`_MAX_HEAD`, `MAX_EVENT_BYTES`);
  anything else is a ValueError naming what is wrong.
- The socket is created 0600 (umask) in a directory made 0700; a socket left by a relay
  that died is replaced, one that answers belongs to another relay (Unavailable), and a
  file that is not a socket is never removed. Paths longer than sun_path are reached
  through ``/proc/self/fd``.
- Who is asking is the kernel's SO_PEERCRED, never what the client says.

Example:
    >>> decode_request(b"wait=0\\nfail=open\\ntimeout=10.0\\nsource=claude-code\\n", b"{}").wait
    False
"""

from __future__ import annotations

import asyncio
import os
import pwd
import socket
from pathlib import Path
from typing import Any

import msgspec

from engine.errors import Unavailable
from ingest.emit.answer import Result
from ingest.emit.fast import ANSWER_MAGIC, MAX_EVENT_BYTES, REQUEST_MAGIC

__all__ = [
    "Request",
    "bind",
    "decode_request",
    "default_socket",
    "encode_answer",
    "peer",
    "read_request",
    "user_name",
]

_MAX_HEAD = 4096
_FAIL = ("open", "closed")


def default_socket(data_dir: Path) -> Path:
    """``<data-dir>/relay/emit.sock`` (what `ingest.emit.fast.relay_path` tries first)."""
    return Path(data_dir).resolve() / "relay" / "emit.sock"


class Request(msgspec.Struct, frozen=True, kw_only=True):
    """One client's ask: its emit options and the raw hook input."""

    wait: bool
    fail: str
    timeout: float
    source: str
    body: bytes
    #: seconds the client process had already run when it asked (its start-up): the answer
    #: is due `timeout` after the client started, as Claude Code's hook timeout counts
    age: float = 0.0
    #: the agent whose dialect the input and the answer speak (`engine.dialects`)
    agent: str = "claude_code"
    #: ``$CLAUDE_PROJECT_DIR`` of the client's environment (the engine checks it again)
    project_dir: str | None = None


_FIELDS = frozenset({"wait", "fail", "timeout", "source", "age", "agent", "project_dir"})
_AGENT_CHARS = frozenset("abcdefghijklmnopqrstuvwxyz_")


def decode_request(head: bytes, body: bytes) -> Request:
    """The request of a `fastemit.encode_request` head; ValueError names what is wrong.

    Example:
        >>> decode_request(b"wait=1\\nfail=closed\\ntimeout=3.0\\nsource=x\\n", b"{}").timeout
        3.0
    """
    fields: dict[str, str] = {}
    for line in head.decode("utf-8", "surrogateescape").splitlines():
        key, eq, value = line.partition("=")
        if not eq or key in fields:
            raise ValueError(f"bad request line {line[:40]!r}")
        fields[key] = value
    if not {"wait", "fail", "timeout", "source"} <= set(fields) <= _FIELDS:
        raise ValueError(f"request fields {sorted(fields)}")
    if fields["wait"] not in ("0", "1") or fields["fail"] not in _FAIL:
        raise ValueError("bad wait or fail")
    timeout = float(fields["timeout"])
    if not 0 <= timeout < 86400:
        raise ValueError(f"timeout {timeout!r} out of range")
    agent = fields.get("agent", "claude_code")
    if not agent or len(agent) > 32 or not set(agent) <= _AGENT_CHARS:
        raise ValueError(f"bad agent {agent[:40]!r}")
    age = float(fields.get("age", "0"))
    if not 0 <= age <= timeout + 1:
        age = 0.0  # a client's clock out of range counts from now
    return Request(
        wait=fields["wait"] == "1",
        fail=fields["fail"],
        timeout=timeout,
        source=fields["source"][:256],
        body=body,
        age=age,
        agent=agent,
        project_dir=fields.get("project_dir") or None,
    )


def encode_answer(result: Result) -> bytes:
    """The wire form of a Result (`fastemit.decode_answer` reads it back).

    Example:
        >>> encode_answer(Result("published"))[:6]
        b'HAR1\\x00\\t'
    """
    out = result.stdout.encode("utf-8", "surrogateescape")
    err = result.stderr.encode("utf-8", "surrogateescape")
    status = result.status.encode("ascii", "replace")[:255]
    return (
        ANSWER_MAGIC
        + bytes([result.exit_code if result.exit_code in (0, 2) else 2, len(status)])
        + status
        + len(out).to_bytes(4, "big")
        + out
        + len(err).to_bytes(4, "big")
        + err
    )


def peer(sock: socket.socket) -> tuple[int, int]:
    """(pid, uid) of the process at the other end, as the kernel says."""
    import struct

    pid, uid, _gid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))
    return pid, uid


def user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


async def read_request(reader: asyncio.StreamReader) -> Request:
    magic = await reader.readexactly(4)
    if magic != REQUEST_MAGIC:
        raise ValueError("not a relay request")
    n = int.from_bytes(await reader.readexactly(4), "big")
    if n > _MAX_HEAD:
        raise ValueError(f"request head of {n} bytes")
    head = await reader.readexactly(n)
    size = int.from_bytes(await reader.readexactly(4), "big")
    if size > MAX_EVENT_BYTES:
        raise ValueError(f"request body of {size} bytes")
    body = await reader.readexactly(size)
    return decode_request(head, body)


def bind(path: Path, mode: int) -> socket.socket:
    """A listening unix socket at `path` (its directory made 0700 if we create it).

    A socket left by a relay that died is replaced; one that answers is another relay
    (Unavailable), and a file that is not a socket is never removed.
    """
    from ingest.nats.auth import private_dir

    try:
        return _bind_at(path, mode, private_dir)
    except OSError as e:
        raise Unavailable(f"cannot listen on {path}: {e.strerror or e}") from e


def _bind_at(path: Path, mode: int, private_dir: Any) -> socket.socket:
    parent = path.parent
    if not parent.exists():
        private_dir(parent)
    if path.exists() or path.is_symlink():
        if not path.is_socket():
            raise Unavailable(f"{path}: exists and is not a socket; not replacing it")
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            probe.settimeout(1.0)
            _at(path, probe.connect)
        except OSError:
            path.unlink()
        else:
            raise Unavailable(f"{path}: another relay is listening there")
        finally:
            probe.close()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        _at(path, sock.bind)
    except OSError as e:
        sock.close()
        raise Unavailable(f"cannot listen on {path}: {e.strerror or e}") from e
    finally:
        os.umask(old)
    os.chmod(path, mode)
    sock.listen(1024)
    sock.setblocking(False)
    return sock


def _at(path: Path, op: Any) -> None:
    """`op(address)` for a unix socket path, even one longer than sun_path (108 bytes)."""
    if len(str(path).encode()) <= 100:
        op(str(path))
        return
    fd = os.open(path.parent, os.O_PATH | os.O_CLOEXEC)
    try:
        op(f"/proc/self/fd/{fd}/{path.name}")
    finally:
        os.close(fd)
