"""Benchmark: planning one event against a realistic 20-group settings file.

Prints JSON: the median time per plan() call for (a) events no group matches and
(b) events matched by matcher-only groups, with the per-event budget the issue sets
(≤ 5 µs). Run: .venv/bin/python tests/bench/bench_plan.py
"""

from __future__ import annotations

import json
import statistics
import time
from typing import Any

from engine.plan import plan
from engine.settings import parse_settings
from engine.sources import Source, merge


def settings_doc() -> dict[str, Any]:
    def cmd(c: str) -> dict[str, Any]:
        return {"type": "command", "command": c}

    pre = [
        {"matcher": "Bash", "hooks": [cmd("guard-bash.sh")]},
        {"matcher": "Edit|Write|MultiEdit", "hooks": [cmd("guard-files.sh")]},
        {"matcher": "Read", "hooks": [cmd("guard-read.sh")]},
        {"matcher": "WebFetch|WebSearch", "hooks": [cmd("guard-web.sh")]},
        {"matcher": "mcp__github__.*", "hooks": [cmd("guard-gh.sh")]},
        {"matcher": "mcp__slack__.*", "hooks": [cmd("guard-slack.sh")]},
        {"matcher": "NotebookEdit", "hooks": [cmd("guard-nb.sh")]},
        {"matcher": "Agent", "hooks": [cmd("guard-agent.sh")]},
    ]
    post = [
        {"matcher": "Edit|Write", "hooks": [cmd("fmt.sh")]},
        {"matcher": "Bash", "hooks": [cmd("audit.sh")]},
        {"matcher": "mcp__.*", "hooks": [cmd("audit-mcp.sh")]},
    ]
    return {
        "hooks": {
            "PreToolUse": pre,
            "PostToolUse": post,
            "PostToolUseFailure": [{"matcher": "Bash", "hooks": [cmd("fail.sh")]}],
            "UserPromptSubmit": [{"hooks": [cmd("prompt.sh")]}],
            "SessionStart": [
                {"matcher": "startup", "hooks": [cmd("start.sh")]},
                {"matcher": "resume", "hooks": [cmd("resume.sh")]},
            ],
            "Stop": [{"hooks": [cmd("stop.sh")]}],
            "Notification": [{"matcher": "permission_prompt", "hooks": [cmd("notify.sh")]}],
            "PreCompact": [{"matcher": "auto", "hooks": [cmd("compact.sh")]}],
            "SubagentStop": [{"matcher": "code-reviewer", "hooks": [cmd("review.sh")]}],
        }
    }


def median_us(fn: Any, n: int = 20000, rounds: int = 7) -> float:
    samples = []
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(n):
            fn()
        samples.append((time.perf_counter() - t) / n * 1e6)
    return statistics.median(samples)


def main() -> None:
    eff = merge([Source("project", "s.json", parse_settings(settings_doc(), "s.json"), "/p")])
    groups = sum(len(v) for v in settings_doc()["hooks"].values())
    nomatch = {
        "hook_event_name": "PreToolUse",
        "tool_name": "Glob",
        "tool_input": {"pattern": "*"},
        "cwd": "/p",
        "session_id": "s",
    }
    match = {
        "hook_event_name": "PreToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": "ls"},
        "cwd": "/p",
        "session_id": "s",
    }
    no_hooks = {"hook_event_name": "CwdChanged", "cwd": "/p", "session_id": "s"}
    raw = b"{}"
    out = {
        "groups": groups,
        "no_match_us": median_us(lambda: plan("PreToolUse", nomatch, raw, eff)),
        "matcher_only_match_us": median_us(lambda: plan("PreToolUse", match, raw, eff)),
        "event_without_hooks_us": median_us(lambda: plan("CwdChanged", no_hooks, raw, eff)),
        "target_us": 5.0,
    }
    out["ok"] = out["no_match_us"] <= 5.0 and out["matcher_only_match_us"] <= 5.0
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
