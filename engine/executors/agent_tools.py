"""Read-only tools for agent hooks, confined to the event's cwd and its transcript.

Rules of this file:
- Four tools: ``read_file``, ``grep``, ``glob``, ``list_dir``. Nothing here writes, spawns,
  connects or starts an agent; a tool the model invents gets an error answer.
- Every path is resolved to its real path before use and must lie under the root (the
  event's ``cwd``) or be one of the extra files (``transcript_path``). A ``..`` component
  is refused outright; absolute paths outside, and symlinks leading outside, are refused
  after resolution. Files are opened with ``O_NOFOLLOW`` and re-checked through the open
  descriptor, so a symlink swapped in after the check is still caught. Only regular files
  are read (no FIFOs or devices, which could block or never end).
- A root of ``/`` confines nothing, so it is refused (only the extra files stay readable).
- Everything is bounded: bytes returned to the model (``output_cap``), bytes read per file
  (``read_cap``), entries visited per walk (``max_visits``). Python's ``re`` cannot be
  interrupted, so a pathological ``grep`` regex is bounded only by those caps and by the
  hook's deadline (the executor runs tools in a worker thread).
- Tools return ``(text, is_error)``; they never raise for what the model asked.

Example:
    >>> box = Sandbox("/nonexistent-root")
    >>> box.run("read_file", {"path": "../etc/passwd"})
    ("refused: '..' is not allowed in paths", True)
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["TOOLS", "Sandbox", "ToolSpec"]


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool offered to the model: its name, what it does, and its JSON-schema input."""

    name: str
    description: str
    schema: dict[str, Any] = field(default_factory=dict)


def _obj(props: dict[str, Any], required: Sequence[str]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": props,
        "required": list(required),
        "additionalProperties": False,
    }


_PATH = {"type": "string", "description": "Relative to the project directory, or absolute."}
TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(
        "read_file",
        "Read a text file of the project (or the session transcript). Returns numbered lines.",
        _obj(
            {
                "path": _PATH,
                "offset": {"type": "integer", "description": "First line (1-based)."},
                "limit": {"type": "integer", "description": "Number of lines."},
            },
            ["path"],
        ),
    ),
    ToolSpec(
        "grep",
        "Search files under a directory for a Python regular expression; returns path:line: text.",
        _obj(
            {
                "pattern": {"type": "string"},
                "path": _PATH,
                "glob": {"type": "string", "description": "Only files matching, e.g. '*.py'."},
                "ignore_case": {"type": "boolean"},
            },
            ["pattern"],
        ),
    ),
    ToolSpec(
        "glob",
        "List project files matching a glob pattern such as 'src/**/*.py'.",
        _obj({"pattern": {"type": "string"}, "path": _PATH}, ["pattern"]),
    ),
    ToolSpec(
        "list_dir",
        "List a directory of the project; directories end with '/'.",
        _obj({"path": _PATH}, []),
    ),
)

_SKIP_DIRS = frozenset({".git", ".hg", ".svn"})
_MAX_LINE = 2000  # characters of one line searched or shown


class Refused(Exception):
    """A request outside the sandbox or otherwise not answerable (message for the model)."""


def _glob_regex(pattern: str) -> re.Pattern[str]:
    """``**`` crosses directories; ``*``, ``?`` and ``[..]`` stay within one path segment.

    >>> bool(_glob_regex("src/**/*.py").fullmatch("src/a/b/c.py"))
    True
    """
    out: list[str] = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        c = pattern[i]
        end = pattern.find("]", i + 2) if c == "[" else -1
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif end > 0:
            inner = pattern[i + 1 : end]
            negate = inner.startswith("!")
            chars = "".join(ch if ch == "-" else re.escape(ch) for ch in inner[negate:])
            out.append(f"[^/{chars}]" if negate else f"[{chars}]")
            i = end + 1
            continue
        else:
            out.append(re.escape(c))
        i += 1
    return re.compile("".join(out), re.S)


@dataclass
class Sandbox:
    """The files one agent hook may read.

    >>> Sandbox("/").root
    ''
    """

    root_dir: str
    extra_files: Sequence[str] = ()
    output_cap: int = 32 * 1024
    read_cap: int = 1 << 20
    max_visits: int = 20_000
    max_results: int = 500
    root: str = field(init=False)
    files: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        real = os.path.realpath(self.root_dir) if self.root_dir else ""
        self.root = "" if real in ("", os.sep) else real
        self.files = frozenset(os.path.realpath(f) for f in self.extra_files if f)

    # ---------------------------------------------------------------- dispatch

    def run(self, name: str, args: Mapping[str, Any]) -> tuple[str, bool]:
        """Run one tool call; unknown tools and bad arguments are error answers."""
        tools: dict[str, Callable[..., str]] = {
            "read_file": self.read_file,
            "grep": self.grep,
            "glob": self.glob,
            "list_dir": self.list_dir,
        }
        tool = tools.get(name)
        if tool is None:
            known = ", ".join(t.name for t in TOOLS)
            return f"unknown tool {name!r}; available: {known}, verdict", True
        try:
            return self._cap(tool(**dict(args))), False
        except Refused as exc:
            return f"refused: {exc}", True
        except TypeError as exc:
            return f"bad arguments for {name}: {exc}", True
        except (OSError, ValueError, re.error) as exc:
            return f"{name} failed: {exc}", True

    def _cap(self, text: str) -> str:
        data = text.encode("utf-8")
        if len(data) <= self.output_cap:
            return text
        cut = data[: self.output_cap].decode("utf-8", "ignore")
        return f"{cut}\n[output truncated: {len(data)} bytes, showing {self.output_cap}]"

    # ---------------------------------------------------------------- paths

    def resolve(self, path: object, *, default_root: bool = False) -> str:
        """The real path of ``path`` if the sandbox allows it; raise Refused otherwise."""
        if path is None and default_root:
            path = "."
        if not isinstance(path, str) or not path:
            raise Refused("path must be a non-empty string")
        if "\x00" in path:
            raise Refused("path contains a NUL character")
        if ".." in re.split(r"[/\\]", path):
            raise Refused("'..' is not allowed in paths")
        if os.path.isabs(path):
            candidate = path
        elif self.root:
            candidate = os.path.join(self.root, path)
        else:
            raise Refused("no project directory to resolve a relative path against")
        real = os.path.realpath(candidate)
        if real in self.files or self._inside(real):
            return real
        raise Refused(f"{path!r} is outside the project directory")

    def _inside(self, real: str) -> bool:
        return bool(self.root) and (real == self.root or real.startswith(self.root + os.sep))

    def _open(self, real: str) -> int:
        flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0)
        fd = os.open(real, flags | getattr(os, "O_CLOEXEC", 0))
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise Refused("not a regular file")
            proc = f"/proc/self/fd/{fd}"
            if os.path.exists(proc):
                now = os.readlink(proc)
                if now not in self.files and not self._inside(now):
                    raise Refused("file moved outside the project directory")
            return fd
        except BaseException:
            os.close(fd)
            raise

    def _read(self, real: str) -> bytes:
        fd = self._open(real)
        with os.fdopen(fd, "rb") as f:
            return f.read(self.read_cap)

    def _rel(self, real: str) -> str:
        if self.root and self._inside(real):
            return os.path.relpath(real, self.root)
        return real

    def _walk(self, base: str) -> Iterator[str]:
        """Real paths of the regular files under ``base`` (no symlinks followed)."""
        if os.path.isfile(base):
            yield base
            return
        visits = 0
        for top, dirs, names in os.walk(base, followlinks=False):
            dirs[:] = sorted(d for d in dirs if d not in _SKIP_DIRS)
            visits += len(dirs)
            for name in sorted(names):
                visits += 1
                if visits > self.max_visits:
                    return
                path = os.path.join(top, name)
                if not os.path.islink(path) and os.path.isfile(path):
                    yield path

    # ---------------------------------------------------------------- tools

    def read_file(self, path: str, offset: int = 1, limit: int = 2000) -> str:
        """Numbered lines ``offset``..``offset+limit-1`` of a text file."""
        if not isinstance(offset, int) or not isinstance(limit, int) or offset < 1 or limit < 1:
            raise Refused("offset and limit must be positive integers")
        data = self._read(self.resolve(path))
        if b"\x00" in data[:8192]:
            raise Refused("binary file")
        lines = data.decode("utf-8", "replace").splitlines()
        shown = lines[offset - 1 : offset - 1 + limit]
        out = [f"{n:6}\t{line[:_MAX_LINE]}" for n, line in enumerate(shown, start=offset)]
        if len(data) >= self.read_cap:
            out.append(f"[file larger than {self.read_cap} bytes; rest not read]")
        return "\n".join(out) if out else "[no lines in that range]"

    def grep(
        self,
        pattern: str,
        path: str | None = None,
        glob: str | None = None,
        ignore_case: bool = False,
    ) -> str:
        """``path:line: text`` for each matching line, at most ``max_results``."""
        if not isinstance(pattern, str):
            raise Refused("pattern must be a string")
        regex = re.compile(pattern, re.IGNORECASE if ignore_case is True else 0)
        only = _glob_regex(glob) if isinstance(glob, str) and glob else None
        base = self.resolve(path, default_root=True)
        hits: list[str] = []
        for real in self._walk(base):
            rel = self._rel(real)
            if only is not None and not (
                only.fullmatch(os.path.basename(rel)) or only.fullmatch(rel)
            ):
                continue
            try:
                data = self._read(real)
            except (OSError, Refused):
                continue
            if b"\x00" in data[:8192]:
                continue
            for n, line in enumerate(data.decode("utf-8", "replace").splitlines(), start=1):
                if regex.search(line[:_MAX_LINE]):
                    hits.append(f"{rel}:{n}: {line[:200]}")
                    if len(hits) >= self.max_results:
                        hits.append(f"[stopped at {self.max_results} matches]")
                        return "\n".join(hits)
        return "\n".join(hits) if hits else "no matches"

    def glob(self, pattern: str, path: str | None = None) -> str:
        """Project-relative paths of files matching ``pattern``, sorted."""
        if not isinstance(pattern, str) or not pattern:
            raise Refused("pattern must be a non-empty string")
        if os.path.isabs(pattern) or ".." in re.split(r"[/\\]", pattern):
            raise Refused("glob patterns must be relative and without '..'")
        base = self.resolve(path, default_root=True)
        regex = _glob_regex(pattern)
        found: list[str] = []
        for real in self._walk(base):
            if regex.fullmatch(os.path.relpath(real, base)):
                found.append(self._rel(real))
                if len(found) >= self.max_results:
                    found.append(f"[stopped at {self.max_results} files]")
                    break
        return "\n".join(found) if found else "no files match"

    def list_dir(self, path: str | None = None) -> str:
        """Entries of a directory; ``/`` marks directories, ``@`` symlinks."""
        real = self.resolve(path, default_root=True)
        if not os.path.isdir(real):
            raise Refused("not a directory")
        out: list[str] = []
        with os.scandir(real) as entries:
            for entry in sorted(entries, key=lambda e: e.name):
                if entry.is_symlink():
                    out.append(entry.name + "@")
                elif entry.is_dir(follow_symlinks=False):
                    out.append(entry.name + "/")
                else:
                    out.append(entry.name)
                if len(out) >= self.max_results:
                    out.append(f"[stopped at {self.max_results} entries]")
                    break
        return "\n".join(out) if out else "[empty directory]"
