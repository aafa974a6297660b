"""`hookaudit wire AGENT`: an agent's hook configuration that sends every hook event it
fires to hookaudit for one data dir, enforcing and fail-closed.

Rules of this file:
- What each agent's configuration looks like is in `LAYOUTS` (where the file is, which
  events, the unit of its timeout, its matcher for "every tool"). `plan` builds the new
  document from the one already there: ours replaced, everything else kept in order.
- Idempotent: a hook entry is ours when its command runs ``emit --agent AGENT``; wiring
  again replaces it and adds nothing.
- Enforcing events wait for the decision and fail closed (`emit --wait --fail closed`),
  with emit's own deadline below the agent's hook timeout (an agent that stops a hook at
  its timeout lets the call run). The other events are recorded without waiting.
- `write` is the one function that touches files: written aside, then renamed.

Example:
    >>> doc, _ = plan("gemini_cli", {}, data_dir=Path("/d"), hookaudit="hookaudit")
    >>> doc["hooks"]["BeforeTool"][0]["hooks"][0]["timeout"]
    15000
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "LAYOUTS",
    "Layout",
    "WireError",
    "command_for",
    "config_path",
    "hookaudit_argv",
    "hookaudit_command",
    "plan",
    "write",
]

WAIT_TIMEOUT = 10  # emit --timeout: the worker's decision, in seconds
#: After an enforced command for an agent that lets a call run on an exit other than 2 (or
#: on exit 2 with nothing on stderr): a hookaudit that cannot start (not found: 127; a
#: broken install: 1) still blocks. Exit 0 and 2 are emit's own answers and pass through.
BLOCK_UNLESS_ANSWERED = (
    "; rc=$?; case $rc in 0|2) exit $rc;; esac; "
    'echo "hookaudit could not run (exit $rc); blocked because the hook fails closed" >&2; '
    "exit 2"
)
HOOK_TIMEOUT = 15  # the agent's timeout for the hook, in seconds: above emit's own


class WireError(ValueError):
    """The configuration cannot be read or written; the message names the file."""


@dataclass(frozen=True)
class Layout:
    """Where and how one agent keeps its hooks."""

    agent: str
    home_file: str  # relative to --home (the agent's user configuration)
    project_file: str  # relative to --project
    enforce: tuple[str, ...]  # the agent's events whose decision it waits for
    record: tuple[str, ...]  # its events recorded without waiting
    tool_events: frozenset[str]  # events whose matcher selects tools
    any_tool: str  # the matcher that selects every tool
    timeout_scale: int  # the timeout field's unit: 1 for seconds, 1000 for milliseconds
    capped: dict[str, int]  # events the agent gives less time (seconds), e.g. Codex SessionEnd
    named: bool  # entries carry a "name" (Gemini CLI)
    notes: str  # what a user must still do, printed after wiring
    flat: bool = False  # hooks listed per event with no matcher groups (Copilot CLI)
    command_key: str = "command"  # the field holding the shell command
    timeout_key: str = "timeout"
    header: tuple[tuple[str, Any], ...] = ()  # fields the file must carry (Copilot: version)
    enforced_suffix: str = ""  # after an enforced command (Claude Code: `|| exit 2`)


def _claude_events() -> tuple[str, ...]:
    from ingest.wire.claude_code import claude_events

    return tuple(s.name for s in claude_events())


_CLAUDE_ENFORCE = ("PreToolUse", "PermissionRequest", "UserPromptSubmit")

LAYOUTS: dict[str, Layout] = {
    "claude_code": Layout(
        agent="claude_code",
        home_file=".claude/settings.json",
        project_file=".claude/settings.json",
        enforce=_CLAUDE_ENFORCE,
        record=tuple(e for e in _claude_events() if e not in _CLAUDE_ENFORCE),
        tool_events=frozenset(),  # no matcher: every tool
        any_tool="",
        timeout_scale=1,
        capped={},
        named=False,
        enforced_suffix=" || exit 2",
        notes=(
            "Claude Code blocks on exit 2 only: `|| exit 2` blocks when hookaudit cannot "
            "start (not on the PATH Claude Code runs hooks with). For a fleet, the managed "
            "settings (/etc/claude-code/managed-settings.json, with allowManagedHooksOnly) "
            "are what a user cannot change: infra/claude/managed-settings.emit.json."
        ),
    ),
    "codex": Layout(
        agent="codex",
        enforced_suffix=BLOCK_UNLESS_ANSWERED,
        home_file=".codex/hooks.json",
        project_file=".codex/hooks.json",
        enforce=("PreToolUse", "PermissionRequest", "UserPromptSubmit", "Stop"),
        record=("PostToolUse", "SessionStart", "SessionEnd"),
        tool_events=frozenset({"PreToolUse", "PostToolUse", "PermissionRequest"}),
        any_tool="*",
        timeout_scale=1,
        capped={"SessionEnd": 3},
        named=False,
        notes=(
            "Codex runs a hook only once it is trusted: review the new hooks with /hooks in "
            "the TUI (or run `codex exec --dangerously-bypass-hook-trust` in automation). "
            "Project hooks load only in a trusted project. For a fleet, put the hooks in "
            "Codex's managed configuration, which needs no review. With CODEX_HOME set, "
            "wire --home to the directory above it."
        ),
    ),
    "gemini_cli": Layout(
        agent="gemini_cli",
        enforced_suffix=BLOCK_UNLESS_ANSWERED,
        home_file=".gemini/settings.json",
        project_file=".gemini/settings.json",
        enforce=("BeforeTool", "BeforeAgent", "AfterAgent"),
        record=("AfterTool", "SessionStart", "SessionEnd", "PreCompress", "Notification"),
        tool_events=frozenset({"BeforeTool", "AfterTool"}),
        any_tool=".*",
        timeout_scale=1000,
        capped={},
        named=True,
        notes=(
            "Gemini CLI runs project hooks only in a trusted folder (trust it, or set "
            "GEMINI_CLI_TRUST_WORKSPACE=true in automation); user hooks run everywhere. "
            "For a fleet, the system settings file (/etc/gemini-cli/settings.json) holds "
            "hooks every user gets. BeforeModel, AfterModel and BeforeToolSelection are not "
            "wired: they carry the whole model request and have no Claude Code counterpart."
        ),
    ),
    "copilot_cli": Layout(
        agent="copilot_cli",
        enforced_suffix=BLOCK_UNLESS_ANSWERED,
        home_file=".copilot/hooks/hookaudit.json",
        project_file=".github/hooks/hookaudit.json",
        enforce=("PreToolUse", "PermissionRequest", "Stop"),
        record=("PostToolUse", "UserPromptSubmit", "SessionStart", "SessionEnd"),
        tool_events=frozenset({"PreToolUse", "PostToolUse", "PermissionRequest"}),
        any_tool="*",
        timeout_scale=1,
        capped={},
        named=False,
        flat=True,
        command_key="bash",
        timeout_key="timeoutSec",
        header=(("version", 1),),
        notes=(
            "Copilot CLI reads every file in ~/.copilot/hooks/ (or $COPILOT_HOME/hooks/) and "
            "the repository's .github/hooks/. For a fleet, /etc/github-copilot/policy.d/ holds "
            "hooks a user cannot turn off. Copilot CLI also runs a repository's "
            ".claude/settings.json hooks: wire those with --agent claude_code's snippets only "
            "where Claude Code runs too."
        ),
    ),
    "qwen_code": Layout(
        agent="qwen_code",
        enforced_suffix=BLOCK_UNLESS_ANSWERED,
        home_file=".qwen/settings.json",
        project_file=".qwen/settings.json",
        enforce=("PreToolUse", "UserPromptSubmit", "Stop"),
        record=("PostToolUse", "SessionStart", "SessionEnd"),
        tool_events=frozenset({"PreToolUse", "PostToolUse"}),
        any_tool=".*",
        timeout_scale=1000,
        capped={},
        named=False,
        notes=(
            "Qwen Code takes hooks from ~/.qwen/settings.json and the project's "
            ".qwen/settings.json (unless disableAllHooks is set there)."
        ),
    ),
}


def hookaudit_argv() -> list[str]:
    """How an agent's hook runs this hookaudit: the console script beside this
    interpreter, else the one on PATH, else ``python -m hookaudit``."""
    beside = Path(sys.executable).with_name("hookaudit")
    if beside.is_file() and os.access(beside, os.X_OK):
        return [str(beside)]
    found = shutil.which("hookaudit")
    if found:
        return [found]
    return [sys.executable, "-m", "hookaudit"]


def hookaudit_command() -> str:
    """`hookaudit_argv` as a shell word list (for a hook that runs a shell)."""
    return " ".join(shlex.quote(a) for a in hookaudit_argv())


def config_path(agent: str, *, home: Path | None, project: Path | None) -> Path:
    """The file `wire` writes for `agent`: under --project when given, else under --home
    (default: the user's home)."""
    layout = LAYOUTS[agent]
    if project is not None:
        return project / layout.project_file
    return (home if home is not None else Path.home()) / layout.home_file


def command_for(layout: Layout, event: str, data_dir: Path, hookaudit: str) -> str:
    """The shell command of `layout`'s hook for `event`."""
    parts = [hookaudit, "emit", "--agent", layout.agent, "--data-dir", shlex.quote(str(data_dir))]
    if event in layout.enforce:
        parts += ["--wait", "--timeout", str(WAIT_TIMEOUT), "--fail", "closed"]
        return " ".join(parts) + layout.enforced_suffix
    return " ".join(parts)


def _entry(layout: Layout, event: str, data_dir: Path, hookaudit: str) -> dict[str, Any]:
    seconds = layout.capped.get(event, HOOK_TIMEOUT)
    hook: dict[str, Any] = {"type": "command"}
    if layout.named:
        hook["name"] = "hookaudit"
    hook[layout.command_key] = command_for(layout, event, data_dir, hookaudit)
    hook[layout.timeout_key] = seconds * layout.timeout_scale
    if layout.flat:
        if event in layout.tool_events:
            hook["matcher"] = layout.any_tool
        return hook
    group: dict[str, Any] = {}
    if event in layout.tool_events:
        group["matcher"] = layout.any_tool
    group["hooks"] = [hook]
    return group


def _ours(group: Any, layout: Layout) -> bool:
    """A matcher group (or, for a flat layout, an entry) holding only hookaudit's own hook."""
    if not isinstance(group, dict):
        return False
    hooks = [group] if layout.flat else group.get("hooks")
    if not isinstance(hooks, list):
        return False
    key = layout.command_key
    return bool(hooks) and all(
        isinstance(h, dict)
        and isinstance(h.get(key), str)
        and f" emit --agent {layout.agent} " in h[key] + " "
        for h in hooks
    )  # `... --fail closed || exit 2` holds " emit --agent AGENT " too


def plan(
    agent: str, existing: dict[str, Any], *, data_dir: Path, hookaudit: str
) -> tuple[dict[str, Any], list[str]]:
    """The configuration with hookaudit wired in, and the events wired. Everything in
    `existing` that is not hookaudit's is kept, in its order; hookaudit's groups are
    replaced (so wiring twice changes nothing).

    Example:
        >>> doc, events = plan("codex", {"hooks": {"Stop": [{"hooks": [{"type": "command",
        ...     "command": "mine"}]}]}}, data_dir=Path("/d"), hookaudit="hookaudit")
        >>> [g["hooks"][0]["command"][:9] for g in doc["hooks"]["Stop"]]
        ['mine', 'hookaudit']
    """
    layout = LAYOUTS[agent]
    doc = dict(existing)
    for key, value in layout.header:
        doc.setdefault(key, value)
    hooks = doc.get("hooks", {})
    if not isinstance(hooks, dict):
        raise WireError('"hooks" is not an object')
    hooks = dict(hooks)
    events = [*layout.enforce, *layout.record]
    for event in events:
        groups = hooks.get(event, [])
        if not isinstance(groups, list):
            raise WireError(f'"hooks.{event}" is not a list')
        kept = [g for g in groups if not _ours(g, layout)]
        hooks[event] = [*kept, _entry(layout, event, data_dir, hookaudit)]
    doc["hooks"] = hooks
    return doc, events


def read_config(path: Path) -> dict[str, Any]:
    """The JSON object in `path` ({} when there is no file); WireError names the file."""
    from engine.userfiles import NotRegular, TooLarge, read_regular

    try:
        raw = read_regular(path, 4 << 20)
    except FileNotFoundError:
        return {}
    except (NotRegular, TooLarge, OSError) as e:
        raise WireError(f"{path}: {e}") from e
    if not raw.strip():
        return {}
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError) as e:
        raise WireError(f"{path}: not JSON: {e}") from e
    if not isinstance(doc, dict):
        raise WireError(f"{path}: expected a JSON object")
    return doc


def render(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=2, ensure_ascii=False) + "\n"


def write(path: Path, doc: dict[str, Any]) -> None:
    """Write `doc` to `path`: to a temporary file beside it, fsynced, then renamed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.hookaudit-{os.getpid()}")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(render(doc))
            f.flush()
            os.fsync(f.fileno())
        if path.exists():
            os.chmod(tmp, path.stat().st_mode & 0o777)
        os.replace(tmp, path)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise WireError(f"{path}: {e.strerror or e}") from e
