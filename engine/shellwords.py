"""Shell command lines for `if` rules (spec §5.4): split them into simple commands.

Rules of this file:
- Pure, stdlib only: text in, values out. Nothing is expanded, looked up or executed.
- Never raises. `parse` returns None for what a shell would refuse as far as we can tell (an
  unclosed quote, `$(`, `${`, `$'` or backtick; an unbalanced `)`), for substitutions nested deeper
  than MAX_DEPTH and for text over MAX_LENGTH; a rule then matches (fail open), as in Claude Code.
- Split points: `&&`, `||`, `;`, `|`, `|&`, `&`, newline, and the `(`/`)` of subshells. Leading
  `VAR=val` assignments and reserved words (`if`, `!`, `{`) are not part of a command.
- A word keeps its value (quotes removed, escapes applied, `$x` and `$(..)` left as written) and
  its raw text; a rule matching either form selects the command.
- Redirections (`>f`, `2>&1`, `<<EOF`) and here-document bodies are not arguments, but an unquoted
  here-document body is searched for `$(..)` and backticks, which bash runs.
- Not a shell: `case`, `for`, functions and arithmetic are only scanned so that their text neither
  hides commands nor breaks the split. PowerShell is this scanner with PowerShell quoting (backtick
  escapes, doubled `''` and `""`, no backtick substitution) and case-insensitive rules; its
  aliases (`gci`) are not expanded. Testing a rule against the commands is `engine.shellrules`.

shlex is not used: it knows neither `$(..)` nor here-documents, and splits `2>&1` at the `&`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["MAX_DEPTH", "MAX_LENGTH", "Command", "Script", "parse"]

MAX_LENGTH = 256 * 1024
MAX_DEPTH = 16


@dataclass(frozen=True, slots=True)
class Command:
    """One simple command, without leading `VAR=val` assignments and reserved words (`if`)."""

    argv: tuple[str, ...]
    raw: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Script:
    """Every simple command of a command line, those inside substitutions last."""

    commands: tuple[Command, ...]
    has_expansion: bool  # `$(..)`, backticks, `<(..)`, `$VAR` or `${..}` outside single quotes


# Only space, tab and newline separate words, as in bash: any other character is part of a word.
_PLAIN = {False: re.compile(r"[^ \t\n'\"\\`$;&|<>()]+"), True: re.compile(r"[^ \t\n'\"`$;&|<>()]+")}
_DQ_PLAIN = {False: re.compile(r'[^"\\`$]+'), True: re.compile(r'[^"`$]+')}
_REDIRECT = re.compile(r"&>>?|<<<|<<-?|<>|<&|>&|>>|>\||[<>]")
_VAR = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|[0-9@*#?$!-]")
_ASSIGN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\[[^\]]*\])?\+?=")
_RESERVED = frozenset(
    ["!", "{", "}", "if", "then", "else", "elif", "fi", "do", "done", "while", "until", "time"]
)
_PAREN = {"(": 1, ")": -1}
_ANSI_C_STRING = re.compile(r"\$'((?:[^'\\]|\\.)*)'", re.S)
_ANSI_C = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "e": "\x1b", "f": "\f", "v": "\v"}


def parse(source: str, *, powershell: bool = False, substitutions: bool = True) -> Script | None:
    """The simple commands of `source`, or None when it cannot be parsed.

    `substitutions=False` leaves out the commands inside `$(..)`, backticks and `<(..)`.

    >>> [c.argv for c in parse("FOO=1 git push && echo $(whoami)").commands]
    [('git', 'push'), ('echo', '$(whoami)'), ('whoami',)]
    """
    if not isinstance(source, str) or len(source) > MAX_LENGTH:
        return None
    scanner = _Scanner(source, powershell)
    try:
        scanner.script(0, 0, closer=False)
    except _Unparseable:
        return None
    found = scanner.top + scanner.nested if substitutions else scanner.top
    return Script(tuple(found), scanner.expansion)


class _Unparseable(Exception):
    pass


class _Words:
    """The words of the simple command being scanned."""

    __slots__ = ("heredoc", "heredocs", "skip", "start", "val", "words")

    def __init__(self) -> None:
        self.words: list[tuple[str, str]] = []
        self.val: list[str] = []
        self.start = -1  # where the current word began, -1 between words
        self.skip = False  # the next word is a redirection target, not an argument
        self.heredoc = ""  # "<<" or "<<-" when that target is a here-document delimiter
        self.heredocs: list[tuple[str, bool, bool]] = []  # delimiter, strip tabs, body expands

    def add(self, i: int, text: str) -> None:
        if self.start < 0:
            self.start = i
        self.val.append(text)

    def end(self, src: str, i: int) -> None:
        if self.start < 0:
            return
        value, raw = "".join(self.val), src[self.start : i]
        self.val.clear()
        self.start = -1
        if not self.skip:
            self.words.append((value, raw))
            return
        self.skip = False
        if self.heredoc:
            expands = not any(q in raw for q in "'\"\\")
            self.heredocs.append((value, self.heredoc == "<<-", expands))
            self.heredoc = ""


class _Scanner:
    def __init__(self, src: str, powershell: bool) -> None:
        self.src = src
        self.ps = powershell
        self.esc = "`" if powershell else "\\"
        self.top: list[Command] = []
        self.nested: list[Command] = []
        self.expansion = False

    def script(self, i: int, depth: int, *, closer: bool) -> int:
        """Scan commands from `i` to the end, or past the `)` that closes a `$(` when `closer`."""
        if depth > MAX_DEPTH:
            raise _Unparseable
        src, n, w, plain = self.src, len(self.src), _Words(), _PLAIN[self.ps]
        parens = 0
        while i < n:
            c = src[i]
            if c == "#" and w.start < 0:
                j = src.find("\n", i)
                i = n if j < 0 else j
            elif m := plain.match(src, i):
                w.add(i, m.group())
                i = m.end()
            elif c == "\n":
                w.end(src, i)
                self.emit(w, depth)
                i = self.bodies(w, i + 1, depth)
            elif c in " \t":
                w.end(src, i)
                i += 1
            elif c == self.esc:
                if not src.startswith("\n", i + 1):  # backslash-newline joins lines
                    w.add(i, src[i + 1 : i + 2] or c)
                i += 2
            elif c == "'":
                i = self.single(w, i)
            elif c == '"':
                w.add(i, "")
                i = self.double(w, i + 1, depth, quoted=True)
            elif c == "$":
                i = self.dollar(w, i, depth, quoted=False)
            elif c == "`":
                i = self.backtick(w, i, depth)
            elif c in "<>" and src.startswith("(", i + 1) and not self.ps:
                self.expansion = True  # process substitution
                j = self.script(i + 2, depth + 1, closer=True)
                w.add(i, src[i:j])
                i = j
            elif c in "<>" or src.startswith("&>", i):
                i = self.redirect(w, i)
            else:  # ; & | ( )
                w.end(src, i)
                self.emit(w, depth)
                i += 1
                if c == "(":
                    parens += 1
                elif c == ")" and parens:
                    parens -= 1
                elif c == ")":
                    if closer:
                        return i
                    raise _Unparseable
        if closer or parens:
            raise _Unparseable
        w.end(src, n)
        self.emit(w, depth)
        return n

    def emit(self, w: _Words, depth: int) -> None:
        w.skip, w.heredoc = False, ""
        words, k = w.words, 0
        while k < len(words) and (words[k][1] in _RESERVED or _ASSIGN.match(words[k][1])):
            k += 1
        if k < len(words):
            cmd = Command(tuple(v for v, _ in words[k:]), tuple(r for _, r in words[k:]))
            (self.top if depth == 0 else self.nested).append(cmd)
        words.clear()

    def bodies(self, w: _Words, i: int, depth: int) -> int:
        """Skip the here-document bodies that start at `i`; return where the commands go on."""
        src, n = self.src, len(self.src)
        for delimiter, strip_tabs, expands in w.heredocs:
            lines: list[str] = []
            while i < n:
                j = src.find("\n", i)
                line = (src[i:] if j < 0 else src[i:j]).rstrip("\r")
                i = n if j < 0 else j + 1
                if (line.lstrip("\t") if strip_tabs else line) == delimiter:
                    break
                lines.append(line)
            if expands:
                self.sub("\n".join(lines), depth + 1, heredoc=True)
        w.heredocs.clear()
        return i

    def sub(self, text: str, depth: int, *, heredoc: bool = False) -> None:
        inner = _Scanner(text, self.ps)
        if heredoc:
            inner.double(_Words(), 0, depth, quoted=False)
        else:
            inner.script(0, depth, closer=False)
        self.nested += inner.top + inner.nested
        self.expansion |= inner.expansion

    def single(self, w: _Words, i: int) -> int:
        start, parts = i, []
        while True:
            j = self.src.find("'", i + 1)
            if j < 0:
                raise _Unparseable
            parts.append(self.src[i + 1 : j])
            i = j + 1
            if not (self.ps and self.src.startswith("'", i)):
                break
            parts.append("'")  # PowerShell: '' inside single quotes is one quote
        w.add(start, "".join(parts))
        return i

    def double(self, w: _Words, i: int, depth: int, *, quoted: bool) -> int:
        """Scan a double-quoted string from after its `"`, or a here-doc body (not `quoted`)."""
        src, n, plain = self.src, len(self.src), _DQ_PLAIN[self.ps]
        while i < n:
            c = src[i]
            if m := plain.match(src, i):
                w.add(i, m.group())
                i = m.end()
            elif c == '"':
                if quoted and not (self.ps and src.startswith('"', i + 1)):
                    return i + 1
                w.add(i, c)
                i += 1 + quoted
            elif c == self.esc:
                nxt = src[i + 1 : i + 2]
                keep = self.ps or (nxt != "" and nxt in '$`"\\')
                w.add(i, nxt if keep else "" if nxt == "\n" else c + nxt)
                i += 2
            elif c == "$":
                i = self.dollar(w, i, depth, quoted=True)
            else:
                i = self.backtick(w, i, depth)
        if quoted:
            raise _Unparseable
        return n

    def dollar(self, w: _Words, i: int, depth: int, *, quoted: bool) -> int:
        src, nxt = self.src, self.src[i + 1 : i + 2]
        if nxt == "(":
            self.expansion = True
            if src.startswith("((", i + 1):
                j = self.arithmetic(i + 3)
            else:
                j = self.script(i + 2, depth + 1, closer=True)
        elif nxt == "{":
            self.expansion = True
            j = src.find("}", i + 2) + 1
            if j == 0:
                raise _Unparseable
        elif nxt == "'" and not quoted and not self.ps:  # $'a\tb'
            if (m := _ANSI_C_STRING.match(src, i)) is None:
                raise _Unparseable
            w.add(i, re.sub(r"\\(.)", lambda e: _ANSI_C.get(e[1], e[1]), m[1], flags=re.S))
            return m.end()
        elif nxt == '"' and not quoted and not self.ps:
            w.add(i, "")
            return self.double(w, i + 2, depth, quoted=True)
        elif m := _VAR.match(src, i + 1):
            self.expansion = True
            j = m.end()
        else:
            j = i + 1
        w.add(i, src[i:j])
        return j

    def arithmetic(self, i: int) -> int:
        open_ = 2
        for j in range(i, len(self.src)):
            open_ += _PAREN.get(self.src[j], 0)
            if open_ == 0:
                return j + 1
        raise _Unparseable

    def backtick(self, w: _Words, i: int, depth: int) -> int:
        src, j, inner = self.src, i + 1, []
        while j < len(src) and src[j] != "`":
            if src[j] == "\\" and src[j + 1 : j + 2] in ("\\", "`", "$"):
                j += 1
            inner.append(src[j])
            j += 1
        if j >= len(src):
            raise _Unparseable
        self.expansion = True
        self.sub("".join(inner), depth + 1)
        w.add(i, src[i : j + 1])
        return j + 1

    def redirect(self, w: _Words, i: int) -> int:
        word = self.src[w.start : i] if w.start >= 0 else ""
        if word.isascii() and word.isdigit():  # `2>`: the fd number belongs to the operator
            w.val.clear()
            w.start = -1
        w.end(self.src, i)
        m = _REDIRECT.match(self.src, i)
        if m is None:  # unreachable: callers stand on `<`, `>` or `&>`
            raise _Unparseable
        w.skip = True
        w.heredoc = m.group() if m.group() in ("<<", "<<-") else ""
        return m.end()
