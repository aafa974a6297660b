"""A SIEM forwarder's state on disk: per-sink counters and parked records.

Layout: ``<data-dir>/siem/<name>/status.json`` (counters, rewritten atomically after every
batch, so a SIGKILL loses none that were acknowledged) and ``<data-dir>/siem/<name>/parked.jsonl``
(one line per record a receiver rejected for good, fsynced before its message is acked).

Example:
    >>> Counters().sent
    0
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import msgspec

__all__ = [
    "Counters",
    "Parked",
    "append_parked",
    "read_counters",
    "read_parked",
    "sink_dir",
    "sink_names",
    "write_counters",
]

_enc = msgspec.json.Encoder()


class Counters(msgspec.Struct, kw_only=True):
    """What one named sink has done since it was first started."""

    name: str = ""
    to: str = ""
    format: str = ""
    consumer: str = ""
    stream: str = ""
    sent: int = 0  # records the receiver accepted
    retried: int = 0  # records sent again after a failure or a per-item retry
    failed: int = 0  # send attempts that failed (receiver down, refused, no ack)
    parked: int = 0  # records rejected for good, kept in parked.jsonl
    messages: int = 0  # JetStream messages acked
    last_error: str | None = None
    last_error_at: float | None = None
    last_sent_at: float | None = None
    pid: int | None = None
    started_at: float | None = None
    updated_at: float | None = None


class Parked(msgspec.Struct, kw_only=True):
    time: float
    seq: int
    event_id: str
    uid: str
    reason: str
    record: str


def sink_dir(data_dir: Path, name: str) -> Path:
    return data_dir / "siem" / name


def sink_names(data_dir: Path) -> list[str]:
    root = data_dir / "siem"
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / "status.json").is_file())


def read_counters(data_dir: Path, name: str) -> Counters | None:
    path = sink_dir(data_dir, name) / "status.json"
    try:
        return msgspec.json.decode(path.read_bytes(), type=Counters)
    except (OSError, msgspec.DecodeError):
        return None


def write_counters(data_dir: Path, c: Counters) -> None:
    c.updated_at = time.time()
    put_counters(data_dir, c.name, _enc.encode(c))


def put_counters(data_dir: Path, name: str, data: bytes) -> None:
    """Replace sink `name`'s status file with `data` (encoded `Counters`), atomically.
    Blocking: a rename can take a tenth of a second on a busy disk, so the forwarder calls
    it from a thread."""
    d = sink_dir(data_dir, name)
    d.mkdir(parents=True, exist_ok=True)
    tmp = d / f"status.json.{os.getpid()}.tmp"
    tmp.write_bytes(data)
    tmp.replace(d / "status.json")


def encode_counters(c: Counters) -> bytes:
    c.updated_at = time.time()
    return _enc.encode(c)


def append_parked(data_dir: Path, name: str, items: list[Parked]) -> None:
    if not items:
        return
    d = sink_dir(data_dir, name)
    d.mkdir(parents=True, exist_ok=True)
    fd = os.open(d / "parked.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o640)
    try:
        os.write(fd, b"".join(_enc.encode(p) + b"\n" for p in items))
        os.fsync(fd)
    finally:
        os.close(fd)


def read_parked(data_dir: Path, name: str, last: int = 20) -> tuple[int, list[dict[str, Any]]]:
    """(how many records are parked, the last `last` of them)."""
    path = sink_dir(data_dir, name) / "parked.jsonl"
    try:
        lines = path.read_bytes().splitlines()
    except OSError:
        return 0, []
    out: list[dict[str, Any]] = []
    for line in lines[-last:]:
        try:
            out.append(msgspec.json.decode(line))
        except msgspec.DecodeError:
            out.append({"unreadable": line[:200].decode("utf-8", "replace")})
    return len(lines), out
