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

Modules: this one prepares and runs a hook (argv, cwd, env, the first-line check for an
async answer); `engine.executors.process` is one running process (pipes, caps, stop,
kill, its RawResult); `engine.executors.background` keeps async hooks running.

Example:
    >>> ex = CommandExecutor(grace=0.5)
    >>> (ex.output_cap, ex.registry.pending())
    (1048576, 0)
"""

from __future__ import annotations

import asyncio
import os
import shlex
import shutil
import subprocess
import time
from collections.abc import Mapping

import msgspec

from engine.effects import Invocation, RawResult
from engine.executors.background import AsyncRegistry, async_limit
from engine.executors.process import Capture, Running, elapsed_ms
from engine.settings import CommandHook, expand_plugin_vars

__all__ = ["AsyncRegistry", "CommandExecutor"]

_PIPE = subprocess.PIPE


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
            return msgspec.structs.replace(prepared, duration_ms=elapsed_ms(t0))
        argv, cwd, env, notes = prepared
        background = bool(inv.hook.async_ or inv.hook.asyncRewake)
        loop = asyncio.get_running_loop()
        proto = Capture(loop, self.output_cap, watch=not background)
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
                duration_ms=elapsed_ms(t0),
            )
        h = Running(inv, t0, transport, proto, notes, self)
        owned = True
        try:
            h.feed(inv.input_json)
            if background:
                owned = False
                self.registry._adopt(h, inv.timeout, 0)
                return RawResult(pending=True, duration_ms=elapsed_ms(t0))
            await asyncio.wait(
                (proto.exited, proto.declared),
                timeout=inv.timeout,
                return_when=asyncio.FIRST_COMPLETED,
            )
            if proto.declared.done():
                owned = False
                self.registry._adopt(h, async_limit(proto.declared.result()), proto.first_len)
                line = bytes(proto.out[: proto.first_len])
                return RawResult(
                    pending=True,
                    stdout=line.rstrip(b"\r\n").decode("utf-8", "replace"),
                    stdout_bytes=len(line),
                    duration_ms=elapsed_ms(t0),
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
