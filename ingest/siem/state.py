"""A SIEM forwarder's state on disk: per-sink counters and parked records.

Layout: ``<data-dir>/siem/<name>/status.json`` (counters, rewritten atomically after every
batch, so a SIGKILL loses none that were acknowledged), ``<data-dir>/siem/<name>/parked.jsonl``
(one line per record a receiver rejected for good, fsynced before its message is acked) and
``<data-dir>/siem/<name>/lock`` (flocked by the running sink: "running" is that lock held,
not a pid that may have been reused since).

Example:
    >>> Counters().sent
    0
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path
from typing import Any

import msgspec

from engine.errors import Unavailable
from ingest.log.files import Held, holder, take_lock
from ingest.private import make_private

__all__ = [
    "BadState",
    "Counters",
    "Parked",
    "append_parked",
    "hold_sink",
    "load_counters",
    "read_counters",
    "read_parked",
    "running_pid",
    "sink_dir",
    "sink_names",
    "sink_report",
    "write_counters",
]

_enc = msgspec.json.Encoder()
_log = logging.getLogger("hookaudit.siem")


class BadState(Exception):
    """A sink's status file exists but cannot be read (the message names the file)."""


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
    """Sink `name`'s counters, None when it has none; `BadState` when the file is damaged."""
    path = sink_dir(data_dir, name) / "status.json"
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise BadState(f"{path}: {e.strerror or e}") from e
    try:
        return msgspec.json.decode(data, type=Counters)
    except (msgspec.DecodeError, RecursionError) as e:
        raise BadState(f"{path}: unreadable: {e}") from e


def load_counters(data_dir: Path, name: str) -> Counters | None:
    """`read_counters` for a sink starting up: a damaged status file is moved aside to
    ``status.json.bad`` with a warning, and the sink counts from zero (the counters are a
    report; where delivery resumes is the durable consumer's, not this file's)."""
    try:
        return read_counters(data_dir, name)
    except BadState as e:
        path = sink_dir(data_dir, name) / "status.json"
        try:
            path.replace(path.with_name("status.json.bad"))
        except OSError as e2:
            raise Unavailable(f"{e}; cannot move it aside: {e2.strerror or e2}") from e2
        _log.warning("%s; moved to status.json.bad, counting from zero", e)
        return None


def hold_sink(data_dir: Path, name: str) -> int:
    """Take sink `name`'s lock (an fd, held until closed): two processes of one sink in one
    data dir would overwrite each other's counters. Unavailable when it is running."""
    d = sink_dir(data_dir, name)
    make_private(d)
    try:
        return take_lock(d / "lock")
    except Held as h:
        raise Unavailable(
            f"sink {name!r} is already running in {data_dir} (pid {h.pid}): stop it first, "
            "or give this one another --name"
        ) from None


def running_pid(data_dir: Path, name: str) -> int | None:
    """The pid of the process running sink `name` now, or None (its lock is not held)."""
    return holder(sink_dir(data_dir, name) / "lock")


def write_counters(data_dir: Path, c: Counters) -> None:
    c.updated_at = time.time()
    put_counters(data_dir, c.name, _enc.encode(c))


def put_counters(data_dir: Path, name: str, data: bytes) -> None:
    """Replace sink `name`'s status file with `data` (encoded `Counters`), atomically.
    Blocking: a rename can take a tenth of a second on a busy disk, so the forwarder calls
    it from a thread."""
    d = sink_dir(data_dir, name)
    make_private(d)
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
    make_private(d)
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
        except (msgspec.DecodeError, RecursionError):
            out.append({"unreadable": line[:200].decode("utf-8", "replace")})
    return len(lines), out


def sink_report(
    data_dir: Path, name: str, show_parked: int, *, damaged: bool = False
) -> dict[str, Any] | None:
    """What `hookaudit siem status` shows of sink `name` (None: no such sink), the lag
    left for the caller to fill in. `damaged`: its counters are unreadable, show zeros."""
    c = Counters(name=name) if damaged else read_counters(data_dir, name)
    if c is None:
        return None
    count, last = read_parked(data_dir, name, show_parked)
    pid = running_pid(data_dir, name)
    return {
        "name": name,
        "to": c.to,
        "format": c.format,
        "running": pid is not None,
        "pid": pid,
        "sent": c.sent,
        "retried": c.retried,
        "failed": c.failed,
        "parked": count,
        "messages": c.messages,
        "lag": None,
        "last_error": c.last_error,
        "last_error_at": _iso(c.last_error_at),
        "last_sent_at": _iso(c.last_sent_at),
        "parked_records": last,
    }


def _iso(t: float | None) -> str | None:
    return None if t is None else time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))
