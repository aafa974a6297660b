"""replay.parts: splitting the log between jobs, and reading live ids from hostile lines."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ingest.log.layout import Segment
from replay.parts import LateSkips, Restart, SegmentQueue, _line_ids


def segment(tmp_path: Path, lines: list[bytes], name: str = "w1") -> Segment:
    folder = tmp_path / "log" / "active" / name
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "00000001.jsonl"
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return Segment(name, 1, "active", path)


def truth(lines: list[bytes]) -> list[tuple[str, int]]:
    """What a full decode says: (event id, line number) of each readable live record."""
    out = []
    for n, raw in enumerate(lines, 1):
        try:
            doc = json.loads(raw)
        except ValueError:
            continue
        ev = doc.get("event") if isinstance(doc, dict) else None
        if not isinstance(ev, dict) or not isinstance(ev.get("id"), str):
            continue
        if doc.get("replay_id") is None:
            out.append((ev["id"], n))
    return out


def record(eid: str, replay_id: str | None, **extra: Any) -> dict[str, Any]:
    return {
        "event": {"id": eid, "ts": "2026-03-01T09:00:00Z", "event": "Stop", "payload": "{}"},
        "settings_id": "s",
        "runs": [{"output": {"replay_id": "inner", "note": ',"replay_id":null,"worker":'}}],
        **extra,
        "replay_id": replay_id,
        "worker": "w1",
        "seq": 1,
        "hash": "h",
    }


def dump(doc: object) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode()


def test_live_ids_from_every_layout(tmp_path: Path) -> None:
    lines = [
        dump(record("a", None)),  # the writer's layout, live
        dump(record("b", "replay-1")),  # a replayed outcome
        dump({"replay_id": None, **record("c", None)}),  # keys in another order
        b'{"event":{"id":"d"},"replay_id":null,"worker":"w1","replay_id":"r"}',  # last wins
        b'{"event":{"id":"d2"},"replay_id":"r","worker":"w1","replay_id":null,"worker":"w"}',
        dump(record('e"quoted', None)),  # an id with an escaped quote
        b'{"event":{"id":"f"',  # torn
        b"not json at all",
        b"",
        dump(record("g", None)) + b" ",  # trailing space
    ]
    got = _line_ids(segment(tmp_path, lines))
    assert got == truth(lines)
    assert [eid for eid, _ in got] == ["a", "c", "d2", 'e"quoted', "g"]


ids = st.text(min_size=1, max_size=12)
docs = st.builds(record, ids, st.one_of(st.none(), ids))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(docs.map(dump), st.binary(max_size=40)), max_size=8))
def test_live_ids_match_a_full_decode(tmp_path_factory: Any, lines: list[bytes]) -> None:
    lines = [line.replace(b"\n", b" ") for line in lines]
    seg = segment(tmp_path_factory.mktemp("seg"), lines)
    assert _line_ids(seg) == truth(lines)


def test_the_queue_hands_each_segment_to_one_taker_largest_first(tmp_path: Path) -> None:
    segs = [
        segment(tmp_path, [dump(record(str(i), None))] * size, name=f"w{i}")
        for i, size in enumerate([50, 10, 10, 30, 40])
    ]
    q = SegmentQueue(segs)
    first, second = q.take(), q.take()  # two jobs taking in turns
    got = [next(first), next(second), next(second), next(first), next(first)]
    assert [s.worker for s in got] == ["w0", "w4", "w3", "w1", "w2"]  # ties in log order
    assert list(first) == [] and list(second) == []
    assert list(SegmentQueue([]).take()) == []
    assert msgspec.json.decode(dump(record("x", None)))["event"]["id"] == "x"


def test_late_skips_restart_only_when_a_read_segment_is_named() -> None:
    answers: list[dict[str, frozenset[int]] | None] = [None, {"b": frozenset({3})}]
    late = LateSkips(lambda block: answers.pop(0) if answers else None)
    assert late.get("a", frozenset()) == frozenset()  # before the answer: nothing skipped
    assert late.get("b", frozenset()) == frozenset({3})  # the answer came meanwhile
    assert late.early == ["a"] and dict(late) == {"b": frozenset({3})}

    late = LateSkips(lambda block: {"a": frozenset({1})} if block else None)
    assert late.get("a", frozenset()) == frozenset()
    with pytest.raises(Restart, match="a"):
        late.finish()  # "a" was read whole without skipping its row 1: start over
