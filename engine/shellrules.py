"""An `if` rule's content against a command line (spec §5.4): prefix, wildcard or exact.

Rules of this file:
- Pure, stdlib only. The command line is split by `engine.shellwords.parse`; a line it
  cannot parse matches (fail open: the hook runs), as in Claude Code.
- A rule matches a command when it matches its words' values or their raw text.
- Wildcards use no regex: O(len(pattern) * len(text)), whatever the pattern.

Example:
    >>> command_matches("git push:*", "cd repo; git push origin main")
    True
"""

from __future__ import annotations

from engine.shellwords import parse

__all__ = ["command_matches", "wildcard"]


def command_matches(
    pattern: str, command: str, *, powershell: bool = False, current: bool = True
) -> bool:
    """Whether an `if` rule's content (`git push *`) selects a command line (§5.4).

    Forms: `Q:*` is a prefix (`Q` itself or `Q` then a space); an unescaped `*` is a wildcard
    (`\\*` a star, `\\\\` a backslash; a single trailing ` *` also matches nothing); else exact.
    `current` also searches `$(..)` and backticks, and matches a pattern naming arguments whenever
    the line has `$(..)`, backticks or `$VAR`, since those may produce them.

    >>> command_matches("git *", "npm test && FOO=bar git push")
    True
    """
    script = parse(command, powershell=powershell, substitutions=current)
    if script is None:
        return True  # cannot be parsed: the hook runs (fail open), as in Claude Code
    pattern = pattern.strip()
    if current and script.has_expansion and _names_arguments(pattern):
        return True  # `$(..)` or `$VAR` may produce the arguments; a text match cannot tell
    if powershell:
        pattern = pattern.casefold()
    for cmd in script.commands:
        for text in {" ".join(cmd.argv), " ".join(cmd.raw)}:
            text = text.casefold() if powershell else text
            if pattern.endswith(":*"):
                if text == pattern[:-2] or text.startswith(pattern[:-2] + " "):
                    return True
            elif wildcard(pattern, text):
                return True
    return False


def _names_arguments(pattern: str) -> bool:
    """`git push *` or `git push:*` name more than the command; `git *` and `*` do not."""
    parts = _stars(pattern.removesuffix(":*"))
    optional_tail = len(parts) == 2 and parts[1] == "" and parts[0].endswith(" ")
    return len((parts[0] if optional_tail else "*".join(parts)).split()) > 1


def wildcard(pattern: str, text: str) -> bool:
    """Claude Code's wildcard rule: an unescaped `*` is any run of characters; else exact.

    >>> wildcard("ls *", "lsof"), wildcard("ls*", "lsof"), wildcard("git *", "git")
    (False, True, True)
    """
    parts = _stars(pattern)
    if len(parts) == 2 and parts[1] == "" and parts[0].endswith(" ") and text == parts[0][:-1]:
        return True  # `git *` also matches a bare `git`
    if len(parts) == 1:
        return text == parts[0]
    first, *middle, last = parts
    if len(text) < len(first) + len(last) or not text.startswith(first) or not text.endswith(last):
        return False
    at, end = len(first), len(text) - len(last)
    for part in middle:  # leftmost placement is always best for `*`-only patterns
        found = text.find(part, at, end)
        if found < 0:
            return False
        at = found + len(part)
    return True


def _stars(pattern: str) -> list[str]:
    """The literal runs between unescaped `*`; `\\*` is a star and `\\\\` a backslash."""
    parts, run, i = [], [], 0
    while i < len(pattern):
        if pattern[i] == "\\" and pattern[i + 1 : i + 2] in ("*", "\\"):
            run.append(pattern[i + 1])
            i += 2
            continue
        if pattern[i] == "*":
            parts.append("".join(run))
            run = []
        else:
            run.append(pattern[i])
        i += 1
    return [*parts, "".join(run)]
