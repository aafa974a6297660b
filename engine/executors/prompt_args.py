"""``$ARGUMENTS`` in a prompt or agent hook's prompt: the event JSON, whole or by shell token.

Rules of this file:
- One pass over the prompt, so text that came from the event is never expanded again.
- ``$n`` and ``$ARGUMENTS[n]`` are shell tokens of the event JSON split as Claude Code
  splits them (operators dropped, no expansion, whitespace when quotes are unbalanced).

Example:
    >>> substitute_arguments("Is this safe? $ARGUMENTS", '{"command": "ls"}')
    'Is this safe? {"command": "ls"}'
"""

from __future__ import annotations

import re
import shlex

__all__ = ["split_arguments", "substitute_arguments"]

_PLACEHOLDER = re.compile(r"(?<!\\)\$(?:ARGUMENTS\[(\d+)\]|ARGUMENTS|(\d+)(?!\w))")
_OPERATOR = re.compile(r"[();<>|&]+")


def split_arguments(text: str) -> list[str]:
    """Shell-split ``text`` as Claude Code does for ``$n`` (operators dropped, no expansion).

    Unbalanced quotes fall back to splitting on whitespace.

    >>> split_arguments('{"a": "b c"} | x')
    ['{a:', 'b c}', 'x']
    """
    if not text.strip():
        return []
    lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        tokens = list(lexer)
    except ValueError:
        return text.split()
    return [t for t in tokens if not _OPERATOR.fullmatch(t)]


def substitute_arguments(prompt: str, arguments: str) -> str:
    """Replace ``$ARGUMENTS``, ``$ARGUMENTS[n]`` and ``$n`` (n-th shell token, from 0).

    One pass, so text coming from the event is never expanded again. ``\\$`` keeps the
    placeholder literal. With no placeholder, ``\\n\\nARGUMENTS: <json>`` is appended.

    >>> substitute_arguments("Check this.", '{"a":1}')
    'Check this.\\n\\nARGUMENTS: {"a":1}'
    """
    tokens: list[str] | None = None
    found = False

    def replace(m: re.Match[str]) -> str:
        nonlocal tokens, found
        found = True
        digits = m[1] or m[2]
        if digits is None:
            return arguments
        if tokens is None:
            tokens = split_arguments(arguments)
        index = int(digits) if len(digits) < 8 else len(tokens)
        return tokens[index] if index < len(tokens) else ""

    out = _PLACEHOLDER.sub(replace, prompt)
    if not found and arguments:
        out += f"\n\nARGUMENTS: {arguments}"
    return out
