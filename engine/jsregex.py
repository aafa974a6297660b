r"""Matcher regexes with ECMAScript meaning: JS `RegExp` source to Python `re` source.

Split from `engine.match` (whose header has the rules): `_translate` gives Python the JS
meaning (`$`, `.`, `\d`, `\s`, `[^]`, `a{,3}`, `\Z`) or rejects what JS rejects (`(?i)`,
`a*+`), and refuses regexes shaped for catastrophic backtracking (a repeated group that
repeats or alternates inside; over `MAX_REPEATS` repeats in a row).

Example:
    >>> _translate("^Bash$")
    '^Bash\\Z'
"""

from __future__ import annotations

import re

__all__ = ["MAX_REPEATS"]

MAX_REPEATS = 2  # 3 repeats in a row already take a second on a 256-character query


_JS_SPACE = r"\t\n\v\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
_BRACES = re.compile(r"\{(\d+)(?:,(\d*))?\}")
_GROUP = re.compile(r"\(\?(?::|=|!|<=|<!|<([A-Za-z_$][\w$]*)>)")
_HAZARD = " (catastrophic backtracking)"


def _translate(src: str) -> str:
    """JS regex source (no flags, not unicode mode) -> Python `re` source with the same meaning."""
    # `.*x.*` finds what `x` finds: an unanchored leading or trailing `.*` only costs time
    src = src[3:] if src.startswith(".*?") else src[2:] if src.startswith(".*") else src
    if src.endswith(".*") and (len(src) - 2 - len(src[:-2].rstrip("\\"))) % 2 == 0:
        src = src[:-2]
    out: list[str] = []
    # per open group: [repeats inside, `|` inside, repeats in a row, longest run of a branch]
    frames = [[0, 0, 0, 0]]
    closed: list[int] | None = None  # the group that just closed, which a quantifier may follow
    repeatable, i = False, 0
    while i < len(src):
        c, group, closed = src[i], closed, None
        braces = _BRACES.match(src, i) if c == "{" else None
        if c in "*+?" or braces:
            end = braces.end() if braces else i + 1
            end += src.startswith("?", end)  # lazy: the same yes/no answer
            if not repeatable or src[end : end + 1] in ("*", "+", "?") or _BRACES.match(src, end):
                raise re.error("nothing to repeat")  # JS has no possessive `a*+` either
            if c != "?":
                if group and (group[0] or group[1]):
                    raise re.error("a repeated group repeats or alternates inside" + _HAZARD)
                frames[-1][0] = 1
                _run(frames[-1], 1)
            out.append(src[i:end])
            i, repeatable = end, False
            continue
        i += 1
        repeatable = c not in "(|^$"
        if c == "\\":
            piece, i, kind = _escape(src, i - 1, in_class=False)
            repeatable = kind != "assert"
        elif c == "[":
            piece, i = _char_class(src, i)
        elif c == "(":
            head = _GROUP.match(src, i - 1)
            if head is None and src.startswith("?", i):
                raise re.error("invalid group")
            i = head.end() if head else i
            piece = "(" if head is None else f"(?P<{head[1]}>" if head[1] else head[0]
            frames.append([0, 0, 0, 0])
        elif c == ")":
            if len(frames) == 1:
                raise re.error("unmatched ')'")
            piece, closed = ")", frames.pop()
            frames[-1][0] |= closed[0]
            frames[-1][1] |= closed[1]
            _run(frames[-1], max(closed[2], closed[3]))
        elif c == "|":
            frame = frames[-1]
            frame[1], frame[2], frame[3], piece = 1, 0, max(frame[2], frame[3]), "|"
        else:  # JS `$` never matches before a final newline; `.` excludes every line terminator
            piece = {"$": r"\Z", "^": "^", ".": r"[^\n\r\u2028\u2029]"}.get(c) or re.escape(c)
        out.append(piece)
    if len(frames) > 1:
        raise re.error("missing ')'")
    return "".join(out)


def _run(frame: list[int], repeats: int) -> None:
    frame[2] += repeats
    if frame[2] > MAX_REPEATS:
        raise re.error(f"more than {MAX_REPEATS} repeats in a row" + _HAZARD)


def _escape(src: str, i: int, *, in_class: bool) -> tuple[str, int, str]:
    """The escape at src[i]: (Python source, index after it, kind "set"/"char"/"assert")."""
    if i + 1 >= len(src):
        raise re.error("\\ at end of pattern")
    c, j = src[i + 1], i + 2
    if c in "dDwW":
        return "\\" + c, j, "set"  # re.ASCII gives them their JS meaning
    if c in "sS":  # JS whitespace is Unicode; inside a class `\S` keeps Python's ASCII meaning
        if in_class:
            return (_JS_SPACE if c == "s" else r"\S"), j, "set"
        return f"[{'^' if c == 'S' else ''}{_JS_SPACE}]", j, "set"
    if c in "bB" and not in_class:
        return "\\" + c, j, "assert"
    if c in "bfnrtv":
        return (r"\x08" if c == "b" else "\\" + c), j, "char"
    if c == "0" or (in_class and c in "1234567"):  # legacy octal escape, up to \377
        digits = re.match(r"[0-3]?[0-7]{1,2}|[0-7]", src[i + 1 : i + 4])
        text = digits[0] if digits else "0"
        return f"\\x{int(text, 8):02x}", i + 1 + len(text), "char"
    if c in "123456789" and not in_class:
        text = re.compile(r"[0-9]+").match(src, i + 1)[0]  # type: ignore[index]  # c is a digit
        return f"(?:\\{text})", i + 1 + len(text), "char"  # Python rejects a missing group
    if c == "k" and not in_class and (name := re.match(r"<([^>]*)>", src[j:])):
        return f"(?P={name[1]})", j + name.end(), "char"
    if c == "c":  # `\cJ` is a control character; a bare `\c` is a backslash, then `c`
        letter = src[j : j + 1]
        if letter.isascii() and letter.isalpha():
            return f"\\x{ord(letter) % 32:02x}", j + 1, "char"
        return r"\\", i + 1, "char"
    hexdigits = src[j : j + (2 if c == "x" else 4)]
    if c in "xu" and re.fullmatch(r"[0-9A-Fa-f]{2}|[0-9A-Fa-f]{4}", hexdigits):
        return f"\\{c}{hexdigits}", j + len(hexdigits), "char"
    return re.escape(c), j, "char"  # identity escape, also for `\A`, `\Z`, `\e` that Python reads


def _char_class(src: str, i: int) -> tuple[str, int]:
    """The class that starts after the `[` at src[i - 1]: (Python source, index after `]`)."""
    negate = src.startswith("^", i)
    i += negate
    if src.startswith("]", i):  # JS `[]` matches nothing and `[^]` anything
        return (r"[\s\S]" if negate else "(?!)"), i + 1
    parts = ["[^" if negate else "["]
    while i < len(src) and src[i] != "]":
        first, i, first_kind = _class_atom(src, i)
        parts.append(first)
        if src.startswith("-", i) and src[i + 1 : i + 2] not in ("]", ""):
            last, i, last_kind = _class_atom(src, i + 1)
            plain = first_kind == last_kind == "char"  # else JS reads `-` literally (Annex B)
            parts.append(("-" if plain else r"\-") + last)
    if i >= len(src):
        raise re.error("missing ]")
    return "".join(parts) + "]", i + 1


def _class_atom(src: str, i: int) -> tuple[str, int, str]:
    if src[i] == "\\":
        return _escape(src, i, in_class=True)
    return re.escape(src[i]), i + 1, "char"  # escaped: Python warns on `[[`, `--`, `&&`, `~~`, `||`


# -- `if` rules (§5.4) ------------------------------------------------------------------------
