"""The differential suite against the real Claude Code (tests/conformance/claude_code).

The default test run plays the fast subset; the whole suite is
`python -m tests.conformance.claude_code` (what .ci/run calls). Without the pinned binary
these tests fail and say how to install it: a fidelity claim nobody measured is no claim.
"""

from __future__ import annotations

import json
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import harness  # noqa: E402
import mock_api  # noqa: E402
import scenarios  # noqa: E402


def _binary() -> Path:
    try:
        return harness.claude_bin()
    except FileNotFoundError as exc:
        pytest.fail(str(exc))


@pytest.mark.timeout(900)
def test_fast_subset_matches_claude_code() -> None:
    results = harness.run_all(scenarios.FAST, _binary(), jobs=3, progress=False)
    bad = [
        f"{r.name}: {r.status}: {r.diffs[:2]}"
        for r in results
        if r.status not in ("match", "deviation")
    ]
    print(harness.summary(results))
    assert not bad, "\n".join(bad)
    assert len(results) == len(scenarios.FAST) >= 15


def test_scenario_names_are_unique_and_deviations_say_why() -> None:
    names = [s.name for s in scenarios.ALL]
    assert len(names) == len(set(names))
    assert len(names) >= 190
    assert all(s.deviation is None or len(s.deviation) > 20 for s in scenarios.ALL)


def _post(url: str, body: dict[str, object]) -> tuple[int, bytes]:
    req = urllib.request.Request(
        url, json.dumps(body).encode(), {"content-type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_mock_speaks_the_messages_wire_format(tmp_path: Path) -> None:
    turns = [
        {"tools": [{"name": "Bash", "input": {"command": "echo hi"}}]},
        {"error": {"status": 529, "type": "overloaded_error", "message": "busy"}},
    ]
    server, _ = mock_api.serve(turns, tmp_path / "r.jsonl")
    base = f"http://127.0.0.1:{server.server_address[1]}/v1/messages"
    tools = [{"name": "Bash", "input_schema": {}}]
    try:
        code, raw = _post(
            base, {"stream": True, "tools": tools, "messages": [{"role": "user", "content": "go"}]}
        )
        events = [line[7:] for line in raw.decode().splitlines() if line.startswith("event: ")]
        assert code == 200
        assert events[0] == "message_start" and events[-1] == "message_stop"
        assert "input_json_delta" in raw.decode() and "message_delta" in events
        data = [
            json.loads(line[6:]) for line in raw.decode().splitlines() if line.startswith("data: ")
        ]
        partial = "".join(
            d["delta"].get("partial_json", "") for d in data if d["type"] == "content_block_delta"
        )
        assert json.loads(partial) == {"command": "echo hi"}
        code, raw = _post(base, {"tools": tools, "messages": [{"role": "user", "content": "x"}]})
        assert code == 529 and json.loads(raw)["error"]["type"] == "overloaded_error"
        code, raw = _post(base + "/count_tokens", {"messages": []})
        assert code == 200 and json.loads(raw) == {"input_tokens": 100}
        code, raw = _post(
            base,
            {
                "stream": False,
                "messages": [
                    {"role": "user", "content": 'judge MOCKVERDICT:{"ok":false,"reason":"r"} now'}
                ],
            },
        )
        assert json.loads(json.loads(raw)["content"][0]["text"]) == {"ok": False, "reason": "r"}
        code, raw = _post(base, {"messages": [{"role": "user", "content": "title?"}]})
        assert json.loads(raw)["content"][0]["text"] == "MOCK_SUMMARY"
    finally:
        server.shutdown()
        server.server_close()
    kinds = [json.loads(line)["kind"] for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert kinds == ["turn0", "turn1", "count_tokens", "verdict", "aux"]


def test_captured_hook_inputs_are_accepted_by_the_engine() -> None:
    from engine.events import is_known
    from engine.run import parse_payload

    fixtures = sorted((harness.REPO / "tests/fixtures/claude_code").glob("*/*.json"))
    assert len(fixtures) >= 10
    seen = set()
    for f in fixtures:
        for inp in json.loads(f.read_text())["hook_inputs"]:
            payload = parse_payload(json.dumps(inp).encode(), str(f))
            assert is_known(payload["hook_event_name"]), f
            seen.add(payload["hook_event_name"])
    assert {"PreToolUse", "PostToolUse", "Stop", "SubagentStart", "PermissionRequest"} <= seen
