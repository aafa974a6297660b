"""What an active segment says the chain's state is, read back at a writer's open.

Rules of this file:
- A torn last line (a crash mid-write) is moved aside to `<segment>.torn-<ts>`; with a
  log key, the records after the last valid batch line are moved aside to
  `<segment>.unsigned-<ts>` (a batch torn by a crash was never acked; a record appended by
  another writer must not be signed into the chain). Nothing is ever dropped.
- A batch line with a wrong hmac is tampering, never a crash (a crash tears a line, it
  never makes a wrong one): `LogCorrupt`, and the writer does not continue the chain.
- An unreadable record is logged and skipped here; `hookaudit verify` reports it.
- `ingest.log.writer.LogWriter` keeps the state; this file only reads it from the files.

Example:
    >>> import tempfile
    >>> from pathlib import Path
    >>> d = Path(tempfile.mkdtemp())
    >>> (d / "active" / "w1").mkdir(parents=True)
    >>> _ = (d / "active" / "w1" / "00000001.jsonl").write_bytes(b'{"torn')
    >>> load_active(d, "w1", 1, None, (0, ""), None, lambda: 0.0).size
    0
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import msgspec

from engine.errors import LogCorrupt
from ingest.log.files import set_aside
from ingest.log.layout import rel, seg_path
from ingest.log.lines import batch_hmac, decode_batch, is_batch_line, key_digest_of, view_decoder
from ingest.log.reader import jsonl_lines

__all__ = ["ActiveState", "load_active"]

_logger = logging.getLogger("ingest.log.writer")


class ActiveState(NamedTuple):
    """The chain after an active segment: its last record, the segment's start and size (the
    bytes kept), and the idempotency key digests it holds (digest -> the segment's seq)."""

    seq: int
    head: str
    started: float | None
    size: int
    keys: dict[bytes, int]


def load_active(
    root: Path,
    worker: str,
    seq: int,
    key: bytes | None,
    seq_head: tuple[int, str],
    started: float | None,
    clock: Callable[[], float],
) -> ActiveState:
    """The state after active segment `seq`, the chain having been at `seq_head` before it;
    a torn or unsigned tail is set aside."""
    path = seg_path(root, worker, seq, "active")
    good = 0  # bytes up to the last complete line
    keyed = key is not None
    signed = 0  # with a key: bytes up to the last valid batch line
    keys: dict[bytes, int] = {}  # read since the last valid batch line (all, without a key)
    kept_keys: dict[bytes, int] = {}  # with a key: those up to the last valid batch line
    kept: tuple[tuple[int, str], float | None] = (seq_head, None)
    for n, raw, complete in jsonl_lines(path):
        if not complete:
            aside = set_aside(path, good, "torn", clock)
            _logger.warning(
                "%s: torn last line (%d bytes, no newline) moved to %s", path, len(raw), aside.name
            )
            break
        good += len(raw) + 1
        if is_batch_line(raw):
            if key is not None and not _signs(key, worker, raw, seq_head):
                raise LogCorrupt(
                    rel(root, path),
                    n,
                    "bad batch hmac (records forged or re-hashed): the writer will not "
                    "continue this chain; run hookaudit verify",
                )
            if keyed:
                signed = good
                kept_keys.update(keys)
                keys.clear()
                kept = (seq_head, started)
            continue
        try:
            view = view_decoder.decode(raw)
        except (msgspec.DecodeError, RecursionError) as exc:
            _logger.warning("%s:%d: unreadable record (verify will report it): %s", path, n, exc)
            continue
        keys[key_digest_of(view.key())] = seq
        seq_head = (view.seq, view.hash)
        if started is None:
            started = view.appended.timestamp() if view.appended else clock()
    if not keyed:
        return ActiveState(seq_head[0], seq_head[1], started, good, keys)
    if signed < good:
        aside = set_aside(path, signed, "unsigned", clock)
        _logger.error(
            "%s: %d bytes of records after the last valid batch hmac moved to %s "
            "(a batch torn by a crash, or records appended by another writer)",
            path,
            good - signed,
            aside.name,
        )
    (last_seq, head), kept_started = kept
    return ActiveState(last_seq, head, kept_started, signed, kept_keys)


def _signs(key: bytes, worker: str, raw: bytes, seq_head: tuple[int, str]) -> bool:
    """Whether a batch line carries a valid hmac of the chain head `seq_head`."""
    try:
        mark = decode_batch(raw)
    except msgspec.DecodeError:
        return False
    want = batch_hmac(key, worker, *seq_head)
    return (mark.last_seq, mark.head) == seq_head and hmac.compare_digest(mark.hmac, want)
