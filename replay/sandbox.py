"""Run new command hooks during a replay away from credentials, real files and the network.

What `--exec sandbox` does to a command hook that has no recorded answer:

- **Environment**: scrubbed. Only ``PATH``, ``LANG``, ``LC_*``, ``TZ`` and ``TERM`` pass
  through; ``HOME`` and ``TMPDIR`` point into a temporary directory; no credential
  variable (``AWS_*``, ``*_TOKEN``, ``SSH_AUTH_SOCK``, …) reaches the hook. The hook's
  own settings ``env`` and the variables Claude Code sets (``CLAUDE_PROJECT_DIR``,
  ``CLAUDE_ENV_FILE``) are kept, pointing into the temporary directory.
- **Working directory**: an empty directory per hook run (one a hook left files in is
  never handed out again); all are removed when the helper exits.
- **Isolation**: with bubblewrap (``bwrap``, Debian's ``bubblewrap``) the helper and every
  hook run in new mount, network, IPC, PID and UTS namespaces: the host's file tree is
  mounted **read-only**; ``/tmp``, ``/var/tmp``, ``/run`` (the usual home of unix sockets),
  ``/home``, ``/root``, the user's ``HOME`` and the replayed data dir (its relay socket, its
  NATS seeds and the key that signs decisions) are each an empty private ``tmpfs``; ``/dev``
  is a minimal new one; the only writable places are those tmpfs (the hook's temporary
  directory lives in the new ``/tmp``). The network namespace has no interface up, so no
  TCP, UDP or abstract unix socket of the host is reachable. The Python the helper runs
  (its prefixes) and hookaudit's own source are bound back read-only so the helper can
  start. This is `isolation`'s ``"bwrap"``.
- Without bwrap, the fallback is network isolation only: the helper runs as ``unshare -rn``
  (util-linux: a new user namespace mapping this user to root, and a new network namespace
  with only a loopback interface that is down), or ``unshare -n`` when only that works
  (root without user namespaces); then a hook can still read and write wherever this user
  can. Where neither works, hooks run **with** the network. The report's ``sandbox`` field
  says which was used, and a sandbox weaker than bwrap says so.
- **Timeouts**: each hook's own timeout, enforced by `CommandExecutor` (SIGTERM to the
  process group, grace, SIGKILL).

The helper is ``python -m replay.sandbox``: it reads pickled Invocations (length-prefixed
frames) on stdin, runs up to ``concurrency`` of them at once with a `CommandExecutor`
(the others wait in its queue), and writes msgpack RawResults tagged with the request
number on stdout. One helper serves one replay job.

Example:
    >>> sorted(scrubbed_env({"PATH": "/bin", "AWS_SECRET_ACCESS_KEY": "x"}, "/tmp/h"))
    ['HOME', 'LANG', 'PATH', 'TMPDIR']
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pickle
import shutil
import struct
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from pathlib import Path

import msgspec

from engine.effects import Invocation, RawResult

__all__ = [
    "BWRAP_DESCRIPTION",
    "SandboxExecutor",
    "bwrap_prefix",
    "network_isolation",
    "scrubbed_env",
]

BWRAP_DESCRIPTION = (
    "bwrap (host files read-only; /tmp, /run, homes and the data dir private and empty; no network)"
)

_PASS = ("PATH", "LANG", "TZ", "TERM")
_FRAME = struct.Struct(">IQ")  # payload length, request number
_result_enc = msgspec.msgpack.Encoder()
_result_dec = msgspec.msgpack.Decoder(RawResult)
_probe: tuple[list[str], str] | None = None
_READY = b"R"
_READY_TIMEOUT = 60.0
_GONE = RawResult(error_kind="spawn_failed", error="the sandbox helper exited")


def scrubbed_env(environ: Mapping[str, str], home: str) -> dict[str, str]:
    """The environment a sandboxed hook starts from: locale and PATH only, HOME in `home`.

    >>> scrubbed_env({"PATH": "/bin", "LC_ALL": "C", "GITHUB_TOKEN": "t"}, "/h")["HOME"]
    '/h'
    """
    env = {k: v for k, v in environ.items() if k in _PASS or k.startswith("LC_")}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.setdefault("LANG", "C.UTF-8")
    env["HOME"] = home
    env["TMPDIR"] = home
    return env


_MASKED = ("/tmp", "/var/tmp", "/run", "/home", "/root")


def bwrap_prefix(hidden: tuple[str, ...] = ()) -> list[str] | None:
    """The bubblewrap command prefix of the full sandbox (see the module's rules), or None
    when bwrap is not installed. `hidden`: more paths to mask (the data dir)."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return None
    args = [bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    home = os.environ.get("HOME")
    masks = [m for m in (*_MASKED, home) if m and os.path.isdir(m)]
    for m in masks:
        args += ["--tmpfs", os.path.realpath(m)]
    # What the helper needs to start, bound back read-only over the masks: the interpreter's
    # prefixes (a venv, a pyenv under /root) and hookaudit's own source.
    source = str(Path(__file__).resolve().parent.parent)
    needed = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, source)}
    for p in sorted(needed):
        if any(p == m or p.startswith(m.rstrip("/") + "/") for m in map(os.path.realpath, masks)):
            args += ["--ro-bind", p, p]
    for h in hidden:  # last: masked even inside a path bound back (a ./data in the checkout)
        if os.path.isdir(h):
            args += ["--tmpfs", os.path.realpath(h)]
    args += ["--unshare-net", "--unshare-ipc", "--unshare-pid", "--unshare-uts",
             "--new-session", "--die-with-parent", "--chdir", "/tmp", "--setenv", "TMPDIR", "/tmp",
             "--setenv", "HOME", "/tmp"]  # fmt: skip
    return args


def network_isolation() -> tuple[list[str], str]:
    """(command prefix, description) of the network isolation that works here.

    Tries ``unshare -rn`` then ``unshare -n`` by running ``true`` under each; the
    result is cached for the process. An empty prefix means no isolation.
    """
    global _probe
    if _probe is not None:
        return _probe
    unshare = shutil.which("unshare")
    if unshare is None:
        _probe = ([], "none (util-linux unshare not found): hooks may use the network")
        return _probe
    why = ""
    for flags in ("-rn", "-n"):
        try:
            done = subprocess.run(
                [unshare, flags, "true"], capture_output=True, timeout=10, check=False
            )
        except (OSError, subprocess.SubprocessError) as exc:
            why = str(exc)
            continue
        if done.returncode == 0:
            _probe = (
                [unshare, flags],
                f"unshare {flags} (new network namespace, no interfaces up)",
            )
            return _probe
        why = done.stderr.decode(errors="replace").strip() or f"exit {done.returncode}"
    _probe = ([], f"none (unshare failed: {why}): hooks may use the network")
    return _probe


class SandboxExecutor:
    """Runs command hooks through a sandbox helper process (started on first use).

    Example:
        >>> ex = SandboxExecutor()
        >>> ex.network.split()[0] in ("unshare", "none")
        True
    """

    def __init__(
        self,
        *,
        environ: Mapping[str, str] | None = None,
        grace: float = 1.0,
        concurrency: int = 32,
        hidden: tuple[str, ...] = (),
    ) -> None:
        full = bwrap_prefix(hidden)
        self.fallback = network_isolation() if full is not None else None
        if full is not None:
            self.prefix, self.network = full, BWRAP_DESCRIPTION
        else:
            self.prefix, self.network = network_isolation()
            self.network += "; no file isolation (bubblewrap not installed)"
        self.environ = dict(os.environ if environ is None else environ)
        self.grace = grace
        self.concurrency = max(1, concurrency)
        self.spawned = 0
        self._proc: asyncio.subprocess.Process | None = None
        self._pending: dict[int, asyncio.Future[RawResult]] = {}
        self._reader: asyncio.Task[None] | None = None
        self._next = 0
        self._start_lock: asyncio.Lock | None = None
        self._gone = False

    async def _spawn(self, prefix: list[str]) -> asyncio.subprocess.Process | None:
        """Start the helper under `prefix`; None when it does not come up (no ready byte)."""
        root = str(Path(__file__).resolve().parent.parent)
        env = scrubbed_env(self.environ, tempfile.gettempdir())
        env["PYTHONPATH"] = root
        proc = await asyncio.create_subprocess_exec(
            *prefix, sys.executable, "-m", "replay.sandbox", str(self.grace), str(self.concurrency),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, cwd=tempfile.gettempdir(),
        )  # fmt: skip
        assert proc.stdout is not None
        try:
            ready = await asyncio.wait_for(proc.stdout.readexactly(1), _READY_TIMEOUT)
        except (TimeoutError, asyncio.IncompleteReadError):
            ready = b""
        if ready == _READY:
            return proc
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        return None

    async def _start(self) -> asyncio.subprocess.Process:
        if self._start_lock is None:
            self._start_lock = asyncio.Lock()
        async with self._start_lock:
            if self._proc is not None:
                return self._proc
            proc = await self._spawn(self.prefix)
            if proc is None and self.fallback is not None:  # bwrap refused (no user namespaces)
                prefix, how = self.fallback
                proc = await self._spawn(prefix)
                self.network = f"{how}; no file isolation (bwrap did not start)"
                self.prefix = prefix
            if proc is None and self.prefix:  # e.g. python cannot start in the namespace
                proc = await self._spawn([])
                self.network = f"none (the helper did not start under {' '.join(self.prefix)})"
            if proc is None:
                raise RuntimeError(
                    f"the sandbox helper ({sys.executable} -m replay.sandbox) did not start"
                )
            self._proc = proc
            self._reader = asyncio.create_task(self._read(proc))
            return proc

    async def _read(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        try:
            while True:
                head = await proc.stdout.readexactly(_FRAME.size)
                size, rid = _FRAME.unpack(head)
                body = await proc.stdout.readexactly(size)
                fut = self._pending.pop(rid, None)
                if fut is not None and not fut.done():
                    fut.set_result(_result_dec.decode(body))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self._gone = True
            for fut in self._pending.values():
                if not fut.done():
                    fut.set_result(_GONE)
            self._pending.clear()

    async def warm_up(self) -> None:
        """Start the helper now; a failure is left for the first `run` to report."""
        with contextlib.suppress(Exception):
            await self._start()

    async def run(self, inv: Invocation) -> RawResult:
        """Run one command hook in the sandbox; never raises for the hook's own failure."""
        proc = await self._start()
        assert proc.stdin is not None
        if self._gone:
            return _GONE
        self._next += 1
        rid = self._next
        fut: asyncio.Future[RawResult] = asyncio.get_running_loop().create_future()
        self._pending[rid] = fut
        body = pickle.dumps(inv, protocol=pickle.HIGHEST_PROTOCOL)
        proc.stdin.write(_FRAME.pack(len(body), rid) + body)
        self.spawned += 1
        try:
            await proc.stdin.drain()
        except ConnectionError:
            self._pending.pop(rid, None)
            return _GONE
        return await fut

    async def aclose(self) -> None:
        """Let the helper finish what it runs, then reap it."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.stdin is not None:
            proc.stdin.close()
            with contextlib.suppress(ConnectionError):
                await proc.stdin.wait_closed()
        if self._reader is not None:
            await self._reader
        await proc.wait()


# ----------------------------------------------------------------------------- the helper


def _pidfd_watcher() -> None:
    """On Python 3.11, reap hooks with a pidfd instead of a thread per child (3.12 does so
    by default): the helper starts thousands of processes."""
    if sys.version_info >= (3, 12) or not hasattr(os, "pidfd_open"):
        return
    try:
        os.close(os.pidfd_open(os.getpid()))  # pidfds may be refused (old kernel, seccomp)
    except OSError:
        return
    watcher = asyncio.PidfdChildWatcher()
    watcher.attach_loop(asyncio.get_running_loop())
    asyncio.set_child_watcher(watcher)


async def _serve(grace: float, concurrency: int) -> None:
    from engine.executors.command import CommandExecutor

    _pidfd_watcher()

    root = Path(tempfile.mkdtemp(prefix="hookaudit-sandbox-"))
    home = root / "home"
    home.mkdir()
    env = scrubbed_env(os.environ, str(home))
    executor = CommandExecutor(base_env=env, workdir=str(root), grace=grace)
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    out = sys.stdout.buffer
    out.write(_READY)
    out.flush()
    tasks: set[asyncio.Task[None]] = set()
    slots = asyncio.Semaphore(concurrency)

    free: list[Path] = []  # empty working directories, ready for the next hook

    async def one(rid: int, inv: Invocation) -> None:
        async with slots:
            await run(rid, inv)

    async def run(rid: int, inv: Invocation) -> None:
        work = free.pop() if free else root / f"run-{rid}"
        work.mkdir(exist_ok=True)
        extra = dict(inv.env)
        extra["CLAUDE_PROJECT_DIR"] = str(work)
        if "CLAUDE_ENV_FILE" in extra:
            extra["CLAUDE_ENV_FILE"] = str(home / ".claude" / Path(extra["CLAUDE_ENV_FILE"]).name)
            (home / ".claude").mkdir(exist_ok=True)
        try:
            res = await executor.run(msgspec.structs.replace(inv, cwd=str(work), env=extra))
        except Exception as exc:  # a bug must not hang the replay waiting for this answer
            res = RawResult(error_kind="spawn_failed", error=f"sandbox: {exc!r}")
        if not res.pending:  # a background hook may still write there
            with os.scandir(work) as left:
                if next(left, None) is None:  # still empty: as good as a fresh one
                    free.append(work)
        body = _result_enc.encode(res)
        out.write(_FRAME.pack(len(body), rid) + body)
        out.flush()

    try:
        while True:
            try:
                head = await reader.readexactly(_FRAME.size)
            except asyncio.IncompleteReadError:
                break
            size, rid = _FRAME.unpack(head)
            inv = pickle.loads(await reader.readexactly(size))  # from our own parent only
            task = asyncio.create_task(one(rid, inv))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        if tasks:
            await asyncio.gather(*tasks)
        await executor.aclose()
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    args = sys.argv[1:]
    asyncio.run(_serve(float(args[0]) if args else 1.0, int(args[1]) if len(args) > 1 else 32))
