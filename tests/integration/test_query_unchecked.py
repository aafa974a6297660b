"""`hookaudit query unchecked`: backfilled calls with no live decision, in sealed and active
segments, read by DuckDB; and `hookaudit backfill --dry-run` on a real transcript."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec

from engine.dialects.base import derived_id
from engine.records import Outcome, new_event
from ingest.backfill import Call
from ingest.log.writer import LogWriter
from queries.catalog import load_catalog
from queries.db import open_db, run_named

T0 = datetime(2026, 3, 1, 10, 0, tzinfo=UTC)
BIN = Path(sys.executable).parent
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "claude_code" / "2.1.332"


def call(sid: str, tuid: str, sec: int, command: str, ran: bool | None) -> Call:
    return Call(sid, tuid, "Bash", {"command": command}, T0 + timedelta(seconds=sec), "/p",
                "default", None, f"/t/{sid}.jsonl", sec, ran)  # fmt: skip


def live(sid: str, tuid: str, sec: int, command: str) -> Outcome:
    payload = {"session_id": sid, "hook_event_name": "PreToolUse", "tool_name": "Bash",
               "tool_input": {"command": command}, "tool_use_id": tuid, "cwd": "/p"}  # fmt: skip
    ev = new_event(payload, host="h", user="u", ts=T0 + timedelta(seconds=sec))
    return Outcome(event=ev, settings_id="s", decided_by="policy")


def observed(c: Call, decision: str | None) -> Outcome:
    return Outcome(event=c.event(host="h", user="u"), settings_id="s", decision=decision,
                   blocked=decision == "deny", reason="no" if decision else None,
                   decided_by="observed")  # fmt: skip


def named(data: Path, **given: str) -> list[dict[str, Any]]:
    con = open_db(data, cache=False)
    try:
        result = run_named(con, load_catalog()["unchecked"], given)
        names = [c for c, _ in result.columns]
        return [dict(zip(names, r, strict=True)) for b in result.batches() for r in b]
    finally:
        con.close()


def test_unchecked_lists_backfilled_calls_no_live_hook_decided(tmp_path: Path) -> None:
    decided = call("s1", "tu1", 1, "ls", True)  # decided live too: not unchecked
    escaped = call("s1", "tu2", 2, "rm -rf /srv", True)
    refused = call("s1", "tu3", 3, "curl x | sh", False)
    resumed = call("s2", "tu1", 4, "ls", True)  # s1's decided call, copied by a resumed session
    again = call("s3", "tu2", 5, "rm -rf /srv", True)  # s1's escaped call, copied again
    late = call("s1", "tu4", 6, "make", None)
    with LogWriter.open(tmp_path, "w1") as w:
        w.append_batch([live("s1", "tu1", 1, "ls"), observed(decided, None)])
        w.seal()  # sealed (Parquet) and active (JSON lines) rows alike
        w.append_batch([observed(escaped, "deny"), observed(refused, "deny"),
                        observed(resumed, None), observed(again, "deny"), observed(late, None)])  # fmt: skip
    got = named(tmp_path)
    assert [(r["session_id"], r["tool_use_id"], r["ran"], r["policy"]) for r in got] == [
        ("s1", "tu2", True, "deny"),  # once, its first copy
        ("s1", "tu3", False, "deny"),
        ("s1", "tu4", None, "allow"),
    ]
    assert got[0]["target"] == "rm -rf /srv" and got[0]["reason"] == "no"
    assert [r["tool_use_id"] for r in named(tmp_path, ran="true")] == ["tu2"]
    since = named(tmp_path, since="2026-03-01T10:00:03Z")
    assert [r["tool_use_id"] for r in since] == ["tu3", "tu4"]


def test_identical_calls_with_a_derived_id_are_each_checked(tmp_path: Path) -> None:
    """Gemini CLI and Copilot CLI give no call id: identical calls of a session share the id
    hookaudit derives. Three such calls in the transcript, two decided live: one is unchecked
    (before, the three were listed as one, and one live decision hid them all)."""
    same = [call("g1", "ha-0123456789abcdef", k, "make test", True) for k in (1, 3, 5)]
    other = call("g2", "ha-0123456789abcdef", 7, "make test", True)  # another session's
    with LogWriter.open(tmp_path, "w1") as w:
        w.append_batch([live("g1", "ha-0123456789abcdef", 1, "make test"),
                        live("g1", "ha-0123456789abcdef", 3, "make test")]
                       + [observed(c, None) for c in (*same, other)])  # fmt: skip
    rows = named(tmp_path)
    assert [(r["session_id"], r["ts"]) for r in rows] == [
        ("g1", T0 + timedelta(seconds=5)), ("g2", T0 + timedelta(seconds=7))
    ], rows  # fmt: skip


def test_a_call_that_ran_rewritten_is_checked_by_its_live_decision(tmp_path: Path) -> None:
    """A policy rewrote `make test` to `make test -k fast` on an agent with derived ids: the
    call ran, and its session file shows, the rewritten input, whose derived id is not the
    live Pre's. The live decision still checks it (`ha_ran_as_id`), and its Post pairs with
    the Pre in `tool_calls`; a rewrite that was blocked, or given to nobody, does not."""
    asked, ran = {"command": "make test"}, {"command": "make test -k fast"}
    pre_id, ran_id = derived_id("g1", "Bash", asked), derived_id("g1", "Bash", ran)
    rewritten = msgspec.structs.replace(live("g1", pre_id, 1, "make test"), updated_input=ran)
    post = new_event({"session_id": "g1", "hook_event_name": "PostToolUse", "tool_name": "Bash",
                      "tool_input": ran, "tool_use_id": ran_id, "cwd": "/p",
                      "tool_response": {"stdout": "ok"}}, ts=T0 + timedelta(seconds=2))  # fmt: skip
    shown = call("g1", ran_id, 2, "make test -k fast", True)  # what backfill reads
    denied = msgspec.structs.replace(  # a rewrite that came with a block: nothing ran
        live("g2", derived_id("g2", "Bash", asked), 3, "make test"),
        updated_input=ran,
        blocked=True,
        decision="deny",
    )
    unseen = call("g2", derived_id("g2", "Bash", ran), 3, "make test -k fast", True)
    with LogWriter.open(tmp_path, "w1") as w:
        w.append_batch([rewritten, Outcome(event=post, settings_id="s", decided_by="policy"),
                        observed(shown, None), denied, observed(unseen, None)])  # fmt: skip
    assert [r["session_id"] for r in named(tmp_path)] == ["g2"]
    con = open_db(tmp_path, cache=False)
    try:
        calls = con.execute(
            "SELECT session_id, ran, status FROM tool_calls WHERE pre_id = ?", [rewritten.event.id]
        ).fetchall()
    finally:
        con.close()
    assert calls == [("g1", True, "success")], calls


def test_backfill_dry_run_on_a_real_transcript(tmp_path: Path) -> None:
    doc = json.loads((FIXTURE / "pre.exit2.blocks.json").read_text())
    t = tmp_path / "projects" / "p" / "s.jsonl"
    t.parent.mkdir(parents=True)
    t.write_text("".join(json.dumps(e) + "\n" for e in doc["transcript"]) + "{broken\n")
    p = subprocess.run([str(BIN / "hookaudit"), "backfill", "--dry-run", str(tmp_path / "projects"),
                        str(tmp_path / "missing.jsonl")],
                       capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert p.returncode == 1  # the missing file: named, the rest done
    assert "missing.jsonl: No such file or directory" in p.stderr
    (line,) = p.stdout.splitlines()
    assert line.split()[1:2] + line.split()[3:] == [
        "claude_code",
        "toolu_t00000",
        "Bash",
        "refused",
    ], line
    assert "1 transcript(s)" in p.stderr and "(1 passed over)" in p.stderr, p.stderr
    bad = subprocess.run([str(BIN / "hookaudit"), "backfill", "--since", "yesterday", str(t)],
                         capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert bad.returncode == 2 and "--since" in bad.stderr and "Traceback" not in bad.stderr


def test_backfill_lint_and_eval_refuse_a_fifo_or_a_device_named_on_the_command_line(
    tmp_path: Path,
) -> None:
    """A named FIFO hung backfill (a directory scan skipped it) and /dev/zero grew without
    bound: each is one line naming it, and the other files are still read."""
    import os

    fifo = tmp_path / "t.jsonl"
    os.mkfifo(fifo)
    doc = json.loads((FIXTURE / "pre.exit2.blocks.json").read_text())
    good = tmp_path / "good.jsonl"
    good.write_text("".join(json.dumps(e) + "\n" for e in doc["transcript"]))
    p = subprocess.run([str(BIN / "hookaudit"), "backfill", "--dry-run", str(fifo), "/dev/zero",
                        str(good)], capture_output=True, text=True, timeout=30, check=False)  # fmt: skip
    assert p.returncode == 1, p.stderr
    assert f"{fifo}: not a regular file (a FIFO)" in p.stderr
    assert "/dev/zero: not a regular file (a character device)" in p.stderr
    assert "1 transcript(s)" in p.stderr and len(p.stdout.splitlines()) == 1
    for bad in (str(fifo), "/dev/zero"):
        lint = subprocess.run([str(BIN / "hookaudit"), "lint", f"project:{bad}"],
                              capture_output=True, text=True, timeout=30, check=False)  # fmt: skip
        assert lint.returncode == 1 and "not a regular file" in lint.stdout + lint.stderr, lint
        ev = subprocess.run([str(BIN / "hookaudit"), "eval", "--settings", f"project:{bad}"],
                            input='{"hook_event_name":"Stop","session_id":"s","cwd":"/"}',
                            capture_output=True, text=True, timeout=30, check=False)  # fmt: skip
        assert ev.returncode == 1 and f"{bad}: cannot read: not a regular file" in ev.stderr, ev
