"""Verification of the whole log: every chain, batch line, manifest line and sealed file.

Rules of this file:
- `verify` never stops at the first problem and never raises, whatever the files hold: it
  reports every broken record, file and manifest line as a `VerifyError`, in chain order,
  and names the first.
- A sealed file is checked against its manifest line's sha256 first: a file that differs
  is reported in one line and its content is read only as far as it can be.
- With a log key, every record of an active segment must be followed by a batch line
  whose HMAC signs the chain head there (`ingest.log.lines`), and every manifest line
  must carry a valid hmac.
- This file walks each worker's chain across its segments; what a sealed segment's files
  must agree with (manifest line, flat columns, keys index, runs file) is checked by
  `ingest.log.verify_sealed`.
- Notes (a torn line set aside after a crash, a seal's leftover) are not errors, but they
  are reported: `hookaudit verify` prints them.

Example:
    >>> report = verify(data_dir)
    >>> report.ok, report.first_error
    (True, None)
"""

from __future__ import annotations

import hashlib
import hmac
import os
from pathlib import Path

import msgspec
import pyarrow as pa
import pyarrow.parquet as pq

from engine.errors import Unavailable
from engine.records import Outcome
from ingest.log.findings import ErrorKind, VerifyError, VerifyReport, WorkerReport
from ingest.log.layout import (
    manifest_path,
    rel,
    root,
    seg_path,
    seqs,
    workers,
)
from ingest.log.lines import batch_hmac, decode_batch, is_batch_line, log_key, recompute_hash
from ingest.log.manifest import ManifestEntry, manifest_hmac, manifest_lines
from ingest.log.objstore import read_bytes
from ingest.log.reader import jsonl_lines, parquet_lines
from ingest.log.seal import decode_all, decode_error
from ingest.log.ship import remote_segments
from ingest.log.verify_sealed import check_columns, check_counts, check_runs

__all__ = ["ErrorKind", "VerifyError", "VerifyReport", "WorkerReport", "verify"]


def verify(data_dir: str | os.PathLike[str], *, key: bytes | None = None) -> VerifyReport:
    """Recompute every worker chain (sealed segments in manifest order, then active) and manifest.

    `key` (default: env HOOKAUDIT_LOG_KEY, else the data dir's ``log/key``) makes a missing or
    wrong manifest hmac or batch line an error.

    Run it while writers are stopped: an active segment's last line may be mid-write.

    Example:
        >>> verify(data_dir, key=b"secret").first_error
        'active/w1/00000002.jsonl:17: record seq 4017: hash mismatch (record edited)'
    """
    base = root(data_dir)
    key = key if key is not None else log_key(base)
    errors: list[VerifyError] = []
    notes: list[str] = []
    found: dict[str, WorkerReport] = {}
    for worker in workers(base):
        check = _Checker(base, worker, key)
        try:
            found[worker] = check.run()
        except Exception as exc:  # a file no check foresaw: reported, never a traceback
            why = f"cannot check this chain further: {type(exc).__name__}: {exc}"
            check.err("corrupt", check.mfile, why)
            found[worker] = check.report
        errors += check.errors
        notes += check.notes
    return VerifyReport(
        ok=not errors,
        records=sum(w.records for w in found.values()),
        workers=found,
        errors=errors,
        notes=notes,
        hmac_checked=key is not None,
        first_error=str(errors[0]) if errors else None,
    )


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


class _Checker:
    """Walks one worker's segments in seq order, carrying the chain across them."""

    def __init__(self, root: Path, worker: str, key: bytes | None) -> None:
        self.root, self.worker, self.key = root, worker, key
        self.mfile = rel(root, manifest_path(root, worker))
        self.errors: list[VerifyError] = []
        self.notes: list[str] = []
        self.report = WorkerReport()
        self.prev = ""  # hash of the previous record
        self.next_seq = 1
        self.resync = False  # after a gap or an unreadable record: take the next as the anchor

    def err(
        self, kind: ErrorKind, file: str, msg: str, line: int | None = None, seq: int | None = None
    ) -> None:
        self.errors.append(
            VerifyError(file=file, line=line, record_seq=seq, kind=kind, message=msg)
        )

    def run(self) -> WorkerReport:
        listed: dict[int, tuple[int, ManifestEntry]] = {}
        for m in manifest_lines(manifest_path(self.root, self.worker)):
            e = m.entry
            if e is None:
                torn = m.error == "torn"
                why = "torn last manifest line (no newline)" if torn else str(m.error)
                self.err("truncated" if torn else "corrupt", self.mfile, why, m.line)
            elif e.worker != self.worker or e.seq in listed:
                self.err("manifest", self.mfile, "duplicate or foreign line", m.line, e.first_seq)
            else:
                if listed and e.seq < max(listed):
                    self.err("manifest", self.mfile, "lines out of order", m.line, e.first_seq)
                listed[e.seq] = (m.line, e)
        parquets: dict[int, Path | str] = dict(seqs(self.root / "sealed" / self.worker, "parquet"))
        for seq, url in remote_segments(self.root, self.worker).items():  # shipped, pruned here
            parquets.setdefault(seq, url)
        actives = seqs(self.root / "active" / self.worker, "jsonl")
        expected = 1
        for seq in sorted(set(listed) | set(parquets) | set(actives)):
            if seq > expected:
                gone = rel(self.root, seg_path(self.root, self.worker, expected, "sealed"))
                span = f"{expected}" if seq == expected + 1 else f"{expected}..{seq - 1}"
                self.err(
                    "deleted", gone, f"segment seq {span} missing (deleted)", None, self.next_seq
                )
                self.resync = True
            expected = seq + 1
            if seq in listed or seq in parquets:
                line, entry = listed.get(seq, (0, None))
                self.sealed(seq, parquets.get(seq), line, entry)
                if seq in actives:
                    self.leftover(actives[seq], parquets.get(seq))
            else:
                self.active(actives[seq])
        self.report.last_seq, self.report.head = self.next_seq - 1, self.prev
        self.set_aside()
        return self.report

    def set_aside(self) -> None:
        """Notes for what the writer set aside at an open: never dropped, always shown."""
        folders = (self.root / "active" / self.worker, self.root / "manifest")
        for aside in sorted(p for f in folders if f.is_dir() for p in f.iterdir()):
            name = aside.name
            if ".jsonl.torn-" in name:
                self.notes.append(f"{rel(self.root, aside)}: a torn line set aside after a crash")
            elif ".jsonl.unsigned-" in name:
                self.notes.append(
                    f"{rel(self.root, aside)}: records without a valid batch hmac, set aside "
                    "by the writer (a batch torn by a crash, or records appended by another "
                    "writer)"
                )

    def listing(self, mline: int, e: ManifestEntry) -> None:
        """The manifest line itself: its signature and its link to the previous segment."""
        if self.key is not None and e.hmac is None:
            self.err(
                "hmac", self.mfile, "no hmac but a key is set (unsigned line)", mline, e.first_seq
            )
        elif self.key is not None and not hmac.compare_digest(
            str(e.hmac), manifest_hmac(e, self.key)
        ):
            self.err("hmac", self.mfile, "bad hmac (line forged or edited)", mline, e.first_seq)
        if not self.resync and e.prev_head != self.prev:
            why = "prev_head does not match the previous segment's head"
            self.err("manifest", self.mfile, why, mline, e.first_seq)

    def sealed(
        self, seq: int, path: Path | str | None, mline: int, e: ManifestEntry | None
    ) -> None:
        file = rel(self.root, seg_path(self.root, self.worker, seq, "sealed"))
        if e is not None:
            self.listing(mline, e)
        if path is None:
            assert e is not None
            why = f"sealed segment listed at {self.mfile}:{mline} is missing (deleted)"
            self.err("deleted", file, why, None, e.first_seq)
            self.prev, self.next_seq, self.resync = e.head, e.last_seq + 1, False
            return
        self.report.sealed += 1
        try:
            data = read_bytes(str(path))
        except (OSError, Unavailable) as exc:
            self.err("corrupt", file, f"cannot read: {exc}", None, e.first_seq if e else None)
            if e is not None:
                self.prev, self.next_seq = e.head, e.last_seq + 1
            self.resync = e is None
            return
        # the file's sha256 is checked before its content is decoded: a file that is not
        # the one sealed is named in one line, whatever its bytes make the reader do
        rewritten = e is not None and hashlib.sha256(data).hexdigest() != e.sha256
        if rewritten and e is not None:
            why = (
                f"file sha256 does not match {self.mfile}:{mline} (segment corrupted or "
                f"rewritten: {len(data)} bytes, listed {e.size})"
            )
            self.err("edited", file, why, None, e.first_seq)
        try:
            table = pq.read_table(pa.BufferReader(data))
            raw = table.column("record").to_pylist()
        except Exception as exc:  # whatever a hostile file makes the Parquet reader raise
            short = e is not None and len(data) < e.size
            kind: ErrorKind = "truncated" if short else "corrupt"
            if not rewritten:
                why = f"unreadable Parquet: {_one_line(exc)}"
                self.err(kind, file, why, None, e.first_seq if e else None)
            if e is not None:
                self.prev, self.next_seq = e.head, e.last_seq + 1
            self.resync = e is None
            return
        rows = [(i, r if isinstance(r, bytes) else b"") for i, r in enumerate(raw, 1)]
        records = decode_all([r for _, r in rows])
        if e is None:
            first = next((r.seq for r in records if r is not None), None)
            why = (
                f"not listed in {self.mfile} (its manifest line was removed, or a seal was "
                "interrupted before writing it: reopening the writer completes that seal)"
            )
            self.err("manifest", file, why, None, first)
        self.chain(file, rows, records)
        self.errors += check_columns(file, table, rows, records)
        if e is not None:
            self.errors += check_counts(self.root, self.mfile, file, mline, e, records)
        self.errors += check_runs(
            self.root, self.worker, self.mfile, seq, mline, e, records, str(path)
        )

    def active(self, path: Path) -> None:
        file = rel(self.root, path)
        self.report.active += 1
        rows: list[tuple[int, bytes]] = []
        marks: list[tuple[int, int, bytes]] = []  # (line, records before it, the batch line)
        torn: tuple[int, bytes] | None = None
        for n, raw, complete in jsonl_lines(path):
            if not complete:
                torn = (n, raw)
            elif is_batch_line(raw):
                marks.append((n, len(rows), raw))
            else:
                rows.append((n, raw))
        records = decode_all([r for _, r in rows])
        self.chain(file, rows, records)
        if self.key is not None:
            self.batches(file, rows, records, marks)
        if torn is not None:
            why = (
                f"torn last line ({len(torn[1])} bytes, no newline): segment truncated after "
                f"record seq {self.next_seq - 1}"
            )
            self.err("truncated", file, why, torn[0])

    def batches(
        self,
        file: str,
        rows: list[tuple[int, bytes]],
        records: list[Outcome | None],
        marks: list[tuple[int, int, bytes]],
    ) -> None:
        """With a key: each batch line signs the chain head before it; no record is unsigned."""
        assert self.key is not None
        signed = 0  # records covered by a valid batch line
        for n, before, raw in marks:
            try:
                mark = decode_batch(raw)
            except msgspec.DecodeError as exc:
                self.err("corrupt", file, f"unreadable batch line: {exc}", n)
                continue
            want = batch_hmac(self.key, mark.worker, mark.last_seq, mark.head)
            last = next((r for r in reversed(records[:before]) if r is not None), None)
            if mark.worker != self.worker or not hmac.compare_digest(mark.hmac, want):
                self.err("hmac", file, "bad batch hmac (batch line forged or edited)", n)
            elif last is None or (last.seq, last.hash) != (mark.last_seq, mark.head):
                why = "batch hmac does not sign the chain head before it (records re-hashed)"
                self.err("hmac", file, why, n, mark.last_seq)
            else:
                signed = before
        if signed < len(rows):
            rec = next((r for r in records[signed:] if r is not None), None)
            why = (
                f"{len(rows) - signed} record(s) not signed by the log key (appended by "
                "another writer, or a batch torn by a crash: reopening the writer sets them "
                "aside)"
            )
            self.err("hmac", file, why, rows[signed][0], rec.seq if rec else None)

    def leftover(self, path: Path, sealed: Path | str | None) -> None:
        file = rel(self.root, path)
        lines = [raw for _, raw, done in jsonl_lines(path) if done and not is_batch_line(raw)]
        try:
            same = sealed is not None and lines == [raw for _, raw in parquet_lines(sealed)]
        except (OSError, ValueError, pa.ArrowException):
            same = False
        if same:
            self.notes.append(
                f"{file}: left over from a seal; the writer removes it at its next open"
            )
        else:
            self.err("edited", file, "active segment differs from its sealed copy of the same seq")

    def chain(
        self, file: str, rows: list[tuple[int, bytes]], records: list[Outcome | None]
    ) -> None:
        """Each record's own hash, then its link to the one before (seq and prev_hash)."""
        seen: set[int] = set()
        present = {r.seq for r in records if r is not None}
        for (n, raw), rec in zip(rows, records, strict=True):
            if rec is None:
                self.err("corrupt", file, f"unreadable record: {decode_error(raw)}", n)
                self.resync = True
                continue
            self.report.records += 1
            seen.add(rec.seq)
            if recompute_hash(raw, rec) != rec.hash:
                self.err("edited", file, "hash mismatch (record edited)", n, rec.seq)
            want = self.next_seq
            if self.resync:
                pass
            elif rec.seq < want or (rec.seq > want and want in present and want not in seen):
                why = f"seq {rec.seq} where {want} was expected (records reordered)"
                self.err("reordered", file, why, n, rec.seq)
            elif rec.seq > want:
                span = f"{want}" if rec.seq == want + 1 else f"{want}..{rec.seq - 1}"
                self.err(
                    "removed", file, f"record seq {span} missing before it (removed)", n, rec.seq
                )
            elif rec.prev_hash != self.prev:
                why = (
                    f"prev_hash is not record seq {want - 1}'s hash "
                    "(a record before it was removed or replaced)"
                )
                self.err("removed", file, why, n, rec.seq)
            self.prev, self.next_seq, self.resync = rec.hash, rec.seq + 1, False
