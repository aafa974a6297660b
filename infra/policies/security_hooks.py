"""Python hooks of the example security policy (`infra/policies/security.json`).

Each function receives a Claude Code hook input (a dict) and returns the JSON output a
command hook would print, or None to stay silent. They are loaded in-process by
hookaudit's `python` hook type: `{"type": "python", "callable": "security_hooks.py:bash_guard"}`.
"""

from __future__ import annotations

import posixpath
import re
import shlex
from typing import Any

PIPE_TO_SHELL = re.compile(r"\b(curl|wget)\b[^|;&]*\|\s*(sudo\s+)?(ba|z|da)?sh\b")
FORCE_PUSH = re.compile(
    r"\bgit\s+push\b(?=.*(\s--force\b|\s-f\b|\s--force-with-lease\b))(?=.*\b(main|master)\b)"
)
SSH_READ = re.compile(r"(~|\$HOME|/home/[^/\s]+|/root)/\.ssh\b")
SECRET = re.compile(
    r"(AKIA[0-9A-Z]{16}|ghp_[A-Za-z0-9]{36}|-----BEGIN [A-Z ]*PRIVATE KEY-----|xox[bap]-[A-Za-z0-9-]{10,})"
)
ALLOWED_DOMAINS = ("docs.python.org", "pypi.org", "github.com", "developer.mozilla.org")


def _deny(reason: str) -> dict[str, Any]:
    return {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": reason,
        }
    }


def _ask(reason: str) -> dict[str, Any]:
    return {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "ask",
            "permissionDecisionReason": reason,
        }
    }


def _rm_outside(command: str, cwd: str) -> str | None:
    for part in re.split(r"&&|\|\||;|\|", command):
        try:
            words = shlex.split(part)
        except ValueError:
            continue
        while words and "=" in words[0] and not words[0].startswith("-"):
            words = words[1:]
        if words[:1] == ["sudo"]:
            words = words[1:]
        if not words or words[0] != "rm":
            continue
        flags = "".join(w[1:] for w in words[1:] if w.startswith("-") and not w.startswith("--"))
        recursive = "r" in flags.lower() or "--recursive" in words
        force = "f" in flags or "--force" in words
        if not (recursive and force):
            continue
        for target in (w for w in words[1:] if not w.startswith("-")):
            path = posixpath.normpath(posixpath.join(cwd, posixpath.expanduser(target)))
            if path in ("/", cwd.rstrip("/") or "/") or not path.startswith(cwd.rstrip("/") + "/"):
                return target
    return None


def bash_guard(event: dict[str, Any]) -> dict[str, Any] | None:
    """Deny destructive or exfiltrating shell commands."""
    command = str((event.get("tool_input") or {}).get("command", ""))
    cwd = str(event.get("cwd") or "/")
    if PIPE_TO_SHELL.search(command):
        return _deny("piping a download into a shell is not allowed")
    if FORCE_PUSH.search(command):
        return _deny("force-pushing to main/master is not allowed")
    if SSH_READ.search(command):
        return _deny("agents may not touch ~/.ssh")
    target = _rm_outside(command, cwd)
    if target is not None:
        return _deny(f"rm -rf outside the project ({target}) is not allowed")
    return None


def file_guard(event: dict[str, Any]) -> dict[str, Any] | None:
    """Deny reading SSH keys and writing .env files."""
    tool = event.get("tool_name")
    ti = event.get("tool_input") or {}
    path = str(ti.get("file_path") or ti.get("notebook_path") or "")
    norm = posixpath.normpath(path)
    if "/.ssh/" in norm + "/" or norm.endswith("/.ssh"):
        return _deny("agents may not read or write ~/.ssh")
    base = posixpath.basename(norm)
    if tool != "Read" and (base == ".env" or base.startswith(".env.")):
        return _deny("writing .env files is not allowed; edit .env.example instead")
    return None


def web_guard(event: dict[str, Any]) -> dict[str, Any] | None:
    """Ask before fetching from domains outside a short allowlist."""
    ti = event.get("tool_input") or {}
    url = str(ti.get("url") or "")
    if not url:
        return None
    host = url.split("://", 1)[-1].split("/", 1)[0].split(":", 1)[0].lower()
    if any(host == d or host.endswith("." + d) for d in ALLOWED_DOMAINS):
        return None
    return _ask(f"network access to {host}: confirm")


def prompt_secrets(event: dict[str, Any]) -> dict[str, Any] | None:
    """Block prompts that paste credentials."""
    if SECRET.search(str(event.get("prompt", ""))):
        return {"decision": "block", "reason": "the prompt contains what looks like a credential"}
    return None


def post_write_note(event: dict[str, Any]) -> dict[str, Any] | None:
    """Remind the agent to run tests after editing source files."""
    path = str((event.get("tool_input") or {}).get("file_path", ""))
    if path.endswith(".py"):
        return {
            "hookSpecificOutput": {
                "hookEventName": "PostToolUse",
                "additionalContext": "A Python file changed: run the tests before finishing.",
            }
        }
    return None


def web_deny_unlisted(event: dict[str, Any]) -> dict[str, Any] | None:
    """Deny (rather than ask) fetches from domains outside the allowlist."""
    asked = web_guard(event)
    if asked is None:
        return None
    return _deny(asked["hookSpecificOutput"]["permissionDecisionReason"].replace(": confirm", ""))
