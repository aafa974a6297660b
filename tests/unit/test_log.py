"""The append-only log: writer, recovery, dedup, rollover, sealing and tamper detection.

Real files under tmp_path; no mocks. Tampering is done the way an attacker with write access
would: editing bytes in JSONL, rewriting a Parquet file, editing the manifest.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from engine.errors import LogCorrupt, Unavailable
from engine.records import (
    HookIdentity,
    HookRun,
    Outcome,
    chain_hash,
    decode_outcome_json,
    encode_json,
    new_event,
)
from ingest.log.findings import VerifyReport
from ingest.log.layout import runs_path, segments
from ingest.log.lines import idempotency_key, key_digest, recompute_hash
from ingest.log.lines import stamp as _stamp
from ingest.log.manifest import manifest_hmac, read_manifest
from ingest.log.reader import iter_outcomes, iter_raw_lines
from ingest.log.schema import (
    BASE_SCHEMA,
    RUN_SCHEMA,
    SCHEMA,
    SEALED_EXTRA_COLUMNS,
    sealed_write_options,
)
from ingest.log.verifier import verify
from ingest.log.writer import LogWriter

W = "w1"
KEY = b"k" * 32


class Clock:
    """An injectable clock for the writer (seconds since the epoch)."""

    def __init__(self, t: float = 1_800_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def make(i: int, *, replay_id: str | None = None, settings_id: str = "set-1") -> Outcome:
    payload = {
        "hook_event_name": "PreToolUse",
        "session_id": "sess-1",
        "cwd": "/home/dev/app",
        "tool_name": "Bash",
        "tool_input": {"command": f"rm -rf build/{i}", "description": "clean ✓"},
        "tool_use_id": f"toolu_{i}",
    }
    ev = new_event(
        payload,
        host="h",
        user="u",
        event_id=f"ev-{i:06d}",
        ts=datetime(2026, 1, 2, 3, 4, 5, i, tzinfo=UTC),
    )
    hook = HookIdentity(type="command", source="project", matcher="Bash", command="guard.sh")
    run = HookRun(
        hook=hook,
        hook_id=hook.key(),
        outcome="allow",
        exit_code=0,
        duration_ms=1.5,
        output={"hash": "0" * 64, "nested": {"k": [1, 2.5, None]}},
    )
    return Outcome(
        event=ev,
        settings_id=settings_id,
        decision="allow",
        reason=f"ok {i}",
        runs=[run],
        replay_id=replay_id,
    )


def build(
    tmp: Path, *, sealed: int = 2, per: int = 5, active: int = 5, key: bytes | None = b""
) -> list[Outcome]:
    """`sealed` sealed segments of `per` records, then `active` records in the active segment."""
    stored: list[Outcome] = []
    with LogWriter.open(tmp, W, key=key) as w:
        for s in range(sealed):
            stored += w.append_batch([make(s * per + i) for i in range(per)])
            assert w.seal() is not None
        stored += w.append_batch([make(sealed * per + i) for i in range(active)])
    return stored


def log(tmp: Path) -> Path:
    return tmp / "log"


def active(tmp: Path, seq: int) -> Path:
    return log(tmp) / "active" / W / f"{seq:08d}.jsonl"


def sealed(tmp: Path, seq: int) -> Path:
    return log(tmp) / "sealed" / W / f"{seq:08d}.parquet"


def manifest(tmp: Path) -> Path:
    return log(tmp) / "manifest" / f"{W}.jsonl"


def edit_lines(path: Path, change: Callable[[list[bytes]], list[bytes]]) -> None:
    path.write_bytes(b"".join(line + b"\n" for line in change(path.read_bytes().splitlines())))


def rewrite_parquet(path: Path, change: Callable[[dict[str, list[Any]]], None]) -> None:
    cols = pq.read_table(path).to_pydict()
    change(cols)
    pq.write_table(pa.Table.from_pydict(cols, schema=SCHEMA), path)


def first(report: VerifyReport) -> tuple[str, str | None]:
    assert not report.ok
    return report.errors[0].kind, report.first_error


def after_sha(report: VerifyReport) -> tuple[str, str | None]:
    """A rewritten sealed file is named first by its sha256, in one line; then the detail."""
    assert not report.ok and "file sha256 does not match" in report.errors[0].message
    assert report.errors[0].line is None
    return report.errors[1].kind, str(report.errors[1])


# ---------------------------------------------------------------- appending and the chain


def test_append_then_verify_ok(tmp_path: Path) -> None:
    with LogWriter.open(tmp_path, W, key=b"") as w:
        stored = w.append_batch([make(i) for i in range(10)])
    assert [o.seq for o in stored] == list(range(1, 11))
    assert stored[0].prev_hash == "" and all(o.worker == W for o in stored)
    assert all(b.prev_hash == a.hash for a, b in itertools.pairwise(stored))
    assert all(o.hash == chain_hash(o) for o in stored)
    assert list(iter_outcomes(tmp_path)) == stored
    report = verify(tmp_path)
    assert report.ok and report.records == 10 and report.first_error is None
    assert report.workers[W].last_seq == 10 and report.workers[W].head == stored[-1].hash


def test_one_fsynced_write_per_batch_and_appended_from_clock(tmp_path: Path) -> None:
    clock = Clock()
    with LogWriter.open(tmp_path, W, clock=clock, key=b"") as w:
        stored = w.append_batch([make(1), make(2)])
    assert {o.appended for o in stored} == {datetime.fromtimestamp(clock.t, UTC)}
    assert active(tmp_path, 1).read_bytes() == b"".join(encode_json(o) + b"\n" for o in stored)


@pytest.mark.parametrize(
    "outcome",
    [
        make(1),
        make(2, replay_id="rp-1"),
        Outcome(event=new_event({"hook_event_name": "Stop"}), settings_id='é\u2028"x"'),
        msgspec.structs.replace(
            make(3), updated_input={"hash": "f" * 64}, specific={"a": {"b": "\\"}}
        ),
    ],
)
def test_fast_line_hash_is_chain_hash(outcome: Outcome) -> None:
    rec = msgspec.structs.replace(
        outcome, worker=W, seq=7, prev_hash="ab" * 32, appended=datetime.now(UTC)
    )
    stamped, line = _stamp(rec)
    assert line == encode_json(stamped)
    assert stamped.hash == chain_hash(stamped) == recompute_hash(line, stamped)
    assert decode_outcome_json(line) == stamped


def test_recompute_hash_falls_back_for_other_line_shapes() -> None:
    stamped, _ = _stamp(make(1))
    reordered = json.dumps({"hash": stamped.hash, **json.loads(encode_json(stamped))}).encode()
    assert recompute_hash(reordered, decode_outcome_json(reordered)) == stamped.hash


def test_chain_continues_across_restart(tmp_path: Path) -> None:
    with LogWriter.open(tmp_path, W, key=b"") as w:
        a = w.append_batch([make(i) for i in range(3)])
    with LogWriter.open(tmp_path, W, key=b"") as w:
        assert (w.last_seq, w.head) == (3, a[-1].hash)
        b = w.append_batch([make(i) for i in range(3, 6)])
    assert [o.seq for o in b] == [4, 5, 6] and b[0].prev_hash == a[-1].hash
    assert [s.name for s in segments(tmp_path)] == ["active/w1/00000001.jsonl"]
    assert verify(tmp_path).ok


def test_chain_continues_across_restart_after_seal(tmp_path: Path) -> None:
    stored = build(tmp_path, sealed=2, per=3, active=0)
    with LogWriter.open(tmp_path, W, key=b"") as w:
        assert (w.last_seq, w.head) == (6, stored[-1].hash)
        nxt = w.append_batch([make(99)])
        assert w.active_path == active(tmp_path, 3)
    assert nxt[0].seq == 7 and nxt[0].prev_hash == stored[-1].hash
    assert verify(tmp_path).ok


# ---------------------------------------------------------------- idempotency


def test_duplicates_skipped_in_batch_across_batches_restart_and_seal(tmp_path: Path) -> None:
    with LogWriter.open(tmp_path, W, key=b"") as w:
        stored = w.append_batch([make(1), make(2), make(1)])
        assert [o.event.id for o in stored] == ["ev-000001", "ev-000002"]
        assert w.append_batch([make(2)]) == []
        again = w.append(make(2))
        assert again.duplicate and again.outcome == make(2)
        assert not w.append(make(2, replay_id="replay-1")).duplicate  # another key
        assert not w.append(make(2, settings_id="set-2")).duplicate
    with LogWriter.open(
        tmp_path, W, key=b""
    ) as w:  # across a restart (keys from the active segment)
        assert w.append_batch([make(1), make(2)]) == []
        assert w.contains(make(1)) and not w.contains(make(3))
        w.seal()
    with LogWriter.open(tmp_path, W, key=b"") as w:  # after sealing (keys from the sealed index)
        assert w.append_batch([make(1), make(2, replay_id="replay-1")]) == []
        assert [o.seq for o in w.append_batch([make(3)])] == [5]
        found = w.lookup(idempotency_key("ev-000002", "set-1", None))
        assert found == stored[1]
        assert w.lookup(idempotency_key("ev-000003", "set-1", None)) is not None  # active
        assert w.lookup(idempotency_key("nope", "set-1", None)) is None
        # A batch of re-delivered events: sealed and active segments, one scan each.
        keys = [idempotency_key(f"ev-00000{i}", "set-1", None) for i in (1, 2, 3)]
        many = w.lookup_many([*keys, idempotency_key("nope", "set-1", None)])
        assert sorted(many) == sorted(keys)
        assert many[keys[1]] == stored[1] and many[keys[2]].seq == 5
    assert verify(tmp_path).ok


def test_keys_index_missing_or_planted_is_rebuilt(tmp_path: Path) -> None:
    build(tmp_path, sealed=1, per=3, active=0)
    keys = log(tmp_path) / "sealed" / W / "00000001.keys"
    keys.unlink()
    with LogWriter.open(tmp_path, W, key=b"") as w:
        assert w.append_batch([make(0)]) == []
    assert keys.exists()
    # a planted index (claiming a key that is not in the log) is not trusted
    keys.write_bytes(keys.read_bytes() + key_digest(make(42)))
    with LogWriter.open(tmp_path, W, key=b"") as w:
        assert [o.event.id for o in w.append_batch([make(42)])] == ["ev-000042"]


def test_planted_keys_index_not_trusted_without_a_valid_hmac(tmp_path: Path) -> None:
    build(tmp_path, sealed=1, per=3, active=0, key=KEY)
    keys = log(tmp_path) / "sealed" / W / "00000001.keys"
    keys.write_bytes(keys.read_bytes() + key_digest(make(42)))
    line = json.loads(manifest(tmp_path).read_bytes())
    line["keys_sha256"] = hashlib.sha256(keys.read_bytes()).hexdigest()  # no key to re-sign
    manifest(tmp_path).write_text(json.dumps(line) + "\n")
    with LogWriter.open(tmp_path, W, key=KEY) as w:
        assert w.append_batch([make(0)]) == []  # real keys still known
        assert [o.event.id for o in w.append_batch([make(42)])] == ["ev-000042"]


# ---------------------------------------------------------------- rollover


def test_rollover_by_size_seals_old_segments(tmp_path: Path) -> None:
    with LogWriter.open(tmp_path, W, max_bytes=2500, key=b"") as w:
        stored = [o for i in range(12) for o in w.append_batch([make(i)])]
    segs = segments(tmp_path)
    assert [s.kind for s in segs[:-1]] == ["sealed"] * (len(segs) - 1) and len(segs) >= 4
    entries = [m.entry for m in read_manifest(tmp_path, W)]
    assert all(e is not None and e.count >= 1 for e in entries)
    assert [o.seq for o in iter_outcomes(tmp_path)] == list(range(1, 13))
    assert list(iter_outcomes(tmp_path)) == stored
    assert verify(tmp_path).ok


def test_rollover_by_age_with_injected_clock(tmp_path: Path) -> None:
    clock = Clock()
    with LogWriter.open(tmp_path, W, max_age_s=60, clock=clock, key=b"") as w:
        w.append_batch([make(1)])
        clock.t += 30
        w.append_batch([make(2)])
        assert w.roll_if_due() is None
        clock.t += 31  # the segment's first record is now 61 s old
        w.append_batch([make(3)])
        assert [(s.seq, s.kind) for s in segments(tmp_path)] == [(1, "sealed"), (2, "active")]
        clock.t += 61  # an idle worker seals through roll_if_due
        entry = w.roll_if_due()
        assert entry is not None and (entry.seq, entry.first_seq, entry.last_seq) == (2, 3, 3)
    (m1, m2) = read_manifest(tmp_path, W)
    assert m1.entry is not None and m1.entry.count == 2 and m2.entry is not None
    assert m2.entry.prev_head == m1.entry.head
    assert verify(tmp_path).ok


def test_age_survives_restart(tmp_path: Path) -> None:
    clock = Clock()
    with LogWriter.open(tmp_path, W, max_age_s=60, clock=clock, key=b"") as w:
        w.append_batch([make(1)])
    clock.t += 120
    with LogWriter.open(tmp_path, W, max_age_s=60, clock=clock, key=b"") as w:
        w.append_batch([make(2)])
    assert [(s.seq, s.kind) for s in segments(tmp_path)] == [(1, "sealed"), (2, "active")]


# ---------------------------------------------------------------- sealing and crash recovery


def test_sealed_segment_layout_and_manifest(tmp_path: Path) -> None:
    stored = build(tmp_path, sealed=1, per=4, active=0)
    assert not active(tmp_path, 1).exists()
    table = pq.read_table(sealed(tmp_path, 1))
    assert table.schema.names == SCHEMA.names
    assert table.column("record").to_pylist() == [encode_json(o) for o in stored]
    assert table.column("tool_name").to_pylist() == ["Bash"] * 4
    (m,) = read_manifest(tmp_path, W)
    e = m.entry
    assert e is not None and (e.seq, e.first_seq, e.last_seq, e.count) == (1, 1, 4, 4)
    assert (e.head, e.prev_head, e.hmac) == (stored[-1].hash, "", None)
    assert e.first_ts == stored[0].appended and e.last_ts == stored[-1].appended


def test_leftover_tmp_is_ignored_and_removed(tmp_path: Path) -> None:
    build(tmp_path, sealed=1, per=2, active=2)
    tmp = log(tmp_path) / "sealed" / W / "00000002.parquet.tmp"
    tmp.write_bytes(b"PAR1 half a file")
    assert [s.name for s in segments(tmp_path)] == [
        "sealed/w1/00000001.parquet",
        "active/w1/00000002.jsonl",
    ]
    assert verify(tmp_path).ok
    LogWriter.open(tmp_path, W, key=b"").close()
    assert not tmp.exists()


def test_crash_between_parquet_and_manifest_line_is_completed(tmp_path: Path) -> None:
    with LogWriter.open(tmp_path, W, key=b"") as w:
        w.append_batch([make(i) for i in range(3)])
        source = active(tmp_path, 1).read_bytes()
        w.seal()
    # the state a crash leaves: Parquet renamed into place, no manifest line, source present
    active(tmp_path, 1).write_bytes(source)
    manifest(tmp_path).write_bytes(b"")
    assert first(verify(tmp_path))[0] == "manifest"
    assert len(list(iter_outcomes(tmp_path))) == 3  # the sealed copy is read, once
    LogWriter.open(tmp_path, W, key=b"").close()
    assert not active(tmp_path, 1).exists() and len(read_manifest(tmp_path, W)) == 1
    assert verify(tmp_path).ok


def test_crash_before_removing_the_active_source(tmp_path: Path) -> None:
    with LogWriter.open(tmp_path, W, key=b"") as w:
        w.append_batch([make(i) for i in range(3)])
        source = active(tmp_path, 1).read_bytes()
        w.seal()
    active(tmp_path, 1).write_bytes(source)
    assert [s.kind for s in segments(tmp_path)] == ["sealed"]
    report = verify(tmp_path)
    assert report.ok and any("left over" in n for n in report.notes)
    with LogWriter.open(tmp_path, W, key=b"") as w:
        assert w.append_batch([make(9)])[0].seq == 4
    assert not active(tmp_path, 1).exists() and verify(tmp_path).ok


def test_a_parquet_found_alone_is_not_signed(tmp_path: Path) -> None:
    build(tmp_path, sealed=2, per=2, active=0)
    lines = manifest(tmp_path).read_bytes().splitlines(keepends=True)
    manifest(tmp_path).write_bytes(b"".join(lines[:-1]))
    LogWriter.open(tmp_path, W, key=KEY).close()  # no active source: left for verify
    assert len(read_manifest(tmp_path, W)) == 1
    assert first(verify(tmp_path))[0] == "manifest"


def test_older_unsealed_active_segments_are_sealed_at_open(tmp_path: Path) -> None:
    with LogWriter.open(tmp_path, W, key=b"") as w:
        stored = w.append_batch([make(i) for i in range(3)])
    lines = active(tmp_path, 1).read_bytes().splitlines(keepends=True)
    active(tmp_path, 1).write_bytes(b"".join(lines[:2]))
    active(tmp_path, 2).write_bytes(lines[2])
    with LogWriter.open(tmp_path, W, key=b"") as w:
        assert (w.last_seq, w.head, w.active_path) == (3, stored[-1].hash, active(tmp_path, 2))
        w.append_batch([make(3)])
    assert [(s.seq, s.kind) for s in segments(tmp_path)] == [(1, "sealed"), (2, "active")]
    assert verify(tmp_path).ok


def test_a_failed_seal_does_not_stop_appends(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    clock = Clock()
    with LogWriter.open(tmp_path, W, max_bytes=1, clock=clock, key=b"") as w:
        trap = log(tmp_path) / "sealed" / W / "00000001.parquet.tmp"
        trap.mkdir()  # the seal's temp file cannot be created
        assert len(w.append_batch([make(1)])) == 1
        assert len(w.append_batch([make(2)])) == 1  # retried a minute later; appends go on
        assert "sealing failed" in caplog.text
        assert [(s.seq, s.kind) for s in segments(tmp_path)] == [(1, "active")]
        assert sorted(p.name for p in trap.parent.iterdir()) == [trap.name]  # nothing half-made
        assert read_manifest(tmp_path, W) == []
        trap.rmdir()
        clock.t += 61
        assert w.append_batch([make(3)])[0].seq == 3
    assert [(s.seq, s.kind) for s in segments(tmp_path)] == [(1, "sealed"), (2, "sealed")]
    assert verify(tmp_path).ok


def test_torn_manifest_line_is_set_aside(tmp_path: Path) -> None:
    build(tmp_path, sealed=1, per=2, active=1)
    with open(manifest(tmp_path), "ab") as f:
        f.write(b'{"worker":"w1","seq":2,"fir')
    assert first(verify(tmp_path))[0] == "truncated"
    LogWriter.open(tmp_path, W, key=b"").close()
    assert len(list(manifest(tmp_path).parent.glob("w1.jsonl.torn-*"))) == 1
    assert verify(tmp_path).ok


def test_torn_last_line_is_set_aside_and_chain_continues(tmp_path: Path) -> None:
    with LogWriter.open(tmp_path, W, key=b"") as w:
        w.append_batch([make(i) for i in range(3)])
    full = active(tmp_path, 1).read_bytes()
    torn = encode_json(make(3))[:57]
    with open(active(tmp_path, 1), "ab") as f:
        f.write(torn)
    kind, msg = first(verify(tmp_path))
    assert (
        kind == "truncated"
        and msg is not None
        and msg.startswith("active/w1/00000001.jsonl:4: torn last line")
    )
    assert len(list(iter_outcomes(tmp_path))) == 3  # readers skip a partial line
    with LogWriter.open(tmp_path, W, key=b"") as w:
        assert w.append_batch([make(3)])[0].seq == 4
    (aside,) = active(tmp_path, 1).parent.glob("00000001.jsonl.torn-*")
    assert aside.read_bytes() == torn
    assert active(tmp_path, 1).read_bytes().startswith(full)
    report = verify(tmp_path)
    assert report.ok and report.records == 4 and report.notes


def test_lock_refuses_a_second_writer(tmp_path: Path) -> None:
    w = LogWriter.open(tmp_path, W, key=b"")
    with pytest.raises(
        Unavailable, match=r"\.lock: the log of worker 'w1' is already open .*pid \d+"
    ):
        LogWriter.open(tmp_path, W, key=b"")
    LogWriter.open(tmp_path, "w2", key=b"").close()  # another worker chain is fine
    w.close()
    LogWriter.open(tmp_path, W, key=b"").close()


def test_bad_worker_name(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"worker name '\.\./x'"):
        LogWriter.open(tmp_path, "../x", key=b"")


# ---------------------------------------------------------------- reading


@pytest.mark.parametrize("junk", [b"{not json", b'{"seq": ' + b"[" * 100_000], ids=["bad", "deep"])
def test_corrupt_line_reported_with_file_and_line(tmp_path: Path, junk: bytes) -> None:
    build(tmp_path, sealed=0, active=4)
    edit_lines(active(tmp_path, 1), lambda ls: [*ls[:2], junk, *ls[2:]])
    bad: list[tuple[str, int, str]] = []
    seqs = [
        o.seq for o in iter_outcomes(tmp_path, on_corrupt=lambda f, n, why: bad.append((f, n, why)))
    ]
    assert seqs == [1, 2, 3, 4]
    assert [(f, n) for f, n, _ in bad] == [(str(active(tmp_path, 1)), 3)]
    kind, msg = first(verify(tmp_path))
    assert (
        kind == "corrupt"
        and msg is not None
        and msg.startswith("active/w1/00000001.jsonl:3: unreadable record")
    )
    assert len(verify(tmp_path).errors) == 1  # the chain resumes after it


def test_iter_raw_lines_of_an_active_segment_sealed_meanwhile(tmp_path: Path) -> None:
    with LogWriter.open(tmp_path, W, key=b"") as w:
        stored = w.append_batch([make(1), make(2)])
        (seg,) = segments(tmp_path)
        w.seal()
    assert seg.kind == "active"
    assert [raw for _, raw in iter_raw_lines(seg)] == [encode_json(o) for o in stored]


# ---------------------------------------------------------------- tampering


def test_tamper_edit_field_in_active_jsonl(tmp_path: Path) -> None:
    build(tmp_path)
    edit_lines(
        active(tmp_path, 3),
        lambda ls: [ls[0], ls[1].replace(b'"blocked":false', b'"blocked":true'), *ls[2:]],
    )
    assert first(verify(tmp_path)) == (
        "edited",
        "active/w1/00000003.jsonl:2: record seq 12: hash mismatch (record edited)",
    )
    assert len(verify(tmp_path).errors) == 1


def test_tamper_edit_record_in_sealed_parquet(tmp_path: Path) -> None:
    build(tmp_path)

    def deny(cols: dict[str, list[Any]]) -> None:
        cols["record"][2] = cols["record"][2].replace(b'"decision":"allow"', b'"decision":"deny"')
        cols["decision"][2] = "deny"

    rewrite_parquet(sealed(tmp_path, 2), deny)
    report = verify(tmp_path)
    assert after_sha(report) == (
        "edited",
        "sealed/w1/00000002.parquet:3: record seq 8: hash mismatch (record edited)",
    )
    assert any("sha256" in e.message for e in report.errors)


def test_tamper_edit_flat_column_only_in_sealed_parquet(tmp_path: Path) -> None:
    build(tmp_path)

    def hide(cols: dict[str, list[Any]]) -> None:
        cols["tool_name"][1] = "Read"

    rewrite_parquet(sealed(tmp_path, 1), hide)
    kind, msg = after_sha(verify(tmp_path))
    assert kind == "edited"
    assert (
        msg
        == "sealed/w1/00000001.parquet:2: record seq 2: column 'tool_name' is 'Read' but the record says 'Bash' (column edited)"
    )


def test_tamper_delete_a_line(tmp_path: Path) -> None:
    build(tmp_path)
    edit_lines(active(tmp_path, 3), lambda ls: [ls[0], *ls[2:]])
    assert first(verify(tmp_path)) == (
        "removed",
        "active/w1/00000003.jsonl:2: record seq 13: record seq 12 missing before it (removed)",
    )


def test_tamper_delete_a_row_in_sealed_parquet(tmp_path: Path) -> None:
    build(tmp_path)

    def drop(cols: dict[str, list[Any]]) -> None:
        for values in cols.values():
            del values[1]

    rewrite_parquet(sealed(tmp_path, 1), drop)
    kind, msg = after_sha(verify(tmp_path))
    assert (
        kind == "removed"
        and msg
        == "sealed/w1/00000001.parquet:2: record seq 3: record seq 2 missing before it (removed)"
    )


def test_tamper_swap_two_lines(tmp_path: Path) -> None:
    build(tmp_path)
    edit_lines(active(tmp_path, 3), lambda ls: [ls[0], ls[2], ls[1], *ls[3:]])
    assert first(verify(tmp_path)) == (
        "reordered",
        "active/w1/00000003.jsonl:2: record seq 13: seq 13 where 12 was expected (records reordered)",
    )


def test_tamper_delete_sealed_segment(tmp_path: Path) -> None:
    build(tmp_path)
    sealed(tmp_path, 2).unlink()
    report = verify(tmp_path)
    assert first(report) == (
        "deleted",
        "sealed/w1/00000002.parquet: record seq 6: sealed segment listed at manifest/w1.jsonl:2 is missing (deleted)",
    )
    assert len(report.errors) == 1  # the chain resumes from the manifest's head


def test_tamper_delete_sealed_segment_and_its_manifest_line(tmp_path: Path) -> None:
    build(tmp_path, sealed=3)
    sealed(tmp_path, 2).unlink()
    edit_lines(manifest(tmp_path), lambda ls: [ls[0], ls[2]])
    kind, msg = first(verify(tmp_path))
    assert (
        kind == "deleted"
        and msg == "sealed/w1/00000002.parquet: record seq 6: segment seq 2 missing (deleted)"
    )


def test_tamper_truncate_active_segment(tmp_path: Path) -> None:
    build(tmp_path)
    path = active(tmp_path, 3)
    os.truncate(path, path.stat().st_size - 100)
    kind, msg = first(verify(tmp_path))
    assert kind == "truncated"
    assert msg is not None and msg.startswith("active/w1/00000003.jsonl:5: torn last line (")
    assert msg.endswith("segment truncated after record seq 14")


def test_tamper_truncate_sealed_segment_and_rewrite(tmp_path: Path) -> None:
    build(tmp_path)

    def cut(cols: dict[str, list[Any]]) -> None:
        for values in cols.values():
            del values[-2:]

    rewrite_parquet(sealed(tmp_path, 1), cut)
    report = verify(tmp_path)
    assert after_sha(report) == (
        "truncated",
        "sealed/w1/00000001.parquet:3: 3 records, manifest/w1.jsonl:1 says 5",
    )
    assert {"truncated", "removed"} <= {e.kind for e in report.errors}  # segment 2 no longer links


def test_tamper_remove_last_manifest_line(tmp_path: Path) -> None:
    build(tmp_path)
    edit_lines(manifest(tmp_path), lambda ls: ls[:-1])
    kind, msg = first(verify(tmp_path))
    assert kind == "manifest"
    assert msg is not None and msg.startswith(
        "sealed/w1/00000002.parquet: record seq 6: not listed in manifest/w1.jsonl"
    )


def test_hmac_signed_log_verifies_with_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOOKAUDIT_LOG_KEY", KEY.decode())
    build(tmp_path, key=None)  # key from the environment
    for m in read_manifest(tmp_path, W):
        assert m.entry is not None and m.entry.hmac == manifest_hmac(m.entry, KEY)
    report = verify(tmp_path)
    assert report.ok and report.hmac_checked
    assert first(verify(tmp_path, key=b"another key"))[0] == "hmac"


def test_tamper_forge_manifest_line_without_the_key(tmp_path: Path) -> None:
    build(tmp_path, key=KEY)

    def cut(cols: dict[str, list[Any]]) -> None:  # drop segment 2's last record ...
        for values in cols.values():
            del values[-1]

    rewrite_parquet(sealed(tmp_path, 2), cut)
    path = sealed(tmp_path, 2)
    lines = manifest(tmp_path).read_bytes().splitlines()
    forged = json.loads(lines[1])  # ... and rewrite its manifest line to match
    records = pq.read_table(path).column("record").to_pylist()
    last = decode_outcome_json(records[-1])
    forged.update(count=4, last_seq=last.seq, head=last.hash, size=path.stat().st_size)
    forged["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    forged["hmac"] = "0" * 64
    manifest(tmp_path).write_bytes(lines[0] + b"\n" + json.dumps(forged).encode() + b"\n")
    assert first(verify(tmp_path, key=KEY)) == (
        "hmac",
        "manifest/w1.jsonl:2: record seq 6: bad hmac (line forged or edited)",
    )
    del forged["hmac"]
    manifest(tmp_path).write_bytes(lines[0] + b"\n" + json.dumps(forged).encode() + b"\n")
    assert first(verify(tmp_path, key=KEY)) == (
        "hmac",
        "manifest/w1.jsonl:2: record seq 6: no hmac but a key is set (unsigned line)",
    )
    assert not verify(tmp_path).ok  # without the key: segment 3 no longer links to the forged head


def test_unsigned_log_fails_verification_with_a_key(tmp_path: Path) -> None:
    build(tmp_path)
    assert verify(tmp_path).ok
    assert first(verify(tmp_path, key=KEY))[0] == "hmac"


def test_raise_for_errors(tmp_path: Path) -> None:
    build(tmp_path)
    verify(tmp_path).raise_for_errors()
    edit_lines(active(tmp_path, 3), lambda ls: ls[1:])
    with pytest.raises(LogCorrupt, match=r"^active/w1/00000003\.jsonl:1: record seq 12: "):
        verify(tmp_path).raise_for_errors()


# ---------------------------------------------------------------- extra columns and runs files


def runs_file(tmp: Path, seq: int) -> Path:
    return log(tmp) / "sealed" / W / f"{seq:08d}.runs.parquet"


def test_sealed_segment_has_the_extra_flat_columns(tmp_path: Path) -> None:
    stored = build(tmp_path, sealed=1, per=3, active=0)
    path = sealed(tmp_path, 1)
    table = pq.read_table(path)
    names = table.schema.names
    assert names[: len(BASE_SCHEMA) - 1] == BASE_SCHEMA.names[:-1] and names[-1] == "record"
    assert names[names.index("hash") + 1 : -1] == [n for n, *_ in SEALED_EXTRA_COLUMNS]
    assert table.schema.equals(SCHEMA)
    cols = table.to_pydict()
    assert cols["command"] == [f"rm -rf build/{i}" for i in range(3)]
    assert cols["file_path"] == cols["url"] == [None] * 3
    assert cols["n_runs"] == [1, 1, 1] and cols["errors"] == [[], [], []]
    assert cols["continue"] == [o.continue_ for o in stored]
    assert cols["engine_version"] == [o.engine_version for o in stored]
    assert cols["permission_mode"] == [o.event.permission_mode for o in stored]
    # the encodings of sealed_write_options
    meta = pq.ParquetFile(path).metadata
    ts = meta.row_group(0).column(names.index("ts"))
    assert ts.compression == "ZSTD" and "DELTA_BINARY_PACKED" in ts.encodings
    assert meta.row_group(0).column(names.index("session_id")).bloom_filter_offset is not None
    assert "DELTA_BINARY_PACKED" in sealed_write_options(names)["column_encoding"].values()


def test_runs_file_one_row_per_hook_run_and_listed_in_the_manifest(tmp_path: Path) -> None:
    stored = build(tmp_path, sealed=2, per=3, active=1, key=KEY)
    for seq, recs in ((1, stored[:3]), (2, stored[3:6])):
        seg = next(s for s in segments(tmp_path) if s.seq == seq)
        assert runs_path(seg) == runs_file(tmp_path, seq)
        runs = pq.read_table(runs_file(tmp_path, seq))
        assert runs.schema.equals(RUN_SCHEMA)
        assert runs.num_rows == sum(len(o.runs) for o in recs) == 3
        cols = runs.to_pydict()
        assert cols["seq"] == [o.seq for o in recs] and cols["run"] == [1, 1, 1]
        assert cols["id"] == [o.event.id for o in recs]
        assert cols["command"] == ["guard.sh"] * 3 and cols["duration_ms"] == [1.5] * 3
        assert cols["hook_id"] == [o.runs[0].hook_id for o in recs]
        (entry,) = [m.entry for m in read_manifest(tmp_path, W) if m.entry and m.entry.seq == seq]
        digest = hashlib.sha256(runs_file(tmp_path, seq).read_bytes()).hexdigest()
        assert entry.runs_sha256 == digest
    # the active segment has none
    assert not runs_file(tmp_path, 3).exists()
    assert runs_path(segments(tmp_path)[-1]) == runs_file(tmp_path, 3)
    assert verify(tmp_path, key=KEY).ok


def test_tamper_runs_file(tmp_path: Path) -> None:
    build(tmp_path, key=KEY)
    path = runs_file(tmp_path, 1)
    table = pq.read_table(path)
    i = table.schema.get_field_index("outcome")
    forged = table.set_column(i, "outcome", pa.array(["error"] * table.num_rows))
    pq.write_table(forged, path)
    report = verify(tmp_path, key=KEY)
    assert [(e.kind, e.file) for e in report.errors] == [
        ("manifest", "sealed/w1/00000001.runs.parquet"),
        ("edited", "sealed/w1/00000001.runs.parquet"),
    ]
    assert report.first_error == (
        "sealed/w1/00000001.runs.parquet: record seq 1: runs file sha256 does not match "
        "manifest/w1.jsonl:1's runs_sha256 (runs file rewritten)"
    )
    # the hmac covers runs_sha256: re-pointing the manifest line at the forged file breaks it
    lines = manifest(tmp_path).read_bytes().splitlines()
    line = json.loads(lines[0])
    line["runs_sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
    manifest(tmp_path).write_bytes(b"\n".join([json.dumps(line).encode(), *lines[1:]]) + b"\n")
    kinds = {e.kind for e in verify(tmp_path, key=KEY).errors}
    assert kinds == {"hmac", "edited"}  # and the rows still disagree with the records
    path.unlink()
    assert ("deleted", "sealed/w1/00000001.runs.parquet") in [
        (e.kind, e.file) for e in verify(tmp_path).errors
    ]


def test_log_sealed_before_runs_files_still_verifies_and_reads(
    tmp_path: Path, old_sealed_layout: Callable[..., None]
) -> None:
    stored = build(tmp_path, key=KEY)
    old_sealed_layout(tmp_path, key=KEY)
    assert b"runs_sha256" not in manifest(tmp_path).read_bytes()
    assert not runs_file(tmp_path, 1).exists()
    assert pq.read_table(sealed(tmp_path, 1)).schema.names == BASE_SCHEMA.names
    assert all(m.entry and m.entry.runs_sha256 is None for m in read_manifest(tmp_path, W))
    assert verify(tmp_path, key=KEY).ok
    assert [o.hash for o in iter_outcomes(tmp_path)] == [o.hash for o in stored]
    with LogWriter.open(tmp_path, W, key=KEY) as w:  # sealing goes on in the new layout
        assert w.append_batch([make(100)])[0].seq == len(stored) + 1
        entry = w.seal()
    assert entry is not None and entry.runs_sha256 is not None
    assert runs_file(tmp_path, 3).exists() and not runs_file(tmp_path, 2).exists()
    assert verify(tmp_path, key=KEY).ok


def test_crash_after_the_runs_file_before_the_parquet(tmp_path: Path) -> None:
    build(tmp_path, sealed=1, per=2, active=2)
    orphan = runs_file(tmp_path, 2)  # written first at a seal, then the crash
    orphan.write_bytes(runs_file(tmp_path, 1).read_bytes())
    (orphan.parent / (orphan.name + ".tmp")).write_bytes(b"half")
    assert verify(tmp_path).ok  # a runs file is only checked beside its sealed segment
    LogWriter.open(tmp_path, W, key=b"").close()
    assert not orphan.exists() and not (orphan.parent / (orphan.name + ".tmp")).exists()
    assert runs_file(tmp_path, 1).exists() and verify(tmp_path).ok


def test_crash_before_the_manifest_line_rewrites_the_runs_file(tmp_path: Path) -> None:
    with LogWriter.open(tmp_path, W, key=KEY) as w:
        w.append_batch([make(i) for i in range(3)])
        source = active(tmp_path, 1).read_bytes()
        w.seal()
    active(tmp_path, 1).write_bytes(source)
    manifest(tmp_path).write_bytes(b"")
    runs_file(tmp_path, 1).unlink()
    LogWriter.open(tmp_path, W, key=KEY).close()
    (m,) = read_manifest(tmp_path, W)
    assert m.entry is not None and m.entry.hmac == manifest_hmac(m.entry, KEY)
    data = runs_file(tmp_path, 1).read_bytes()
    assert m.entry.runs_sha256 == hashlib.sha256(data).hexdigest()
    assert verify(tmp_path, key=KEY).ok


def test_a_fresh_log_is_keyed_with_no_step_to_forget(tmp_path: Path) -> None:
    """With no key given and none in the environment, the writer of a log with no record
    makes <data-dir>/log/key (0600) and signs with it; verify finds it; a second writer
    (another worker) uses the same key; a log that already had unkeyed records gets none."""
    import os
    import stat

    stored = build(tmp_path, key=None)
    key_file = tmp_path / "log" / "key"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    key = key_file.read_bytes().strip()
    assert len(key) == 64 and os.environ.get("HOOKAUDIT_LOG_KEY") is None
    for m in read_manifest(tmp_path, W):
        assert m.entry is not None and m.entry.hmac == manifest_hmac(m.entry, key)
    report = verify(tmp_path)
    assert report.ok and report.hmac_checked and report.records == len(stored)
    with LogWriter.open(tmp_path, "w2") as w:
        w.append_batch([make(99)])
    assert key_file.read_bytes().strip() == key and verify(tmp_path).ok
    old = tmp_path / "old"
    build(old)  # written unkeyed (key=b"")
    with LogWriter.open(old, W) as w:  # reopened with defaults: still unkeyed
        w.append_batch([make(100)])
    assert not (old / "log" / "key").exists() and verify(old).ok
