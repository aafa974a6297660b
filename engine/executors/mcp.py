"""Run `mcp_tool` hooks: call a tool on an MCP server (spec §4.2).

Rules of this file:
- Servers come from Claude Code's MCP configuration (`.mcp.json`:
  ``{"mcpServers": {name: {"command", "args", "env"} | {"type": "http", "url"}}}``),
  loaded by `load_mcp_config`. Only the stdio transport is implemented; an ``http``
  or ``sse`` server answers ``mcp_transport_unsupported``.
- One long-lived process per server, in its own process group, started lazily by the
  first hook that needs it and restarted by the next hook once it has died. JSON-RPC
  2.0 over newline-delimited JSON: ``initialize`` (protocolVersion 2025-06-18), the
  ``notifications/initialized`` notification, then ``tools/call`` per hook. Responses
  are matched to requests by id, so hooks share one server in parallel.
- A hook's failure is a RawResult, never an exception. Success is
  ``exit_code=0, stdout=<the text content items joined by newlines>``, decoded like a
  command hook's stdout. ``error_kind``: ``mcp_not_connected`` (unknown server, spawn or
  handshake failure), ``mcp_transport_unsupported``, ``mcp_tool_error`` (``isError``),
  ``mcp_rpc_error`` (a JSON-RPC error object), ``mcp_protocol`` (an unreadable answer),
  ``mcp_connection_closed`` (the server died during the call), ``timeout``. All are
  non-blocking errors (the enforcing posture then denies at PreToolUse).
- Nothing waits forever: the hook's timeout covers start, handshake and call. A timed
  out call kills the server (a single-threaded server would still be busy), and the
  next call starts a fresh one. Messages are read a line at a time, at most
  ``max_message`` bytes a line; a longer line is a protocol error that ends the server.
- ``aclose()`` closes each server's stdin, SIGTERMs its group, waits ``grace``, then
  SIGKILLs the group. POSIX only.
- ``${path}`` in the string values of the hook's ``input`` (recursively) is replaced by
  the dotted path into the event payload (``${tool_input.file_path}``; list items by
  index). A missing path gives ``""``; a non-string value is inserted as JSON.

Example:
    >>> substitute({"p": "${tool_input.file_path}", "n": ["${x.y}"]},
    ...            {"tool_input": {"file_path": "/a"}})
    {'p': '/a', 'n': ['']}
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

import msgspec

from engine.effects import Invocation, RawResult
from engine.errors import SettingsError
from engine.records import ENGINE_VERSION
from engine.settings import McpToolHook

__all__ = ["McpExecutor", "McpServerConfig", "load_mcp_config", "substitute"]

PROTOCOL_VERSION = "2025-06-18"
_KILL_WAIT = 2.0
_STDERR_TAIL = 4096
_PLACEHOLDER = re.compile(r"\$\{([^}]*)\}")
_ENV_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


class McpServerConfig(msgspec.Struct, frozen=True, kw_only=True):
    """One server of an `.mcp.json` file, as written (``${VAR}`` expanded at spawn)."""

    name: str
    type: Literal["stdio", "http", "sse"] = "stdio"
    command: str | None = None
    args: tuple[str, ...] = ()
    env: dict[str, str] = msgspec.field(default_factory=dict)
    url: str | None = None
    headers: dict[str, str] = msgspec.field(default_factory=dict)
    file: str = ""


# --------------------------------------------------------------------------- configuration


def _str_map(value: Any, file: str, where: str) -> dict[str, str]:
    if not isinstance(value, dict):
        raise SettingsError(file, where, f"expected an object, got {type(value).__name__}")
    for k, v in value.items():
        if not isinstance(v, str):
            raise SettingsError(file, f"{where}.{k}", f"expected a string, got {type(v).__name__}")
    return dict(value)


def _server(name: str, spec: Any, file: str) -> McpServerConfig:
    where = f"mcpServers.{name}"
    if not isinstance(spec, dict):
        raise SettingsError(file, where, f"expected an object, got {type(spec).__name__}")
    kind = spec.get("type", "stdio")
    if kind not in ("stdio", "http", "sse"):
        raise SettingsError(file, f"{where}.type", f"unknown transport {kind!r}")
    if kind == "stdio":
        command = spec.get("command")
        if not isinstance(command, str) or not command:
            raise SettingsError(file, f"{where}.command", "a stdio server needs a command string")
        args = spec.get("args", [])
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise SettingsError(file, f"{where}.args", "expected a list of strings")
        env = _str_map(spec.get("env", {}), file, f"{where}.env")
        return McpServerConfig(
            name=name, type="stdio", command=command, args=tuple(args), env=env, file=file
        )
    url = spec.get("url")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise SettingsError(file, f"{where}.url", f"an {kind} server needs an http(s) url")
    headers = _str_map(spec.get("headers", {}), file, f"{where}.headers")
    return McpServerConfig(name=name, type=kind, url=url, headers=headers, file=file)


def load_mcp_config(paths: Iterable[str | os.PathLike[str]]) -> dict[str, McpServerConfig]:
    """Read `.mcp.json`-style files; a later file's server replaces an earlier one's.

    Raises `SettingsError` naming the file and the key for anything unreadable.

    >>> load_mcp_config([])
    {}
    """
    servers: dict[str, McpServerConfig] = {}
    for p in paths:
        file = os.fspath(p)
        try:
            data = Path(file).read_bytes()
        except OSError as exc:
            raise SettingsError(file, "", f"cannot read: {exc.strerror or exc}") from exc
        try:
            doc = msgspec.json.decode(data)
        except msgspec.DecodeError as exc:
            raise SettingsError(file, "", f"invalid JSON: {exc}") from exc
        if not isinstance(doc, dict):
            raise SettingsError(file, "", f"expected an object, got {type(doc).__name__}")
        if "mcpServers" not in doc:
            raise SettingsError(file, "mcpServers", "missing")
        table = doc["mcpServers"]
        if not isinstance(table, dict):
            raise SettingsError(
                file, "mcpServers", f"expected an object, got {type(table).__name__}"
            )
        for name, spec in table.items():
            servers[name] = _server(name, spec, file)
    return servers


def _expand_env(text: str, environ: Mapping[str, str], missing: list[str]) -> str:
    def one(m: re.Match[str]) -> str:
        value = environ.get(m.group(1))
        if value is not None:
            return value
        if m.group(2) is not None:
            return m.group(2)
        missing.append(m.group(1))
        return ""

    return _ENV_VAR.sub(one, text)


# --------------------------------------------------------------------------- ${path} input


def _lookup(payload: Any, path: str) -> str:
    node = payload
    for part in path.strip().split("."):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return ""
    if node is None:
        return ""
    if isinstance(node, str):
        return node
    return msgspec.json.encode(node).decode()


def substitute(value: Any, payload: Mapping[str, Any]) -> Any:
    """Replace ``${dotted.path}`` in every string of `value` (dicts and lists recursively)."""
    if isinstance(value, str):
        return _PLACEHOLDER.sub(lambda m: _lookup(payload, m.group(1)), value)
    if isinstance(value, dict):
        return {k: substitute(v, payload) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute(v, payload) for v in value]
    return value


# --------------------------------------------------------------------------- stdio transport


class _McpError(Exception):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


def _killpg(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


class _Conn:
    """One running server process and its JSON-RPC session."""

    def __init__(self, name: str, proc: asyncio.subprocess.Process) -> None:
        self.name = name
        self.proc = proc
        self.pgid = proc.pid  # start_new_session made it the group leader
        self.loop = asyncio.get_running_loop()
        self.pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self.next_id = 0
        self.write_lock = asyncio.Lock()
        self.stderr_tail = bytearray()
        self.dead: _McpError | None = None
        self.reader = asyncio.create_task(self._read_stdout())
        self.errreader = asyncio.create_task(self._read_stderr())

    @property
    def alive(self) -> bool:
        return self.dead is None and self.proc.returncode is None

    def _why_closed(self) -> str:
        rc = self.proc.returncode
        how = (
            "still running"
            if rc is None
            else (f"exit code {rc}" if rc >= 0 else f"killed by signal {-rc}")
        )
        tail = self.stderr_tail.decode("utf-8", "replace").strip()
        return f"MCP server {self.name!r} closed its output ({how})" + (
            f"; stderr: {tail[-500:]}" if tail else ""
        )

    def _fail_all(self, err: _McpError) -> None:
        if self.dead is None:
            self.dead = err
        for fut in self.pending.values():
            if not fut.done():
                fut.set_exception(err)
                fut.exception()  # retrieved: a caller that gave up must not warn
        self.pending.clear()

    async def _read_stderr(self) -> None:
        stream = self.proc.stderr
        assert stream is not None
        with contextlib.suppress(Exception):
            while chunk := await stream.read(65536):
                self.stderr_tail += chunk
                del self.stderr_tail[:-_STDERR_TAIL]

    async def _read_stdout(self) -> None:
        stream = self.proc.stdout
        assert stream is not None
        err: _McpError
        try:
            while True:
                line = await stream.readline()
                if not line:
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(self.proc.wait(), 0.5)
                    err = _McpError("mcp_connection_closed", self._why_closed())
                    break
                if not line.strip():
                    continue
                try:
                    msg = msgspec.json.decode(line)
                except msgspec.DecodeError:
                    continue  # not a message (a server that logs to stdout); skip it
                if isinstance(msg, dict):
                    await self._dispatch(msg)
        except ValueError as exc:  # a line longer than the stream limit
            err = _McpError("mcp_protocol", f"MCP server {self.name!r}: {exc}")
            _killpg(self.pgid, signal.SIGKILL)
        except Exception as exc:
            err = _McpError("mcp_connection_closed", f"MCP server {self.name!r}: {exc!r}")
        self._fail_all(err)

    async def _dispatch(self, msg: dict[str, Any]) -> None:
        mid = msg.get("id")
        if "method" in msg:
            if mid is None:
                return  # a notification (log, progress, list_changed): nothing to do
            if msg["method"] == "ping":
                await self._send({"jsonrpc": "2.0", "id": mid, "result": {}})
            else:
                await self._send(
                    {
                        "jsonrpc": "2.0",
                        "id": mid,
                        "error": {"code": -32601, "message": "Method not found"},
                    }
                )
            return
        if isinstance(mid, int) and not isinstance(mid, bool):
            fut = self.pending.pop(mid, None)
            if fut is not None and not fut.done():
                fut.set_result(msg)

    async def _send(self, msg: dict[str, Any]) -> None:
        stdin = self.proc.stdin
        assert stdin is not None
        data = msgspec.json.encode(msg) + b"\n"
        try:
            async with self.write_lock:
                stdin.write(data)
                await stdin.drain()
        except (ConnectionError, RuntimeError) as exc:
            raise _McpError(
                "mcp_connection_closed", f"MCP server {self.name!r} stdin closed: {exc}"
            ) from exc

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        await self._send(msg)

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """Send one request and wait for its response's ``result``."""
        if self.dead is not None:
            raise self.dead
        self.next_id += 1
        mid = self.next_id
        fut: asyncio.Future[dict[str, Any]] = self.loop.create_future()
        self.pending[mid] = fut
        try:
            await self._send({"jsonrpc": "2.0", "id": mid, "method": method, "params": params})
            msg = await fut
        except asyncio.CancelledError:
            if self.pending.pop(mid, None) is not None and self.alive:
                with contextlib.suppress(Exception):
                    await self.notify(
                        "notifications/cancelled", {"requestId": mid, "reason": "hook timeout"}
                    )
            raise
        finally:
            self.pending.pop(mid, None)
        if "error" in msg:
            e = msg["error"]
            text = e.get("message") if isinstance(e, dict) else e
            code = e.get("code") if isinstance(e, dict) else None
            raise _McpError("mcp_rpc_error", f"{method} failed: {text} (code {code})")
        result = msg.get("result")
        if not isinstance(result, dict):
            raise _McpError("mcp_protocol", f"{method}: response has no result object")
        return result

    def kill_now(self) -> None:
        """From another event loop, or as a last resort: SIGKILL the group, no waiting."""
        self._fail_all(_McpError("mcp_connection_closed", f"MCP server {self.name!r} stopped"))
        _killpg(self.pgid, signal.SIGKILL)

    async def close(self, grace: float) -> None:
        """Close stdin, SIGTERM the group, wait `grace`, SIGKILL the group; reap."""
        self._fail_all(_McpError("mcp_connection_closed", f"MCP server {self.name!r} stopped"))
        stdin = self.proc.stdin
        if stdin is not None:
            with contextlib.suppress(Exception):
                stdin.close()
        if self.proc.returncode is None:
            _killpg(self.pgid, signal.SIGTERM)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.proc.wait(), grace)
        _killpg(self.pgid, signal.SIGKILL)  # the leader or children left in its group
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self.proc.wait(), _KILL_WAIT)
        for task in (self.reader, self.errreader):
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(task, _KILL_WAIT)
        if stdin is not None:
            with contextlib.suppress(Exception):
                await stdin.wait_closed()


class _Server:
    """One configured server: its current connection, started under a per-loop lock."""

    def __init__(self, config: McpServerConfig) -> None:
        self.config = config
        self.conn: _Conn | None = None
        self._locks: dict[asyncio.AbstractEventLoop, asyncio.Lock] = {}

    def lock(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        lock = self._locks.get(loop)
        if lock is None:
            self._locks = {lp: lk for lp, lk in self._locks.items() if not lp.is_closed()}
            lock = self._locks[loop] = asyncio.Lock()
        return lock


# --------------------------------------------------------------------------- executor


def _ms(t0: float) -> float:
    return (time.perf_counter() - t0) * 1000.0


class McpExecutor:
    """Runs `mcp_tool` hooks against configured MCP servers.

    `servers` maps a server name (``plugin:<plugin>:<server>`` for plugin servers) to
    its configuration. `environ` is the base environment of the server processes and
    the source of ``${VAR}`` in their configuration (default: ``os.environ``).

    Example:
        >>> ex = McpExecutor()
        >>> (ex.output_cap, ex.servers)
        (1048576, {})
    """

    def __init__(
        self,
        servers: Mapping[str, McpServerConfig] | None = None,
        *,
        environ: Mapping[str, str] | None = None,
        cwd: str | None = None,
        grace: float = 2.0,
        output_cap: int = 1024 * 1024,
        max_message: int = 8 * 1024 * 1024,
    ) -> None:
        self.servers: dict[str, McpServerConfig] = dict(servers or {})
        self.environ = dict(os.environ if environ is None else environ)
        self.cwd = cwd
        self.grace = grace
        self.output_cap = output_cap
        self.max_message = max_message
        self._live: dict[str, _Server] = {}

    async def aclose(self) -> None:
        """Terminate every server process (SIGTERM, `grace`, SIGKILL of its group)."""
        live, self._live = self._live, {}
        loop = asyncio.get_running_loop()
        closing = []
        for srv in live.values():
            conn, srv.conn = srv.conn, None
            if conn is None:
                continue
            if conn.loop is loop:
                closing.append(conn.close(self.grace))
            else:
                conn.kill_now()
        if closing:
            await asyncio.gather(*closing)

    def pids(self) -> dict[str, int]:
        """The process id of each running server (for tests and status output)."""
        return {
            name: srv.conn.proc.pid
            for name, srv in self._live.items()
            if srv.conn is not None and srv.conn.alive
        }

    async def _spawn(self, cfg: McpServerConfig, inv: Invocation) -> _Conn:
        missing: list[str] = []
        command = _expand_env(cfg.command or "", self.environ, missing)
        args = [_expand_env(a, self.environ, missing) for a in cfg.args]
        extra = {k: _expand_env(v, self.environ, missing) for k, v in cfg.env.items()}
        if missing:
            raise _McpError(
                "mcp_not_connected",
                f"MCP server {cfg.name!r} ({cfg.file or 'config'}): environment variable(s) "
                f"{', '.join(sorted(set(missing)))} not set and no default given",
            )
        cwd = self.cwd or (inv.cwd if inv.cwd and os.path.isdir(inv.cwd) else os.getcwd())
        try:
            proc = await asyncio.create_subprocess_exec(
                command,
                *args,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd=cwd,
                env={**self.environ, **extra},
                start_new_session=True,
                limit=self.max_message,
            )
        except (OSError, ValueError) as exc:
            raise _McpError(
                "mcp_not_connected", f"cannot start MCP server {cfg.name!r} ({command!r}): {exc}"
            ) from exc
        return _Conn(cfg.name, proc)

    async def _connection(self, name: str, cfg: McpServerConfig, inv: Invocation) -> _Conn:
        srv = self._live.get(name)
        if srv is None:
            srv = self._live[name] = _Server(cfg)
        async with srv.lock():
            conn = srv.conn
            if conn is not None and conn.alive and conn.loop is asyncio.get_running_loop():
                return conn
            if conn is not None:
                srv.conn = None
                if conn.loop is asyncio.get_running_loop():
                    await conn.close(self.grace)
                else:
                    conn.kill_now()
            conn = await self._spawn(cfg, inv)
            try:
                init = await conn.request(
                    "initialize",
                    {
                        "protocolVersion": PROTOCOL_VERSION,
                        "capabilities": {},
                        "clientInfo": {"name": "hookaudit", "version": ENGINE_VERSION},
                    },
                )
                if not isinstance(init.get("protocolVersion"), str):
                    raise _McpError("mcp_protocol", "initialize: the result has no protocolVersion")
                await conn.notify("notifications/initialized")
            except _McpError as exc:
                await conn.close(self.grace)
                kind = "mcp_not_connected" if exc.kind != "mcp_protocol" else exc.kind
                raise _McpError(
                    kind, f"MCP server {name!r} failed to initialize: {exc.message}"
                ) from exc
            except BaseException:
                await asyncio.shield(conn.close(self.grace))
                raise
            srv.conn = conn
            return conn

    async def _stop(self, name: str, conn: _Conn) -> None:
        srv = self._live.get(name)
        if srv is not None and srv.conn is conn:
            srv.conn = None
        await conn.close(self.grace)

    def _answer(self, result: dict[str, Any], label: str, t0: float) -> RawResult:
        content = result.get("content")
        if not isinstance(content, list):
            return RawResult(
                error_kind="mcp_protocol",
                error=f"{label}: tools/call result has no content list",
                duration_ms=_ms(t0),
            )
        texts = [
            item["text"]
            for item in content
            if isinstance(item, dict)
            and item.get("type") == "text"
            and isinstance(item.get("text"), str)
        ]
        text = "\n".join(texts)
        raw = text.encode("utf-8", "replace")
        truncated = len(raw) > self.output_cap
        if truncated:
            text = raw[: self.output_cap].decode("utf-8", "ignore")
        if result.get("isError") is True:
            first = text.strip()[:500] or "no text"
            return RawResult(
                stdout=text,
                stdout_bytes=len(raw),
                truncated=truncated,
                error_kind="mcp_tool_error",
                error=f"{label} returned isError: {first}",
                duration_ms=_ms(t0),
            )
        return RawResult(
            exit_code=0,
            stdout=text,
            stdout_bytes=len(raw),
            truncated=truncated,
            duration_ms=_ms(t0),
        )

    async def run(self, inv: Invocation) -> RawResult:
        """Call the hook's tool and report its text; never raises for the hook's failure."""
        t0 = time.perf_counter()
        hook = inv.hook
        if not isinstance(hook, McpToolHook):
            return RawResult(
                error_kind="unknown_type",
                error=f"McpExecutor cannot run a {type(hook).__name__}",
                duration_ms=_ms(t0),
            )
        label = f"MCP tool {hook.server}:{hook.tool}"
        cfg = self.servers.get(hook.server)
        if cfg is None:
            return RawResult(
                error_kind="mcp_not_connected",
                error=f"MCP server {hook.server!r} is not configured/connected",
                duration_ms=_ms(t0),
            )
        if cfg.type != "stdio":
            return RawResult(
                error_kind="mcp_transport_unsupported",
                error=f"MCP server {hook.server!r} uses the {cfg.type} transport; only stdio is supported",
                duration_ms=_ms(t0),
            )
        arguments = substitute(hook.input or {}, inv.payload)
        conn: _Conn | None = None
        try:
            async with asyncio.timeout(inv.timeout):
                conn = await self._connection(hook.server, cfg, inv)
                result = await conn.request(
                    "tools/call", {"name": hook.tool, "arguments": arguments}
                )
        except TimeoutError:
            if conn is not None:
                # A server busy past the timeout is ended; the next hook starts a fresh one.
                await self._stop(hook.server, conn)
            return RawResult(
                error_kind="timeout",
                error=f"{label} timed out after {inv.timeout:g} s",
                duration_ms=_ms(t0),
            )
        except _McpError as exc:
            if conn is not None and exc.kind == "mcp_protocol":
                await self._stop(hook.server, conn)
            return RawResult(
                error_kind=exc.kind, error=f"{label}: {exc.message}", duration_ms=_ms(t0)
            )
        return self._answer(result, label, t0)
