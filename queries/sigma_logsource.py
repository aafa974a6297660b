"""The Sigma log source mapping of hookaudit's history: which products, categories and
fields a rule may name, and what each means (`queries.sigma_duckdb` turns them into SQL).

Example:
    >>> PRODUCTS["coding_agent"] is None and PRODUCTS["codex"] == ("codex",)
    True
"""

from __future__ import annotations

__all__ = ["CATEGORIES", "FIELDS", "PRODUCT", "PRODUCTS"]

PRODUCT = "claude_code"
#: Sigma `logsource.product` -> the agents (`HookEvent.agent`) a rule of it sees; None: all.
#: `coding_agent` (and a rule naming no product) matches every agent.
PRODUCTS: dict[str, tuple[str, ...] | None] = {
    "claude_code": ("claude_code",),
    "codex": ("codex",),
    "gemini_cli": ("gemini_cli",),
    "copilot_cli": ("copilot_cli",),
    "qwen_code": ("qwen_code",),
    "opencode": ("opencode",),
    "cline": ("cline",),
    "coding_agent": None,
}
CATEGORIES: dict[str, tuple[str, ...]] = {
    "process_creation": ("Bash",),
    "file_event": ("Write", "Edit", "MultiEdit", "NotebookEdit"),
    "file_access": ("Read",),
    "proxy": ("WebFetch",),
    "web": ("WebFetch",),
    "mcp": ("mcp__",),
}
FIELDS: dict[str, str] = {
    "EventName": "hook_event_name (PreToolUse, UserPromptSubmit, …), Claude Code's name for every agent",
    "ToolName": "tool_name, Claude Code's name for every agent (Bash, Write, …)",
    "Agent": "the agent: claude_code, codex, gemini_cli, copilot_cli, qwen_code, opencode, cline",
    "AgentToolName": "the agent's own tool name (run_shell_command, bash, …)",
    "User": "the user who ran the agent",
    "Host": "the machine",
    "SessionId": "session_id",
    "CurrentDirectory": "cwd",
    "Decision": "allow, deny, ask, defer or none",
    "Blocked": "true when the call was stopped (a deny nobody waited for, DecidedBy observed, is not)",
    "DecidedBy": "policy, fallback, rejected or observed (observe mode, backfill: nobody waited)",
    "CommandLine": "Bash tool_input.command",
    "Image": "the first word of CommandLine (words split at ASCII white space)",
    "TargetFilename": "the first non-empty string of tool_input.file_path, notebook_path, path",
    "c-uri": "WebFetch tool_input.url (also Url)",
    "cs-host": "the host of that URL (also UrlHost)",
    "McpServer": "SERVER of mcp__SERVER__TOOL",
    "McpTool": "TOOL of mcp__SERVER__TOOL",
    "Prompt": "UserPromptSubmit prompt",
    "tool_input.NAME": "a string, boolean or integer field of the tool input",
}
