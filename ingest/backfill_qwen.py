"""Backfill of a Qwen Code chat file (`~/.qwen/projects/<project>/chats/<session>.jsonl`): its
tool calls (`functionCall` parts and their `tool_result` records, and whether each ran) and
its other events, each as the hook input the real binary sent for it
(tests/fixtures/agents/transcripts: checked field by field).

What the file keeps, and so what is rebuilt: SessionStart (at the file's first entry, with
the model of its first answer), UserPromptSubmit (each prompt typed, with `prompt_id`, and
the empty one Qwen Code raises as it sends a call's result back to the model), PreToolUse,
PostToolUse (each call that ran, with what it returned) and Stop (a turn's last answer).
The file does not keep: the permission mode, the `toolu_` id Qwen Code makes for a hook
(the provider's call id, `tool_call_id`, is the canonical id), a call's `duration_ms`, a
Stop's context figures and background tasks, the hook's own time (each `timestamp` is the
entry's). It does not mark a session's end: no SessionEnd.

The rules are `ingest.backfill_agents`' (untrusted lines counted and passed over, stable ids).

Example:
    >>> _display({"type": "shell_result", "output": "hookaudit-probe"})
    'hookaudit-probe'
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ingest.backfill import Scan
from ingest.backfill_agents import (
    AgentCall,
    AgentEvent,
    add_call,
    add_event,
    function_output,
    json_object,
    texts_of,
)
from ingest.backfill_events import parse_time as _when

__all__ = ["scan_chat"]


def _display(shown: object) -> str | None:
    """A result's `returnDisplay` as the hook gives it: the text, or a shell's output."""
    if isinstance(shown, str):
        return shown
    out = shown.get("output") if isinstance(shown, dict) else None
    return out if isinstance(out, str) else None


def scan_chat(lines: Iterable[str], path: str, scan: Scan, calls: list[AgentCall]) -> None:
    """A chat file's tool calls (into `calls`) and other events (into `scan.events`)."""
    by_id: dict[str, AgentCall] = {}
    prompts = 0
    prompt_id: str | None = None
    started: tuple[dict[str, Any], int] | None = None  # the first entry, until a model is seen
    answer: tuple[dict[str, Any], int, str] | None = None
    pending: tuple[dict[str, Any], int] | None = None  # results not yet sent back
    start_said = False

    def said(d: dict[str, Any], n: int, name: str, key: str, **fields: Any) -> None:
        ts, session = _when(d.get("timestamp")), str(d.get("sessionId") or "")
        if ts is None or not session:
            scan.skipped += 1
            return
        head = {"session_id": session, "transcript_path": path, "cwd": d.get("cwd"),
                "hook_event_name": name, "timestamp": d.get("timestamp")}  # fmt: skip
        hook = {k: v for k, v in {**head, **fields}.items() if v is not None}
        add_event(AgentEvent("qwen_code", session, key, ts, hook, path, n), scan)

    def results_sent() -> None:  # the model is called again with the results
        nonlocal pending
        if pending is not None:
            d, n = pending
            said(d, n, "UserPromptSubmit", f"UserPromptSubmit:{d.get('uuid')}",
                 prompt_id=prompt_id, prompt="")  # fmt: skip
        pending = None

    def turn_ends() -> None:
        nonlocal answer
        if answer is not None:
            d, n, text = answer
            said(d, n, "Stop", f"Stop:{d.get('uuid')}", prompt_id=prompt_id,
                 stop_hook_active=False, last_assistant_message=text)  # fmt: skip
        answer = None

    for n, line in enumerate(lines, 1):
        d = json_object(line)
        if d is None:
            scan.skipped += 1
            continue
        if started is None and d.get("sessionId"):
            started = (d, n)
        found = d.get("message")
        msg: dict[str, Any] = found if isinstance(found, dict) else {}
        found_parts = msg.get("parts")
        parts: list[Any] = found_parts if isinstance(found_parts, list) else []
        kind = d.get("type")
        if kind == "user" and d.get("provenance") == "real_user":
            text = texts_of(parts)
            if text is None:
                continue
            turn_ends()
            prompt_id = f"{d.get('sessionId')}########{prompts}"
            prompts += 1
            said(d, n, "UserPromptSubmit", f"UserPromptSubmit:{d.get('uuid')}",
                 prompt_id=prompt_id, prompt=text, submitted_prompt=text)  # fmt: skip
        elif kind == "assistant":
            if started is not None and not start_said and isinstance(d.get("model"), str):
                first, at = started
                said(first, at, "SessionStart", "SessionStart", source="startup", model=d["model"])
                start_said = True
            results_sent()
            text = texts_of(parts)
            answer = (d, n, text) if text else None
            for part in parts:
                fc = part.get("functionCall") if isinstance(part, dict) else None
                if isinstance(fc, dict):
                    _call(fc, d, n, path, prompt_id, scan, calls, by_id)
        elif kind == "tool_result":
            got = d.get("toolCallResult")
            res: dict[str, Any] = got if isinstance(got, dict) else {}
            done = by_id.get(str(res.get("callId")))
            if done is None:
                continue
            done.ran = (
                res.get("executionStatus") != "not_started"
                and res.get("errorType") != "execution_denied"
            )
            scan.results += 1
            pending = (d, n)
            output = function_output(parts)
            shown = _display(res.get("resultDisplay"))
            if (
                done.ran
                and res.get("status") == "success"
                and output is not None
                and shown is not None
            ):
                said(d, n, "PostToolUse", f"PostToolUse:{done.call_id}", prompt_id=prompt_id,
                     tool_name=done.hook.get("tool_name"), tool_input=done.hook.get("tool_input"),
                     tool_response={"llmContent": output, "returnDisplay": shown},
                     tool_call_id=done.call_id)  # fmt: skip
    turn_ends()


def _call(
    fc: dict[str, Any],
    d: dict[str, Any],
    n: int,
    path: str,
    prompt_id: str | None,
    scan: Scan,
    calls: list[AgentCall],
    by_id: dict[str, AgentCall],
) -> None:
    """One `functionCall` part: the PreToolUse Qwen Code's hook sent for it."""
    ts, call_id = _when(d.get("timestamp")), fc.get("id")
    if ts is None or not isinstance(call_id, str) or not isinstance(fc.get("name"), str):
        scan.skipped += 1
        return
    session = str(d.get("sessionId") or "")
    args = fc.get("args") if isinstance(fc.get("args"), dict) else {}
    hook = {"session_id": session, "transcript_path": path, "cwd": d.get("cwd"),
            "hook_event_name": "PreToolUse", "timestamp": d.get("timestamp"),
            "prompt_id": prompt_id, "tool_name": fc["name"], "tool_input": args,
            "tool_call_id": call_id}  # fmt: skip
    c = AgentCall(
        "qwen_code", session, call_id, ts, {k: v for k, v in hook.items() if v is not None},
        path, n,
    )  # fmt: skip
    add_call(c, calls, scan, by_id)
