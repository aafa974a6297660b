"""Python hooks of the example security policy (`infra/policies/security.json`).

Each function receives a Claude Code hook input (a dict) and returns the JSON output a
command hook would print, or None to stay silent. They are loaded in-process by
hookaudit's `python` hook type: `{"type": "python", "callable": "security_hooks.py:bash_guard"}`.
"""

from __future__ import annotations

import posixpath
import re
from typing import Any

PIPE_TO_SHELL = re.compile(
    r"\b(curl|wget)\b[^|;&]*\|\s*(\S*/)?(sudo\s+(-\S+\s+)*)?(env\s+)?(\S*/)?(ba|z|da|k)?sh\b"
)
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


# Commands that run the command after their own options: `sudo rm …`, `env X=1 rm …`.
# (name -> options that take a value, which are skipped with it)
_WRAPPERS: dict[str, frozenset[str]] = {
    "sudo": frozenset({"-u", "-g", "-h", "-p", "-C", "-D", "-r", "-t", "-U", "-T"}),
    "doas": frozenset({"-u", "-C"}),
    "env": frozenset({"-u", "-C", "-S", "--unset", "--chdir", "--split-string"}),
    "command": frozenset(),
    "builtin": frozenset(),
    "exec": frozenset({"-a"}),
    "nice": frozenset({"-n", "--adjustment"}),
    "nohup": frozenset(),
    "time": frozenset({"-f", "-o", "--format", "--output"}),
    "timeout": frozenset({"-s", "-k", "--signal", "--kill-after"}),
    "stdbuf": frozenset({"-i", "-o", "-e"}),
    "ionice": frozenset({"-c", "-n", "-p", "--class", "--classdata"}),
    "chroot": frozenset(),
    "setsid": frozenset(),
    "xargs": frozenset(
        {
            "-a",
            "-d",
            "-E",
            "-I",
            "-L",
            "-n",
            "-P",
            "-s",
            "--arg-file",
            "--delimiter",
            "--max-args",
            "--max-procs",
            "--replace",
        }
    ),
}
_SHELLS = frozenset({"sh", "bash", "zsh", "dash", "ksh", "ash", "busybox"})
_MAX_NESTING = 8


def _unwrap(argv: list[str]) -> tuple[list[str], bool]:
    """The command a wrapper runs (`sudo -u root env X=1 /bin/rm -rf /` -> `rm -rf /`), and
    whether its arguments may come from elsewhere (xargs: from stdin)."""
    from_stdin = False
    while argv:
        name = posixpath.basename(argv[0])
        if name not in _WRAPPERS:
            break
        takes = _WRAPPERS[name]
        from_stdin |= name == "xargs"
        i = 1
        while i < len(argv):
            word = argv[i]
            if name == "env" and "=" in word and not word.startswith("-"):
                i += 1  # env VAR=val
            elif name == "timeout" and not word.startswith("-"):
                i += 1  # its DURATION, then the command
                break
            elif word == "--":
                i += 1
                break
            elif word.startswith("-"):
                i += 2 if word in takes else 1
            else:
                break
        argv = argv[i:]
    return argv, from_stdin


def _script_index(argv: list[str]) -> int | None:
    """Where the script of `sh -c SCRIPT` (`bash -lc`, `sh -e -c`) is in `argv`, or None."""
    if posixpath.basename(argv[0]) not in _SHELLS:
        return None
    return next(
        (i + 1 for i, w in enumerate(argv[1:], 1)
         if w.startswith("-") and not w.startswith("--") and "c" in w[1:]),
        None,
    )  # fmt: skip


def _recursive(argv: list[str]) -> bool:
    words = argv[1:]
    opts = words[: words.index("--")] if "--" in words else words
    short = "".join(w[1:] for w in opts if w.startswith("-") and not w.startswith("--"))
    return "r" in short.lower() or "--recursive" in opts


def _rm_targets(argv: list[str], cwd: str, from_stdin: bool) -> str | None:
    """The first target of a recursive rm that lies outside `cwd` (or is `cwd` itself, or
    cannot be known: an expansion, a glob at the root, arguments from stdin)."""
    words = argv[1:]
    end = words.index("--") if "--" in words else len(words)
    targets = [w for w in words[:end] if not w.startswith("-")] + words[end + 1 :]
    if not _recursive(argv):
        return None
    if from_stdin:
        return "(paths from stdin)"
    root = cwd.rstrip("/") or "/"
    for target in targets:
        if "$" in target or "`" in target:
            return target  # expanded by the shell: cannot be known here
        path = posixpath.normpath(posixpath.join(cwd, posixpath.expanduser(target)))
        if path in ("/", root) or not path.startswith(root.rstrip("/") + "/"):
            return target
        if any(c in target for c in "*?[") and posixpath.dirname(path) in ("/", root):
            continue  # a glob inside the project (build/*) stays there
    return None


def _outside(here: str | None, cwd: str, relative: list[str]) -> str | None:
    """A relative target after a `cd` out of the project: outside it."""
    root = cwd.rstrip("/") or "/"
    if here is not None and (here == root or here.startswith(root.rstrip("/") + "/")):
        return None
    return relative[0]


def _rm_outside(command: str, cwd: str, depth: int = 0) -> str | None:
    """The target of a recursive ``rm`` in `command` outside the project `cwd`, whatever
    the spelling: a path (`/bin/rm`), flags reordered or split (`-fr`, `-r -f`, `-R`,
    `--recursive`), behind `sudo`, `env`, `xargs`, `nice`, `timeout`, `command`, inside
    `sh -c '…'` or a `$(…)` substitution, after `;`, `&&`, `|`, `&` or a newline. A command
    line the parser cannot read that mentions rm is treated as such an rm."""
    from engine.shellwords import parse

    script = parse(command)
    if script is None or depth > _MAX_NESTING:
        return command if re.search(r"(^|[^\w-])rm\b", command) else None
    here: str | None = cwd  # None once a `cd` went somewhere that cannot be known
    for cmd in script.commands:
        argv, from_stdin = _unwrap(list(cmd.argv))
        if not argv:
            continue
        name = posixpath.basename(argv[0])
        if name in ("cd", "pushd"):
            to = argv[1] if len(argv) > 1 else "~"
            unknown = here is None or "$" in to or "`" in to or to == "-"
            here = (
                None
                if unknown
                else posixpath.normpath(posixpath.join(here or "/", posixpath.expanduser(to)))
            )
            continue
        script_at = _script_index(argv)
        if script_at is not None:
            if script_at < len(argv):
                found = _rm_outside(argv[script_at], cwd, depth + 1)
                if found is not None:
                    return found
            continue
        if name == "rm":
            relative = [w for w in argv[1:] if not w.startswith(("-", "/", "~"))]
            if here is None and relative:  # after `cd $X`: where these point is not known
                found = relative[0] if _recursive(argv) else None
            else:
                found = _rm_targets(argv, cwd if here is None else here, from_stdin)
                if found is None and here != cwd and relative:
                    found = _rm_targets(argv, cwd, from_stdin) or _outside(here, cwd, relative)
            if found is not None:
                return found
    return None


def _programs(command: str, depth: int = 0) -> set[str] | None:
    """The programs `command` runs (basenames, behind wrappers and inside `sh -c`, `$(…)`),
    or None when it cannot be read (then every check treats it as running anything)."""
    from engine.shellwords import parse

    script = parse(command)
    if script is None or depth > _MAX_NESTING:
        return None
    found: set[str] = set()
    for cmd in script.commands:
        argv, _ = _unwrap(list(cmd.argv))
        if not argv:
            continue
        name = posixpath.basename(argv[0])
        found.add(name)
        at = _script_index(argv)
        if at is not None and at < len(argv):
            inner = _programs(argv[at], depth + 1)
            if inner is None:
                return None
            found |= inner
    return found


def _runs(command: str, names: frozenset[str]) -> bool:
    """Whether `command` runs one of `names` (by any path, behind any wrapper); a command
    line that cannot be read runs one when it mentions one."""
    programs = _programs(command)
    if programs is None:
        return any(re.search(rf"(^|[^\w-]){re.escape(n)}\b", command) for n in names)
    return bool(programs & names)


RAW_SOCKETS = frozenset({"nc", "ncat", "netcat", "socat"})
DOWNLOADERS = frozenset({"curl", "wget"})


def bash_guard(event: dict[str, Any]) -> dict[str, Any] | None:
    """Deny destructive or exfiltrating shell commands."""
    command = str((event.get("tool_input") or {}).get("command", ""))
    cwd = str(event.get("cwd") or "/")
    if _runs(command, RAW_SOCKETS):
        return _deny("raw sockets are not allowed from agents")
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


def network_ask(event: dict[str, Any]) -> dict[str, Any] | None:
    """Ask before a download tool runs (curl, wget: by any path, behind any wrapper)."""
    command = str((event.get("tool_input") or {}).get("command", ""))
    if _runs(command, DOWNLOADERS):
        return _ask("network tool: confirm the destination")
    return None


def network_deny(event: dict[str, Any]) -> dict[str, Any] | None:
    """Deny download tools (the strict policy): use the artifact proxy."""
    command = str((event.get("tool_input") or {}).get("command", ""))
    if _runs(command, DOWNLOADERS):
        return _deny("network tools need a ticket: use the artifact proxy")
    return None
