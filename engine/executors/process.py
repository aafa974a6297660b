"""One running hook process: its pipes, its output caps, its stop and kill (for `command`).

Split from `engine.executors.command` at its seam: this module is the subprocess side
(`Capture` reads a process's pipes as they arrive, `Running` feeds, drains, stops and
kills one hook's process group and builds its RawResult); `command` plans and runs hooks
with it, `background` keeps async ones running. The rules of the process handling are
those in `engine.executors.command`'s header.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from typing import TYPE_CHECKING, Any

import msgspec

from engine.effects import Invocation, RawResult

if TYPE_CHECKING:
    from engine.executors.command import CommandExecutor

__all__ = ["Capture", "Fut", "Running", "elapsed_ms", "resolve"]  # for command, background

_KILL_WAIT = 2.0  # SIGKILLed processes end in ms; bounded anyway (D state, setsid escapees)
_EPIPE = "hook closed stdin before reading all of its input (EPIPE)"
Fut = asyncio.Future[None]


def elapsed_ms(t0: float) -> float:
    return (time.perf_counter() - t0) * 1000.0


def _killpg(pgid: int, sig: int) -> None:
    # ESRCH: the group is gone; EPERM: on macOS, a group of zombies only.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def resolve(fut: asyncio.Future[Any], value: Any = None) -> None:
    if not fut.done():
        fut.set_result(value)


class Capture(asyncio.SubprocessProtocol):
    """Collects one hook's output as it arrives and watches for a self-declared async line."""

    def __init__(self, loop: asyncio.AbstractEventLoop, cap: int, watch: bool) -> None:
        self.cap = cap
        self.out = bytearray()
        self.err = bytearray()
        self.out_n = 0
        self.err_n = 0
        self.open_pipes = 2
        self.stdin_error: Exception | None = None
        self.stdin_done = False
        self.exited: Fut = loop.create_future()
        self.closed: Fut = loop.create_future()
        self.declared: asyncio.Future[dict[str, Any]] = loop.create_future()
        self.watch = watch
        self.first_len = 0  # bytes of the async line (with its newline) once declared
        self._scan = 0

    def pipe_data_received(self, fd: int, data: bytes) -> None:
        if fd == 1:
            n, self.out_n = self.out_n, self.out_n + len(data)
            if n < self.cap:
                self.out += data if self.out_n <= self.cap else data[: self.cap - n]
            if self.watch:
                self._check_first_line()
        else:
            n, self.err_n = self.err_n, self.err_n + len(data)
            if n < self.cap:
                self.err += data if self.err_n <= self.cap else data[: self.cap - n]

    def _check_first_line(self) -> None:
        # Spec §6.4: only the first line, checked once it contains "}". We re-check until
        # its newline arrives so that a chunk boundary inside the JSON cannot hide it.
        buf = self.out
        nl = buf.find(b"\n", self._scan)
        end = nl if nl >= 0 else len(buf)
        self._scan = end
        if buf.find(b"}", 0, end) >= 0 and buf.find(b'"async"', 0, end) >= 0:
            try:
                obj = msgspec.json.decode(bytes(buf[:end]))
            except (msgspec.DecodeError, RecursionError):
                obj = None
            if isinstance(obj, dict) and obj.get("async") is True:
                self.watch = False
                self.first_len = end + 1 if nl >= 0 else end
                resolve(self.declared, obj)
                return
        if nl >= 0 or self.out_n >= self.cap:
            self.watch = False

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if fd == 0:
            self.stdin_error, self.stdin_done = exc, True
            return
        self.open_pipes -= 1
        if self.open_pipes == 0:
            resolve(self.closed)

    def process_exited(self) -> None:
        resolve(self.exited)


class Running:
    """One spawned hook: its transport, its output and the ways to end it."""

    __slots__ = (
        "drain_window",
        "grace",
        "inv",
        "notes",
        "pgid",
        "proto",
        "stdin_unread",
        "t0",
        "transport",
    )

    def __init__(
        self,
        inv: Invocation,
        t0: float,
        transport: asyncio.SubprocessTransport,
        proto: Capture,
        notes: list[str],
        ex: CommandExecutor,
    ) -> None:
        self.inv, self.t0, self.transport, self.proto, self.notes = inv, t0, transport, proto, notes
        self.pgid = transport.get_pid()  # == the group id: start_new_session made it leader
        self.grace, self.drain_window = ex.grace, ex.drain_window
        self.stdin_unread = False

    def feed(self, data: bytes) -> None:
        pipe = self.transport.get_pipe_transport(0)
        if not isinstance(pipe, asyncio.WriteTransport):
            return
        if self.proto.stdin_done or pipe.is_closing():
            # Gone before we wrote a byte (asyncio drops writes to a closed pipe silently).
            self.stdin_unread = True
            return
        # A hook that stops reading makes this fail later with EPIPE; `close` notes it
        # and the exit code stands (spec §6.1).
        pipe.write(data + b"\n")
        pipe.write_eof()

    async def drain(self) -> None:
        """The process has exited: give its pipes a short window, then kill the group."""
        if not self.proto.closed.done():
            await asyncio.wait((self.proto.closed,), timeout=self.drain_window)
            if not self.proto.closed.done():
                _killpg(self.pgid, signal.SIGKILL)
                self.notes.append(
                    f"output pipes still open {self.drain_window:g} s after exit; process group killed"
                )
                await asyncio.wait((self.proto.closed,), timeout=self.drain_window)
        await self._settle_stdin()
        self.close()

    async def stop(self) -> str:
        """SIGTERM the group, wait `grace`, SIGKILL whatever is left; say how it ended."""
        p = self.proto
        _killpg(self.pgid, signal.SIGTERM)
        await asyncio.wait((p.exited, p.closed), timeout=self.grace)
        gone = p.exited.done() and p.closed.done()
        _killpg(self.pgid, signal.SIGKILL)
        if not gone:
            await asyncio.wait((p.exited,), timeout=_KILL_WAIT)
            await asyncio.wait((p.closed,), timeout=self.drain_window)
        await self._settle_stdin()
        self.close()
        return "ended on SIGTERM" if gone else f"SIGKILLed after {self.grace:g} s grace"

    async def _settle_stdin(self) -> None:
        # An EPIPE seen in this loop iteration reaches the protocol on the next one; let
        # it arrive so that the note does not depend on callback order.
        if not self.proto.stdin_done:
            await asyncio.sleep(0)

    async def kill(self) -> None:
        """Cancellation: SIGKILL the group at once and wait (bounded) for the reap.

        Waiting lets the child watcher reap the process, so that closing the transport
        neither races it nor leaves an unclosed transport behind a closing loop.
        """
        _killpg(self.pgid, signal.SIGKILL)
        try:
            if not self.proto.exited.done():
                await asyncio.wait((self.proto.exited,), timeout=_KILL_WAIT)
        finally:
            self.close()

    def close(self) -> None:
        pipe = self.transport.get_pipe_transport(0)
        if isinstance(pipe, asyncio.WriteTransport) and pipe.get_write_buffer_size() > 0:
            self.stdin_unread = True
            pipe.abort()  # the process is gone: drop what it never read
        if isinstance(self.proto.stdin_error, ConnectionError):  # EPIPE, ECONNRESET
            self.stdin_unread = True
        self.transport.close()

    def result(
        self, *, error_kind: str | None = None, error: str | None = None, skip: int = 0
    ) -> RawResult:
        p = self.proto
        notes = [error] if error else []
        exit_code: int | None = None
        if error_kind is None:
            rc = self.transport.get_returncode()
            if rc is None or rc < 0:
                exit_code = 1
                notes.append(f"no exit status: killed by {_signame(rc)} (returncode {rc})")
            else:
                exit_code = rc
        if self.stdin_unread:
            notes.append(_EPIPE)
        notes.extend(self.notes)
        return RawResult(
            exit_code=exit_code,
            stdout=p.out[skip:].decode("utf-8", "replace"),
            stderr=p.err.decode("utf-8", "replace"),
            stdout_bytes=p.out_n - skip,
            stderr_bytes=p.err_n,
            truncated=p.out_n > p.cap or p.err_n > p.cap,
            error_kind=error_kind,
            error="; ".join(notes) or None,
            duration_ms=elapsed_ms(self.t0),
        )


def _signame(rc: int | None) -> str:
    if rc is None:
        return "an unknown cause"
    try:
        return signal.Signals(-rc).name
    except ValueError:
        return f"signal {-rc}"
