"""Where the log's files are: the one place that knows the paths under ``<data_dir>/log/``.

Layout::

    active/<worker>/<seq:08d>.jsonl     one Outcome a line (exact `encode_json` bytes), fsync per batch
    active/<worker>/.lock               flock held by the one writer of that worker's chain (its pid)
    sealed/<worker>/<seq:08d>.parquet   a sealed segment: flat query columns + each record's line
    sealed/<worker>/<seq:08d>.keys      its idempotency keys (a derived index, checked by sha256)
    sealed/<worker>/<seq:08d>.runs.parquet  one row per HookRun of its records (derived, for
                                        queries; checked by sha256; absent for older segments)
    manifest/<worker>.jsonl             one line per sealed segment: range, count, sha256, heads, hmac
    shipped/<worker>.jsonl              one line per segment shipped to object storage and read
                                        back intact (`ingest.log.ship`); a pruned segment is
                                        listed by `segments` with its object as `location`

Rules of this file:
- Paths only, and the listing of segments; no reading of records, no NATS, no DuckDB.
- Every other module (the writer, the sealer, `verify`, the readers, `queries.db`,
  `replay`) gets its paths from here: `Segment`, `segments`, `sealed_copy`, `runs_path`.

Example:
    >>> import tempfile
    >>> segments(tempfile.mkdtemp())
    []
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

__all__ = [
    "LOCK_NAME",
    "Segment",
    "SegmentKind",
    "check_worker",
    "default_data_dir",
    "has_log",
    "keys_path",
    "lock_path",
    "manifest_path",
    "rel",
    "root",
    "runs_location",
    "runs_path",
    "runs_path_of",
    "sealed_copy",
    "seg_path",
    "segments",
    "seqs",
    "shipped_path",
    "stamp_name",
    "workers",
]


def default_data_dir() -> Path:
    """``$HOOKAUDIT_DATA_DIR``, else ``$XDG_DATA_HOME/hookaudit`` (``~/.local/share/hookaudit``)."""
    env = os.environ.get("HOOKAUDIT_DATA_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_DATA_HOME")
    return (Path(xdg) if xdg else Path.home() / ".local" / "share") / "hookaudit"


SegmentKind = Literal["active", "sealed"]
LOCK_NAME = ".lock"
_WORKER_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")
_SEGMENT_RE = re.compile(r"(\d{8,})\.(jsonl|parquet)\Z")
_EXT: dict[SegmentKind, str] = {"active": "jsonl", "sealed": "parquet"}


def root(data_dir: str | os.PathLike[str]) -> Path:
    """`<data_dir>/log`, the folder every path of the log is under."""
    return Path(data_dir) / "log"


def check_worker(worker: str) -> str:
    """The worker name, or ValueError naming the rule it breaks."""
    if not _WORKER_RE.match(worker):
        raise ValueError(
            f"worker name {worker!r}: expected 1-128 of [A-Za-z0-9._-], not starting with . _ -"
        )
    return worker


def seg_path(root: Path, worker: str, seq: int, kind: SegmentKind) -> Path:
    return root / kind / worker / f"{seq:08d}.{_EXT[kind]}"


def keys_path(root: Path, worker: str, seq: int) -> Path:
    return root / "sealed" / worker / f"{seq:08d}.keys"


def runs_path_of(root: Path, worker: str, seq: int) -> Path:
    return root / "sealed" / worker / f"{seq:08d}.runs.parquet"


def manifest_path(root: Path, worker: str) -> Path:
    return root / "manifest" / f"{worker}.jsonl"


def shipped_path(root: Path, worker: str) -> Path:
    return root / "shipped" / f"{worker}.jsonl"


def lock_path(root: Path, worker: str) -> Path:
    return root / "active" / worker / LOCK_NAME


def rel(root: Path, path: Path) -> str:
    return path.relative_to(root).as_posix()


def stamp_name(clock: Callable[[], float]) -> str:
    return datetime.fromtimestamp(clock(), UTC).strftime("%Y%m%dT%H%M%S%fZ")


def seqs(folder: Path, ext: str) -> dict[int, Path]:
    """Segment files named `<seq>.<ext>` in a folder, by seq (other files are ignored)."""
    found: dict[int, Path] = {}
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        for entry in os.scandir(folder):
            m = _SEGMENT_RE.match(entry.name)
            if m and m.group(2) == ext:
                found[int(m.group(1))] = Path(entry.path)
    return found


def workers(root: Path) -> list[str]:
    """Every worker that has a chain: an active or sealed folder, or a manifest."""
    names: set[str] = set()
    for kind in ("active", "sealed"):
        with contextlib.suppress(FileNotFoundError, NotADirectoryError):
            names.update(e.name for e in os.scandir(root / kind) if e.is_dir())
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        names.update(
            e.name[:-6] for e in os.scandir(root / "manifest") if e.name.endswith(".jsonl")
        )
    return sorted(n for n in names if _WORKER_RE.match(n))


def has_log(data_dir: str | os.PathLike[str]) -> bool:
    """Whether `data_dir` holds a log (a `log/` folder with at least one worker chain).

    Example:
        >>> has_log(tempfile.mkdtemp())
        False
    """
    return bool(workers(root(data_dir)))


@dataclass(frozen=True, slots=True, order=True)
class Segment:
    """One segment file: `kind` 'active' (JSONL, still appended) or 'sealed' (Parquet)."""

    worker: str
    seq: int
    kind: SegmentKind
    path: Path = field(compare=False)
    remote: str | None = field(default=None, compare=False)  # its object, once pruned here

    @property
    def location(self) -> str:
        """Where to read it: the local path, or the ``s3://`` object of a pruned segment."""
        return self.remote or str(self.path)

    @property
    def name(self) -> str:
        """The path under `<data_dir>/log/`, as `verify` reports it: 'active/w1/00000002.jsonl'."""
        return f"{self.kind}/{self.worker}/{self.path.name}"


def sealed_copy(seg: Segment) -> Segment:
    """The sealed segment of the same worker and seq (where an active one goes when sealed).

    Example:
        >>> sealed_copy(Segment("w1", 2, "active", Path("/d/log/active/w1/00000002.jsonl"))).name
        'sealed/w1/00000002.parquet'
    """
    if seg.kind == "sealed":
        return seg
    base = seg.path.parents[2]
    return Segment(seg.worker, seg.seq, "sealed", seg_path(base, seg.worker, seg.seq, "sealed"))


def runs_path(seg: Segment) -> Path:
    """The runs side file of a segment (one row per HookRun, `ingest.log.schema.RUN_SCHEMA`).

    Only sealed segments have one, and only those sealed since it exists: check `exists()`.

    Example:
        >>> runs_path(Segment("w1", 1, "sealed", Path("/d/log/sealed/w1/00000001.parquet"))).name
        '00000001.runs.parquet'
    """
    return runs_path_of(seg.path.parents[2], seg.worker, seg.seq)


def runs_location(seg: Segment) -> str:
    """`runs_path` as a location: the runs object of a pruned segment, else the local path.

    Example:
        >>> runs_location(Segment("w1", 1, "sealed", Path("/x"), "s3://b/p/sealed/w1/00000001.parquet"))
        's3://b/p/sealed/w1/00000001.runs.parquet'
    """
    if seg.remote:
        return seg.remote.removesuffix(".parquet") + ".runs.parquet"
    return str(runs_path(seg))


def segments(data_dir: str | os.PathLike[str], *, worker: str | None = None) -> list[Segment]:
    """Every segment, by worker then seq; a seq both sealed and active counts as sealed.

    This is log order: the order `verify` walks and the dedup rule ranks copies by.

    Example:
        >>> segments(tempfile.mkdtemp())
        []
    """
    base = root(data_dir)
    found: list[Segment] = []
    for w in [check_worker(worker)] if worker is not None else workers(base):
        sealed = seqs(base / "sealed" / w, "parquet")
        active = seqs(base / "active" / w, "jsonl")
        found += [Segment(w, s, "sealed", p) for s, p in sealed.items()]
        found += [Segment(w, s, "active", p) for s, p in active.items() if s not in sealed]
        if (base / "shipped").is_dir():
            from ingest.log.ship import remote_segments  # only for logs that shipped

            for s, url in remote_segments(base, w).items():
                if s not in sealed and s not in active:
                    path = seg_path(base, w, s, "sealed")
                    found.append(Segment(w, s, "sealed", path, url))
    return sorted(found)
