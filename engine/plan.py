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
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from engine import match
from engine.effects import Invocation
from engine.events import CATALOG, match_query
from engine.records import HookIdentity, Profile
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


_SESSION_ID_SAFE = re.compile(r"[^A-Za-z0-9_.-]")
_ENV_FILE_EVENTS = frozenset({"SessionStart", "Setup", "CwdChanged", "FileChanged"})


@dataclass(frozen=True, slots=True)
class Skipped:
    """A configured hook that did not run, and why (for `--explain` and audits)."""

    scope: str
    file: str
    hook_type: str
    why: str


class Plan(msgspec.Struct, frozen=True, gc=False):
    """The hooks that run for one event, in configuration order, and those that do not.

    A msgspec Struct rather than a frozen dataclass: one is built per event, and a
    Struct is built several times faster.

    Untracked by the garbage collector (``gc=False``): one is made per event, and it
    can never be part of a reference cycle (it holds values and decoded JSON only).
    """

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


@dataclass(frozen=True, slots=True)
class _Prepared:
    """An entry that passed lockdown, matcher and type checks for one (event, query)."""

    entry: Entry
    identity: HookIdentity
    dedup: tuple[str, ...] | None
    rule: match.Rule | None
    timeout: float
    env: Mapping[str, str]
    hook_id: str
    env_file: bool  # it gets a CLAUDE_ENV_FILE (a bash command hook on an env-file event)


@dataclass(frozen=True, slots=True)
class _Prefiltered:
    """The part of planning that depends only on (event, query): memoised per Effective."""

    prepared: tuple[_Prepared, ...]
    skipped: tuple[Skipped, ...]
    # What `_choose` returns whatever the payload (no `if` rule, no skill `once`
    # hook): computed once here; None when the payload must be read.
    static: tuple[_Prepared, ...] | None
    nothing: Plan  # the plan when no hook passed the prefilter (shared: it is immutable)


def _prefilter(
    event: str, query: str | None, eff: Effective, profile: Profile, dialect: match.Dialect
) -> _Prefiltered:
    kept: list[_Prepared] = []
    skipped: list[Skipped] = []
    if_ok = match.if_allowed_on(event, profile)
    for entry in eff.entries[event]:
        h = entry.hook
        why: str | None = None
        if (eff.disable_all or eff.allow_managed_only) and entry.scope != "managed":
            why = "disableAllHooks" if eff.disable_all else "allowManagedHooksOnly"
        elif not match.matcher_matches(
            event, query, entry.matcher, profile=profile, dialect=dialect
        ):
            why = "matcher"
        elif not _type_allowed(event, h.type, profile):
            why = f"{h.type} hooks do not run on {event}"
        elif h.if_ is not None and not if_ok:
            why = f"'if' is not allowed on {event}"
        if why is not None:
            skipped.append(Skipped(entry.scope, entry.file, h.type, why))
            continue
        rule = match.parse_rule(h.if_, profile=profile) if h.if_ is not None else None
        env = dict(entry.group_env)
        if entry.plugin_root:
            env["CLAUDE_PLUGIN_ROOT"] = entry.plugin_root
            if entry.plugin_data:
                env["CLAUDE_PLUGIN_DATA"] = entry.plugin_data
        timeout = default_timeout(event, h, profile)
        identity = identity_of(entry)
        env_file = (
            event in _ENV_FILE_EVENTS and isinstance(h, CommandHook) and h.shell in (None, "bash")
        )
        kept.append(
            _Prepared(
                entry, identity, _dedup_key(entry), rule, timeout, env, identity.key(), env_file
            )
        )
    prepared = tuple(kept)
    static = None
    if not any(p.rule is not None or _once_applies(p) for p in prepared):
        static = _choose(prepared, {}, (), home="", profile=profile)[0]
    return _Prefiltered(prepared, tuple(skipped), static, Plan((), tuple(skipped)))


def _once_applies(p: _Prepared) -> bool:
    """``once`` is honoured only on skill hooks (spec §4.2)."""
    return bool(p.entry.hook.once) and p.entry.scope == "skill"


def _choose(
    prepared: tuple[_Prepared, ...],
    payload: Mapping[str, Any],
    once_done: Collection[tuple[str, str]],
    *,
    home: str,
    profile: Profile,
) -> tuple[tuple[_Prepared, ...], tuple[Skipped, ...]]:
    """Apply ``once``, `if` and dedup (per root, last wins) to prepared hooks, in order."""
    cwd_value = payload.get("cwd")
    cwd = cwd_value if isinstance(cwd_value, str) else ""
    session_value = payload.get("session_id")
    session = session_value if isinstance(session_value, str) else ""
    skipped: tuple[Skipped, ...] = ()
    kept: dict[object, _Prepared] = {}
    for p in prepared:
        if once_done and _once_applies(p) and (session, p.hook_id) in once_done:
            skipped += (Skipped(p.entry.scope, p.entry.file, p.entry.hook.type, "once"),)
            continue
        if p.rule is not None:
            tool_name = payload.get("tool_name")
            tool_input = payload.get("tool_input")
            if not isinstance(tool_name, str) or not match.if_matches(
                p.rule,
                tool_name,
                tool_input if isinstance(tool_input, Mapping) else {},
                cwd=cwd,
                home=home,
                source_root=p.entry.base_dir,
                profile=profile,
            ):
                skipped += (Skipped(p.entry.scope, p.entry.file, p.entry.hook.type, "if"),)
                continue
        if p.dedup is None:
            kept[p.entry.order] = p
        else:
            kept.pop(p.dedup, None)  # last wins, at its own position
            kept[p.dedup] = p
    chosen = sorted(kept.values(), key=lambda p: p.entry.order) if len(kept) > 1 else kept.values()
    return tuple(chosen), skipped


_EMPTY = Plan(())
_CACHE_LIMIT = 4096


def _usable_dir(path: str | None) -> str | None:
    """`path` when it is an absolute path of at most 4096 characters with no control
    character (what an emitter recorded is not trusted further), else None.

    >>> _usable_dir("/srv/app"), _usable_dir("rel"), _usable_dir("/a\nb")
    ('/srv/app', None, None)
    """
    if not path or len(path) > 4096 or not path.startswith("/"):
        return None
    if any(ord(c) < 32 or ord(c) == 127 for c in path):
        return None
    return path


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
    once_done: Collection[tuple[str, str]] = (),
    project_dir: str | None = None,
) -> Plan:
    """The hooks that run for one event, in configuration order.

    ``CLAUDE_PROJECT_DIR`` for command hooks is the settings' project (`eff.project_dir`,
    given by the caller), else `project_dir` (the one the agent gave its hook, recorded on
    the event) when it is a plain absolute path, else the input's `cwd`.

    `once_done` holds (session_id, hook_id) of skill hooks with ``once: true`` that
    already ran successfully in that session: they are removed (spec §4.2; ``once``
    is honoured only in skill frontmatter and ignored elsewhere, as in Claude Code).

    `payload` is read, never copied or changed: invocations share it.
    `sessionend_budget_ms` is ``CLAUDE_CODE_SESSIONEND_HOOKS_TIMEOUT_MS`` when set.
    """
    if not trusted or not eff.has_hooks(event):
        return _EMPTY
    query = match_query(event, payload)
    key = (event, query, profile, dialect)
    cached: _Prefiltered | None = eff.plan_cache.get(key)  # type: ignore[assignment]
    if cached is None:
        cached = _prefilter(event, query, eff, profile, dialect)
        if len(eff.plan_cache) < _CACHE_LIMIT:
            eff.plan_cache[key] = cached
    if not cached.prepared:
        return cached.nothing
    chosen = cached.static
    skipped = cached.skipped
    if chosen is None:
        chosen, skipped_now = _choose(
            cached.prepared, payload, once_done, home=home, profile=profile
        )
        skipped += skipped_now
    cwd_value = payload.get("cwd")
    cwd = cwd_value if isinstance(cwd_value, str) else ""
    budget = _sessionend_budget(eff, sessionend_budget_ms) if event == "SessionEnd" else None
    project_dir = eff.project_dir or _usable_dir(project_dir) or cwd
    invocations = []
    for index, p in enumerate(chosen):
        entry = p.entry
        timeout = p.timeout if budget is None else min(p.timeout, budget)
        env = {**p.env, "CLAUDE_PROJECT_DIR": project_dir}
        if p.env_file:
            session_id = payload.get("session_id")
            env["CLAUDE_ENV_FILE"] = _env_file(
                home, session_id if isinstance(session_id, str) else "", event, index
            )
        invocations.append(
            Invocation(
                index,
                event,
                entry.hook,
                p.identity,
                entry.scope,
                entry.matcher,
                timeout,
                payload,  # type: ignore[arg-type]
                input_json,
                cwd,
                env,
                entry.plugin_root,
                entry.plugin_data,
                eff.allowed_http_urls,
                eff.http_env_allowlist,
                p.hook_id,
            )
        )
    return Plan(tuple(invocations), skipped)


def _sessionend_budget(eff: Effective, override_ms: float | None) -> float:
    """SessionEnd's shared budget: 1.5 s, raised to the largest settings-file timeout (≤ 60 s)."""
    if override_ms is not None:
        return max(override_ms, 0.0) / 1000.0
    budget = 1.5
    if eff.sessionend_max_timeout is not None:
        budget = max(budget, min(eff.sessionend_max_timeout, 60.0))
    return budget
