"""The hook event catalog: every event hookaudit knows and how each behaves.

Rules of this file:
- Data only: one `EventSpec` per event, built once; lookups never do I/O.
- The table follows spec §1 (27 Claude Code events, 4 newer ones) and [003] for
  agent-core's 3 informational events. Profile differences are data, not branches
  spread through the engine.

`exit2` says what exit code 2 (or an equivalent block decision) does:
  - ``block``: the action is stopped (a tool call, a prompt, a compaction, a task,
    stopping itself for Stop/SubagentStop/TeammateIdle: the agent keeps working);
  - ``feedback``: the action already happened; stderr/reason is fed to Claude;
  - ``user``: stderr is shown to the user; nothing is stopped;
  - ``ignored``: the exit code has no effect;
  - ``fail``: any non-zero exit fails the action (WorktreeCreate).

Example:
    >>> spec("PreToolUse").matcher_field
    'tool_name'
    >>> spec("Stop").matcher_field is None
    True
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "ALL_TYPES",
    "CATALOG",
    "EventSpec",
    "Exit2",
    "field_types",
    "is_known",
    "match_query",
    "spec",
]

Exit2 = Literal["block", "feedback", "user", "ignored", "fail"]
Origin = Literal["claude", "claude-new", "agent-core"]

ALL_TYPES = frozenset({"command", "http", "mcp_tool", "prompt", "agent", "python"})
_NO_LLM = frozenset({"command", "http", "mcp_tool", "python"})
_COMMAND_ONLY = frozenset({"command", "mcp_tool", "python"})


@dataclass(frozen=True, slots=True)
class EventSpec:
    """How one hook event behaves (spec §1)."""

    name: str
    matcher_field: str | None
    exit2: Exit2
    top_decision: bool
    specific: frozenset[str]
    hook_types: frozenset[str]
    plain_stdout_context: bool = False
    informational: bool = False
    tool_event: bool = False
    origin: Origin = "claude"
    default_timeout: float | None = None
    legacy_exit2: Exit2 | None = None

    def exit2_for(self, profile: str) -> Exit2:
        """What exit 2 does under a profile (only PreCompact differs)."""
        if profile == "legacy" and self.legacy_exit2 is not None:
            return self.legacy_exit2
        return self.exit2


def _s(*names: str) -> frozenset[str]:
    return frozenset(names)


_TOOL_CTX = _s("additionalContext")
_WATCH = _s("watchPaths")

_SPECS: tuple[EventSpec, ...] = (
    EventSpec(
        "PreToolUse",
        "tool_name",
        "block",
        True,
        _s("permissionDecision", "permissionDecisionReason", "updatedInput", "additionalContext"),
        ALL_TYPES,
        tool_event=True,
    ),
    EventSpec(
        "PostToolUse",
        "tool_name",
        "feedback",
        True,
        _s("additionalContext", "updatedToolOutput", "updatedMCPToolOutput", "classifierContext"),
        ALL_TYPES,
        tool_event=True,
    ),
    EventSpec(
        "PostToolUseFailure", "tool_name", "feedback", True, _TOOL_CTX, ALL_TYPES, tool_event=True
    ),
    EventSpec("Notification", "notification_type", "ignored", False, _s(), _NO_LLM),
    EventSpec(
        "UserPromptSubmit",
        None,
        "block",
        True,
        _s("additionalContext", "sessionTitle", "suppressOriginalPrompt"),
        ALL_TYPES,
        plain_stdout_context=True,
        default_timeout=30.0,
    ),
    EventSpec(
        "SessionStart",
        "source",
        "user",
        False,
        _s("additionalContext", "initialUserMessage", "sessionTitle", "watchPaths", "reloadSkills"),
        _COMMAND_ONLY,
        plain_stdout_context=True,
    ),
    EventSpec("SessionEnd", "reason", "user", False, _s(), _NO_LLM),
    EventSpec("Stop", None, "block", True, _TOOL_CTX, ALL_TYPES),
    EventSpec("StopFailure", "error", "ignored", False, _s(), _NO_LLM),
    EventSpec("SubagentStart", "agent_type", "user", False, _TOOL_CTX, _NO_LLM),
    EventSpec("SubagentStop", "agent_type", "block", True, _TOOL_CTX, ALL_TYPES),
    EventSpec("PreCompact", "trigger", "block", True, _s(), _NO_LLM, legacy_exit2="ignored"),
    EventSpec("PostCompact", "trigger", "user", False, _s(), _NO_LLM),
    EventSpec(
        "PermissionRequest",
        "tool_name",
        "ignored",
        False,
        _s("decision"),
        ALL_TYPES,
        tool_event=True,
    ),
    EventSpec(
        "PermissionDenied", "tool_name", "ignored", False, _s("retry"), ALL_TYPES, tool_event=True
    ),
    EventSpec("Setup", "trigger", "user", False, _TOOL_CTX, _COMMAND_ONLY),
    EventSpec("TeammateIdle", None, "block", False, _s(), ALL_TYPES),
    EventSpec("TaskCreated", None, "block", True, _s(), ALL_TYPES),
    EventSpec("TaskCompleted", None, "block", False, _s(), ALL_TYPES),
    EventSpec("Elicitation", "mcp_server_name", "block", False, _s("action", "content"), _NO_LLM),
    EventSpec(
        "ElicitationResult", "mcp_server_name", "block", False, _s("action", "content"), _NO_LLM
    ),
    EventSpec("ConfigChange", "source", "block", True, _s(), _NO_LLM),
    EventSpec("WorktreeCreate", None, "fail", False, _s("worktreePath"), _NO_LLM),
    EventSpec("WorktreeRemove", None, "ignored", False, _s(), _NO_LLM),
    EventSpec("InstructionsLoaded", "load_reason", "ignored", False, _s(), _NO_LLM),
    EventSpec("CwdChanged", None, "user", False, _WATCH, _NO_LLM),
    EventSpec("FileChanged", "file_path", "user", False, _WATCH, _NO_LLM),
    # Newer Claude Code events (spec §1 "Newer Claude Code events").
    EventSpec(
        "UserPromptExpansion",
        "command_name",
        "block",
        True,
        _TOOL_CTX,
        ALL_TYPES,
        plain_stdout_context=True,
        origin="claude-new",
    ),
    EventSpec("PostToolBatch", None, "block", True, _TOOL_CTX, ALL_TYPES, origin="claude-new"),
    EventSpec(
        "MessageDisplay",
        None,
        "ignored",
        False,
        _s("displayContent"),
        _NO_LLM,
        origin="claude-new",
        default_timeout=10.0,
    ),
    EventSpec("DirectoryAdded", "source", "ignored", False, _s(), _NO_LLM, origin="claude-new"),
    # agent-core's informational events ([003]): fire-and-forget, never block. Their
    # matcher targets are not in the seed text, so they have none here.
    EventSpec(
        "PreModelCall",
        None,
        "ignored",
        False,
        _s(),
        ALL_TYPES,
        informational=True,
        origin="agent-core",
    ),
    EventSpec(
        "PostModelCall",
        None,
        "ignored",
        False,
        _s(),
        ALL_TYPES,
        informational=True,
        origin="agent-core",
    ),
    EventSpec(
        "PermissionDecision",
        None,
        "ignored",
        False,
        _s(),
        ALL_TYPES,
        informational=True,
        origin="agent-core",
    ),
)

CATALOG: dict[str, EventSpec] = {s.name: s for s in _SPECS}


JsonKind = Literal["string", "object", "array", "boolean", "number"]

# The JSON type of each documented input field (spec §2), checked on input by
# `engine.payload`: common fields, then each event's own. A field may be absent; when
# present (null included) it must have its type, so no hook ever sees e.g. a PreToolUse
# whose `tool_input` is the string "rm -rf /".
_COMMON_FIELDS: dict[str, JsonKind] = {
    "hook_event_name": "string",
    "session_id": "string",
    "transcript_path": "string",
    "cwd": "string",
    "permission_mode": "string",
    "agent_id": "string",
    "agent_type": "string",
}
_TOOL_FIELDS: dict[str, JsonKind] = {
    "tool_name": "string",
    "tool_input": "object",
    "tool_use_id": "string",
}
_EVENT_FIELDS: dict[str, dict[str, JsonKind]] = {
    "PostToolUseFailure": {"error": "string", "is_interrupt": "boolean"},
    "PermissionRequest": {"permission_suggestions": "array"},
    "Notification": {"message": "string", "title": "string"},
    "UserPromptSubmit": {"prompt": "string"},
    "UserPromptExpansion": {"prompt": "string"},
    "SessionStart": {"model": "string"},
    "Stop": {"stop_hook_active": "boolean"},
    "SubagentStop": {"stop_hook_active": "boolean", "agent_transcript_path": "string"},
    "PostToolBatch": {"tool_calls": "array"},
}


def _fields_of(es: EventSpec) -> dict[str, JsonKind]:
    out = dict(_COMMON_FIELDS)
    if es.tool_event:
        out.update(_TOOL_FIELDS)
    if es.matcher_field is not None:
        out[es.matcher_field] = "string"  # what a matcher is tested against is a string
    out.update(_EVENT_FIELDS.get(es.name, {}))
    return out


_FIELDS: dict[str, dict[str, JsonKind]] = {s.name: _fields_of(s) for s in _SPECS}


def field_types(name: str) -> Mapping[str, JsonKind]:
    """The documented input fields of event `name` and their JSON types ({} if unknown).

    >>> field_types("PreToolUse")["tool_input"]
    'object'
    """
    return _FIELDS.get(name, {})


def is_known(name: str) -> bool:
    """True when `name` is a hook event in the catalog.

    >>> is_known("PreToolUse"), is_known("pretooluse")
    (True, False)
    """
    return name in CATALOG


def spec(name: str) -> EventSpec:
    """The EventSpec of a known event; KeyError for an unknown one."""
    return CATALOG[name]


def match_query(event: str, payload: Mapping[str, object]) -> str | None:
    """The string an event's matcher is tested against, or None when it has no target.

    FileChanged matches the basename of `file_path` (spec §5.2).

    >>> match_query("FileChanged", {"file_path": "/p/.env"})
    '.env'
    """
    es = CATALOG.get(event)
    if es is None or es.matcher_field is None:
        return None
    value = payload.get(es.matcher_field)
    if not isinstance(value, str):
        return None
    if event == "FileChanged":
        return value.rstrip("/").rsplit("/", 1)[-1]
    return value
