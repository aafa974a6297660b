"""Backfill of a Codex CLI rollout (`~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl`): its tool
calls (`function_call` items, and whether each ran), and its other events, each as the hook
input the real binary sent for it (tests/fixtures/agents/transcripts: checked field by field).

The rules are `ingest.backfill_agents`' (untrusted lines counted and passed over, stable ids).

Example:
    >>> _codex_mode({"approval_policy": "never", "sandbox_policy": {"type": "danger-full-access"}})
    'bypassPermissions'
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from ingest.backfill import Scan
from ingest.backfill_agents import AgentCall, AgentEvent, add_call, add_event, json_object
from ingest.backfill_events import parse_time as _when

__all__ = ["scan_rollout"]


def _codex_mode(ctx: dict[str, Any]) -> str | None:
    """The `permission_mode` Codex gives its hooks for a turn's settings, where observed:
    `never` asking with full access is `bypassPermissions` (other settings: not said)."""
    sandbox = ctx.get("sandbox_policy")
    full = isinstance(sandbox, dict) and sandbox.get("type") == "danger-full-access"
    return "bypassPermissions" if ctx.get("approval_policy") == "never" and full else None


def scan_rollout(lines: Iterable[str], path: str, scan: Scan, calls: list[AgentCall]) -> None:
    """A rollout's tool calls, and its other events as Codex's hooks sent them: SessionStart
    (at its `session_meta`, once a turn says the model), UserPromptSubmit (each user
    message), PostToolUse (each shell command that ran, with its output) and Stop (each
    `task_complete`). A rollout does not mark the session's end: no SessionEnd."""
    session, cwd, turn, model, mode = "", None, None, None, None
    began: tuple[datetime, int] | None = None
    by_id: dict[str, AgentCall] = {}

    def said(name: str, n: int, ts: datetime | None, key: str, **fields: Any) -> None:
        if ts is None or not session:
            scan.skipped += 1
            return
        head = {"session_id": session, "turn_id": turn, "transcript_path": path, "cwd": cwd,
                "hook_event_name": name, "model": model, "permission_mode": mode}  # fmt: skip
        if name == "SessionStart":
            head.pop("turn_id")
        hook = {k: v for k, v in {**head, **fields}.items() if v is not None}
        add_event(AgentEvent("codex", session, key, ts, hook, path, n), scan)

    for n, line in enumerate(lines, 1):
        d = json_object(line)
        p = d.get("payload") if d is not None else None
        if d is None or not isinstance(p, dict):
            scan.skipped += 1
            continue
        kind = d.get("type")
        ts = _when(d.get("timestamp"))
        if kind == "session_meta":
            session = str(p.get("id") or p.get("session_id") or "")
            cwd = p.get("cwd") if isinstance(p.get("cwd"), str) else cwd
            began = (ts, n) if ts is not None else None
        elif kind == "turn_context":
            turn = p.get("turn_id") if isinstance(p.get("turn_id"), str) else turn
            cwd = p.get("cwd") if isinstance(p.get("cwd"), str) else cwd
            model = p.get("model") if isinstance(p.get("model"), str) else model
            mode = _codex_mode(p)
            if began is not None:
                turn, was = None, turn  # SessionStart carries no turn
                said("SessionStart", began[1], began[0], "SessionStart", source="startup")
                turn, began = was, None
        elif kind == "event_msg" and p.get("type") == "item_completed":
            item = p.get("item")
            item = item if isinstance(item, dict) else {}
            if item.get("type") == "UserMessage" and isinstance(item.get("content"), list):
                text = "".join(
                    c["text"] for c in item["content"]
                    if isinstance(c, dict) and c.get("type") == "text" and isinstance(c.get("text"), str)
                )  # fmt: skip
                said("UserPromptSubmit", n, ts, f"UserPromptSubmit:{item.get('id')}", prompt=text)
            elif item.get("type") == "CommandExecution" and item.get("status") == "completed":
                call = by_id.get(str(item.get("id")))
                output = item.get("aggregated_output")
                if call is not None and isinstance(output, str):
                    said("PostToolUse", n, ts, f"PostToolUse:{call.call_id}",
                         tool_name=call.hook.get("tool_name"),
                         tool_input=call.hook.get("tool_input"),
                         tool_response=output, tool_use_id=call.call_id)  # fmt: skip
        elif kind == "event_msg" and p.get("type") == "task_complete":
            last = p.get("last_agent_message")
            said("Stop", n, ts, f"Stop:{p.get('turn_id')}", stop_hook_active=False,
                 last_assistant_message=last if isinstance(last, str) else None)  # fmt: skip
        elif kind == "response_item" and p.get("type") == "function_call":
            call_id, name = p.get("call_id"), p.get("name")
            args = json_object(p["arguments"]) if isinstance(p.get("arguments"), str) else None
            if (
                ts is None
                or not isinstance(call_id, str)
                or not isinstance(name, str)
                or args is None
            ):
                scan.skipped += 1
                continue
            if name in ("exec_command", "shell", "shell_command", "local_shell"):
                cmd = args.get("cmd", args.get("command"))
                if isinstance(cmd, list):
                    cmd = " ".join(str(c) for c in cmd)
                tool, tool_input = "Bash", {"command": cmd}
            elif name == "apply_patch":
                tool, tool_input = (
                    "apply_patch",
                    {"command": args.get("input", args.get("patch", ""))},
                )
            else:
                tool, tool_input = name, args
            hook = {"session_id": session, "turn_id": turn, "transcript_path": path, "cwd": cwd,
                    "hook_event_name": "PreToolUse", "model": model, "permission_mode": mode,
                    "tool_name": tool, "tool_input": tool_input, "tool_use_id": call_id}  # fmt: skip
            c = AgentCall(
                "codex",
                session,
                call_id,
                ts,
                {k: v for k, v in hook.items() if v is not None},
                path,
                n,
            )
            add_call(c, calls, scan, by_id)
        elif kind == "response_item" and p.get("type") in (
            "function_call_output",
            "custom_tool_call_output",
        ):
            done = by_id.get(str(p.get("call_id")))
            if done is not None:
                out = p.get("output")
                done.ran = not (
                    isinstance(out, str) and out.startswith("Command blocked by PreToolUse hook")
                )
                scan.results += 1
