"""A scripted Anthropic Messages API on 127.0.0.1 for running the real Claude Code offline.

It speaks the real wire format: `POST /v1/messages` answers as server-sent events
(`message_start`, `content_block_start`, `content_block_delta` with `text_delta` or
`input_json_delta`, `content_block_stop`, `message_delta`, `message_stop`) when the request
says `"stream": true`, and as one JSON message otherwise; `POST /v1/messages/count_tokens`
answers `{"input_tokens": N}`; a scripted error turn answers with the API's error body.

Which reply a request gets:

1. A request whose text holds `MOCKVERDICT:` followed by a JSON object (a prompt or agent
   hook's prompt carries it) gets that object as its text: a prompt hook's verdict. When the
   request offers an output tool (Claude Code's agent hook: `StructuredOutput`; hookaudit's
   prompt and agent hooks: `verdict`), the object is given as that tool's input instead.
2. A request that offers tools and is part of the session's conversation (the main agent or a
   subagent) takes the next scripted turn.
3. Anything else (titles, summaries, compaction) gets a short fixed text: `MOCK_SUMMARY`.

Every request is appended to the record file as one JSON line: path, headers of interest,
body. The script is a JSON list of turns; a turn is an object with any of `text` (str),
`tools` (list of `{"name", "input", "id"?}`), `error` (`{"status", "type", "message"}`),
`stop_reason`. When the script is exhausted the reply is the text `MOCK_DONE`.

Run: `python mock_api.py --script turns.json --record requests.jsonl --port-file port`.
"""

from __future__ import annotations

import argparse
import json
import re
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

_VERDICT = re.compile(r"MOCKVERDICT:(\{.*?\})(?:\s|$|\"|\\)")


def _all_text(body: dict[str, Any]) -> str:
    parts: list[str] = []

    def walk(v: Any) -> None:
        if isinstance(v, str):
            parts.append(v)
        elif isinstance(v, list):
            for x in v:
                walk(x)
        elif isinstance(v, dict):
            for x in v.values():
                walk(x)

    walk(body.get("system"))
    walk(body.get("messages"))
    return "\n".join(parts)


def _last_user_text(body: dict[str, Any]) -> str:
    msgs = body.get("messages") or []
    for m in reversed(msgs):
        if isinstance(m, dict) and m.get("role") == "user":
            c = m.get("content")
            if isinstance(c, str):
                return c
            if isinstance(c, list):
                return "\n".join(
                    str(b.get("text", ""))
                    for b in c
                    if isinstance(b, dict) and b.get("type") == "text"
                )
    return ""


class Mock:
    """The shared state of one mock server: script, cursor, record file."""

    def __init__(self, turns: list[dict[str, Any]], record: Path) -> None:
        self.turns = turns
        self.cursor = 0
        self.record = record
        self.lock = threading.Lock()
        self.seq = 0

    def log(self, entry: dict[str, Any]) -> None:
        with self.lock, self.record.open("a", encoding="utf-8") as f:
            f.write(json.dumps(entry) + "\n")

    def classify(self, body: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """Pick the reply for one request: (kind, turn)."""
        tools = body.get("tools") or []
        names = [t.get("name", "") for t in tools if isinstance(t, dict)]
        so_tools = [
            n
            for n in names
            if "StructuredOutput" in n or "structured" in n.lower() or n == "verdict"
        ]
        # Only a hook's own request (no tools: a prompt hook; an output tool: an agent hook,
        # or any hookaudit hook) is answered with its verdict; the session's conversation may
        # quote the prompt.
        m = _VERDICT.search(_all_text(body)) if (not names or so_tools) else None
        if m:
            verdict = json.loads(m.group(1))
            so = so_tools
            if so:
                # An agent hook: answer once through the output tool, then plain text.
                msgs = body.get("messages") or []
                answered = any(
                    isinstance(b, dict) and b.get("type") == "tool_result"
                    for mm in msgs
                    if isinstance(mm, dict) and isinstance(mm.get("content"), list)
                    for b in mm["content"]
                )
                if answered:
                    return "verdict", {"text": json.dumps(verdict)}
                return "verdict", {"tools": [{"name": so[0], "input": verdict}]}
            return "verdict", {"text": json.dumps(verdict)}
        if names and any(n in ("Bash", "Read", "Write", "Edit", "Agent", "Task") for n in names):
            with self.lock:
                if self.cursor < len(self.turns):
                    turn = dict(self.turns[self.cursor], _index=self.cursor)
                    self.cursor += 1
                    return f"turn{self.cursor - 1}", turn
            return "done", {"text": "MOCK_DONE"}
        return "aux", {"text": "MOCK_SUMMARY"}


def _wait_hook(spec: dict[str, Any]) -> None:
    """Hold a reply until a hook's line is in the hook log (an async hook runs beside the
    session: without this its log line races Claude Code's exit). Gives up after `timeout`."""
    log, label = Path(spec["log"]), str(spec["label"])
    deadline = time.monotonic() + float(spec.get("timeout", 30))
    while time.monotonic() < deadline:
        try:
            lines = log.read_text(encoding="utf-8").splitlines()
        except OSError:
            lines = []
        for line in lines:
            try:
                if json.loads(line).get("label") == label:
                    return
            except (ValueError, AttributeError):
                continue
        time.sleep(0.05)


def _content(turn: dict[str, Any], n: int) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if turn.get("text"):
        blocks.append({"type": "text", "text": turn["text"]})
    for i, t in enumerate(turn.get("tools") or []):
        blocks.append(
            {
                "type": "tool_use",
                "id": t.get("id") or f"toolu_t{turn.get('_index', n):03d}{i:02d}",
                "name": t["name"],
                "input": t.get("input", {}),
            }
        )
    if not blocks:
        blocks.append({"type": "text", "text": "MOCK_DONE"})
    return blocks


def _message(body: dict[str, Any], turn: dict[str, Any], n: int) -> dict[str, Any]:
    content = _content(turn, n)
    stop = turn.get("stop_reason") or (
        "tool_use" if any(b["type"] == "tool_use" for b in content) else "end_turn"
    )
    return {
        "id": f"msg_mock{n:04d}",
        "type": "message",
        "role": "assistant",
        "model": body.get("model", "claude-mock"),
        "content": content,
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {
            "input_tokens": 10,
            "output_tokens": 5,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
    }


def _sse(msg: dict[str, Any]) -> Iterator[bytes]:
    def ev(name: str, data: dict[str, Any]) -> bytes:
        return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()

    head = dict(msg, content=[], stop_reason=None)
    head["usage"] = dict(msg["usage"], output_tokens=1)
    yield ev("message_start", {"type": "message_start", "message": head})
    for i, b in enumerate(msg["content"]):
        if b["type"] == "text":
            yield ev(
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": i,
                    "content_block": {"type": "text", "text": ""},
                },
            )
            text = b["text"]
            for j in range(0, max(len(text), 1), 40):
                yield ev(
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": i,
                        "delta": {"type": "text_delta", "text": text[j : j + 40]},
                    },
                )
        else:
            start = {"type": "tool_use", "id": b["id"], "name": b["name"], "input": {}}
            yield ev(
                "content_block_start",
                {"type": "content_block_start", "index": i, "content_block": start},
            )
            raw = json.dumps(b["input"])
            for j in range(0, len(raw), 30):
                yield ev(
                    "content_block_delta",
                    {
                        "type": "content_block_delta",
                        "index": i,
                        "delta": {"type": "input_json_delta", "partial_json": raw[j : j + 30]},
                    },
                )
        yield ev("content_block_stop", {"type": "content_block_stop", "index": i})
    yield ev(
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": msg["stop_reason"], "stop_sequence": None},
            "usage": {"output_tokens": msg["usage"]["output_tokens"]},
        },
    )
    yield ev("message_stop", {"type": "message_stop"})


def make_handler(mock: Mock) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _send_json(self, status: int, obj: dict[str, Any]) -> None:
            data = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.send_header("request-id", "req_mock")
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            mock.log({"method": "GET", "path": self.path})
            self._send_json(
                404,
                {
                    "type": "error",
                    "error": {"type": "not_found_error", "message": "mock: no such path"},
                },
            )

        def do_HEAD(self) -> None:
            self.send_response(200)
            self.send_header("content-length", "0")
            self.end_headers()

        def do_POST(self) -> None:
            n = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(n)
            try:
                body = json.loads(raw or b"{}")
            except ValueError:
                body = {"_unparsed": raw.decode("utf-8", "replace")}
            path = self.path.split("?")[0]
            with mock.lock:
                mock.seq += 1
                seq = mock.seq
            if path.endswith("/count_tokens"):
                mock.log({"seq": seq, "path": path, "kind": "count_tokens", "body": body})
                self._send_json(200, {"input_tokens": 100})
                return
            if not path.endswith("/v1/messages"):
                mock.log({"seq": seq, "path": path, "kind": "other", "body": body})
                self._send_json(
                    404,
                    {
                        "type": "error",
                        "error": {"type": "not_found_error", "message": "mock: no such path"},
                    },
                )
                return
            kind, turn = mock.classify(body)
            mock.log({"seq": seq, "path": path, "kind": kind, "body": body})
            if turn.get("wait_hook"):
                _wait_hook(turn["wait_hook"])
            err = turn.get("error")
            if err:
                self._send_json(
                    int(err.get("status", 500)),
                    {
                        "type": "error",
                        "error": {
                            "type": err.get("type", "api_error"),
                            "message": err.get("message", "mock error"),
                        },
                    },
                )
                return
            msg = _message(body, turn, seq)
            if body.get("stream"):
                self.send_response(200)
                self.send_header("content-type", "text/event-stream")
                self.send_header("cache-control", "no-cache")
                self.send_header("request-id", "req_mock")
                self.send_header("connection", "close")
                self.end_headers()
                for chunk in _sse(msg):
                    self.wfile.write(chunk)
                self.wfile.flush()
                self.close_connection = True
            else:
                self._send_json(200, msg)

    return Handler


def serve(turns: list[dict[str, Any]], record: Path) -> tuple[ThreadingHTTPServer, Mock]:
    """Start a mock on a free loopback port in a daemon thread; returns (server, state)."""
    mock = Mock(turns, record)
    server = ThreadingHTTPServer(("127.0.0.1", 0), make_handler(mock))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, mock


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--script", type=Path, required=True)
    ap.add_argument("--record", type=Path, required=True)
    ap.add_argument("--port-file", type=Path)
    a = ap.parse_args()
    turns = json.loads(a.script.read_text())
    server, _ = serve(turns, a.record)
    port = server.server_address[1]
    if a.port_file:
        a.port_file.write_text(str(port))
    print(port, flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    main()
