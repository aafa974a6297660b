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

Modules: this one is the executor; `engine.executors.mcp_config` reads the configuration
and fills ``${path}`` input, `engine.executors.mcp_stdio` is the stdio transport.

Example:
    >>> substitute({"p": "${tool_input.file_path}", "n": ["${x.y}"]},
    ...            {"tool_input": {"file_path": "/a"}})
    {'p': '/a', 'n': ['']}
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Mapping
from typing import Any

from engine.effects import Invocation, RawResult
from engine.executors.mcp_config import McpServerConfig, expand_env, load_mcp_config, substitute
from engine.executors.mcp_stdio import Conn, McpError, Server
from engine.records import ENGINE_VERSION
from engine.settings import McpToolHook

__all__ = ["McpExecutor", "McpServerConfig", "load_mcp_config", "substitute"]

PROTOCOL_VERSION = "2025-06-18"


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
        self._live: dict[str, Server] = {}

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

    async def _spawn(self, cfg: McpServerConfig, inv: Invocation) -> Conn:
        missing: list[str] = []
        command = expand_env(cfg.command or "", self.environ, missing)
        args = [expand_env(a, self.environ, missing) for a in cfg.args]
        extra = {k: expand_env(v, self.environ, missing) for k, v in cfg.env.items()}
        if missing:
            raise McpError(
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
            raise McpError(
                "mcp_not_connected", f"cannot start MCP server {cfg.name!r} ({command!r}): {exc}"
            ) from exc
        return Conn(cfg.name, proc)

    async def _connection(self, name: str, cfg: McpServerConfig, inv: Invocation) -> Conn:
        srv = self._live.get(name)
        if srv is None:
            srv = self._live[name] = Server(cfg)
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
                    raise McpError("mcp_protocol", "initialize: the result has no protocolVersion")
                await conn.notify("notifications/initialized")
            except McpError as exc:
                await conn.close(self.grace)
                kind = "mcp_not_connected" if exc.kind != "mcp_protocol" else exc.kind
                raise McpError(
                    kind, f"MCP server {name!r} failed to initialize: {exc.message}"
                ) from exc
            except BaseException:
                await asyncio.shield(conn.close(self.grace))
                raise
            srv.conn = conn
            return conn

    async def _stop(self, name: str, conn: Conn) -> None:
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
        conn: Conn | None = None
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
        except McpError as exc:
            if conn is not None and exc.kind == "mcp_protocol":
                await self._stop(hook.server, conn)
            return RawResult(
                error_kind=exc.kind, error=f"{label}: {exc.message}", duration_ms=_ms(t0)
            )
        return self._answer(result, label, t0)
