"""The named queries of `queries/sql/` and their parameters: parsing, checking, converting.

Rules of this file:
- Pure: no DuckDB. A `.sql` file's leading comment is its documentation and its contract:
  ``-- <name>: <summary>``, description lines, then one
  ``-- @param <name> <type> required|optional|default=<v> <help>`` line per parameter.
- Values reach SQL only as bound parameters; this module turns `--param k=v` strings into
  typed values. A `glob` becomes an anchored RE2 regex, and both `glob` and `regex` params
  also bind `<name>_literal`, a substring every match contains, for a cheap pre-filter.

Example:
    >>> bind_params(load_catalog()["files"], {"glob": "~/.ssh/**"})["glob_literal"]
    '/.ssh/'
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from importlib import resources

from engine.errors import HookauditError

__all__ = [
    "Catalog",
    "NamedQuery",
    "Param",
    "QueryError",
    "bind_params",
    "glob_literal",
    "glob_to_regex",
    "load_catalog",
    "parse_time",
    "regex_literal",
]


class QueryError(HookauditError):
    """A query cannot run: bad SQL, a refused statement, an unknown query or a bad parameter."""


_TYPES = ("text", "timestamp", "integer", "number", "boolean", "regex", "glob")


@dataclass(frozen=True)
class Param:
    """One parameter of a named query, from its `-- @param` header line."""

    name: str
    type: str
    required: bool
    default: str | None
    help: str


@dataclass(frozen=True)
class NamedQuery:
    """A `.sql` file of `queries/sql/`: name, summary, description, parameters and SQL."""

    name: str
    summary: str
    description: str
    params: tuple[Param, ...]
    sql: str


Catalog = dict[str, NamedQuery]
_PARAM_RE = re.compile(
    r"@param\s+(?P<name>[a-z_][a-z0-9_]*)\s+(?P<type>\w+)\s+"
    r"(?P<req>required|optional|default=(?P<default>\S+))\s*(?P<help>.*)\Z"
)


def _parse_header(name: str, text: str) -> NamedQuery:
    """Parse the leading `--` comment of a named query file.

    First line ``-- <name>: <summary>``; then free description lines; then
    ``-- @param <name> <type> required|optional|default=<v> <help>`` lines.
    """
    header: list[str] = []
    for line in text.splitlines():
        if not line.startswith("--"):
            break
        header.append(line[2:].strip())
    if not header or not header[0].startswith(f"{name}:"):
        raise QueryError(f"{name}.sql: header must start with '-- {name}: <summary>'")
    summary = header[0][len(name) + 1 :].strip()
    desc: list[str] = []
    params: list[Param] = []
    for n, line in enumerate(header[1:], 2):
        if line.startswith("@param"):
            m = _PARAM_RE.match(line)
            if not m or m["type"] not in _TYPES:
                raise QueryError(f"{name}.sql:{n}: bad @param line: {line!r}")
            params.append(
                Param(m["name"], m["type"], m["req"] == "required", m["default"], m["help"].strip())
            )
        elif not params:
            desc.append(line)
    paragraphs = "\n".join(desc).strip().split("\n\n")
    description = "\n\n".join(" ".join(p.split()) for p in paragraphs)
    return NamedQuery(name, summary, description, tuple(params), text)


def load_catalog() -> Catalog:
    """Every named query shipped in `queries/sql/`, by name.

    Example:
        >>> sorted(load_catalog())[:3]
        ['commands', 'denied', 'egress']
    """
    out: Catalog = {}
    folder = resources.files("queries") / "sql"
    for entry in folder.iterdir():
        if entry.name.endswith(".sql"):
            name = entry.name[:-4]
            out[name] = _parse_header(name, entry.read_text(encoding="utf-8"))
    return dict(sorted(out.items()))


_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*(s|m|h|d|w)\Z")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_time(text: str, *, now: datetime | None = None) -> datetime:
    """A point in time: a duration before now (``90m``, ``12h``, ``7d``, ``2w``) or ISO-8601.

    A date or a naive time is UTC.

    Example:
        >>> parse_time("2026-03-01").isoformat()
        '2026-03-01T00:00:00+00:00'
        >>> parse_time("1d", now=datetime(2026, 3, 2, tzinfo=UTC)).isoformat()
        '2026-03-01T00:00:00+00:00'
    """
    value = text.strip()
    m = _DURATION.match(value)
    if m:
        try:
            return (now or datetime.now(UTC)) - timedelta(seconds=float(m[1]) * _UNITS[m[2]])
        except (OverflowError, ValueError):
            raise QueryError(f"bad time {text!r}: reaches back before the year 1") from None
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise QueryError(
            f"bad time {text!r}: expected a duration like 7d, 12h, 30m or an ISO-8601 time"
        ) from None
    return when if when.tzinfo else when.replace(tzinfo=UTC)


_HOME = r"(?:/home/[^/]+|/Users/[^/]+|/root|~)"


def glob_to_regex(pattern: str) -> str:
    """An anchored RE2 regex for a path glob: ``**`` any depth, ``*`` and ``?`` within a name,
    ``[abc]`` a class, ``~`` any home directory. A glob not starting with ``/`` or ``~`` matches
    at any depth (``.env`` and ``**/.env`` both match ``/p/.env``); everything else is literal.

    Example:
        >>> import re
        >>> bool(re.fullmatch(glob_to_regex("~/.ssh/**"), "/home/bob/.ssh/id_rsa"))
        True
        >>> bool(re.fullmatch(glob_to_regex("**/.env"), "/srv/app/.env.example"))
        False
    """
    if not pattern:
        raise QueryError("empty glob")
    out: list[str] = []
    i = 0
    if pattern.startswith("~"):
        out.append(_HOME)
        i = 1
    elif not pattern.startswith("/") and not pattern.startswith("**"):
        out.append("(?:.*/)?")
    n = len(pattern)
    while i < n:
        c = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif c == "*":
            out.append("[^/]*")
            i += 1
        elif c == "?":
            out.append("[^/]")
            i += 1
        elif c == "[":
            j = pattern.find("]", i + 2)
            if j < 0:
                out.append(re.escape(c))
                i += 1
                continue
            body = pattern[i + 1 : j]
            neg = body.startswith(("!", "^"))
            body = body[1:] if neg else body
            cls = "".join("\\" + ch if ch in "\\]^[" else ch for ch in body)
            out.append(f"[{'^' if neg else ''}{cls}]")
            i = j + 1
        else:
            out.append(re.escape(c))
            i += 1
    return "".join(out)


def glob_literal(pattern: str) -> str:
    """The longest literal run of a glob (for a cheap `contains` pre-filter); '' if none.

    Example:
        >>> glob_literal("~/.ssh/**")
        '/.ssh/'
    """
    # `**/` may match nothing, so the "/" after it is not certain: it goes with the wildcard
    runs = re.split(r"\*\*/?|[*?]|\[[^\]]*\]?", pattern.lstrip("~"))
    return max(runs, key=len) if runs else ""


def regex_literal(pattern: str) -> str:
    """A substring every match of `pattern` contains ('' when none can be proven).

    Conservative: only the top level of a regex without alternation is read; groups,
    classes, escapes of letters and quantified atoms end a literal run.

    Example:
        >>> regex_literal(r"curl .*\\|\\s*sh")
        'curl '
        >>> regex_literal("rm|shred")
        ''
    """
    if "(?i" in pattern or "\\Q" in pattern or _has_top_alternation(pattern):
        return ""
    runs: list[str] = []
    cur: list[str] = []
    i, n = 0, len(pattern)

    def end_run() -> None:
        if cur:
            runs.append("".join(cur))
            cur.clear()

    while i < n:
        c = pattern[i]
        atom: str | None = None
        step = 1
        if c == "\\" and i + 1 < n:
            nxt = pattern[i + 1]
            atom = None if nxt.isalnum() else nxt
            step = 2
        elif c == "(":
            end_run()
            i = _skip_group(pattern, i)
            continue
        elif c == "[":
            end_run()
            i = _skip_class(pattern, i)
            continue
        elif c in ".^$":
            atom = None
        elif c == "{":
            end_run()
            close = pattern.find("}", i)
            i = close + 1 if close > 0 else i + 1
            continue
        elif c in "*+?":
            end_run()
            i += 1
            continue
        else:
            atom = c
        j = i + step
        quant = pattern[j] if j < n else ""
        if atom is None:
            end_run()
        elif quant in ("*", "?", "{"):
            end_run()  # the atom may be absent
        elif quant == "+":
            cur.append(atom)
            end_run()  # one copy is certain, what follows may be another copy
        else:
            cur.append(atom)
        i = j
    end_run()
    return max(runs, key=len) if runs else ""


def _skip_class(p: str, i: int) -> int:
    j = i + 1
    if j < len(p) and p[j] == "^":
        j += 1
    if j < len(p) and p[j] == "]":
        j += 1
    while j < len(p) and p[j] != "]":
        j += 2 if p[j] == "\\" else 1
    return j + 1


def _skip_group(p: str, i: int) -> int:
    depth, j = 0, i
    while j < len(p):
        c = p[j]
        if c == "\\":
            j += 2
            continue
        if c == "[":
            j = _skip_class(p, j)
            continue
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return j + 1
        j += 1
    return j


def _has_top_alternation(p: str) -> bool:
    depth, j = 0, 0
    while j < len(p):
        c = p[j]
        if c == "\\":
            j += 2
            continue
        if c == "[":
            j = _skip_class(p, j)
            continue
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "|" and depth == 0:
            return True
        j += 1
    return False


def bind_params(query: NamedQuery, given: Mapping[str, str]) -> dict[str, object]:
    """Convert `--param k=v` strings to the typed values the query's SQL binds.

    A `regex` param `p` also binds `p_literal` (see `regex_literal`); a `glob` param binds
    `p` as an anchored regex and `p_literal`. Unknown or missing parameters are QueryError.

    Example:
        >>> bind_params(load_catalog()["top-tools"], {"limit": "5"})["limit"]
        5
    """
    known = {p.name: p for p in query.params}
    for name in given:
        if name not in known:
            names = ", ".join(known) or "none"
            raise QueryError(
                f"query {query.name!r} has no parameter {name!r} (parameters: {names})"
            )
    out: dict[str, object] = {}
    for p in query.params:
        raw = given.get(p.name, p.default)
        if raw is None and p.required:
            raise QueryError(f"query {query.name!r}: missing parameter {p.name!r} ({p.help})")
        value = None if raw is None else _convert(query.name, p, raw)
        if p.type in ("regex", "glob"):
            text = "" if raw is None else raw
            out[p.name] = value
            out[f"{p.name}_literal"] = (
                regex_literal(text) if p.type == "regex" else glob_literal(text)
            )
        else:
            out[p.name] = value
    return out


def _convert(qname: str, p: Param, raw: str) -> object:
    where = f"query {qname!r}: parameter {p.name!r}"
    try:
        if p.type == "timestamp":
            return parse_time(raw)
        if p.type == "integer":
            return int(raw)
        if p.type == "number":
            return float(raw)
        if p.type == "boolean":
            low = raw.lower()
            if low not in ("true", "false", "1", "0", "yes", "no"):
                raise ValueError("expected true or false")
            return low in ("true", "1", "yes")
        if p.type == "glob":
            return glob_to_regex(raw)
        return raw
    except QueryError as exc:
        raise QueryError(f"{where}: {exc}") from None
    except (ValueError, re.error) as exc:
        raise QueryError(f"{where}: {raw!r}: {exc}") from None
