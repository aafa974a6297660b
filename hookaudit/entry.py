"""The `hookaudit` console script: `emit` on the standard library alone, the rest via click.

Rules of this file:
- Stdlib only, and nothing at module level but `sys`: an agent runs `hookaudit emit` on
  every tool call, and the generated console script imports this module first. `emit`
  goes to `ingest.emit.fast` (a relay on a unix socket, else today's emit); every other
  command, and `emit --help`, to the click group of `hookaudit.cli`.

Example:
    $ echo '{"hook_event_name":"Stop","session_id":"s"}' | hookaudit emit
"""

from __future__ import annotations

import sys

__all__ = ["main"]


def main() -> None:
    """Dispatch `hookaudit ARGS`."""
    if sys.argv[1:2] == ["emit"]:
        from ingest.emit.fast import main as fast

        fast(sys.argv[2:])
        return
    from hookaudit.cli import main as cli

    cli()
