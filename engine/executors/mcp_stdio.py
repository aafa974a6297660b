"""The stdio transport of `mcp_tool` hooks: one long-lived server process, JSON-RPC 2.0.

Split from `engine.executors.mcp` (whose header has the rules: process group, handshake,
requests matched by id, bounded lines, kill on timeout).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from typing import Any

import msgspec

from engine.executors.mcp_config import McpServerConfig

__all__ = ["Conn", "McpError", "Server"]

_KILL_WAIT = 2.0
_STDERR_TAIL = 4096


# --------------------------------------------------------------------------- stdio transport


class McpError(Exception):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


def _killpg(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


class Conn:
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
        self.dead: McpError | None = None
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

    def _fail_all(self, err: McpError) -> None:
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
        err: McpError
        try:
            while True:
                line = await stream.readline()
                if not line:
                    with contextlib.suppress(asyncio.TimeoutError):
                        await asyncio.wait_for(self.proc.wait(), 0.5)
                    err = McpError("mcp_connection_closed", self._why_closed())
                    break
                if not line.strip():
                    continue
                try:
                    msg = msgspec.json.decode(line)
                except (msgspec.DecodeError, RecursionError):
                    continue  # not a message (a server that logs to stdout); skip it
                if isinstance(msg, dict):
                    await self._dispatch(msg)
        except ValueError as exc:  # a line longer than the stream limit
            err = McpError("mcp_protocol", f"MCP server {self.name!r}: {exc}")
            _killpg(self.pgid, signal.SIGKILL)
        except Exception as exc:
            err = McpError("mcp_connection_closed", f"MCP server {self.name!r}: {exc!r}")
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
            raise McpError(
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
            raise McpError("mcp_rpc_error", f"{method} failed: {text} (code {code})")
        result = msg.get("result")
        if not isinstance(result, dict):
            raise McpError("mcp_protocol", f"{method}: response has no result object")
        return result

    def kill_now(self) -> None:
        """From another event loop, or as a last resort: SIGKILL the group, no waiting."""
        self._fail_all(McpError("mcp_connection_closed", f"MCP server {self.name!r} stopped"))
        _killpg(self.pgid, signal.SIGKILL)

    async def close(self, grace: float) -> None:
        """Close stdin, SIGTERM the group, wait `grace`, SIGKILL the group; reap."""
        self._fail_all(McpError("mcp_connection_closed", f"MCP server {self.name!r} stopped"))
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


class Server:
    """One configured server: its current connection, started under a per-loop lock."""

    def __init__(self, config: McpServerConfig) -> None:
        self.config = config
        self.conn: Conn | None = None
        self._locks: dict[asyncio.AbstractEventLoop, asyncio.Lock] = {}

    def lock(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        lock = self._locks.get(loop)
        if lock is None:
            self._locks = {lp: lk for lp, lk in self._locks.items() if not lp.is_closed()}
            lock = self._locks[loop] = asyncio.Lock()
        return lock
