r"""Matchers and `if` rules (spec §5): does a hook group, or one hook, apply to this event?

Rules of this file:
- Pure: data in, bool out. No I/O, no clock, no environment: `cwd`, `home` and `source_root` are
  passed in. The only state is an lru_cache of compiled regexes.
- Never raises on hostile input: a bad regex, a malformed rule, an odd `tool_input` or a command
  that cannot be parsed each has a documented result, never an exception.
- Matcher regexes keep ECMAScript semantics (Claude Code runs JS `RegExp`): `engine.jsregex._translate` gives
  Python the JS meaning (`$`, `.`, `\d`, `\s`, `[^]`, `a{,3}`, `\Z`) or rejects what JS rejects
  (`(?i)`, `a*+`).
- Bounded work. A regex over MAX_MATCHER characters, or shaped for catastrophic backtracking (a
  repeated group that repeats or alternates inside; over MAX_REPEATS repeats in a row, a leading
  or trailing `.*` not counted), is invalid; no regex sees a query over MAX_QUERY characters (no
  tool, agent or file name is that long). `*` wildcards use no regex, path segments use fnmatch
  (atomic, linear). Commands: see `engine.shellrules` (over `engine.shellwords`).

Decisions where the spec is silent:
- Aliases (`Task`->`Agent`, ...) map the query as well as the matcher, so old and new names match
  each other either way round, in `if` rules too.
- agent-core: `*` matches every target (invalid as a JS regex, but "all" in every settings file);
  a query longer than MAX_QUERY is only compared exactly.
- `if` paths (current): a bare name (`.env`, `*.ts`) or a pattern starting with `**/` matches at any
  depth anywhere, not only under the cwd; `dir/` means `dir/**`; a trailing `**` needs one more
  segment; `[ab]` classes work; `~` in the tool's path is `home`; Glob and Grep without `path`
  search the cwd.
- `if: "mcp__srv"` (server only) and `mcp__srv__*` match every tool of that server in current, as
  permission rules do; legacy compares whole names only (§5.4).
"""

from __future__ import annotations

import fnmatch
import functools
import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from engine import shellrules
from engine.jsregex import MAX_REPEATS, _translate
from engine.records import Profile

__all__ = [
    "IF_EVENTS_CURRENT",
    "IF_EVENTS_LEGACY",
    "MAX_MATCHER",
    "MAX_QUERY",
    "MAX_REPEATS",
    "Dialect",
    "Profile",
    "Rule",
    "file_watch_paths",
    "if_allowed_on",
    "if_matches",
    "matcher_matches",
    "parse_rule",
    "regex_error",
]

Dialect = Literal["claude", "agent-core"]

MAX_MATCHER = 1024
MAX_QUERY = 256

IF_EVENTS_LEGACY = frozenset(
    {"PreToolUse", "PostToolUse", "PostToolUseFailure", "PermissionRequest"}
)
IF_EVENTS_CURRENT = IF_EVENTS_LEGACY | {"PermissionDenied"}

_ALIASES = {"Task": "Agent", "KillShell": "TaskStop"}
_ALIASES |= dict.fromkeys(("AgentOutputTool", "BashOutputTool"), "TaskOutput")
_NARROW_EVENTS = frozenset({"FileChanged", "StopFailure"})
_SIMPLE = {True: re.compile(r"[A-Za-z0-9_|]+"), False: re.compile(r"[A-Za-z0-9_\-, |]+")}
_SEPARATOR = {True: re.compile(r"\|"), False: re.compile(r"[|,]")}


def _alias(name: str) -> str:
    return _ALIASES.get(name, name)


# -- matchers (§5.1, §5.2) --------------------------------------------------------------------


def matcher_matches(
    event: str,
    query: str | None,
    matcher: str | None,
    *,
    profile: Profile = "current",
    dialect: Dialect = "claude",
) -> bool:
    """Whether a matcher group applies; `query` is the event's target (None when it has none).

    >>> matcher_matches("PreToolUse", "NotebookEdit", "Edit.*")
    True
    """
    if dialect == "agent-core":
        if not matcher:
            return True
        if query is None:
            return False  # agent-core never runs a matcher on an event without a target
        if matcher in (query, "*"):
            return True
        rx = _compile(matcher)
        return not isinstance(rx, str) and len(query) <= MAX_QUERY and bool(rx.search(query))
    if not matcher or matcher == "*" or query is None:
        return True
    if not query and profile == "legacy":
        return True  # v2.1.88 (from its source): an empty target ignores the matcher
    # an empty target is matched like any other (Claude Code 2.1.332: `/compact`'s
    # SubagentStop, agent_type "", runs "^$" and ".*" groups, not ".+" nor a name)
    narrow = profile == "legacy" or event in _NARROW_EVENTS
    if _SIMPLE[narrow].fullmatch(matcher):
        alternatives = {_alias(a.strip()) for a in _SEPARATOR[narrow].split(matcher)}
        return query in alternatives or _alias(query) in alternatives
    rx = _compile(matcher)
    if isinstance(rx, str) or len(query) > MAX_QUERY:
        return False
    canonical = _alias(query)
    names = {query, canonical, *(old for old, new in _ALIASES.items() if new == canonical)}
    return any(rx.search(name) for name in names)


def regex_error(matcher: str) -> str | None:
    """Why `matcher` cannot be used as a regex (it then matches nothing), or None when it can.

    >>> regex_error("(")
    "missing ')'"
    """
    rx = _compile(matcher)
    return rx if isinstance(rx, str) else None


def file_watch_paths(matcher: str | None, cwd: str) -> list[str]:
    """The files a FileChanged matcher watches: each `|`-separated part, as a name in `cwd`.

    Parts are literal (`*` is a file named `*`) and joined the way Node's `path.join` does.

    >>> file_watch_paths(".envrc|.env", "/work")
    ['/work/.envrc', '/work/.env']
    """
    paths = (posixpath.normpath(f"{cwd}/{part}") for part in (matcher or "").split("|") if part)
    return list(dict.fromkeys(paths))


@functools.lru_cache(maxsize=1024)
def _compile(pattern: str) -> re.Pattern[str] | str:
    """The compiled regex, or why there is none."""
    if len(pattern) > MAX_MATCHER:
        return f"longer than {MAX_MATCHER} characters"
    try:
        return re.compile(_translate(pattern), re.ASCII)
    except (re.error, OverflowError, RecursionError, Warning) as e:  # Warning: when made errors
        return str(e)


@dataclass(frozen=True, slots=True)
class Rule:
    """A parsed `if` rule: `Bash(git *)` is Rule("Bash", "git *")."""

    tool: str  # after alias mapping
    content: str | None  # None = the whole tool


_FIRST_OPEN = re.compile(r"(?<!\\)(?:\\\\)*\(")  # linear: a match starts only after a non-`\`


def parse_rule(text: str, *, profile: Profile = "current") -> Rule:
    r"""Parse permission-rule syntax (§5.4 Parsing, steps 1-5); both profiles parse alike.

    >>> parse_rule(r"Bash(echo \(hi\))")
    Rule(tool='Bash', content='echo (hi)')
    """
    # the first unescaped `(`, and the last unescaped `)` must be the final character
    opening = _FIRST_OPEN.search(text)
    backslashes = len(text) - 1 - len(text[:-1].rstrip("\\"))
    if not opening or opening.end() == 1 or not text.endswith(")") or backslashes % 2:
        return Rule(_alias(text), None)
    tool, content = text[: opening.end() - 1], text[opening.end() : -1]
    if content in ("", "*"):
        return Rule(_alias(tool), None)
    content = content.replace("\\(", "(").replace("\\)", ")").replace("\\\\", "\\")
    return Rule(_alias(tool), content)


def if_allowed_on(event: str, profile: Profile = "current") -> bool:
    """Whether a hook with `if` may run on `event`; elsewhere it is dropped.

    >>> if_allowed_on("Stop")
    False
    """
    return event in (IF_EVENTS_LEGACY if profile == "legacy" else IF_EVENTS_CURRENT)


_PATH_FIELDS = dict.fromkeys(("Read", "Edit", "Write", "MultiEdit"), "file_path")
_PATH_FIELDS |= {"NotebookEdit": "notebook_path", "Glob": "path", "Grep": "path"}


def if_matches(
    rule: Rule,
    tool_name: str,
    tool_input: Mapping[str, object],
    *,
    cwd: str,
    home: str,
    source_root: str | None = None,
    profile: Profile = "current",
) -> bool:
    """Whether an `if` rule selects this tool call (§5.4 Evaluation).

    >>> if_matches(Rule("Bash", "git *"), "Bash", {"command": "FOO=1 git push"}, cwd="/", home="/")
    True
    """
    if not isinstance(tool_input, Mapping):
        return False
    name, current, content = _alias(tool_name), profile != "legacy", rule.content
    if current and content is None and _mcp_server_rule(rule.tool, name):
        return True
    if rule.tool != name or content is None:
        return rule.tool == name
    if name == "Bash" or (name == "PowerShell" and current):
        command, ps = tool_input.get("command"), name == "PowerShell"
        return isinstance(command, str) and _command_matches(content, command, ps, current)
    if name in _PATH_FIELDS:
        if not current and name in ("Glob", "Grep"):
            value = tool_input.get("pattern")  # legacy tests the pattern, not a path
            return isinstance(value, str) and shellrules.wildcard(content.strip(), value)
        path = tool_input.get(_PATH_FIELDS[name], cwd if name in ("Glob", "Grep") else None)
        if not isinstance(path, str) or not path:
            return False
        path = _absolute(path, cwd, home)
        if not current:
            return shellrules.wildcard(content.strip(), path)
        return _path_matches(content, path, cwd, home, source_root or cwd)
    # Any other content selects no hook: Claude Code 2.1.332 runs a WebFetch hook whose `if`
    # is `WebFetch` or `WebFetch(*)` and never one with a `domain:` rule, exact, wildcard or
    # `*` (tests/conformance/claude_code: if.webfetch_*); lint says so.
    return False


def _command_matches(content: str, command: str, powershell: bool, current: bool) -> bool:
    """shellrules.command_matches, memoised: agents repeat the same commands a lot."""
    if len(command) > 4096:  # huge commands are not pinned in the cache
        return shellrules.command_matches(content, command, powershell=powershell, current=current)
    return _command_matches_cached(content, command, powershell, current)


@functools.lru_cache(maxsize=16384)
def _command_matches_cached(content: str, command: str, powershell: bool, current: bool) -> bool:
    return shellrules.command_matches(content, command, powershell=powershell, current=current)


def _mcp_server_rule(rule_tool: str, name: str) -> bool:
    """`mcp__srv` or `mcp__srv__*` against a tool of server `srv`."""
    server = rule_tool.removesuffix("__*")
    if not server.startswith("mcp__") or "__" in server[5:] or server == "mcp__":
        return False
    return name.startswith(server + "__") and len(name) > len(server) + 2


def _absolute(path: str, cwd: str, home: str) -> str:
    """A tool's path as Claude Code sees it: absolute, `..` and `//` resolved lexically."""
    if re.match(r"[A-Za-z]:[\\/]", path):  # Windows paths become /c/...
        path = "/" + path[0].lower() + "/" + path[3:].replace("\\", "/")
    if path == "~" or path.startswith("~/"):
        path = home + path[1:]
    return "/" + posixpath.normpath(path if path.startswith("/") else f"{cwd}/{path}").lstrip("/")


def _path_matches(pattern: str, path: str, cwd: str, home: str, root: str) -> bool:
    """Current profile: gitignore-style permission paths, anchored per §5.4."""
    anchors = (("//", "/"), ("~/", home), ("/", root), ("./", cwd), ("**/", "/"), ("", cwd))
    prefix, base = next((p, b) for p, b in anchors if pattern.startswith(p))
    pattern = pattern[len(prefix) :] if prefix != "**/" else pattern
    if not prefix and "/" not in pattern.rstrip("/"):
        base, pattern = "/", "**/" + pattern  # a bare name matches at any depth
    if pattern.endswith("/") or not pattern:
        pattern += "**"
    segments = [s for s in posixpath.normpath(f"{base}/{pattern}").split("/") if s]
    if segments[-1:] == ["**"]:
        segments[-1:] = ["*", "**"]  # `dir/**` is what is inside `dir`, not `dir` itself
    unescape = functools.partial(re.sub, r"\\(.)", lambda m: f"[{m[1]}]" if m[1] in "*?[" else m[1])
    return _segments_match(list(map(unescape, segments)), [s for s in path.split("/") if s])


def _segments_match(globs: list[str], names: list[str]) -> bool:
    """`**` is any run of names, else fnmatch (ReDoS-safe); O(len(globs) * len(names)) globs.
    Case-insensitive: Claude Code 2.1.332 matches `Read(SECRET.TXT)` on `secret.txt`
    (tests/conformance/claude_code: if.path.case)."""
    g = n = 0
    star, mark = -1, 0  # a mismatch retries from the last `**` only: enough for a plain star
    while n < len(names):
        if g < len(globs) and globs[g] == "**":
            star, mark, g = g, n, g + 1
        elif g < len(globs) and fnmatch.fnmatchcase(names[n].lower(), globs[g].lower()):
            g, n = g + 1, n + 1
        elif star < 0:
            return False
        else:
            g, mark = star + 1, mark + 1
            n = mark
    return all(glob == "**" for glob in globs[g:])
