"""Shipping sealed segments to object storage, and pruning the local copies once verified.

Rules of this file:
- Remote layout, under ``s3://bucket/prefix``: the local one, ``sealed/<worker>/<seq>.parquet``,
  ``.keys``, ``.runs.parquet`` and ``manifest/<worker>.jsonl``.
- `ship` uploads each sealed segment listed in a worker's manifest, in seq order: first
  its local files are checked against the manifest's sha256 (a corrupted local copy is
  refused, never shipped), then uploaded, then **read back** and checked against the
  manifest again; only then is a line appended (fsynced) to the ship index
  ``log/shipped/<worker>.jsonl``. The manifest goes up last, as the bytes that listed
  what was shipped, so a remote manifest never names a segment that is not there.
- `prune` deletes a local Parquet (and runs file) only when the index says it was
  shipped and verified **and** the object, read again now, still has the manifest's
  sha256. The keys index stays local (small): the writer still drops a re-delivered
  event that a pruned segment holds.
- `remote_segments` is how `ingest.log.layout.segments` lists a pruned segment: as a
  sealed segment whose location is its object.

Example:
    >>> import tempfile
    >>> remote_segments(Path(tempfile.mkdtemp()), "w1")
    {}
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
from collections.abc import Callable
from pathlib import Path

import msgspec

from engine.errors import HookauditError
from ingest.log.files import make_dirs, open_append
from ingest.log.layout import (
    check_worker,
    keys_path,
    manifest_path,
    root,
    runs_path_of,
    seg_path,
    shipped_path,
    workers,
)
from ingest.log.manifest import ManifestEntry, manifest_lines
from ingest.log.objstore import Store, read_bytes, set_endpoint, split_url

__all__ = ["ShipError", "Shipped", "prune", "remote_segments", "ship", "shipped"]


class ShipError(HookauditError):
    """A segment could not be shipped or pruned safely (named in the message)."""


class Shipped(msgspec.Struct, frozen=True, kw_only=True):
    """One line of ``log/shipped/<worker>.jsonl``: a segment uploaded and read back intact."""

    worker: str
    seq: int
    url: str  # the Parquet object
    endpoint: str
    sha256: str
    size: int
    keys_sha256: str
    runs_sha256: str | None = None
    at: float = 0.0


_enc = msgspec.json.Encoder()
_dec = msgspec.json.Decoder(Shipped)


def _rel(worker: str, seq: int, suffix: str) -> str:
    return f"sealed/{worker}/{seq:08d}{suffix}"


def shipped(base: Path, worker: str) -> dict[int, Shipped]:
    """The ship index of a worker (`base` is ``<data_dir>/log``), by seq; bad lines ignored."""
    out: dict[int, Shipped] = {}
    with contextlib.suppress(FileNotFoundError), open(shipped_path(base, worker), "rb") as f:
        for raw in f:
            if raw.endswith(b"\n"):
                with contextlib.suppress(msgspec.DecodeError):
                    s = _dec.decode(raw)
                    if s.worker == worker:
                        out[s.seq] = s
    return out


def remote_segments(base: Path, worker: str) -> dict[int, str]:
    """{seq: object URL} of a worker's shipped segments (their endpoints registered)."""
    out: dict[int, str] = {}
    for seq, s in shipped(base, worker).items():
        with contextlib.suppress(ValueError):
            set_endpoint(split_url(s.url)[0], s.endpoint)
            out[seq] = s.url
    return out


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _append_index(path: Path, line: Shipped) -> None:
    make_dirs(path.parent)
    fd, _ = open_append(path)
    try:
        os.write(fd, _enc.encode(line) + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)


def _ship_one(store: Store, base: Path, e: ManifestEntry) -> Shipped:
    w, seq = e.worker, e.seq
    files = [(".parquet", seg_path(base, w, seq, "sealed"), e.sha256),
             (".keys", keys_path(base, w, seq), e.keys_sha256)]  # fmt: skip
    if e.runs_sha256 is not None:
        files.append((".runs.parquet", runs_path_of(base, w, seq), e.runs_sha256))
    for suffix, path, want in files:
        name = f"sealed/{w}/{path.name}"
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise ShipError(f"{name}: listed in manifest/{w}.jsonl but missing here") from None
        if _sha(data) != want:
            raise ShipError(f"{name}: sha256 does not match manifest/{w}.jsonl (run verify)")
        rel = _rel(w, seq, suffix)
        store.put(rel, data)
        back = read_bytes(store.url_of(rel))
        if _sha(back) != want:
            raise ShipError(f"{store.url_of(rel)}: read back {len(back)} bytes whose sha256 "
                            "does not match the manifest: not recorded as shipped")  # fmt: skip
    return Shipped(
        worker=w,
        seq=seq,
        url=store.url_of(_rel(w, seq, ".parquet")),
        endpoint=store.endpoint,
        sha256=e.sha256,
        size=e.size,
        keys_sha256=e.keys_sha256,
        runs_sha256=e.runs_sha256,
        at=time.time(),
    )


def ship(
    data_dir: str | os.PathLike[str],
    store: Store,
    *,
    worker: str | None = None,
    progress: Callable[[str], None] | None = None,
    planned: Callable[[int, int], None] | None = None,
) -> list[Shipped]:
    """Ship every sealed segment not yet shipped to `store`; what was shipped now.
    `planned(segments, records)` hears what is to ship before the first upload,
    `progress(line)` each segment as it is shipped.

    Example:
        >>> [s.seq for s in ship(data_dir, open_store("s3://logs/h"))]  # doctest: +SKIP
        [1, 2]
    """
    base = root(data_dir)
    plan: list[tuple[str, bytes, list[ManifestEntry]]] = []
    for w in [check_worker(worker)] if worker else workers(base):
        mpath = manifest_path(base, w)
        try:
            mbytes = mpath.read_bytes()
        except FileNotFoundError:
            continue
        mbytes = mbytes[: mbytes.rfind(b"\n") + 1]  # a torn last line is not listed yet
        have = shipped(base, w)
        todo = []
        for m in manifest_lines(mpath):
            e = m.entry
            if e is None or m.line > mbytes.count(b"\n"):
                continue
            s = have.get(e.seq)
            if s is not None and s.url == store.url_of(_rel(w, e.seq, ".parquet")):
                if s.sha256 != e.sha256:
                    raise ShipError(f"manifest/{w}.jsonl:{m.line}: segment {e.seq} was "
                                    "shipped with another sha256 (run verify)")  # fmt: skip
                continue
            todo.append(e)
        plan.append((w, mbytes, todo))
    if planned is not None:
        planned(sum(len(t) for _, _, t in plan), sum(e.count for _, _, t in plan for e in t))
    done: list[Shipped] = []
    for w, mbytes, todo in plan:
        for e in todo:
            line = _ship_one(store, base, e)
            _append_index(shipped_path(base, w), line)
            done.append(line)
            if progress is not None:
                progress(f"shipped {w} segment {e.seq} ({e.count} records) to {line.url}")
        rel = f"manifest/{w}.jsonl"
        store.put(rel, mbytes)
        if read_bytes(store.url_of(rel)) != mbytes:
            raise ShipError(f"{store.url_of(rel)}: read back differs from manifest/{w}.jsonl")
    return done


def prune(
    data_dir: str | os.PathLike[str], *, progress: Callable[[str], None] | None = None
) -> tuple[int, int]:
    """Delete the local Parquet and runs files of shipped segments whose objects, read now,
    still match the manifest; (segments pruned, bytes freed).

    Example:
        >>> prune(tempfile.mkdtemp())
        (0, 0)
    """
    base = root(data_dir)
    count = freed = 0
    for w in workers(base):
        listed = {m.entry.seq: m.entry for m in manifest_lines(manifest_path(base, w)) if m.entry}
        remote_segments(base, w)  # registers the endpoints
        for seq, s in sorted(shipped(base, w).items()):
            local = seg_path(base, w, seq, "sealed")
            if not local.exists():
                continue
            e = listed.get(seq)
            if e is None or e.sha256 != s.sha256:
                raise ShipError(f"sealed/{w}/{local.name}: shipped copy is not the one the "
                                "manifest lists: not pruned (run verify)")  # fmt: skip
            if _sha(read_bytes(s.url)) != e.sha256:
                raise ShipError(f"{s.url}: object no longer matches the manifest: not pruned")
            runs = runs_path_of(base, w, seq)
            if e.runs_sha256 is not None:
                rurl = s.url.removesuffix(".parquet") + ".runs.parquet"
                if _sha(read_bytes(rurl)) != e.runs_sha256:
                    raise ShipError(f"{rurl}: object no longer matches the manifest: not pruned")
            for path in (local, runs):
                with contextlib.suppress(FileNotFoundError):
                    size = path.stat().st_size
                    path.unlink()
                    freed += size
            count += 1
            if progress is not None:
                progress(f"pruned sealed/{w}/{local.name} (kept at {s.url})")
    return count, freed
