"""Lint settings files: every entry that would silently remove a gate, with its JSON path.

Rules of this file:
- `lint(data, file)` is a pure function of the decoded JSON (plus a `Probe` for the two
  questions only the filesystem answers: does this python hook's file exist, and does it
  define the function). It never raises on any JSON value: each problem is a `Finding`.
- A finding is something that makes a hook that looks present never run, or never match:
  a typo in a key (`"hook":`, `"comand"`), an unknown event or hook type, an `if` rule
  that cannot match anything, an invalid matcher regex, a malformed entry Claude Code
  would skip, a python hook whose file or function is missing; or a fail-closed
  `hookaudit emit` that Claude Code would let fail open (no `|| exit 2`, a hook timeout
  shorter than emit's wait). Style is not linted.
- Python hooks' files and modules are checked by `engine.lint_python`.
- `lint_text` adds the JSON decoding; `lint_path` the reading. The CLI (`hookaudit lint`,
  and `--strict` on eval, worker and replay) is in `hookaudit/lint_cmd.py`.

Example:
    >>> [f.kind for f in lint({"hook": {"PreToolUse": []}}, "s.json")]
    ['unknown-key']
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterator, Mapping
from pathlib import Path

import msgspec

from engine.errors import SettingsError
from engine.events import CATALOG
from engine.lint_python import FILESYSTEM, Add, Probe, lint_callable
from engine.match import parse_rule
from engine.settings import (
    MAX_SETTINGS_BYTES,
    AgentHook,
    CommandHook,
    HttpHook,
    McpToolHook,
    PromptHook,
    PythonHook,
    SettingsFile,
    parse_settings,
)

__all__ = ["Finding", "lint", "lint_path", "lint_specs", "lint_text", "refusal"]


_ONE_LINE = re.compile(r"[\x00-\x1f\x7f\u2028\u2029]")


class Finding(msgspec.Struct, frozen=True, kw_only=True):
    """One problem: where (file, JSON path), what kind, and why, in one line."""

    file: str
    path: str
    kind: str
    message: str

    def line(self) -> str:
        """``settings.json: hooks.PreToolUse[0].hooks[0].type: … [unknown-type]``."""
        where = f"{self.file}: {self.path}" if self.path else self.file
        return _ONE_LINE.sub(
            lambda m: repr(m.group())[1:-1], f"{where}: {self.message} [{self.kind}]"
        )


_HOOK_KEYS = {
    "command": CommandHook,
    "http": HttpHook,
    "prompt": PromptHook,
    "agent": AgentHook,
    "mcp_tool": McpToolHook,
    "python": PythonHook,
}
_TOP_HOOK_KEYS = tuple(f for f in SettingsFile.model_fields if f != "description")
# Claude Code settings keys that are not about hooks (not linted, never "typos").
_OTHER_TOP_KEYS = frozenset(
    {
        "$schema", "apiKeyHelper", "cleanupPeriodDays", "env", "includeCoAuthoredBy",
        "permissions", "model", "outputStyle", "statusLine", "forceLoginMethod",
        "forceLoginOrgUUID", "enableAllProjectMcpServers", "enabledMcpjsonServers",
        "disabledMcpjsonServers", "awsAuthRefresh", "awsCredentialExport", "theme",
        "spinnerTipsEnabled", "companyAnnouncements", "extraKnownMarketplaces",
        "enabledPlugins", "description", "autoUpdates", "preferredNotifChannel",
        "verbose", "alwaysThinkingEnabled", "sandbox", "subagentStatusLine",
    }
)  # fmt: skip
_GROUP_KEYS = ("matcher", "hooks", "env")
_TOOL_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]*|mcp__[A-Za-z0-9_-]+(?:__[A-Za-z0-9_*-]+)?")


def _keys_of(model: type[msgspec.Struct] | type[object]) -> frozenset[str]:
    fields = getattr(model, "model_fields", {})
    return frozenset((info.alias or name) for name, info in fields.items())


_HOOK_FIELDS = {kind: _keys_of(m) for kind, m in _HOOK_KEYS.items()}


def _near(word: str, options: Iterator[str] | tuple[str, ...] | frozenset[str]) -> str | None:
    found = difflib.get_close_matches(word, list(options), n=1, cutoff=0.75)
    if found:
        return found[0]
    lowered = {o.lower(): o for o in options}
    return lowered.get(word.strip().lower())


def _did_you_mean(word: str, options: Iterator[str] | tuple[str, ...] | frozenset[str]) -> str:
    near = _near(word, options)
    return f" (did you mean {near!r}?)" if near else ""


def lint(data: object, file: str, *, probe: Probe = FILESYSTEM) -> list[Finding]:
    """Every finding in one decoded settings document, in document order.

    Example:
        >>> [f.line() for f in lint({"hooks": {"PreToolUse": [{"hooks": [
        ...     {"type": "comand", "command": "x"}]}]}}, "s.json")]
        ["s.json: hooks.PreToolUse[0].hooks[0].type: unknown hook type 'comand' (did you mean 'command'?): the hook never runs [unknown-type]"]
    """
    out: list[Finding] = []

    def add(path: str, kind: str, message: str) -> None:
        out.append(Finding(file=file, path=path, kind=kind, message=message))

    if not isinstance(data, dict):
        add("", "invalid", f"expected a JSON object at the top level, not {_json_type(data)}")
        return out
    for key in data:
        if not isinstance(key, str):
            continue
        if key in _TOP_HOOK_KEYS or key in _OTHER_TOP_KEYS:
            continue
        near = _near(key, _TOP_HOOK_KEYS)
        if near is not None:
            add(key, "unknown-key", f"unknown key (did you mean {near!r}?): it is ignored")
    hooks = data.get("hooks")
    if hooks is not None and not isinstance(hooks, dict):
        add("hooks", "invalid", f"expected an object of events, not {_json_type(hooks)}")
    elif isinstance(hooks, dict):
        for event, groups in hooks.items():
            _lint_event(str(event), groups, file, probe, add)
    out += _parse_findings(data, file, {(f.path, f.kind) for f in out})
    return out


def _json_type(v: object) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}.get(
        type(v), "null" if v is None else "a number"
    )


def _lint_event(event: str, groups: object, file: str, probe: Probe, add: Add) -> None:
    path = f"hooks.{event}"
    if event not in CATALOG:
        hint = _did_you_mean(event, frozenset(CATALOG))
        add(path, "unknown-event", f"unknown hook event{hint}: its hooks never run")
        return
    if not isinstance(groups, list):
        return  # reported by the parser
    spec = CATALOG[event]
    for gi, group in enumerate(groups):
        gpath = f"{path}[{gi}]"
        if not isinstance(group, dict):
            continue
        for key in group:
            if isinstance(key, str) and key not in _GROUP_KEYS:
                hint = _did_you_mean(key, _GROUP_KEYS)
                where = " (`if` belongs on each hook)" if key == "if" else hint
                add(f"{gpath}.{key}", "unknown-key", f"unknown key{where}: it is ignored")
        hooks = group.get("hooks")
        if isinstance(hooks, list) and not hooks:
            add(f"{gpath}.hooks", "empty", "no hooks: the group does nothing")
        if not isinstance(hooks, list):
            continue
        for hi, hook in enumerate(hooks):
            if isinstance(hook, dict):
                _lint_hook(hook, f"{gpath}.hooks[{hi}]", spec.tool_event, event, file, probe, add)


def _lint_hook(
    hook: Mapping[object, object],
    path: str,
    tool_event: bool,
    event: str,
    file: str,
    probe: Probe,
    add: Add,
) -> None:
    kind = hook.get("type")
    if isinstance(kind, str) and kind and kind not in _HOOK_KEYS:
        hint = _did_you_mean(kind, tuple(_HOOK_KEYS))
        add(
            f"{path}.type", "unknown-type", f"unknown hook type {kind!r}{hint}: the hook never runs"
        )
    elif isinstance(kind, str) and kind in _HOOK_FIELDS:
        allowed = _HOOK_FIELDS[kind]
        for key in hook:
            if isinstance(key, str) and key not in allowed and key != "type":
                hint = _did_you_mean(key, allowed)
                add(
                    f"{path}.{key}",
                    "unknown-key",
                    f"unknown key for a {kind} hook{hint}: it is ignored",
                )
    rule = hook.get("if")
    if isinstance(rule, str):
        _lint_if(rule, f"{path}.if", tool_event, event, add)
    if kind == "python" and isinstance(hook.get("callable"), str):
        lint_callable(str(hook["callable"]), f"{path}.callable", file, probe, add)
    if kind == "command" and isinstance(hook.get("command"), str):
        _lint_fail_closed(str(hook["command"]), hook.get("timeout"), path, event, add)


# A command hook meant to fail closed: `hookaudit emit … --fail closed` (or the relay's
# `ingest/emit/fast.py` form). Two ways Claude Code lets the call run anyway: a hook that exits
# other than 2 (hookaudit not on Claude Code's PATH: 127), and a hook Claude Code stops at
# its timeout before emit's own --timeout answered.
_EMIT = re.compile(r"(?:^|[\s/;&|(])(?:hookaudit\s+emit|ingest/emit/fast\.py)(?=\s|$)")
_FAIL_CLOSED = re.compile(r"--fail(?:\s+|=)closed(?=[\s;|&)]|$)")
_EXIT_2_LAST = re.compile(r"\|\|\s*(?:exit\s+2|\{[^{}]*\bexit\s+2\s*;?\s*\})\s*$")
_EMIT_TIMEOUT = re.compile(r"--timeout(?:\s+|=)(\d+(?:\.\d+)?)(?=[\s;|&)]|$)")
EMIT_WAIT_DEFAULT = 10.0  # `hookaudit emit --timeout`'s default (a test keeps them equal)
# emit's --timeout counts from its process's start (its interpreter's start-up included,
# ingest.emit.fast.process_age); this is the slack for writing the answer and exiting, and for
# the shell Claude Code starts it through
START_MARGIN = 2.0


def _lint_fail_closed(command: str, timeout: object, path: str, event: str, add: Add) -> None:
    if not (_EMIT.search(command) and _FAIL_CLOSED.search(command)):
        return
    if not _EXIT_2_LAST.search(command):
        add(
            f"{path}.command",
            "fails-open-on-start",
            "Claude Code blocks on exit 2 only: if hookaudit cannot start (not on the PATH "
            "Claude Code runs hooks with: exit 127) the call runs; end the command with "
            "`|| exit 2`",
        )
    m = _EMIT_TIMEOUT.search(command)
    wait = float(m[1]) if m else EMIT_WAIT_DEFAULT
    if isinstance(timeout, (int, float)) and not isinstance(timeout, bool):
        limit, where = float(timeout), f"{path}.timeout"
    else:
        spec = CATALOG.get(event)
        limit = spec.default_timeout if spec and spec.default_timeout else 600.0
        where = path
    if limit < wait + START_MARGIN:
        add(
            where,
            "timeout-fails-open",
            f"Claude Code stops this hook after {limit:g} s, before emit's --timeout of "
            f"{wait:g} s (counted from its start) can answer, and a stopped hook lets the call "
            f"run; make the hook's timeout at least {wait + 5:g}",
        )


def _lint_if(rule: str, path: str, tool_event: bool, event: str, add: Add) -> None:
    if not tool_event:
        add(path, "if-never-runs", f"`if` on {event} (not a tool event): the hook never runs")
        return
    text = rule.strip()
    opens, closes = _unescaped(text, "("), _unescaped(text, ")")
    if opens != closes or (opens and not text.endswith(")")):
        add(path, "bad-if", f"rule {rule!r}: unbalanced parentheses: it never matches")
        return
    parsed = parse_rule(text)
    if not _TOOL_NAME.fullmatch(parsed.tool):
        add(path, "bad-if", f"rule {rule!r}: {parsed.tool!r} is not a tool name: it never matches")
    elif parsed.tool == "WebFetch" and parsed.content not in (None, "*"):
        add(
            path,
            "if-never-runs",
            f"rule {rule!r}: Claude Code runs no hook whose `if` is a WebFetch rule with "
            "content (`domain:` included): the hook never runs; match WebFetch and check the "
            "URL in the hook",
        )


def _unescaped(text: str, ch: str) -> int:
    n, i = 0, 0
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        n += text[i] == ch
        i += 1
    return n


def _parse_findings(
    data: dict[object, object], file: str, seen: set[tuple[str, str]]
) -> list[Finding]:
    """What the settings parser skips or refuses (malformed entries, bad regexes)."""
    warnings: list[str] = []
    try:
        parse_settings(data, file, strict=False, warnings=warnings)
    except SettingsError as exc:
        warnings.append(str(exc))
    except (ValueError, TypeError, RecursionError) as exc:
        warnings.append(f"{file}: : {exc}")
    out: list[Finding] = []
    prefix = f"{file}: "
    for w in warnings:
        body = w[len(prefix) :] if w.startswith(prefix) else w
        path, _, message = body.partition(": ")
        if not message:
            path, message = "", body
        if "unknown hook type" in message or "unknown hook event" in message:
            continue  # reported above with a suggestion
        if any(p == path for p, _ in seen):
            continue
        out.append(
            Finding(
                file=file,
                path=path,
                kind="invalid",
                message=message.replace(" (entry skipped)", ": the entry is skipped"),
            )
        )
    return out


def lint_text(text: str, file: str, *, probe: Probe = FILESYSTEM) -> list[Finding]:
    """`lint` of a JSON text; invalid JSON is one finding with its line and column."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        return [
            Finding(
                file=file,
                path=f"line {exc.lineno} column {exc.colno}",
                kind="json",
                message=f"invalid JSON: {exc.msg}",
            )
        ]
    except RecursionError:
        return [Finding(file=file, path="", kind="json", message="JSON nested too deeply")]
    return lint(data, file, probe=probe)


def lint_path(path: str | Path, *, probe: Probe = FILESYSTEM) -> list[Finding]:
    """`lint` of a settings file (a plugin directory means its ``hooks/hooks.json``)."""
    p = Path(path)
    if p.is_dir():
        p = p / "hooks" / "hooks.json"
    text = probe.read_text(str(p))
    if text is None:
        return [Finding(file=str(p), path="", kind="unreadable", message=_why_unreadable(p, probe))]
    return lint_text(text, str(p), probe=probe)


def _why_unreadable(p: Path, probe: Probe) -> str:
    """Why the filesystem probe could not read `p`, in one line."""
    if probe is not FILESYSTEM:
        return "no such file, or unreadable"
    from engine.userfiles import TooLarge, read_regular

    try:
        read_regular(p, MAX_SETTINGS_BYTES).decode("utf-8")
    except TooLarge:
        return f"larger than {MAX_SETTINGS_BYTES >> 20} MiB (the engine refuses it too)"
    except UnicodeDecodeError as exc:
        return f"not UTF-8 ({exc.reason} at byte {exc.start})"
    except OSError as exc:
        return f"cannot read: {exc.strerror or exc}"
    return "no such file, or unreadable"


def lint_specs(specs: list[str] | tuple[str, ...], *, probe: Probe = FILESYSTEM) -> list[Finding]:
    """`lint_path` of each ``[SCOPE:]PATH`` settings argument, in order."""
    from engine.errors import SettingsError
    from engine.sources import parse_scoped

    out: list[Finding] = []
    for spec in specs:
        try:
            path = parse_scoped(spec)[1]
        except SettingsError as exc:  # a mistyped scope (`projct:`)
            out.append(Finding(file=spec, path="", kind="invalid", message=exc.why))
            continue
        out += lint_path(path, probe=probe)
    return out


def refusal(command: str, findings: list[Finding]) -> list[str]:
    """The lines `--strict` prints before refusing: each finding, then the verdict."""
    lines = [f"hookaudit {command}: {f.line()}" for f in findings]
    lines.append(
        f"hookaudit {command}: --strict: {len(findings)} lint finding(s) in the settings; "
        "refusing to start"
    )
    return lines
