"""Read hooks' answers and combine them: the pure core between executors and the flow.

Rules of this file, and of `decode`, `decode_llm`, `hook_verdict`, `hook_text`,
`hook_json` and `aggregate` behind it:

1. Pure. Data in, data out: no I/O, no clock, no randomness, no logging, no callbacks
   into the caller. The same inputs always give the same verdicts and decision, which
   is what makes replay deterministic.
2. Never raises on hostile hook output. Exit codes, stdout, stderr, HTTP bodies, model
   answers and python return values are untrusted; every failure to read them is a
   value (``HookVerdict(outcome="error", error_kind=...)`` or plain text), never an
   exception. An exception from here is a bug in the engine.
3. One hook at a time, then all together. `decode` reads one RawResult into a
   HookVerdict without looking at any other hook; `aggregate` combines verdicts
   without looking at raw output. Replay can re-run either step alone.
4. Profiles are data. ``current`` is Claude Code as documented in 2026-08, ``legacy``
   is v2.1.88; each difference is a table entry or a single test of ``profile``.
5. Claude Code's races become rules. Several ``updatedInput``s, several
   PermissionRequest decisions, several ``watchPaths``: the winner is fixed by
   configuration order, and a dropped rewrite is reported in ``Decision.errors``.
6. Posture is applied last, in `aggregate` only: ``enforcing`` turns a PreToolUse
   hook that reached no verdict into a deny; decoding never depends on posture.
7. What the engine reads differs from Claude Code only where a gate would otherwise
   open by accident, and each such place says so: JSON ``null`` is "not given"
   rather than a schema failure; a python hook's non-JSON return value is a schema
   error rather than a crash.

Example:
    >>> from engine.effects import RawResult
    >>> from engine.hook_verdict import example_invocation
    >>> inv = example_invocation("PreToolUse", {"tool_name": "Bash"})
    >>> v = decode(inv, RawResult(exit_code=0, stdout='{"decision": "block", "reason": "r"}'))
    >>> d = aggregate("PreToolUse", inv.payload, [(inv, v)])
    >>> d.blocked, d.decision, d.reason
    (True, 'deny', 'r')
"""

from __future__ import annotations

from engine.aggregate import Decision, aggregate
from engine.decode import STRING_CAP, Posture, Profile, decode
from engine.hook_verdict import HookVerdict, VerdictOutcome, hook_label, to_hook_run

__all__ = [
    "STRING_CAP",
    "Decision",
    "HookVerdict",
    "Posture",
    "Profile",
    "VerdictOutcome",
    "aggregate",
    "decode",
    "hook_label",
    "to_hook_run",
]
