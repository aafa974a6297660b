"""A loopback stand-in for the model APIs the agents under test call (run as a script).

It speaks each API's real wire format (OpenAI Responses over SSE for Codex, Gemini's
streamGenerateContent over SSE, OpenAI chat completions, streamed or not, for Copilot CLI
and Qwen Code), so the real agent binary runs unchanged: the first turn
asks for one shell call running $MOCK_CMD; once a tool result is in the request, it ends
the turn with text. Every request is appended to $MOCK_LOG (one JSON object a line), so a
test can read what the agent sent back to the model (the tool result, or the block).

    python tests/agents/mockmodel.py PORT    # prints "ready" once listening on 127.0.0.1
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

SHELL_TOOLS = (
    "exec_command", "shell_command", "shell", "run_shell_command", "bash", "Bash", "run_commands",
)  # fmt: skip


def _tools(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    tools = body.get("tools") or (body.get("config") or {}).get("tools") or []
    for t in tools:
        if not isinstance(t, dict):
            continue
        if t.get("type") == "function" and isinstance(t.get("function"), dict):
            f = t["function"]
            found[f.get("name")] = f.get("parameters") or {}
        elif "name" in t:
            found[t["name"]] = t.get("parameters") or {}
        for fd in t.get("functionDeclarations") or []:
            found[fd.get("name")] = fd.get("parameters") or fd.get("parametersJsonSchema") or {}
    return found


def _shell_call(body: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    tools = _tools(body)
    cmd = os.environ.get("MOCK_CMD", "echo hookaudit-probe")
    for name in SHELL_TOOLS:
        if name in tools:
            props = (tools[name] or {}).get("properties") or {}
            if "cmd" in props:
                if os.environ.get("MOCK_ESCALATE") and "sandbox_permissions" in props:
                    # asks to run outside the sandbox: an approval, so a PermissionRequest
                    return name, {"cmd": cmd, "sandbox_permissions": "require_escalated",
                                  "justification": "hookaudit probe"}  # fmt: skip
                return name, {"cmd": cmd}
            if "commands" in props:
                return name, {"commands": [cmd]}
            args: dict[str, Any] = {"command": cmd}
            if "description" in props:
                args["description"] = "probe"
            return name, args
    return None


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, code: int, data: bytes, ctype: str) -> None:
        self.send_response(code)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _json(self, obj: Any, code: int = 200) -> None:
        self._send(code, json.dumps(obj).encode(), "application/json")

    def _sse(self, events: list[Any], named: bool) -> None:
        out = []
        for ev in events:
            head = f"event: {ev['type']}\n" if named else ""
            out.append(f"{head}data: {json.dumps(ev)}\n\n")
        self._send(200, "".join(out).encode(), "text/event-stream")

    def do_GET(self) -> None:
        if "/models" in self.path:
            self._json({"object": "list", "data": [{"id": "mock-model", "object": "model"}]})
        else:
            self._json({"error": "not found"}, 404)

    def do_POST(self) -> None:
        n = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(n) if n else b"{}"
        try:
            body = json.loads(raw)
        except ValueError:
            body = {}
        with open(os.environ["MOCK_LOG"], "a") as f:
            f.write(json.dumps({"path": self.path, "body": body}) + "\n")
        path = self.path.split("?")[0]
        if ":streamGenerateContent" in path or ":generateContent" in path:
            self._gemini(body, stream=":streamGenerateContent" in path)
        elif ":countTokens" in path:
            self._json({"totalTokens": 10})
        elif path.endswith("/responses"):
            self._responses(body)
        elif path.endswith("/chat/completions"):
            self._chat(body)
        else:
            self._json({"error": "not found", "path": self.path}, 404)

    def _gemini(self, body: dict[str, Any], stream: bool) -> None:
        contents = body.get("contents") or []
        answered = any("functionResponse" in p for c in contents for p in c.get("parts") or [])
        if not stream:  # side calls (routing, next speaker): a JSON text answer
            text = json.dumps({"reasoning": "mock", "next_speaker": "user",
                               "model_choice": "flash", "complexity_reasoning": "mock",
                               "complexity_score": 1})  # fmt: skip
            part: dict[str, Any] = {"text": text}
        else:
            call = None if answered else _shell_call(body)
            part = {"text": "Done."} if call is None else {
                "functionCall": {"name": call[0], "args": call[1]}}  # fmt: skip
        chunk = {"candidates": [{"content": {"role": "model", "parts": [part]},
                                 "finishReason": "STOP", "index": 0}],
                 "usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 5,
                                   "totalTokenCount": 10}}  # fmt: skip
        if stream:
            self._sse([chunk], named=False)
        else:
            self._json(chunk)

    def _chat(self, body: dict[str, Any]) -> None:
        answered = any(m.get("role") == "tool" for m in body.get("messages") or [])
        call = None if answered else _shell_call(body)
        cid = "chatcmpl-" + uuid.uuid4().hex[:10]
        model = body.get("model", "mock-model")
        usage = {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10}
        if call is None:
            delta: dict[str, Any] = {"role": "assistant", "content": "Done."}
            message: dict[str, Any] = dict(delta)
            finish = "stop"
        else:
            tc = {"id": "call_" + uuid.uuid4().hex[:8], "type": "function",
                  "function": {"name": call[0], "arguments": json.dumps(call[1])}}  # fmt: skip
            delta = {"role": "assistant", "content": None, "tool_calls": [{"index": 0, **tc}]}
            message = {"role": "assistant", "content": None, "tool_calls": [tc]}
            finish = "tool_calls"
        if not body.get("stream"):
            self._json({"id": cid, "object": "chat.completion", "created": 0, "model": model,
                        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                        "usage": usage})  # fmt: skip
            return
        base = {"id": cid, "object": "chat.completion.chunk", "created": 0, "model": model}
        chunks = [
            {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
            {
                **base,
                "choices": [{"index": 0, "delta": {}, "finish_reason": finish}],
                "usage": usage,
            },
        ]
        data = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
        self._send(200, data.encode(), "text/event-stream")

    def _responses(self, body: dict[str, Any]) -> None:
        items = body.get("input") or []
        answered = any(isinstance(i, dict) and str(i.get("type", "")).endswith("_output")
                       for i in items)  # fmt: skip
        call = None if answered else _shell_call(body)
        if call is None:
            item: dict[str, Any] = {
                "type": "message", "id": "msg_" + uuid.uuid4().hex[:8], "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": "Done.", "annotations": []}],
            }  # fmt: skip
        else:
            item = {"type": "function_call", "id": "fc_" + uuid.uuid4().hex[:8],
                    "call_id": "call_" + uuid.uuid4().hex[:8], "name": call[0],
                    "arguments": json.dumps(call[1]), "status": "completed"}  # fmt: skip
        rid = "resp_" + uuid.uuid4().hex[:12]
        usage = {"input_tokens": 5, "input_tokens_details": {"cached_tokens": 0},
                 "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 0},
                 "total_tokens": 10}  # fmt: skip
        events = [
            {"type": "response.created",
             "response": {"id": rid, "object": "response", "status": "in_progress", "output": []}},
            {"type": "response.output_item.added", "output_index": 0, "item": item},
            {"type": "response.output_item.done", "output_index": 0, "item": item},
            {"type": "response.completed",
             "response": {"id": rid, "object": "response", "status": "completed",
                          "output": [item], "usage": usage}},
        ]  # fmt: skip
        self._sse(events, named=True)


if __name__ == "__main__":
    server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
    print("ready", flush=True)
    server.serve_forever()
