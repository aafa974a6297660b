"""The docs' settings reference, generated: every key of a settings file that hookaudit
reads (from the models that parse them, `engine.settings`) and every hook event (from the
catalogue, `engine.events`). A key the models gain without a line here fails the reference
test, so the page cannot fall behind the parser.
"""

from __future__ import annotations

from typing import Any

__all__ = ["KEYS", "settings_page"]

#: What each key means, by (model, key as written in JSON).
KEYS: dict[tuple[str, str], str] = {
    ("SettingsFile", "hooks"): "event name → list of matcher groups",
    (
        "SettingsFile",
        "disableAllHooks",
    ): "no hook runs (managed > flag > local > project > user decides)",
    ("SettingsFile", "allowManagedHooksOnly"): "in managed settings: only managed hooks run",
    (
        "SettingsFile",
        "allowedHttpHookUrls",
    ): "URL patterns http hooks may POST to (a managed list is a ceiling)",
    ("SettingsFile", "httpHookAllowedEnvVars"): "variables http hook headers may interpolate",
    ("SettingsFile", "enabledPlugins"): "plugin name → enabled (plugins' hooks run when enabled)",
    ("SettingsFile", "hookauditPosture"): "hookaudit: event (or `*`) → `compat` or `enforcing`",
    ("SettingsFile", "description"): "free text, shown nowhere (a policy's own note)",
    (
        "Group",
        "matcher",
    ): "which calls the group applies to: a tool name, names joined by `|`, a regex, `*` or absent (all)",
    ("Group", "hooks"): "the hooks that run, in order, when the matcher matches",
    ("Group", "env"): "variables added to the group's command hooks",
    (
        "_Common",
        "if",
    ): "a permission rule (`Bash(git push *)`, `Edit(src/**)`) the call must match too",
    ("_Common", "timeout"): "seconds (0 < t ≤ 86400); default per event (60 s for most)",
    ("_Common", "statusMessage"): "the spinner text Claude Code shows while the hook runs",
    ("_Common", "once"): "in a skill's hooks only: removed for the session after one success",
    ("CommandHook", "type"): "`command`",
    ("CommandHook", "command"): "run by `/bin/sh -c` (or exec form with `args`)",
    ("CommandHook", "args"): "exec form: argv after `command`, no shell",
    ("CommandHook", "shell"): "`bash` (default) or `powershell` (`pwsh`)",
    ("CommandHook", "async"): "run in the background; the call does not wait",
    ("CommandHook", "asyncRewake"): "background, and a blocking answer wakes the model",
    ("HttpHook", "type"): "`http`",
    ("HttpHook", "url"): "where the event JSON is POSTed (allowlist and SSRF rules apply)",
    ("HttpHook", "headers"): "request headers; `$VAR` from `allowedEnvVars` only",
    ("HttpHook", "allowedEnvVars"): "variables the headers may interpolate",
    ("PromptHook", "type"): "`prompt`",
    ("PromptHook", "prompt"): "the question to a model (`$ARGUMENTS`: the event JSON)",
    ("PromptHook", "model"): "the model to ask (default: the provider's fast model)",
    ("PromptHook", "continueOnBlock"): "a block is fed back to the model instead of stopping",
    ("AgentHook", "type"): "`agent`",
    ("AgentHook", "prompt"): "the task of a model with read-only tools over the project",
    ("AgentHook", "model"): "the model to ask",
    ("McpToolHook", "type"): "`mcp_tool`",
    ("McpToolHook", "server"): "an MCP server of `.mcp.json` (stdio)",
    ("McpToolHook", "tool"): "the tool to call",
    ("McpToolHook", "input"): "its arguments; `${tool_input.file_path}` filled from the event",
    ("PythonHook", "type"): "`python` (hookaudit's own)",
    (
        "PythonHook",
        "callable",
    ): "`package.module:function` or `file.py:function` (relative to the settings file)",
}

_EXIT2 = {
    "block": "blocks; stderr to the model",
    "feedback": "stderr to the model; nothing blocked",
    "user": "stderr to the user only",
    "ignored": "ignored",
    "fail": "the hook fails",
}


def _type(annotation: Any) -> str:
    """The JSON type of a model field's annotation, as a reader of the file sees it."""
    import types
    import typing

    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Annotated:
        return _type(args[0])
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type(a) for a in args if a is not type(None))
    if origin is typing.Literal:
        return " or ".join(f"`{a}`" if isinstance(a, str) else str(a) for a in args)
    if origin in (list, tuple):
        return "array"
    if origin is dict or annotation is dict:
        return "object"
    names = {str: "string", bool: "boolean", float: "number", int: "integer"}
    return names.get(annotation, "any")


def _model_rows(name: str, model: Any, *, common: bool = True) -> list[str]:
    rows = []
    for field, info in model.model_fields.items():
        key = info.alias or field
        owner = (
            "_Common" if common and field in ("if_", "timeout", "statusMessage", "once") else name
        )
        if owner == "_Common" and name != "_Common":
            continue
        doc = KEYS.get((owner, key))
        if doc is None:
            raise KeyError(f"{name}.{key}: no line in hookaudit.reference_settings.KEYS")
        need = "required" if info.is_required() else ""
        cells = (f"`{key}`", _type(info.annotation), need, doc)
        rows.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |\n")
    return rows


def settings_page(generated: str) -> str:
    from engine import settings as st
    from engine.events import CATALOG

    head = "| key | type | | meaning |\n|---|---|---|---|\n"
    out = [
        generated,
        "# Settings\n\nThe keys of a Claude Code settings file that hookaudit reads (every other "
        "key is left alone): the policy is written as Claude Code settings, whichever agent it "
        "governs. [Settings and sources](../concepts/settings.md) says how files combine; "
        "`hookaudit lint` finds entries that would never fire.\n\n## Top level\n\n",
        head,
        *_model_rows("SettingsFile", st.SettingsFile),
        "\n## A matcher group (`hooks.EVENT[i]`)\n\n",
        head,
        *_model_rows("Group", st.Group),
        "\n## Every hook (`hooks.EVENT[i].hooks[j]`)\n\n",
        head,
        *_model_rows("_Common", st._Common, common=False),
    ]
    for name in ("CommandHook", "HttpHook", "PromptHook", "AgentHook", "McpToolHook", "PythonHook"):
        model = getattr(st, name)
        out += [f"\n### `{KEYS[(name, 'type')].strip('`').split('`')[0]}`\n\n", head]
        out += _model_rows(name, model)
    out.append(
        "\n## Events\n\nEvery event a group may name: what its matcher matches, what exit 2 "
        "of a command hook does, and which hook types may run on it.\n\n"
        "| event | matcher matches | exit 2 | hook types | default timeout |\n|---|---|---|---|---|\n"
    )
    for spec in CATALOG.values():
        types = ", ".join(sorted(spec.hook_types))
        timeout = f"{spec.default_timeout:g} s" if spec.default_timeout else "60 s"
        match = f"`{spec.matcher_field}`" if spec.matcher_field else "(no matcher)"
        out.append(f"| `{spec.name}` | {match} | {_EXIT2[spec.exit2]} | {types} | {timeout} |\n")
    return "".join(out)
