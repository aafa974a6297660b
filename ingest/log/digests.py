"""Readers check a sealed segment's bytes against its manifest entry before reading it.

Rules of this file:
- A sealed Parquet file with one byte changed may fail to parse (an error naming no file,
  an abort inside a reader thread) or parse into other values. So `query`, `sql`, `detect`
  and `replay` compare each local sealed segment's sha256 with the manifest's before
  DuckDB or pyarrow opens it, and refuse to answer over one that differs, naming it.
- Hashing is paid once per file version: a digest that matched is remembered in
  ``<data_dir>/cache/sealed-digests.json`` (0600) under the file's (inode, size, mtime,
  ctime). Any write to the file changes its ctime, which no user can set back, so a changed
  file is hashed again. The cache saves time, not trust: `hookaudit verify` (with the log
  key) is the check of record; a user who can write the data dir can also rewrite a
  manifest that has no key.
- A segment with no readable manifest entry, or shipped to object storage, is not judged
  here (`verify` reports it).

Example:
    >>> changed_sealed(data_dir)  # doctest: +SKIP
    ['sealed/w1/00000002.parquet: its sha256 differs from manifest/w1.jsonl (changed after sealing)']
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from collections.abc import Iterable
from pathlib import Path

import msgspec

from ingest.log.files import make_dirs
from ingest.log.layout import Segment, segments
from ingest.log.manifest import ListedDigests

__all__ = ["changed_sealed"]

_CACHE = ("cache", "sealed-digests.json")
_dec = msgspec.json.Decoder(dict[str, str])


def _stamp(st: os.stat_result) -> str:
    return f"{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def changed_sealed(
    data_dir: str | os.PathLike[str], segs: Iterable[Segment] | None = None
) -> list[str]:
    """One line for each local sealed segment (of `segs`, default all) whose bytes are not
    those its manifest entry lists, or that cannot be read."""
    root = Path(data_dir)
    cache_path = root.joinpath(*_CACHE)
    try:
        cache = _dec.decode(cache_path.read_bytes())
    except (OSError, msgspec.DecodeError, RecursionError):
        cache = {}
    listed = ListedDigests(root)
    out: list[str] = []
    fresh: dict[str, str] = {}
    for seg in segs if segs is not None else segments(root):
        if seg.kind != "sealed" or seg.remote is not None:
            continue
        want = listed.sha256(seg.worker, seg.seq)
        if want is None:
            continue
        try:
            stamp = _stamp(seg.path.stat())
            if cache.get(seg.name) == f"{stamp}:{want}":
                fresh[seg.name] = cache[seg.name]
                continue
            got = _sha256(seg.path)
        except OSError as exc:
            out.append(f"{seg.name}: cannot read: {exc.strerror or exc}")
            continue
        if got != want:
            out.append(
                f"{seg.name}: its sha256 differs from manifest/{seg.worker}.jsonl"
                " (changed after sealing)"
            )
            continue
        fresh[seg.name] = f"{stamp}:{want}"
    if fresh != cache:
        with contextlib.suppress(OSError):  # a read-only data dir: hash again next time
            make_dirs(cache_path.parent)
            tmp = cache_path.with_name(f".{cache_path.name}.{os.getpid()}")
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(msgspec.json.encode(fresh))
            os.replace(tmp, cache_path)
    return out
