"""The tables every SIEM format shares: a tool's kind of activity, the 0-10 severity of a
decision, and the text of times and file names.

Rules of this file:
- Pure functions of plain values (no `View`, no `Outcome`): the view and every format use
  them, so a format's severity or kind cannot drift from another's.
- The tool decides the kind of activity: a shell command (`process`), a file operation
  (`file`, with its action), a fetch (`web`), an MCP tool (`mcp`), anything else (`api`).

Example:
    >>> tool_kind("Bash"), severity("ask", False, False)
    (('process', None), 4)
"""

from __future__ import annotations

import posixpath
from datetime import UTC, datetime

__all__ = ["Kind", "file_name", "iso_ms", "severity", "tool_kind"]

Kind = str  # "process" | "file" | "web" | "mcp" | "api"

_FILE_TOOLS = {
    "Write": "create",
    "Edit": "update",
    "MultiEdit": "update",
    "NotebookEdit": "update",
    "Read": "read",
}
_WEB_TOOLS = {"WebFetch"}
_SHELL_TOOLS = {"Bash", "BashOutput", "PowerShell"}


def tool_kind(tool: str | None) -> tuple[Kind, str | None]:
    """The kind of activity a tool stands for, and the file action for file tools.

    Example:
        >>> tool_kind("Edit"), tool_kind("mcp__github__create_issue"), tool_kind(None)
        (('file', 'update'), ('mcp', None), ('api', None))
    """
    if tool is None:
        return "api", None
    if tool in _SHELL_TOOLS:
        return "process", None
    if tool in _FILE_TOOLS:
        return "file", _FILE_TOOLS[tool]
    if tool in _WEB_TOOLS:
        return "web", None
    if tool.startswith("mcp__"):
        return "mcp", None
    return "api", None


def severity(decision: str, blocked: bool, has_errors: bool) -> int:
    """0-10 severity shared by every format (CEF uses it as is, others scale it).

    Example:
        >>> severity("deny", True, False), severity("allow", False, False)
        (7, 1)
    """
    if blocked or decision == "deny":
        return 7
    if decision == "ask":
        return 4
    if has_errors:
        return 5
    if decision == "defer":
        return 3
    return 1


_iso_cache: dict[int, str] = {}


def iso_ms(ms: int) -> str:
    """RFC 3339 UTC time with milliseconds of epoch milliseconds `ms` (the second's text is
    cached: a burst of events shares a few seconds).

    Example:
        >>> iso_ms(1500)
        '1970-01-01T00:00:01.500Z'
    """
    sec, frac = divmod(ms, 1000)
    head = _iso_cache.get(sec)
    if head is None:
        if len(_iso_cache) > 4096:
            _iso_cache.clear()
        head = datetime.fromtimestamp(sec, UTC).strftime("%Y-%m-%dT%H:%M:%S")
        _iso_cache[sec] = head
    return f"{head}.{frac:03d}Z"


def file_name(path: str) -> str:
    """The last component of `path` (the path itself when it has none).

    Example:
        >>> file_name("/a/b.txt"), file_name("/")
        ('b.txt', '/')
    """
    return posixpath.basename(path.rstrip("/")) or path
