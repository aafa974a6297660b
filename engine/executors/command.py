"""Run `command` hooks as subprocesses (spec §6.1, §6.3, §6.4, §9 SessionEnd).

Rules of this file:
- One hook, one process group (``start_new_session``). Every kill goes to the whole
  group, so a hook's children die with it. A child that calls ``setsid`` itself escapes.
- A hook's failure is a RawResult, never an exception. ``error_kind`` is set only when
  the hook gave no answer (``spawn_failed``, ``plugin_root_missing``,
  ``plugin_var_outside_plugin``, ``timeout``, ``cancelled``, ``unknown_type``).
  ``error`` also carries notes that leave the answer standing: stdin closed unread
  (EPIPE), death by a signal (``exit_code`` is then 1, as in Claude Code), cwd fallback.
  The EPIPE note is a race for a hook that never reads: it appears only when the hook
  was gone before its input fitted into the pipe, as it does in Claude Code.
- Output is read by a protocol as it arrives. At most ``output_cap`` bytes a stream are
  kept; the rest is counted in ``stdout_bytes``/``stderr_bytes`` and dropped.
- Nothing waits forever. A timeout sends SIGTERM, waits ``grace``, then SIGKILL. Once
  the hook's own process has exited, pipes that its children still hold get
  ``drain_window`` seconds, then the group is killed. Children that let go of the
  pipes are left alone: a SessionStart hook may start a daemon on purpose.
- Cancelling ``run`` is an abort: SIGKILL to the group at once, a bounded wait for the
  reap, then re-raise. A stop with grace (the SessionEnd budget) is the hook's timeout.
- Async hooks (config ``async``/``asyncRewake``, or a first stdout line
  ``{"async": true}``) return ``pending=True`` at once and finish under an
  AsyncRegistry, which enforces ``asyncTimeout`` (Claude Code does not) and hands
  the final results out through ``drain``.
- Bytes are decoded as UTF-8 with ``errors="replace"``. Nothing here interprets an answer.

Where a hook runs: the event's ``cwd`` when it is a directory on this machine, else
the executor's ``workdir``, else the worker's own cwd (workers evaluate events raised
on other hosts). Shell form is ``/bin/sh -c``, never ``$SHELL``;
``CLAUDE_CODE_SHELL_PREFIX`` wraps it as ``<prefix> '<command>'`` (not exec form, not
PowerShell). POSIX only: process groups and ``killpg`` have no Windows equivalent here.

Example:
    >>> ex = CommandExecutor(grace=0.5)
    >>> (ex.output_cap, ex.registry.pending())
    (1048576, 0)
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shlex
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping
from typing import Any

import msgspec

from engine.effects import Invocation, RawResult
from engine.settings import CommandHook, expand_plugin_vars

__all__ = ["AsyncRegistry", "CommandExecutor"]

_PIPE = subprocess.PIPE
_ASYNC_TIMEOUT_MS = 15_000
_KILL_WAIT = 2.0  # SIGKILLed processes end in ms; bounded anyway (D state, setsid escapees)
_EPIPE = "hook closed stdin before reading all of its input (EPIPE)"
_Fut = asyncio.Future[None]


def _ms(t0: float) -> float:
    return (time.perf_counter() - t0) * 1000.0


def _killpg(pgid: int, sig: int) -> None:
    # ESRCH: the group is gone; EPERM: on macOS, a group of zombies only.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _set(fut: asyncio.Future[Any], value: Any = None) -> None:
    if not fut.done():
        fut.set_result(value)


class _Capture(asyncio.SubprocessProtocol):
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
        self.exited: _Fut = loop.create_future()
        self.closed: _Fut = loop.create_future()
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
            except msgspec.DecodeError:
                obj = None
            if isinstance(obj, dict) and obj.get("async") is True:
                self.watch = False
                self.first_len = end + 1 if nl >= 0 else end
                _set(self.declared, obj)
                return
        if nl >= 0 or self.out_n >= self.cap:
            self.watch = False

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        if fd == 0:
            self.stdin_error, self.stdin_done = exc, True
            return
        self.open_pipes -= 1
        if self.open_pipes == 0:
            _set(self.closed)

    def process_exited(self) -> None:
        _set(self.exited)


class _Running:
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
        proto: _Capture,
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
            duration_ms=_ms(self.t0),
        )


def _signame(rc: int | None) -> str:
    if rc is None:
        return "an unknown cause"
    try:
        return signal.Signals(-rc).name
    except ValueError:
        return f"signal {-rc}"


def _async_limit(line: Mapping[str, Any]) -> float:
    value = line.get("asyncTimeout")
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return float(value) / 1000.0
    return _ASYNC_TIMEOUT_MS / 1000.0


class AsyncRegistry:
    """Background hooks: keeps them running, enforces their limit, collects their results.

    Example:
        >>> reg = AsyncRegistry()
        >>> reg.pending()
        0
    """

    def __init__(self) -> None:
        self._live: dict[asyncio.Task[None], _Running] = {}
        self._done: list[tuple[Invocation, RawResult]] = []
        self._stop: _Fut | None = None

    def pending(self) -> int:
        """How many background hooks are still running.

        >>> AsyncRegistry().pending()
        0
        """
        return len(self._live)

    async def drain(self, timeout: float | None = 0.0) -> list[tuple[Invocation, RawResult]]:
        """The finished results not handed out yet, each once, in completion order.

        ``timeout=0`` does not wait; ``None`` waits for every pending hook; a number
        waits at most that long for all of them.

        >>> import asyncio
        >>> asyncio.run(AsyncRegistry().drain())
        []
        """
        if self._live and (timeout is None or timeout > 0):
            await asyncio.wait(tuple(self._live), timeout=timeout)
        done, self._done = self._done, []
        return done

    async def aclose(self) -> None:
        """Stop every background hook (SIGTERM, grace, SIGKILL); results stay drainable
        with ``error_kind="cancelled"``.

        >>> import asyncio
        >>> asyncio.run(AsyncRegistry().aclose())
        """
        if self._stop is not None:
            _set(self._stop)
        if self._live:
            await asyncio.wait(tuple(self._live))
        self._stop = None

    def _adopt(self, hook: _Running, limit: float, skip: int) -> None:
        loop = asyncio.get_running_loop()
        if self._stop is None or self._stop.get_loop() is not loop:
            self._stop = loop.create_future()
        task = loop.create_task(self._finish(hook, limit, skip, self._stop))
        self._live[task] = hook
        task.add_done_callback(self._forget)

    def _forget(self, task: asyncio.Task[None]) -> None:
        self._live.pop(task, None)

    async def _finish(self, h: _Running, limit: float, skip: int, stop: _Fut) -> None:
        try:
            await asyncio.wait(
                (h.proto.exited, stop), timeout=limit, return_when=asyncio.FIRST_COMPLETED
            )
            if h.proto.exited.done():
                await h.drain()
                res = h.result(skip=skip)
            elif stop.done():
                how = await h.stop()
                res = h.result(
                    error_kind="cancelled", error=f"stopped at registry close; {how}", skip=skip
                )
            else:
                how = await h.stop()
                res = h.result(
                    error_kind="timeout", error=f"async hook ran past {limit:g} s; {how}", skip=skip
                )
        except asyncio.CancelledError:
            await h.kill()
            self._done.append(
                (
                    h.inv,
                    h.result(
                        error_kind="cancelled", error="killed (SIGKILL) on cancellation", skip=skip
                    ),
                )
            )
            raise
        self._done.append((h.inv, res))


class CommandExecutor:
    """Runs `command` hooks; safe to share between hooks gathered on one event loop.

    Example:
        >>> import asyncio
        >>> from engine.records import HookIdentity
        >>> hook = CommandHook(type="command", command="cat; echo; exit 3")
        >>> inv = Invocation(index=0, event="Stop", hook=hook,
        ...     identity=HookIdentity(type="command", source="user", command=hook.command),
        ...     source="user", matcher=None, timeout=10, payload={}, input_json=b'{"a":1}', cwd="/")
        >>> res = asyncio.run(CommandExecutor().run(inv))
        >>> (res.exit_code, res.stdout)
        (3, '{"a":1}\\n\\n')
    """

    def __init__(
        self,
        *,
        output_cap: int = 1 << 20,
        grace: float = 2.0,
        drain_window: float = 0.5,
        workdir: str | None = None,
        base_env: Mapping[str, str] | None = None,
        shell_prefix: str | None = None,
        registry: AsyncRegistry | None = None,
    ) -> None:
        env = os.environ if base_env is None else base_env
        self.output_cap = output_cap
        self.grace = grace
        self.drain_window = drain_window
        self.workdir = workdir
        # Read once: the OTEL_* exporter variables are never passed on (spec §6.1).
        self.base_env = {k: v for k, v in env.items() if not k.startswith("OTEL_")}
        self.shell_prefix = (
            env.get("CLAUDE_CODE_SHELL_PREFIX", "") if shell_prefix is None else shell_prefix
        )
        self.registry = registry if registry is not None else AsyncRegistry()

    async def aclose(self) -> None:
        """Stop the background hooks (see ``AsyncRegistry.aclose``).

        >>> import asyncio
        >>> asyncio.run(CommandExecutor().aclose())
        """
        await self.registry.aclose()

    def _prepare(
        self, inv: Invocation
    ) -> tuple[list[str], str, dict[str, str], list[str]] | RawResult:
        hook = inv.hook
        if not isinstance(hook, CommandHook):
            return RawResult(
                error_kind="unknown_type",
                error=f"CommandExecutor cannot run a {type(hook).__name__}",
            )
        root = inv.plugin_root
        if root is not None and not os.path.isdir(root):
            # Before spawning, so a missing script exiting 2 cannot look like a block.
            return RawResult(
                error_kind="plugin_root_missing",
                error=f"plugin directory {root} does not exist; hook not run",
            )
        try:
            command = expand_plugin_vars(hook.command, root, inv.plugin_data)
            args = [expand_plugin_vars(a, root, inv.plugin_data) for a in hook.args or ()]
        except KeyError as exc:
            return RawResult(
                error_kind="plugin_var_outside_plugin",
                error=f"${{{exc.args[0]}}} in {hook.command!r} is not defined for this hook (plugin hooks only)",
            )
        env = {**self.base_env, **inv.env} if inv.env else dict(self.base_env)
        if hook.args is not None:
            argv = [command, *args]
        elif hook.shell == "powershell":
            path = env.get("PATH")
            pwsh = shutil.which("pwsh", path=path) or shutil.which("powershell", path=path)
            if pwsh is None:
                return RawResult(
                    error_kind="spawn_failed", error="pwsh not found on PATH (shell: powershell)"
                )
            argv = [pwsh, "-NoProfile", "-NonInteractive", "-Command", command]
        else:
            text = f"{self.shell_prefix} {shlex.quote(command)}" if self.shell_prefix else command
            argv = ["/bin/sh", "-c", text]
        notes: list[str] = []
        cwd = inv.cwd
        if not cwd or not os.path.isdir(cwd):
            fallback = self.workdir or os.getcwd()
            notes.append(f"cwd {cwd!r} does not exist here; ran in {fallback}")
            cwd = fallback
        return argv, cwd, env, notes

    async def run(self, inv: Invocation) -> RawResult:
        """Run one hook to its end (or to ``pending`` when async); never raises for it.

        >>> import asyncio
        >>> from engine.records import HookIdentity
        >>> hook = CommandHook(type="command", command="exit 2")
        >>> inv = Invocation(index=0, event="Stop", hook=hook,
        ...     identity=HookIdentity(type="command", source="user"), source="user",
        ...     matcher=None, timeout=10, payload={}, input_json=b"{}", cwd="/")
        >>> asyncio.run(CommandExecutor().run(inv)).exit_code
        2
        """
        t0 = time.perf_counter()
        prepared = self._prepare(inv)
        if isinstance(prepared, RawResult):
            return msgspec.structs.replace(prepared, duration_ms=_ms(t0))
        argv, cwd, env, notes = prepared
        background = bool(inv.hook.async_ or inv.hook.asyncRewake)
        loop = asyncio.get_running_loop()
        proto = _Capture(loop, self.output_cap, watch=not background)
        try:
            transport, _ = await loop.subprocess_exec(
                lambda: proto,
                *argv,
                stdin=_PIPE,
                stdout=_PIPE,
                stderr=_PIPE,
                cwd=cwd,
                env=env,
                start_new_session=True,
            )
        except (OSError, ValueError, subprocess.SubprocessError) as exc:
            return RawResult(
                error_kind="spawn_failed",
                error=f"cannot start {argv[0]!r}: {exc}",
                duration_ms=_ms(t0),
            )
        h = _Running(inv, t0, transport, proto, notes, self)
        owned = True
        try:
            h.feed(inv.input_json)
            if background:
                owned = False
                self.registry._adopt(h, inv.timeout, 0)
                return RawResult(pending=True, duration_ms=_ms(t0))
            await asyncio.wait(
                (proto.exited, proto.declared),
                timeout=inv.timeout,
                return_when=asyncio.FIRST_COMPLETED,
            )
            if proto.declared.done():
                owned = False
                self.registry._adopt(h, _async_limit(proto.declared.result()), proto.first_len)
                line = bytes(proto.out[: proto.first_len])
                return RawResult(
                    pending=True,
                    stdout=line.rstrip(b"\r\n").decode("utf-8", "replace"),
                    stdout_bytes=len(line),
                    duration_ms=_ms(t0),
                )
            if not proto.exited.done():
                how = await h.stop()
                return h.result(
                    error_kind="timeout", error=f"timed out after {inv.timeout:g} s; {how}"
                )
            await h.drain()
            return h.result()
        except BaseException:
            if owned:
                await h.kill()
            raise
