"""Settings sources: discover them the way Claude Code does, load and merge them.

Rules of this file:
- The output is one frozen `Effective` configuration: hook entries in Claude
  Code's order, the policy keys after precedence, and a `settings_id` that hashes
  everything that can change a decision.
- Hooks merge, they never replace each other: settings arrays are concatenated
  user → project → local → flag → managed, then plugins (spec §4.3). Scalars
  (`disableAllHooks`) follow managed > flag > local > project > user.
- File reading happens in `load_sources`/`discover`; `merge` is pure.

Example:
    >>> from engine.settings import parse_settings
    >>> eff = merge([Source("project", "p.json", parse_settings({}, "p.json"), "/p")])
    >>> eff.has_hooks("Stop")
    False
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from engine.errors import SettingsError
from engine.http_policy import claude_http_policy, http_policy
from engine.settings import SCOPES, Hook, SettingsFile, UnknownHook, default_user_dir, load_file

__all__ = [
    "Effective",
    "Entry",
    "Source",
    "claude_http_policy",
    "discover",
    "http_policy",
    "load_sources",
    "managed_paths",
    "merge",
    "parse_scoped",
]

_HOOK_ORDER = ("user", "project", "local", "flag", "managed")
_SCALAR_ORDER = ("managed", "flag", "local", "project", "user")


@dataclass(frozen=True, slots=True)
class Source:
    """One loaded settings file and where it sits."""

    scope: str
    file: str
    settings: SettingsFile
    base_dir: str
    plugin_root: str | None = None
    plugin_data: str | None = None


@dataclass(frozen=True, slots=True)
class Entry:
    """One hook handler from one source, in merge order."""

    event: str
    scope: str
    file: str
    matcher: str | None
    hook: Hook
    group_env: Mapping[str, str]
    base_dir: str
    order: int
    plugin_root: str | None = None
    plugin_data: str | None = None


@dataclass(frozen=True, slots=True)
class Effective:
    """The merged configuration the planner works from."""

    entries: Mapping[str, tuple[Entry, ...]]
    settings_id: str
    managed_disable_all: bool = False
    disable_all: bool = False
    allow_managed_only: bool = False
    allowed_http_urls: tuple[str, ...] | None = None
    http_env_allowlist: tuple[str, ...] | None = None
    # What Claude Code would allow (every scope's lists, a union), kept only where a managed
    # ceiling narrowed it: an outcome then names the rule when the ceiling refused something.
    uncapped_http_urls: tuple[str, ...] | None = None
    uncapped_http_env: tuple[str, ...] | None = None
    posture: Mapping[str, str] = field(default_factory=dict)
    project_dir: str | None = None
    files: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    sessionend_max_timeout: float | None = None
    # The planner's memo of matcher results, keyed by (event, query, profile, dialect).
    # Derived data only: it never changes what a plan contains.
    plan_cache: dict[tuple[object, ...], object] = field(
        default_factory=dict, compare=False, repr=False, hash=False
    )

    def has_hooks(self, event: str) -> bool:
        """The fast existence check: may any hook run for this event?"""
        return event in self.entries and not self.managed_disable_all


def _settings_id(sources: Sequence[Source]) -> str:
    h = hashlib.sha256()
    for s in sources:
        doc = {
            "scope": s.scope,
            "plugin_root": s.plugin_root,
            "settings": s.settings.model_dump(mode="json", by_alias=True, exclude_none=True),
        }
        h.update(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode())
        h.update(b"\n")
    return h.hexdigest()[:16]


def merge(sources: Sequence[Source], *, project_dir: str | None = None) -> Effective:
    """Merge loaded sources into one Effective configuration (pure).

    >>> merge([]).entries
    {}
    """
    by_scope: dict[str, list[Source]] = {}
    for s in sources:
        by_scope.setdefault(s.scope, []).append(s)
    ordered = [s for scope in _HOOK_ORDER for s in by_scope.get(scope, [])]
    ordered += by_scope.get("plugin", [])
    ordered += by_scope.get("skill", [])
    entries: dict[str, list[Entry]] = {}
    order = 0
    sessionend_max: float | None = None
    for s in ordered:
        for event, groups in s.settings.hooks.items():
            for g in groups:
                for h in g.hooks:
                    entries.setdefault(event, []).append(
                        Entry(
                            event,
                            s.scope,
                            s.file,
                            g.matcher,
                            h,
                            g.env,
                            s.base_dir,
                            order,
                            s.plugin_root,
                            s.plugin_data,
                        )
                    )
                    order += 1
                    if (
                        event == "SessionEnd"
                        and s.scope not in ("plugin", "skill")
                        and h.timeout is not None
                    ):
                        sessionend_max = max(sessionend_max or 0.0, h.timeout)

    def scalar(scopes: Iterable[str]) -> bool | None:
        for scope in scopes:
            for s in reversed(by_scope.get(scope, [])):
                if s.settings.disableAllHooks is not None:
                    return s.settings.disableAllHooks
        return None

    managed = by_scope.get("managed", [])
    managed_disable = any(s.settings.disableAllHooks for s in managed)
    disable_all = bool(scalar(_SCALAR_ORDER))
    allow_managed_only = any(s.settings.allowManagedHooksOnly for s in managed)
    posture: dict[str, str] = {}
    for s in ordered:
        if s.settings.hookauditPosture:
            posture.update(s.settings.hookauditPosture)
    urls, env_allow = http_policy(ordered)
    all_urls, all_env = claude_http_policy(ordered)
    return Effective(
        entries={k: tuple(v) for k, v in entries.items()},
        settings_id=_settings_id(ordered),
        managed_disable_all=managed_disable,
        disable_all=disable_all,
        allow_managed_only=allow_managed_only,
        allowed_http_urls=tuple(urls) if urls is not None else None,
        http_env_allowlist=tuple(env_allow) if env_allow is not None else None,
        uncapped_http_urls=tuple(all_urls) if all_urls is not None and all_urls != urls else None,
        uncapped_http_env=tuple(all_env) if all_env is not None and all_env != env_allow else None,
        posture=posture,
        project_dir=project_dir,
        files=tuple(s.file for s in ordered),
        sessionend_max_timeout=sessionend_max,
    )


def parse_scoped(spec: str) -> tuple[str, str]:
    """Split ``[SCOPE:]PATH`` (default scope project).

    >>> parse_scoped("user:/h/.claude/settings.json")
    ('user', '/h/.claude/settings.json')
    >>> parse_scoped("policy.json")
    ('project', 'policy.json')

    A word before the colon that is not a scope is a typo, not part of a file name
    (`projct:x.json` raises SettingsError naming ``project``).
    """
    head, sep, tail = spec.partition(":")
    if sep and head in SCOPES:
        return head, tail
    if sep and re.fullmatch(r"[A-Za-z]{2,}", head):  # `projct:x.json`: a mistyped scope
        import difflib

        near = difflib.get_close_matches(head.lower(), SCOPES, n=1)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        raise SettingsError(
            spec,
            "",
            f"unknown scope {head!r}{hint}: one of {', '.join(SCOPES)} "
            f"(a file whose name has a colon: project:{spec})",
        )
    return "project", spec


def _plugin_paths(path: Path) -> tuple[Path, Path]:
    """(hooks.json, plugin root) for a plugin given as its root dir or its hooks.json."""
    if path.is_dir():
        return path / "hooks" / "hooks.json", path
    root = path.parent.parent if path.parent.name == "hooks" else path.parent
    return path, root


def _base_dir(scope: str, file: Path, project_dir: str | None) -> str:
    if scope == "user":
        return str(file.parent)
    if scope in ("project", "local") and file.parent.name == ".claude":
        return str(file.parent.parent)
    if scope in ("project", "local") and project_dir:
        return project_dir
    return str(file.parent)


# What Claude Code (2.1.332, measured by tests/conformance/claude_code) does with a settings
# file that is not JSON or whose hooks fail validation anywhere (a missing command, an
# unknown hook type, a group that is not an object, a bad timeout or matcher, `hooks` not an
# object): it ignores that whole file and keeps the others. Unknown event names are skipped.
CLAUDE_CODE_BROKEN_FILE = "Claude Code ignores every hook of this file and keeps the other files"
# A matcher that is not a valid regex: Claude Code keeps the file and runs its other groups.
CLAUDE_CODE_BAD_REGEX = "Claude Code keeps this file and runs its other groups"


def _load_checked(path: Path, strict: bool, warnings: list[str]) -> SettingsFile | None:
    """One file; None when lenient and Claude Code would ignore it."""
    try:
        sf = load_file(
            path,
            strict=True,
            warnings=warnings,
            skip_unknown_events=not strict,
            keep_bad_regex=not strict,  # Claude Code keeps the file; that group never matches
        )
        if not strict:
            for groups in sf.hooks.values():
                for g in groups:
                    for h in g.hooks:
                        if isinstance(h, UnknownHook):
                            raise SettingsError(str(path), "", f"unknown hook type {h.type!r}")
        return sf
    except SettingsError as exc:
        if exc.why.startswith("cannot read"):
            raise
        if strict:
            what = CLAUDE_CODE_BAD_REGEX if "invalid regex" in exc.why else CLAUDE_CODE_BROKEN_FILE
            raise SettingsError(
                exc.file, exc.path, f"{exc.why} ({what}; --lenient does so too)"
            ) from exc
        warnings.append(f"{exc} (file ignored: {CLAUDE_CODE_BROKEN_FILE})")
        return None


def load_sources(
    specs: Sequence[tuple[str, str]], *, strict: bool = True, project_dir: str | None = None
) -> Effective:
    """Load ``(scope, path)`` pairs and merge them.

    A plugin is given as its root directory or its ``hooks/hooks.json``;
    ``${CLAUDE_PLUGIN_ROOT}`` then expands to that root. A skill is given as a JSON
    file holding its frontmatter's ``hooks`` block (same shape as settings); the
    skill's directory is its root, and only there is ``once`` honoured.
    """
    warnings: list[str] = []
    sources: list[Source] = []
    for scope, raw_path in specs:
        if scope not in SCOPES:
            raise SettingsError(
                raw_path, "", f"unknown scope {scope!r} (one of {', '.join(SCOPES)})"
            )
        path = Path(raw_path).expanduser()
        if scope == "plugin":
            hooks_file, root = _plugin_paths(path)
            data_dir = default_user_dir() / "plugins" / "data" / root.name
            psf = _load_checked(hooks_file, strict, warnings)
            if psf is None:
                continue
            sf = psf
            sources.append(
                Source("plugin", str(hooks_file), sf, str(root), str(root.resolve()), str(data_dir))
            )
            continue
        checked = _load_checked(path, strict, warnings)
        if checked is None:
            continue
        sf = checked
        if scope == "skill":
            root = path.resolve().parent
            sources.append(Source("skill", str(path), sf, str(root), str(root), None))
            continue
        if scope != "managed" and sf.allowManagedHooksOnly:
            warnings.append(f"{path}: allowManagedHooksOnly is honoured in managed settings only")
        sources.append(Source(scope, str(path), sf, _base_dir(scope, path, project_dir)))
    eff = merge(sources, project_dir=project_dir)
    return _with_warnings(eff, warnings)


def _with_warnings(eff: Effective, warnings: list[str]) -> Effective:
    from dataclasses import replace

    return replace(eff, warnings=tuple(warnings)) if warnings else eff


def managed_paths() -> list[Path]:
    """Managed settings files on this machine (``HOOKAUDIT_MANAGED_SETTINGS`` overrides)."""
    override = os.environ.get("HOOKAUDIT_MANAGED_SETTINGS")
    if override is not None:
        return [Path(p) for p in override.split(os.pathsep) if p]
    base = Path("/etc/claude-code")
    out = [base / "managed-settings.json"]
    drop_in = base / "managed-settings.d"
    if drop_in.is_dir():
        out += sorted(drop_in.glob("*.json"))
    return out


def find_project_root(cwd: str, home: str | None = None) -> str | None:
    """The nearest ancestor of `cwd` holding ``.claude/settings*.json`` (not ``~/.claude``)."""
    home_path = Path(home) if home else Path.home()
    p = Path(cwd)
    for d in (p, *p.parents):
        if d == home_path:
            continue
        claude = d / ".claude"
        if (claude / "settings.json").is_file() or (claude / "settings.local.json").is_file():
            return str(d)
    return None


def discover(cwd: str, *, home: str | None = None) -> list[tuple[str, str]]:
    """The settings files Claude Code would read for a session in `cwd`.

    Managed, user (``~/.claude/settings.json``), then the project root found by
    walking up from `cwd` to the nearest ``.claude/settings*.json``: its
    ``settings.json`` (project) and ``settings.local.json`` (local). Files that do
    not exist are left out. Plugins are not discovered: pass them as ``plugin:PATH``.
    """
    out: list[tuple[str, str]] = [("managed", str(p)) for p in managed_paths() if p.is_file()]
    user_dir = Path(home) / ".claude" if home else default_user_dir()
    if (user_dir / "settings.json").is_file():
        out.append(("user", str(user_dir / "settings.json")))
    root = find_project_root(cwd, home)
    if root:
        for scope, name in (("project", "settings.json"), ("local", "settings.local.json")):
            f = Path(root) / ".claude" / name
            if f.is_file():
                out.append((scope, str(f)))
    return out
