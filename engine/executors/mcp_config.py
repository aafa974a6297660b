"""MCP configuration for `mcp_tool` hooks: `.mcp.json` servers and ``${path}`` input.

Split from `engine.executors.mcp` (whose header has the rules): `load_mcp_config` reads
Claude Code's ``{"mcpServers": {...}}`` files into `McpServerConfig`s (``${VAR}`` and
``${VAR:-default}`` expanded from the environment; errors name the file and key), and
`substitute` fills a hook's ``input`` from the event payload.

Example:
    >>> substitute({"p": "${tool_input.file_path}"}, {"tool_input": {"file_path": "/a"}})
    {'p': '/a'}
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

import msgspec

from engine.errors import SettingsError

__all__ = ["McpServerConfig", "expand_env", "load_mcp_config", "substitute"]

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
        except (msgspec.DecodeError, RecursionError) as exc:
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


def expand_env(text: str, environ: Mapping[str, str], missing: list[str]) -> str:
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
