"""The log lines of hookaudit's long-running commands (worker, serve, relay, siem): one event
one line, whatever the event carries.

Rules of this file:
- A message often holds what a hostile party sent (an event name, a request path, a
  receiver's answer). Its control characters are written as escapes (``\\n`` -> ``\\x0a``),
  so no input can start a line of its own in the journal or move a terminal.
- A traceback (``_log.exception``, our own bugs only) keeps its lines, each indented, so none
  of them reads as a log line either.

Example:
    >>> import io
    >>> out = io.StringIO()
    >>> h = logging.StreamHandler(out)
    >>> h.setFormatter(OneLineFormatter("%(levelname)s %(message)s"))
    >>> log = logging.getLogger("hookaudit.doctest")
    >>> log.addHandler(h); log.propagate = False
    >>> log.warning("event %s refused", "Stop\\r\\n2026 CRITICAL forged")
    >>> out.getvalue()
    'WARNING event Stop\\\\x0d\\\\x0a2026 CRITICAL forged refused\\n'
"""

from __future__ import annotations

import logging
import re
import sys

__all__ = ["CONTROL", "FORMAT", "OneLineFormatter", "escape_controls", "setup_logging"]

FORMAT = "%(asctime)s %(name)s %(levelname)s %(message)s"
#: One control character: C0, DEL, C1, the Unicode line and paragraph separators.
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def escape_controls(text: str) -> str:
    """`text` with each control character (C0, DEL, C1, the Unicode line separators) as an
    escape.

    Example:
        >>> escape_controls("a\\tb\\x1b[2J")
        'a\\\\x09b\\\\x1b[2J'
    """
    return CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


class OneLineFormatter(logging.Formatter):
    """A `logging.Formatter` whose message is always one line (see the module's rules)."""

    def formatMessage(self, record: logging.LogRecord) -> str:
        record.message = escape_controls(record.message)
        return super().formatMessage(record)

    def formatException(self, ei: object) -> str:
        text = super().formatException(ei)  # type: ignore[arg-type]
        return "\n".join("    " + escape_controls(line) for line in text.splitlines())

    def formatStack(self, stack_info: str) -> str:
        return "\n".join("    " + escape_controls(line) for line in stack_info.splitlines())


def setup_logging(verbose: bool) -> None:
    """Log to stderr at INFO (`verbose`) or WARNING, one line per event."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(OneLineFormatter(FORMAT))
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, handlers=[handler])
