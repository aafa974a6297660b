"""The manifest of sealed segments: one line per sealed segment of a worker, optionally signed.

Rules of this file:
- `manifest/<worker>.jsonl` (path: `ingest.log.layout.manifest_path`) lists each sealed
  segment once, in seq order: seq range, count, times, the sha256 and size of the Parquet
  file, of its keys index and of its runs side file, the chain head and the previous
  entry's head. With a log key, `hmac` signs the line (`manifest_hmac`).
- A line is appended and fsynced; a failed write is truncated away. A torn last line is
  reported as 'torn' (the writer sets it aside at its next open).

Example:
    >>> import tempfile
    >>> read_manifest(tempfile.mkdtemp(), "w1")
    []
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
from collections.abc import Iterator, Mapping
from datetime import datetime
from pathlib import Path
from typing import NamedTuple

import msgspec

from ingest.log.files import open_append
from ingest.log.layout import check_worker, manifest_path, root, segments

__all__ = [
    "ListedDigests",
    "ManifestEntry",
    "ManifestLine",
    "append_manifest",
    "manifest_hmac",
    "manifest_lines",
    "read_manifest",
    "sealed_mismatches",
]


class ManifestEntry(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One sealed segment as listed in `manifest/<worker>.jsonl`.

    `first_seq`/`last_seq` are record seqs; `first_ts`/`last_ts` their `appended` times;
    `sha256`/`size` those of the Parquet file, `keys_sha256` that of its keys index,
    `runs_sha256` that of its runs side file (None, and omitted, for a segment sealed before
    runs files existed); `head` is the last record's hash and `prev_head` the previous entry's
    `head`;
    `hmac` is `manifest_hmac(entry, key)` when the writer has a key.
    """

    worker: str
    seq: int
    first_seq: int
    last_seq: int
    count: int
    first_ts: datetime | None
    last_ts: datetime | None
    sha256: str
    size: int
    keys_sha256: str
    head: str
    prev_head: str
    runs_sha256: str | None = None
    hmac: str | None = None


class ManifestLine(NamedTuple):
    line: int
    entry: ManifestEntry | None
    error: str | None  # why the line could not be read; 'torn' for a last line with no newline


_manifest_decoder = msgspec.json.Decoder(ManifestEntry)
_manifest_encoder = msgspec.json.Encoder()


def read_manifest(data_dir: str | os.PathLike[str], worker: str) -> list[ManifestLine]:
    """Every line of a worker's manifest, decoded, with its line number or why it is unreadable.

    Example:
        >>> [m.entry.count for m in read_manifest(data_dir, "w1")]
        [1000, 1000]
    """
    return list(manifest_lines(manifest_path(root(data_dir), check_worker(worker))))


def manifest_lines(path: Path) -> Iterator[ManifestLine]:
    with contextlib.suppress(FileNotFoundError), open(path, "rb") as f:
        for n, raw in enumerate(f, 1):
            if not raw.endswith(b"\n"):
                yield ManifestLine(n, None, "torn")
                continue
            try:
                yield ManifestLine(n, _manifest_decoder.decode(raw), None)
            except (msgspec.DecodeError, RecursionError) as exc:
                yield ManifestLine(n, None, f"unreadable manifest line: {exc}")


def append_manifest(path: Path, entry: ManifestEntry) -> None:
    """Append one line and fsync; a failed write is truncated away so no torn line stays."""
    fd, _ = open_append(path)
    try:
        size = os.fstat(fd).st_size
        try:
            os.write(fd, _manifest_encoder.encode(entry) + b"\n")
            os.fsync(fd)
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, size)
            raise
    finally:
        os.close(fd)


def manifest_hmac(entry: ManifestEntry, key: bytes) -> str:
    """HMAC-SHA256 (hex) of a manifest entry's canonical JSON (sorted keys), without `hmac`.

    Example:
        >>> len(manifest_hmac(entry, b"secret"))
        64
    """
    body: dict[str, object] = msgspec.to_builtins(entry)
    body.pop("hmac", None)
    canon = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    return hmac.new(key, canon, hashlib.sha256).hexdigest()


class ListedDigests:
    """The sha256 each manifest lists for its sealed segments, read once per worker."""

    def __init__(self, data_dir: str | os.PathLike[str]) -> None:
        self.data_dir = data_dir
        self._by_worker: dict[str, dict[int, str]] = {}

    def sha256(self, worker: str, seq: int) -> str | None:
        """The digest listed for segment `seq` of `worker`, or None (no readable entry)."""
        if worker not in self._by_worker:
            lines = read_manifest(self.data_dir, worker)
            self._by_worker[worker] = {m.entry.seq: m.entry.sha256 for m in lines if m.entry}
        return self._by_worker[worker].get(seq)


def sealed_mismatches(data_dir: str | os.PathLike[str], read: Mapping[str, str]) -> list[str]:
    """The sealed segments among `read` (`Segment.name` -> sha256 of the bytes a reader read)
    whose bytes are not those their manifest entry lists, each as one line saying which.

    A segment with no readable manifest entry is not judged here (`verify` reports it); nor
    is a manifest forged together with its segment (`verify` with the log key checks the
    entries' HMACs). Replay refuses to report over a segment listed here.

    Example:
        >>> sealed_mismatches(data_dir, {"sealed/w1/00000001.parquet": "0" * 64})[0]
        'sealed/w1/00000001.parquet: its sha256 differs from manifest/w1.jsonl (...)'
    """
    listed = ListedDigests(data_dir)
    out: list[str] = []
    for seg in segments(data_dir):
        sha = read.get(seg.name)
        if sha is None or seg.kind != "sealed":
            continue
        want = listed.sha256(seg.worker, seg.seq)
        if want is not None and want != sha:
            out.append(
                f"{seg.name}: its sha256 differs from manifest/{seg.worker}.jsonl"
                " (changed after sealing)"
            )
    return out
