"""Claude Code settings that wire every hook event to hookaudit: the one generator.

Rules of this file:
- The event list comes from `engine.events.CATALOG` (the events whose origin is Claude
  Code), never from a hand-written list, so a new event in the catalogue is wired by
  running this module again (`python -m ingest.wire.claude_code infra/claude`); a test checks the
  files under `infra/claude/` are exactly what this module writes.
- How an event reaches hookaudit is decided here and only here: `emit_command` (the
  command hook) and `serve_hook` (the http hook). Another emit form (a fast path) changes
  `emit_command` and nothing else.
- Data out only: `snippets()` returns the documents; `write` is the one function that
  touches files.

Example:
    >>> docs = snippets()
    >>> docs["managed-settings.emit.json"]["hooks"]["PreToolUse"][0]["hooks"][0]["command"]
    'hookaudit emit --wait --timeout 10 --fail closed || exit 2'
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from engine.events import CATALOG, EventSpec

__all__ = [
    "NOT_WIRED",
    "SERVE_URL",
    "TOKEN_ENV",
    "claude_events",
    "emit_command",
    "serve_hook",
    "snippets",
    "write",
]

SERVE_URL = "http://127.0.0.1:8787/hooks"
TOKEN_ENV = "HOOKAUDIT_TOKEN"
WAIT_TIMEOUT = 10  # emit --timeout / serve --timeout default: the worker's decision
HOOK_TIMEOUT = 15  # Claude Code's timeout for the hook itself: above the decision timeout

# Events whose decision the agent waits for, and what happens without one. PreToolUse is
# the gate (closed); a prompt is held for a decision but not lost when hookaudit is down.
_WAIT: dict[str, str] = {"PreToolUse": "closed", "UserPromptSubmit": "open"}


#: Events Claude Code fires that hookaudit does not wire, and why.
NOT_WIRED = {
    "WorktreeCreate": "a hook on it replaces Claude Code's own creation of the worktree: it "
    "must print the new worktree's path, and a hook that prints none fails every creation",
}


def claude_events() -> list[EventSpec]:
    """The events Claude Code fires that hookaudit wires, in catalogue order (`NOT_WIRED`
    names those it leaves alone).

    Example:
        >>> claude_events()[0].name
        'PreToolUse'
    """
    return [
        s
        for s in CATALOG.values()
        if s.origin in ("claude", "claude-new") and s.name not in NOT_WIRED
    ]


def emit_command(event: str, *, enforce: bool) -> dict[str, Any]:
    """The command hook that publishes `event` (waiting for a decision where enforced).

    Example:
        >>> emit_command("Stop", enforce=True)
        {'type': 'command', 'command': 'hookaudit emit'}
    """
    fail = _WAIT.get(event) if enforce else None
    if fail is None:
        return {"type": "command", "command": "hookaudit emit"}
    command = f"hookaudit emit --wait --timeout {WAIT_TIMEOUT} --fail {fail}"
    if fail == "closed":
        # Claude Code blocks on exit 2 only: a hookaudit that cannot start (not on the PATH
        # Claude Code runs hooks with: 127; a broken install: 1) would let the call run.
        command += " || exit 2"
    return {"type": "command", "command": command, "timeout": HOOK_TIMEOUT}


def serve_hook(event: str, url: str = SERVE_URL) -> dict[str, Any]:
    """The http hook that POSTs `event` to `hookaudit serve` with the bearer token, at
    ``/hooks/<event>``: serve then knows the event from the URL alone, so a body it cannot
    read (malformed, oversized) still gets that event's blocking answer with status 200.
    At ``/hooks`` such a body is a 400/413, and Claude Code runs the call.

    Example:
        >>> serve_hook("PreToolUse")["url"]
        'http://127.0.0.1:8787/hooks/PreToolUse'
    """
    return {
        "type": "http",
        "url": f"{url}/{event}",
        "headers": {"Authorization": f"Bearer ${TOKEN_ENV}"},
        "allowedEnvVars": [TOKEN_ENV],
        "timeout": HOOK_TIMEOUT,
    }


def _doc(hooks: dict[str, dict[str, Any]], *, http: bool, managed: bool) -> dict[str, Any]:
    out: dict[str, Any] = {"hooks": {e: [{"hooks": [h]}] for e, h in hooks.items()}}
    if http:
        out["allowedHttpHookUrls"] = [SERVE_URL.rsplit("/", 1)[0] + "/*"]
        out["httpHookAllowedEnvVars"] = [TOKEN_ENV]
    if managed:
        # Only the managed hooks run: a repository's settings cannot add hooks whose
        # answers would be combined with hookaudit's.
        out["allowManagedHooksOnly"] = True
    return out


def snippets() -> dict[str, dict[str, Any]]:
    """Every settings document under `infra/claude/`, by file name.

    - `settings.observe.json`: every event published by `hookaudit emit` (never blocks);
    - `settings.enforce.json`: the same, PreToolUse and UserPromptSubmit wait (`_WAIT`);
    - `managed-settings.emit.json`: enforce, as managed settings (only managed hooks run);
    - `managed-settings.serve.json`: every event that takes an http hook POSTed to
      `hookaudit serve`; the few that take only command hooks (SessionStart, Setup) by
      `hookaudit emit`; managed.

    Example:
        >>> sorted(snippets())[0]
        'managed-settings.emit.json'
    """
    events = claude_events()
    observe = {s.name: emit_command(s.name, enforce=False) for s in events}
    enforce = {s.name: emit_command(s.name, enforce=True) for s in events}
    served = {
        s.name: serve_hook(s.name) if "http" in s.hook_types else emit_command(s.name, enforce=True)
        for s in events
    }
    return {
        "settings.observe.json": _doc(observe, http=False, managed=False),
        "settings.enforce.json": _doc(enforce, http=False, managed=False),
        "managed-settings.emit.json": _doc(enforce, http=False, managed=True),
        "managed-settings.serve.json": _doc(served, http=True, managed=True),
    }


def render(doc: dict[str, Any]) -> str:
    """A document as written: one event a line, so a diff shows which event changed."""
    lines = []
    for key, value in doc.items():
        if key != "hooks":
            lines.append(f"  {json.dumps(key)}: {json.dumps(value)}")
            continue
        body = ",\n".join(f"    {json.dumps(e)}: {json.dumps(g)}" for e, g in value.items())
        lines.append(f'  "hooks": {{\n{body}\n  }}')
    return "{\n" + ",\n".join(lines) + "\n}\n"


def write(folder: Path) -> list[Path]:
    """Write every snippet into `folder`; the paths written.

    Example:
        >>> [p.name for p in write(Path(tempfile.mkdtemp()))][:1]  # doctest: +SKIP
        ['settings.observe.json']
    """
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for name, doc in snippets().items():
        path = folder / name
        path.write_text(render(doc))
        out.append(path)
    return out


if __name__ == "__main__":  # python -m ingest.wire.claude_code infra/claude
    for p in write(Path(sys.argv[1] if len(sys.argv) > 1 else "infra/claude")):
        print(p)
