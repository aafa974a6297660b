"""The log against a local attacker and a careless operator: the keyed active chain,
private files, `verify` and `log seal` from the command line, hostile segment files.

Real files and real `hookaudit` subprocesses; each test says what it tried.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.records import Outcome, decode_outcome_json, new_event
from ingest.log.layout import segments
from ingest.log.lines import stamp
from ingest.log.manifest import read_manifest
from ingest.log.verifier import verify
from ingest.log.writer import LogWriter

KEY = b"trust-key-0123456789"
ENV_KEY = {"HOOKAUDIT_LOG_KEY": KEY.decode()}


def outcome(i: int, decision: str | None = None) -> Outcome:
    ev = new_event(
        {
            "hook_event_name": "PreToolUse",
            "session_id": f"s{i % 3}",
            "tool_name": "Bash",
            "tool_input": {"command": f"echo {i}"},
        }
    )
    return Outcome(event=ev, settings_id="set", decision=decision, blocked=decision == "deny")


def write(data: Path, n: int = 5, *, key: bytes | None = KEY, batches: int = 1) -> list[Outcome]:
    stored: list[Outcome] = []
    with LogWriter.open(data, "w1", key=key) as w:
        for b in range(batches):
            stored += w.append_batch([outcome(b * n + i) for i in range(n)])
    return stored


def active(data: Path) -> Path:
    (seg,) = [s for s in segments(data) if s.kind == "active"]
    return seg.path


def forged_after(last: Outcome) -> bytes:
    """A record that continues the chain correctly, hash recomputed: what an attacker
    with write access to the log, but not the key, can make."""
    rec = msgspec.structs.replace(
        outcome(99, "allow"), worker=last.worker, seq=last.seq + 1, prev_hash=last.hash
    )
    return stamp(rec)[1] + b"\n"


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, **(env or {})}
    full.pop("HOOKAUDIT_DATA_DIR", None)
    if env is None:
        full.pop("HOOKAUDIT_LOG_KEY", None)
    return subprocess.run(
        [sys.executable, "-m", "hookaudit", *args],
        capture_output=True,
        text=True,
        env=full,
        timeout=60,
    )


def one_line_error(p: subprocess.CompletedProcess[str]) -> str:
    assert p.returncode == 1, (p.returncode, p.stdout, p.stderr)
    assert "Traceback" not in p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    return lines[0]


# ---------------------------------------------------------------- the keyed active chain


def test_forged_record_in_an_active_segment_is_caught_and_never_signed(tmp_path: Path) -> None:
    data = tmp_path / "data"
    stored = write(data, batches=2)
    seg = active(data)
    with open(seg, "ab") as f:
        f.write(forged_after(stored[-1]))
    assert verify(data).ok  # without the key the forgery is indistinguishable (documented)
    report = verify(data, key=KEY)
    assert not report.ok
    assert report.errors[0].kind == "hmac" and report.errors[0].record_seq == 11
    assert "not signed by the log key" in str(report.first_error)
    text = cli("verify", "--data-dir", str(data), env=ENV_KEY)
    assert text.returncode == 1 and "not signed by the log key" in text.stderr
    # sealing: the writer sets the unsigned record aside; the manifest never signs it
    sealed = cli("log", "seal", "--data-dir", str(data), "--worker", "w1", env=ENV_KEY)
    assert sealed.returncode == 0, sealed.stderr
    assert "records 1-10" in sealed.stdout
    (entry,) = [m.entry for m in read_manifest(data, "w1")]
    assert entry is not None and (entry.last_seq, entry.head) == (10, stored[-1].hash)
    aside = list(seg.parent.glob(seg.name + ".unsigned-*"))
    assert len(aside) == 1 and b'"seq":11' in aside[0].read_bytes()
    after = cli("verify", "--data-dir", str(data), env=ENV_KEY)
    assert after.returncode == 0, after.stderr
    assert "note: active/w1/00000001.jsonl.unsigned-" in after.stdout
    print("forged: caught by verify with the key, set aside at seal, manifest signs seq 1-10")


def test_rehashed_chain_is_caught_by_the_batch_hmac(tmp_path: Path) -> None:
    data = tmp_path / "data"
    write(data, batches=3)
    seg = active(data)
    lines = seg.read_bytes().splitlines()
    prev = ""
    out = []
    for raw in lines:
        if raw.startswith(b'{"batch":'):
            out.append(raw)
            continue
        rec = decode_outcome_json(raw)
        if rec.seq == 2:
            rec = msgspec.structs.replace(rec, decision="allow", blocked=False, reason="edited")
        rec, line = stamp(msgspec.structs.replace(rec, prev_hash=prev, hash=""))
        prev = rec.hash
        out.append(line)
    seg.write_bytes(b"\n".join(out) + b"\n")
    assert verify(data).ok  # every hash recomputed: only the key can tell
    report = verify(data, key=KEY)
    assert not report.ok and {e.kind for e in report.errors} == {"hmac"}
    assert "does not sign the chain head" in str(report.first_error)
    refused = cli("log", "seal", "--data-dir", str(data), "--worker", "w1", env=ENV_KEY)
    assert "bad batch hmac" in one_line_error(refused)
    assert read_manifest(data, "w1") == [] and [s.kind for s in segments(data)] == ["active"]
    print("re-hashed chain: 3 batch lines, verify names them, the writer refuses the chain")


def test_sealing_refuses_a_broken_chain_without_a_key_too(tmp_path: Path) -> None:
    data = tmp_path / "data"
    write(data, key=None)
    seg = active(data)
    body = seg.read_bytes()
    at = body.index(b"echo 2")
    seg.write_bytes(body[:at] + b"echo 7" + body[at + 6 :])  # edited, hash left alone
    refused = cli("log", "seal", "--data-dir", str(data), "--worker", "w1")
    msg = one_line_error(refused)
    assert "cannot seal" in msg and "hash mismatch" in msg and "00000001.jsonl:3" in msg
    assert [s.kind for s in segments(data)] == ["active"] and read_manifest(data, "w1") == []


def test_torn_tail_is_visible_in_the_text_output(tmp_path: Path) -> None:
    data = tmp_path / "data"
    write(data)
    with open(active(data), "ab") as f:
        f.write(b'{"event":{"id":"half')
    torn = cli("verify", "--data-dir", str(data), env=ENV_KEY)
    assert torn.returncode == 1 and "torn last line" in torn.stderr
    with LogWriter.open(data, "w1", key=KEY):
        pass  # reopening sets the torn line aside
    after = cli("verify", "--data-dir", str(data), env=ENV_KEY)
    assert after.returncode == 0
    assert "note: active/w1/00000001.jsonl.torn-" in after.stdout


# ---------------------------------------------------------------- private files


def test_log_files_are_private_under_umask_022(tmp_path: Path) -> None:
    data = tmp_path / "fresh"
    code = textwrap.dedent(
        f"""
        import os
        os.umask(0o022)
        from engine.records import Outcome, new_event
        from ingest.log.writer import LogWriter
        from queries.db import open_db
        with LogWriter.open({str(data)!r}, "w1") as w:
            for i in range(3):
                w.append_batch([Outcome(event=new_event({{"hook_event_name": "Stop"}}), settings_id="s")])
                w.seal()
            w.append_batch([Outcome(event=new_event({{"hook_event_name": "Stop"}}), settings_id="s")])
        open_db({str(data)!r}).close()
        """
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
    modes = {
        p.relative_to(data).as_posix(): stat.S_IMODE(p.stat().st_mode) for p in data.rglob("*")
    }
    assert stat.S_IMODE(data.stat().st_mode) == 0o700
    assert any(name.endswith(".parquet") for name in modes) and "cache/queries/dedup.json" in modes
    wrong = {n: oct(m) for n, m in modes.items() if m != (0o700 if (data / n).is_dir() else 0o600)}
    assert wrong == {}
    print(f"umask 022: {len(modes)} files and folders, all 0600/0700")


# ---------------------------------------------------------------- verify from the command line


def test_verify_without_a_log_fails(tmp_path: Path) -> None:
    missing = one_line_error(cli("verify", "--data-dir", str(tmp_path / "typo")))
    assert "no such data dir" in missing
    assert not (tmp_path / "typo").exists()
    assert "no log here" in one_line_error(cli("verify", "--data-dir", str(tmp_path)))


def test_a_bit_flipped_in_a_sealed_file_is_named_in_one_line(tmp_path: Path) -> None:
    data = tmp_path / "data"
    write(data, 200, key=None)
    with LogWriter.open(data, "w1", key=None) as w:
        w.seal()
    (seg,) = segments(data)
    body = bytearray(seg.path.read_bytes())
    body[len(body) // 2] ^= 0x10
    seg.path.write_bytes(bytes(body))
    bad = cli("verify", "--data-dir", str(data))
    assert bad.returncode == 1 and "Traceback" not in bad.stderr
    # what the flipped bytes decode to is folded into it; notes (anchors) follow it
    first, *notes = bad.stderr.splitlines()
    assert all(n.startswith("note: ") for n in notes), bad.stderr
    assert first.startswith("FAILED: sealed/w1/00000001.parquet: ")
    assert "file sha256 does not match" in first
    listed = json.loads(cli("verify", "--data-dir", str(data), "--format", "json").stdout)
    assert "sha256 does not match" in listed["errors"][0]["message"]  # JSON keeps them all
    print("bit flip:", first, f"({len(listed['errors'])} finding(s) in the JSON report)")


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    cut=st.integers(min_value=0, max_value=10**6), flips=st.lists(st.integers(0, 10**6), max_size=4)
)
def test_hostile_sealed_files_never_raise(
    tmp_path_factory: pytest.TempPathFactory, cut: int, flips: list[int]
) -> None:
    data = tmp_path_factory.mktemp("hostile") / "data"
    write(data, 30, key=None)
    with LogWriter.open(data, "w1", key=None) as w:
        w.seal()
    (seg,) = segments(data)
    body = bytearray(seg.path.read_bytes())
    for f in flips:
        body[f % len(body)] ^= 0xFF
    seg.path.write_bytes(bytes(body[: max(1, cut % (len(body) + 1))]))
    report = verify(data)  # never raises
    assert report.ok == (
        hashlib.sha256(seg.path.read_bytes()).hexdigest()
        == read_manifest(data, "w1")[0].entry.sha256
    )  # type: ignore[union-attr]


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(junk=st.lists(st.binary(max_size=200), max_size=6), keyed=st.booleans())
def test_hostile_active_lines_never_raise(
    tmp_path_factory: pytest.TempPathFactory, junk: list[bytes], keyed: bool
) -> None:
    data = tmp_path_factory.mktemp("hostile") / "data"
    write(data, 3, key=KEY if keyed else None)
    with open(active(data), "ab") as f:
        f.write(b"\n".join(junk))
    report = verify(data, key=KEY if keyed else None)
    # never raises; and any byte appended behind the writer's back is reported
    assert report.ok == (b"\n".join(junk) == b"")


# ---------------------------------------------------------------- log seal from the command line


def test_seal_refuses_an_unknown_worker_and_a_missing_data_dir(tmp_path: Path) -> None:
    data = tmp_path / "data"
    write(data, key=None)
    msg = one_line_error(cli("log", "seal", "--data-dir", str(data), "--worker", "nosuch"))
    assert "no chain for worker 'nosuch'" in msg and "w1" in msg
    assert not (data / "log" / "active" / "nosuch").exists()
    assert not (data / "log" / "manifest" / "nosuch.jsonl").exists()
    gone = tmp_path / "nothing"
    assert "no such data dir" in one_line_error(
        cli("log", "seal", "--data-dir", str(gone), "--worker", "w1")
    )
    assert not gone.exists()


def test_seal_beside_a_running_worker_names_its_pid(tmp_path: Path) -> None:
    data = tmp_path / "data"
    write(data, key=None)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"from ingest.log.writer import LogWriter\nw = LogWriter.open({str(data)!r}, 'w1')\n"
            "print('open', flush=True)\nimport sys; sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "open"
        msg = one_line_error(cli("log", "seal", "--data-dir", str(data), "--worker", "w1"))
        assert f"stop worker pid {holder.pid} first" in msg
    finally:
        holder.communicate("", timeout=30)
    # the worker is gone, its pid stays in the lock file: not believed
    assert (data / "log" / "active" / "w1" / ".lock").read_text().strip() == str(holder.pid)
    done = cli("log", "seal", "--data-dir", str(data), "--worker", "w1")
    assert done.returncode == 0 and "sealed w1 segment 1" in done.stdout


def _sealed_log(d: Path) -> Path:
    with LogWriter.open(d, "w1") as w:
        for b in range(3):
            w.append_batch([outcome(b * 50 + i, "deny" if i % 3 == 0 else None) for i in range(50)])
            w.seal()
    return d / "log" / "sealed" / "w1" / "00000002.parquet"


READERS = {
    "verify": ["verify"],
    "query": ["query", "denied"],
    "sql": ["sql", "SELECT count(*) FROM outcomes"],
    "detect": ["detect", "--rules", str(Path(__file__).resolve().parents[2] / "infra" / "sigma")],
    "replay": ["replay", "--settings",
               f"project:{Path(__file__).resolve().parents[2] / 'infra/policies/strict.json'}"],
}  # fmt: skip


def test_one_flipped_byte_in_a_sealed_segment_is_one_line_naming_it_everywhere(
    tmp_path: Path,
) -> None:
    """Depending on where the byte was, readers said `JSON is malformed (byte 144)` naming
    no file, `internal error: InvalidInputException`, aborted in a reader thread
    (`terminate called …`, ZSTD), or answered from the changed bytes with exit 0. Every
    reader now checks the segment against its manifest entry first: exit 1, the last
    stderr line names the segment, no traceback, no abort."""
    import shutil

    base = tmp_path / "base"
    seg = _sealed_log(base)
    size = seg.stat().st_size
    for offset in (0, 4, 144, 1000, size // 2, size - 300, size - 100, size - 10):
        d = tmp_path / f"at{offset}"
        shutil.copytree(base, d)
        target = d / "log" / "sealed" / "w1" / "00000002.parquet"
        data = bytearray(target.read_bytes())
        data[offset] ^= 0xFF
        target.write_bytes(bytes(data))
        for name, args in READERS.items():
            p = cli(*args, "--data-dir", str(d))
            err = p.stderr.strip()
            assert p.returncode == 1, (offset, name, p.returncode, err[-400:])
            assert "Traceback" not in err and "internal error" not in err, (offset, name, err)
            assert "terminate called" not in err, (offset, name, err)
            named = [line for line in err.splitlines() if "sealed/w1/00000002.parquet" in line]
            assert named, (offset, name, err)
            if name != "verify":
                assert len(err.splitlines()) == 1 and "sha256 differs" in err, (name, err)
            else:  # verify names the segment first, not the manifest
                assert err.splitlines()[0].startswith("FAILED: sealed/w1/00000002.parquet"), err
        # a second run reads the digest cache and must still refuse
        again = cli("sql", "SELECT 1", "--data-dir", str(d))
        assert again.returncode == 1 and "00000002.parquet" in again.stderr
    # the intact copy: every reader answers
    for name, args in READERS.items():
        p = cli(*args, "--data-dir", str(base))
        assert p.returncode in (0, 1) and "sha256" not in p.stderr, (name, p.stderr)
        if name in ("verify", "query", "sql"):
            assert p.returncode == 0, (name, p.stderr)
