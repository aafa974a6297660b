"""Settings: the `hooks` block of Claude Code settings files, its sources and merging.

Rules of this file:
- pydantic only here, for operator input; the engine receives frozen models.
- Every problem names the file and the JSON path: ``settings.json: hooks.PreToolUse[0].matcher: …``.
- Claude Code skips a malformed hook entry with a warning (spec §4.1). A security
  tool should not silently drop a gate, so loading is **strict** by default: a
  malformed entry is a SettingsError. ``strict=False`` reproduces Claude Code.
- A hook `type` nobody implements is kept as `UnknownHook` (with a warning) so
  that the `enforcing` posture can deny on it, as agent-core does (spec §7).

Example:
    >>> s = parse_settings({"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "true"}]}]}}, "s.json")
    >>> s.hooks["Stop"][0].hooks[0].command
    'true'
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import pydantic
from pydantic import BaseModel, ConfigDict, Field

from engine.errors import SettingsError
from engine.events import is_known
from engine.match import regex_error
from engine.records import Posture
from engine.userfiles import NotRegular, TooLarge, read_regular

__all__ = [
    "MAX_SETTINGS_BYTES",
    "SCOPES",
    "AgentHook",
    "CommandHook",
    "Group",
    "Hook",
    "HttpHook",
    "McpToolHook",
    "PromptHook",
    "PythonHook",
    "SettingsFile",
    "UnknownHook",
    "load_file",
    "parse_settings",
]

SCOPES = ("managed", "user", "project", "local", "flag", "plugin", "skill")
Scope = Literal["managed", "user", "project", "local", "flag", "plugin", "skill"]

_frozen = ConfigDict(frozen=True, extra="ignore", populate_by_name=True, strict=True)


class _Common(BaseModel):
    model_config = _frozen
    if_: str | None = Field(default=None, alias="if")
    timeout: Annotated[float, Field(gt=0, le=86400)] | None = None
    statusMessage: str | None = None
    once: bool = False


class CommandHook(_Common):
    type: Literal["command"]
    command: Annotated[str, Field(min_length=1)]
    args: list[str] | None = None
    shell: Literal["bash", "powershell"] | None = None
    async_: bool = Field(default=False, alias="async")
    asyncRewake: bool = False


class HttpHook(_Common):
    type: Literal["http"]
    url: Annotated[str, Field(min_length=1)]
    headers: dict[str, str] = Field(default_factory=dict)
    allowedEnvVars: list[str] | None = None


class PromptHook(_Common):
    type: Literal["prompt"]
    prompt: Annotated[str, Field(min_length=1)]
    model: str | None = None
    continueOnBlock: bool = False


class AgentHook(_Common):
    type: Literal["agent"]
    prompt: Annotated[str, Field(min_length=1)]
    model: str | None = None


class McpToolHook(_Common):
    type: Literal["mcp_tool"]
    server: Annotated[str, Field(min_length=1)]
    tool: Annotated[str, Field(min_length=1)]
    input: dict[str, Any] | None = None


class PythonHook(_Common):
    """hookaudit's extension: an in-process callable ``package.module:function``."""

    type: Literal["python"]
    callable: Annotated[str, Field(pattern=r"^(?:[A-Za-z_][\w.]*|[^:\x00]+\.py):[A-Za-z_][\w.]*$")]


class UnknownHook(_Common):
    """A hook whose `type` no executor implements (kept so `enforcing` can deny)."""

    type: str


KnownHook = Annotated[
    CommandHook | HttpHook | PromptHook | AgentHook | McpToolHook | PythonHook,
    Field(discriminator="type"),
]
Hook = CommandHook | HttpHook | PromptHook | AgentHook | McpToolHook | PythonHook | UnknownHook
_KNOWN_TYPES = frozenset({"command", "http", "prompt", "agent", "mcp_tool", "python"})
_known_adapter: pydantic.TypeAdapter[Any] = pydantic.TypeAdapter(KnownHook)


class Group(BaseModel):
    """One matcher group: ``{"matcher": "Bash", "hooks": [...]}``."""

    model_config = _frozen
    matcher: str | None = None
    hooks: tuple[Hook, ...] = ()
    env: dict[str, str] = Field(default_factory=dict)


class SettingsFile(BaseModel):
    """The hook-related keys of one settings file (everything else is ignored)."""

    model_config = _frozen
    hooks: dict[str, tuple[Group, ...]] = Field(default_factory=dict)
    disableAllHooks: bool | None = None
    allowManagedHooksOnly: bool | None = None
    allowedHttpHookUrls: list[str] | None = None
    httpHookAllowedEnvVars: list[str] | None = None
    enabledPlugins: dict[str, bool] | None = None
    hookauditPosture: dict[str, Posture] | None = None
    description: str | None = None


def _loc(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


def _first_error(exc: pydantic.ValidationError, prefix: str) -> tuple[str, str]:
    err = exc.errors(include_url=False)[0]
    loc = tuple(err["loc"])
    if loc and isinstance(loc[0], str) and loc[0] in _KNOWN_TYPES:
        loc = loc[1:]  # the discriminated union's tag, not a JSON key
    path = prefix + ("." + _loc(loc) if loc else "")
    return path, err["msg"]


def _parse_hook(
    raw: object, file: str, path: str, warnings: list[str], strict: bool
) -> Hook | None:
    if not isinstance(raw, dict):
        _bad(file, path, "expected an object", warnings, strict)
        return None
    kind = raw.get("type")
    if not isinstance(kind, str) or not kind:
        _bad(file, path + ".type", "missing or not a string", warnings, strict)
        return None
    if kind not in _KNOWN_TYPES:
        warnings.append(f"{file}: {path}.type: unknown hook type {kind!r}")
        try:
            return UnknownHook.model_validate(raw)
        except pydantic.ValidationError as exc:
            where, why = _first_error(exc, path)
            _bad(file, where, why, warnings, strict)
            return None
    try:
        hook: Hook = _known_adapter.validate_python(raw)
    except pydantic.ValidationError as exc:
        where, why = _first_error(exc, path)
        _bad(file, where, why, warnings, strict)
        return None
    if isinstance(hook, PythonHook):
        hook = _anchor_python_file(hook, file)
    return hook


def _anchor_python_file(hook: PythonHook, file: str) -> PythonHook:
    """A ``file.py:function`` callable is relative to the settings file's directory."""
    module, _, attr = hook.callable.rpartition(":")
    if not module.endswith(".py") or os.path.isabs(module) or not file:
        return hook
    base = os.path.dirname(os.path.abspath(file))
    return hook.model_copy(update={"callable": f"{os.path.join(base, module)}:{attr}"})


def _bad(file: str, path: str, why: str, warnings: list[str], strict: bool) -> None:
    if strict:
        raise SettingsError(file, path, why)
    warnings.append(f"{file}: {path}: {why} (entry skipped)")
    return None


def _parse_group(
    raw: object, file: str, path: str, warnings: list[str], strict: bool, keep_bad_regex: bool
) -> Group | None:
    if not isinstance(raw, dict):
        _bad(file, path, "expected an object with 'hooks'", warnings, strict)
        return None
    matcher = raw.get("matcher")
    if matcher is not None and not isinstance(matcher, str):
        _bad(file, path + ".matcher", "expected a string", warnings, strict)
        return None
    if matcher and matcher != "*" and not _SIMPLE_MATCHER.fullmatch(matcher):
        why = regex_error(matcher)
        if why is not None:
            message = f"invalid regex {matcher!r} ({why}); the group would never match"
            if strict and not keep_bad_regex:
                raise SettingsError(file, path + ".matcher", message)
            warnings.append(f"{file}: {path}.matcher: {message}")
    hooks_raw = raw.get("hooks")
    if not isinstance(hooks_raw, list):
        _bad(file, path + ".hooks", "expected a list of hooks", warnings, strict)
        return None
    env = raw.get("env") or {}
    if not isinstance(env, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in env.items()
    ):
        _bad(file, path + ".env", "expected an object of strings", warnings, strict)
        return None
    hooks: list[Hook] = []
    for i, h in enumerate(hooks_raw):
        parsed = _parse_hook(h, file, f"{path}.hooks[{i}]", warnings, strict)
        if parsed is not None:
            hooks.append(parsed)
    return Group(matcher=matcher, hooks=tuple(hooks), env=env)


def parse_settings(
    data: object,
    file: str,
    *,
    strict: bool = True,
    warnings: list[str] | None = None,
    skip_unknown_events: bool = False,
    keep_bad_regex: bool = False,
) -> SettingsFile:
    """Validate one settings document (already JSON-decoded).

    ``keep_bad_regex``: a matcher that is not a valid regex is a warning and its group never
    matches (what Claude Code does) even when ``strict``; otherwise strict refuses the file.

    >>> parse_settings({"disableAllHooks": True}, "u.json").disableAllHooks
    True
    """
    warns = warnings if warnings is not None else []
    if not isinstance(data, dict):
        raise SettingsError(file, "", "expected a JSON object at the top level")
    hooks_raw = data.get("hooks", {})
    if hooks_raw is None:
        hooks_raw = {}
    if not isinstance(hooks_raw, dict):
        raise SettingsError(file, "hooks", "expected an object mapping event names to lists")
    hooks: dict[str, tuple[Group, ...]] = {}
    for event, groups_raw in hooks_raw.items():
        if not is_known(event):
            if strict and not skip_unknown_events:
                raise SettingsError(file, f"hooks.{event}", "unknown hook event")
            warns.append(f"{file}: hooks.{event}: unknown hook event (skipped)")
            continue
        if not isinstance(groups_raw, list):
            _bad(file, f"hooks.{event}", "expected a list of matcher groups", warns, strict)
            continue
        groups = []
        for gi, g in enumerate(groups_raw):
            parsed = _parse_group(g, file, f"hooks.{event}[{gi}]", warns, strict, keep_bad_regex)
            if parsed is not None:
                groups.append(parsed)
        hooks[event] = tuple(groups)
    rest = {k: v for k, v in data.items() if k != "hooks" and k in SettingsFile.model_fields}
    try:
        return SettingsFile.model_validate({**rest, "hooks": hooks})
    except pydantic.ValidationError as exc:
        where, why = _first_error(exc, "")
        raise SettingsError(file, where.lstrip("."), why) from exc


MAX_SETTINGS_BYTES = 16 * 1024 * 1024  # a settings file above this is refused
_SIMPLE_MATCHER = re.compile(r"[A-Za-z0-9_\-, |]+")
_PLUGIN_VARS = re.compile(r"\$\{CLAUDE_PLUGIN_(ROOT|DATA)\}")


def load_file(
    path: str | Path,
    *,
    strict: bool = True,
    warnings: list[str] | None = None,
    skip_unknown_events: bool = False,
    keep_bad_regex: bool = False,
) -> SettingsFile:
    """Read and validate one settings (or plugin hooks.json) file.

    Raises SettingsError naming the file for unreadable files and malformed JSON
    (with its line and column).
    """
    p = Path(path)
    try:
        text = read_regular(p, MAX_SETTINGS_BYTES).decode("utf-8")
    except TooLarge as exc:
        raise SettingsError(str(p), "", "file larger than 16 MiB") from exc
    except NotRegular as exc:  # a FIFO would hang the hook, /dev/zero would fill memory
        raise SettingsError(str(p), "", f"cannot read: {exc.strerror}") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise SettingsError(str(p), "", f"cannot read: {exc}") from exc
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SettingsError(
            str(p), f"line {exc.lineno} column {exc.colno}", f"invalid JSON: {exc.msg}"
        ) from exc
    except RecursionError as exc:  # "cannot read": refused even when lenient, never ignored
        raise SettingsError(
            str(p), "", "cannot read: JSON nested deeper than this parser goes (~1,000 levels)"
        ) from exc
    return parse_settings(
        data,
        str(p),
        strict=strict,
        warnings=warnings,
        skip_unknown_events=skip_unknown_events,
        keep_bad_regex=keep_bad_regex,
    )


def expand_plugin_vars(text: str, root: str | None, data: str | None) -> str:
    """Replace ``${CLAUDE_PLUGIN_ROOT}``/``${CLAUDE_PLUGIN_DATA}``; KeyError when not a plugin.

    >>> expand_plugin_vars("${CLAUDE_PLUGIN_ROOT}/x.sh", "/plug", None)
    '/plug/x.sh'
    """

    def sub(m: re.Match[str]) -> str:
        value = root if m.group(1) == "ROOT" else data
        if value is None:
            raise KeyError(f"CLAUDE_PLUGIN_{m.group(1)}")
        return value

    return _PLUGIN_VARS.sub(sub, text)


def default_user_dir() -> Path:
    """``~/.claude`` (or ``$CLAUDE_CONFIG_DIR``)."""
    env = os.environ.get("CLAUDE_CONFIG_DIR")
    return Path(env) if env else Path.home() / ".claude"
