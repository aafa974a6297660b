"""Fail closed means closed: what a hook process answers when it cannot decide.

Rules of this file:
- Stdlib only (`hookaudit emit` imports it on every tool call, before anything else; the
  fast emit, `ingest/emit/fast.py`, imports it when its relay fails).
- One wording: `closed_reason` (blocked) and `open_reason` (proceeding) are the only
  places the fail modes' text is written.
- A hook that fails closed and cannot reach a decision (bad input, an internal error,
  an exception anywhere, even while the interpreter exits) exits 2 with a one-line
  reason on stderr: Claude Code then blocks every event that can be blocked (a
  PreToolUse call is denied and the reason is fed to Claude). Exit 1 would be a
  non-blocking error, i.e. the call would run.
- `guard_process` is the last line: an exception that escapes everything else is
  turned into that answer by `sys.excepthook`, and `exit_now` leaves without the
  interpreter's teardown, so nothing can run (and fail) after the answer is written.

Example:
    >>> closed_answer("internal error: boom")
    ('', 'hookaudit: internal error: boom; blocked because the hook fails closed', 2)
"""

from __future__ import annotations

import os
import sys
from types import TracebackType

__all__ = [
    "armed",
    "cline_cancel",
    "closed_answer",
    "closed_reason",
    "exit_now",
    "guard_process",
    "one_line",
    "open_reason",
]

#: The program name of a process whose hook fails closed (set by `guard_process`).
_ARMED: list[str] = []
#: The agent whose hook this process is (set by `guard_process`): Cline obeys no exit code,
#: only its JSON, so its closed answer carries that too.
_AGENT: list[str] = []


def cline_cancel(reason: str) -> str:
    """Cline's only blocking answer (`engine.dialects.cline.cancel`; stdlib here)."""
    import json

    return json.dumps({"cancel": True, "errorMessage": reason}, separators=(",", ":"))


def armed() -> str | None:
    """The program name when this process is a hook that fails closed, else None.

    A wrapper that turns errors into exit codes (the CLI's `main`) asks this first: exit 1
    would let the call run.

    >>> armed() is None
    True
    """
    return _ARMED[-1] if _ARMED else None


def one_line(exc: BaseException) -> str:
    """`Type: message` of an exception on one line, capped (no traceback, ever).

    >>> one_line(ValueError("a\\nb"))
    'ValueError: a b'
    """
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:300]}" if text else type(exc).__name__


def closed_reason(reason: str, prog: str = "hookaudit") -> str:
    """THE wording of a block because the hook fails closed (command and http forms alike).

    >>> closed_reason("timed out")
    'hookaudit: timed out; blocked because the hook fails closed'
    """
    return f"{prog}: {reason}; blocked because the hook fails closed"


def open_reason(reason: str, prog: str = "hookaudit emit") -> str:
    """THE wording of going on without a decision because the hook fails open.

    >>> open_reason("relay down")
    'hookaudit emit: relay down; proceeding (--fail open)'
    """
    return f"{prog}: {reason}; proceeding (--fail open)"


def closed_answer(reason: str, prog: str = "hookaudit") -> tuple[str, str, int]:
    """(stdout, stderr, exit code) of a hook that blocks because it fails closed: exit 2 and
    the reason on stderr, which every agent but Cline obeys; for Cline, its cancel on exit 0
    (it reads no exit code, and the hook file `hookaudit wire cline` writes adds its own
    cancel when hookaudit exits non-zero without one)."""
    why = closed_reason(reason, prog)
    if _AGENT and _AGENT[-1] == "cline":
        return cline_cancel(why), why, 0
    return "", why, 2


def _write(stream: object, text: str, exact: bool = False) -> None:
    try:
        stream.write(text if exact or text.endswith("\n") else text + "\n")  # type: ignore[attr-defined]
        stream.flush()  # type: ignore[attr-defined]
    except Exception:
        pass


def exit_now(stdout: str, stderr: str, code: int) -> None:
    """Write the answer, flush and exit with `code` at once (no teardown that could fail).

    A blocking answer's stderr (exit 2) is written exactly: Claude Code shows a Stop hook's
    stderr untrimmed, so a newline added here would reach the model.
    """
    if stdout:
        _write(sys.stdout, stdout)
    if stderr:
        _write(sys.stderr, stderr, exact=code == 2)
    os._exit(code)


def guard_process(prog: str, *, closed: bool, agent: str = "claude_code") -> None:
    """Install the last-resort handler: an uncaught exception becomes one line, and
    exit 2 (blocked) when the hook fails closed, else exit 1.

    Example:
        >>> guard_process("hookaudit eval", closed=True)  # doctest: +SKIP
    """

    def hook(kind: type[BaseException], exc: BaseException, tb: TracebackType | None) -> None:
        if closed:
            exit_now(*closed_answer(f"internal error: {one_line(exc)}", prog))
        exit_now("", f"{prog}: internal error: {one_line(exc)}", 1)

    sys.excepthook = hook
    _AGENT.append(agent)
    if closed:
        _ARMED.append(prog)
