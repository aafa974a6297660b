"""Planning: which hooks run for this event? A pure function of (event, settings).

Rules of this file:
- Pure: no I/O, no clock, no environment reads (the caller passes `home`).
- Order of the steps is Claude Code's (spec §6.1): existence check → lockdown
  (managed `disableAllHooks`, `disableAllHooks`, `allowManagedHooksOnly`) → trust →
  matcher → hook type allowed on the event → `if` → dedup (per root, last wins).
- The output keeps configuration order; `Invocation.index` is that order and is
  what aggregation uses to break ties.

Example:
    >>> from engine.sources import merge
    >>> plan("Stop", {}, b"{}", merge([])).invocations
    ()
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from engine import match
from engine.effects import Invocation
from engine.events import CATALOG, match_query
from engine.records import HookIdentity
from engine.settings import (
    AgentHook,
    CommandHook,
    Hook,
    HttpHook,
    McpToolHook,
    PromptHook,
    PythonHook,
)
from engine.sources import Effective, Entry

__all__ = ["Plan", "Skipped", "default_timeout", "identity_of", "plan"]

Profile = Literal["current", "legacy"]

_SESSION_ID_SAFE = re.compile(r"[^A-Za-z0-9_.-]")
_ENV_FILE_EVENTS = frozenset({"SessionStart", "Setup", "CwdChanged", "FileChanged"})


@dataclass(frozen=True, slots=True)
class Skipped:
    """A configured hook that did not run, and why (for `--explain` and audits)."""

    scope: str
    file: str
    hook_type: str
    why: str


@dataclass(frozen=True, slots=True)
class Plan:
    invocations: tuple[Invocation, ...]
    skipped: tuple[Skipped, ...] = ()


def default_timeout(event: str, hook: Hook, profile: Profile = "current") -> float:
    """Claude Code's default timeout in seconds for a hook without one (spec §4.2).

    >>> default_timeout("UserPromptSubmit", CommandHook(type="command", command="x"))
    30.0
    """
    if hook.timeout is not None:
        return hook.timeout
    if isinstance(hook, PromptHook):
        return 30.0
    if isinstance(hook, AgentHook):
        return 60.0
    if isinstance(hook, PythonHook):
        return 5.0
    es = CATALOG.get(event)
    if profile == "current" and es is not None and es.default_timeout is not None:
        return es.default_timeout
    return 600.0


def identity_of(entry: Entry) -> HookIdentity:
    """The identity of a configured hook (what replay reuse and attribution key on)."""
    h = entry.hook
    common: dict[str, Any] = {
        "type": h.type,
        "source": entry.scope,
        "matcher": entry.matcher,
        "if_": h.if_,
        "timeout": h.timeout,
        "plugin_root": entry.plugin_root,
    }
    if isinstance(h, CommandHook):
        return HookIdentity(
            **common,
            command=h.command,
            args=h.args,
            shell=h.shell,
            is_async=h.async_ or h.asyncRewake,
        )
    if isinstance(h, HttpHook):
        return HookIdentity(**common, url=h.url)
    if isinstance(h, PromptHook | AgentHook):
        return HookIdentity(**common, prompt=h.prompt, model=h.model)
    if isinstance(h, McpToolHook):
        return HookIdentity(**common, server=h.server, tool=h.tool)
    if isinstance(h, PythonHook):
        return HookIdentity(**common, callable=h.callable)
    return HookIdentity(**common)


def _dedup_key(entry: Entry) -> tuple[str, ...] | None:
    """Spec §4.5: per type, (root, payload); None means never deduplicated."""
    h, root, cond = entry.hook, entry.plugin_root or "", entry.hook.if_ or ""
    if isinstance(h, CommandHook):
        return ("command", root, h.shell or "bash", h.command, repr(h.args), cond)
    if isinstance(h, HttpHook):
        return ("http", root, h.url, cond)
    if isinstance(h, PromptHook):
        return ("prompt", root, h.prompt, cond)
    if isinstance(h, AgentHook):
        return ("agent", root, h.prompt, cond)
    if isinstance(h, McpToolHook):
        return ("mcp_tool", root, h.server, h.tool, repr(sorted((h.input or {}).items())), cond)
    if isinstance(h, PythonHook):
        return ("python", root, h.callable, cond)
    return None


def _type_allowed(event: str, hook_type: str, profile: Profile) -> bool:
    es = CATALOG[event]
    if hook_type not in {"command", "http", "mcp_tool", "prompt", "agent", "python"}:
        return True  # unknown types reach the verdict as errors (enforcing denies on them)
    return hook_type in es.hook_types


def _env_file(home: str, session_id: str, event: str, index: int) -> str:
    sid = (
        session_id
        if session_id and not _SESSION_ID_SAFE.search(session_id)
        else (hashlib.sha256(session_id.encode()).hexdigest()[:32])
    )
    return f"{home}/.claude/session-env/{sid}/{event.lower()}-hook-{index}.sh"


def plan(
    event: str,
    payload: Mapping[str, Any],
    input_json: bytes,
    eff: Effective,
    *,
    profile: Profile = "current",
    dialect: match.Dialect = "claude",
    trusted: bool = True,
    home: str = "/root",
    sessionend_budget_ms: float | None = None,
) -> Plan:
    """The hooks that run for one event, in configuration order.

    `sessionend_budget_ms` is ``CLAUDE_CODE_SESSIONEND_HOOKS_TIMEOUT_MS`` when set.
    """
    if not eff.has_hooks(event) or not trusted:
        return Plan(())
    query = match_query(event, dict(payload))
    tool_name = payload.get("tool_name")
    tool_input = payload.get("tool_input")
    cwd = payload.get("cwd") if isinstance(payload.get("cwd"), str) else ""
    skipped: list[Skipped] = []
    kept: dict[tuple[str, ...] | int, Entry] = {}
    for entry in eff.entries[event]:
        h = entry.hook

        def skip(why: str, entry: Entry = entry) -> None:
            skipped.append(Skipped(entry.scope, entry.file, entry.hook.type, why))

        if (eff.disable_all or eff.allow_managed_only) and entry.scope != "managed":
            skip("disableAllHooks" if eff.disable_all else "allowManagedHooksOnly")
            continue
        if not match.matcher_matches(event, query, entry.matcher, profile=profile, dialect=dialect):
            skip("matcher")
            continue
        if not _type_allowed(event, h.type, profile):
            skip(f"{h.type} hooks do not run on {event}")
            continue
        if h.if_ is not None:
            if not match.if_allowed_on(event, profile):
                skip(f"'if' is not allowed on {event}")
                continue
            rule = match.parse_rule(h.if_, profile=profile)
            if not isinstance(tool_name, str) or not match.if_matches(
                rule,
                tool_name,
                tool_input if isinstance(tool_input, Mapping) else {},
                cwd=str(cwd),
                home=home,
                source_root=entry.base_dir,
                profile=profile,
            ):
                skip("if")
                continue
        key = _dedup_key(entry)
        if key is None:
            kept[entry.order] = entry
        else:
            kept.pop(key, None)  # last wins, at its own position
            kept[key] = entry
    entries = sorted(kept.values(), key=lambda e: e.order)
    budget = _sessionend_budget(eff, sessionend_budget_ms) if event == "SessionEnd" else None
    session_id = payload.get("session_id")
    invocations = []
    for index, entry in enumerate(entries):
        timeout = default_timeout(event, entry.hook, profile)
        if budget is not None:
            timeout = min(timeout, budget)
        env: dict[str, str] = dict(entry.group_env)
        env["CLAUDE_PROJECT_DIR"] = eff.project_dir or str(cwd)
        if entry.plugin_root:
            env["CLAUDE_PLUGIN_ROOT"] = entry.plugin_root
            if entry.plugin_data:
                env["CLAUDE_PLUGIN_DATA"] = entry.plugin_data
        if (
            event in _ENV_FILE_EVENTS
            and isinstance(entry.hook, CommandHook)
            and (entry.hook.shell in (None, "bash"))
        ):
            env["CLAUDE_ENV_FILE"] = _env_file(
                home, session_id if isinstance(session_id, str) else "", event, index
            )
        invocations.append(
            Invocation(
                index=index,
                event=event,
                hook=entry.hook,
                identity=identity_of(entry),
                source=entry.scope,
                matcher=entry.matcher,
                timeout=timeout,
                payload=dict(payload),
                input_json=input_json,
                cwd=str(cwd),
                env=env,
                plugin_root=entry.plugin_root,
                plugin_data=entry.plugin_data,
            )
        )
    return Plan(tuple(invocations), tuple(skipped))


def _sessionend_budget(eff: Effective, override_ms: float | None) -> float:
    """SessionEnd's shared budget: 1.5 s, raised to the largest settings-file timeout (≤ 60 s)."""
    if override_ms is not None:
        return max(override_ms, 0.0) / 1000.0
    budget = 1.5
    if eff.sessionend_max_timeout is not None:
        budget = max(budget, min(eff.sessionend_max_timeout, 60.0))
    return budget
