"""A record's line: its canonical bytes, its chain hash, its dedup key, its batch seal.

Rules of this file:
- One chain per worker: seq 1, 2, …; `prev_hash` is the previous record's `hash`; `hash` is
  `chain_hash(record)`. A line is exactly `encode_json(record)`, so its hash is recomputed from
  the line's bytes alone (`recompute_hash`) and nothing a reader ignores can be changed unseen.
- The idempotency key of a record is (event id, settings_id, replay_id) (`idempotency_key`);
  the writer stores a key once per worker, `ingest.log.dedup` says which copy readers keep.
- With a log key (env HOOKAUDIT_LOG_KEY) every batch the writer appends ends with a batch
  line, `{"batch":{"worker":…,"last_seq":…,"head":…,"hmac":…}}`: the HMAC of the chain head
  after the batch, which commits to every record before it. A record appended or re-hashed
  by anything that lacks the key has no valid batch line after it (`verify` names it).
  Batch lines are not records: every reader skips them (`is_batch_line`).
- How the writer lays a line out (the event id, then its time, first; `replay_id` after every
  nested object) is fixed here (`HEAD_ID`, `HEAD_TS`, `LIVE_TAIL`), for the fast readers.
- Pure: no I/O (the key comes from the environment in `env_key` only).

Example:
    >>> idempotency_key("e1", "s1", None)
    'e1:s1:'
"""

from __future__ import annotations

import hashlib
import hmac
import os
import re
from datetime import datetime
from pathlib import Path

import msgspec

from engine.records import Outcome, chain_hash, encode_json

__all__ = [
    "BATCH_PREFIX",
    "HEAD_ID",
    "HEAD_TS",
    "KEY_ENV",
    "LIVE_TAIL",
    "BatchMark",
    "batch_hmac",
    "batch_line",
    "decode_batch",
    "env_key",
    "idempotency_key",
    "is_batch_line",
    "key_digest",
    "key_digest_of",
    "recompute_hash",
    "stamp",
    "view_decoder",
]

KEY_ENV = "HOOKAUDIT_LOG_KEY"
_HASH_TAIL = b',"hash":""}'  # how every canonical encoding ends: `hash` is Outcome's last field
_HEX_LEN = 64
_encoder = msgspec.json.Encoder()

# How `LogWriter` writes a record: the event's id, then its time, first; the outcome's
# replay_id after every nested object (only worker, seq, times and hashes follow it).
HEAD_ID = re.compile(rb'\{"event":\{"id":"([^"\\]*)"')
HEAD_TS = re.compile(
    rb'\{"event":\{"id":"[^"\\]*","ts":"'
    rb'(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{1,6})?(?:Z|[+-]\d\d:\d\d))"'
)  # at most 6 digits of a second: more, and `fromisoformat` would truncate, not round
LIVE_TAIL = b'null,"worker":'
BATCH_PREFIX = b'{"batch":'


def env_key() -> bytes | None:
    """The log key from env HOOKAUDIT_LOG_KEY (None when unset or empty)."""
    value = os.environ.get(KEY_ENV, "")
    return value.encode() if value else None


KEY_FILE = "key"  # <data-dir>/log/key: the log key of a data dir, made with its first record


def log_key(base: Path, *, create: bool = False) -> bytes | None:
    """The log key of the log at `base` (``<data-dir>/log``): $HOOKAUDIT_LOG_KEY, else the
    ``key`` file there; with `create`, a new random key is written there (0600, fsynced)
    when there is none. None when neither exists.

    A fresh log is keyed from its first record with no step to forget: its batches carry
    HMAC lines and its manifest entries are signed, so `verify` catches records appended,
    re-hashed or cut off at a point no batch line signs. Keep the file like the NATS seeds.
    """
    key = env_key()
    if key is not None:
        return key
    path = base / KEY_FILE
    try:
        text = path.read_bytes().strip()
        if text:
            return text
    except FileNotFoundError:
        pass
    if not create:
        return None
    import secrets

    new = secrets.token_hex(32).encode()
    base.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = base / f".{KEY_FILE}.{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.write(fd, new + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(tmp, path)  # never replaces a key another process made meanwhile
    except FileExistsError:
        pass
    finally:
        tmp.unlink()
    return path.read_bytes().strip()


def idempotency_key(event_id: str, settings_id: str, replay_id: str | None) -> str:
    """The log's dedup key, also used as the outcome's Nats-Msg-Id.

    Example:
        >>> idempotency_key("e1", "s1", "r1")
        'e1:s1:r1'
    """
    return f"{event_id}:{settings_id}:{replay_id or ''}"


def stamp(rec: Outcome) -> tuple[Outcome, bytes]:
    """Set `hash` on a record whose other chain fields are set; return it and its line bytes.

    One encode for both the hash and the line: the canonical bytes end in `"hash":""}`, so
    the line is those bytes with the digest spliced in (`test_log` asserts the equivalence).
    """
    canon = _encoder.encode(rec if rec.hash == "" else msgspec.structs.replace(rec, hash=""))
    if canon.endswith(_HASH_TAIL):
        digest = hashlib.sha256(canon).hexdigest()
        return msgspec.structs.replace(rec, hash=digest), canon[:-2] + digest.encode() + b'"}'
    stamped = msgspec.structs.replace(rec, hash=chain_hash(rec))  # a future field after `hash`
    return stamped, encode_json(stamped)


def recompute_hash(line: bytes, record: Outcome) -> str:
    """The chain hash of the record stored on `line`, recomputed from the line's exact bytes.

    A line this module wrote ends with its 64-hex `hash`; everything before it is hashed
    as written, so even fields this version does not know are covered. Any other line
    shape falls back to `chain_hash(record)`.

    Example:
        >>> from engine.records import new_event
        >>> rec, line = stamp(Outcome(event=new_event({"hook_event_name": "Stop"}), settings_id="s"))
        >>> recompute_hash(line, rec) == rec.hash == chain_hash(rec)
        True
    """
    n = _HEX_LEN + 2
    if (
        len(line) > n + 8
        and line[-2:] == b'"}'
        and line[-n - 9 : -n] == b',"hash":"'
        and line[-n:-2].decode("ascii", "replace") == record.hash
    ):
        h = hashlib.sha256(memoryview(line)[:-n])
        h.update(b'"}')
        return h.hexdigest()
    return chain_hash(record)


def key_digest_of(key: str) -> bytes:
    """The 16-byte digest of an idempotency key, as the writer and the keys index store it."""
    return hashlib.blake2b(key.encode(), digest_size=16).digest()


def key_digest(outcome: Outcome) -> bytes:
    """The 16-byte digest of the outcome's idempotency key, which a worker's log stores once.

    Example:
        >>> from engine.records import new_event
        >>> o = Outcome(event=new_event({"hook_event_name": "Stop"}), settings_id="s")
        >>> key_digest(o) == key_digest(msgspec.structs.replace(o, seq=9))
        True
    """
    return key_digest_of(idempotency_key(outcome.event.id, outcome.settings_id, outcome.replay_id))


class _EventRef(msgspec.Struct):
    id: str


class LineView(msgspec.Struct):
    """The few fields the writer needs from a line to recover its state (fast to decode)."""

    event: _EventRef
    settings_id: str
    replay_id: str | None = None
    seq: int = 0
    appended: datetime | None = None
    hash: str = ""

    def key(self) -> str:
        return idempotency_key(self.event.id, self.settings_id, self.replay_id)


view_decoder = msgspec.json.Decoder(LineView)


# ---------------------------------------------------------------- batch lines (keyed chain)


class BatchMark(msgspec.Struct, frozen=True, kw_only=True):
    """What a batch line holds: the chain head after the batch, and its HMAC."""

    worker: str
    last_seq: int
    head: str
    hmac: str


class _BatchLine(msgspec.Struct, frozen=True):
    batch: BatchMark


_batch_decoder = msgspec.json.Decoder(_BatchLine)


def batch_hmac(key: bytes, worker: str, last_seq: int, head: str) -> str:
    """HMAC-SHA256 (hex) of a chain head: commits to every record of the chain up to it.

    Example:
        >>> len(batch_hmac(b"k", "w1", 3, "ab" * 32))
        64
    """
    msg = f"hookaudit.log-batch/1\n{worker}\n{last_seq}\n{head}".encode()
    return hmac.new(key, msg, hashlib.sha256).hexdigest()


def batch_line(key: bytes, worker: str, last_seq: int, head: str) -> bytes:
    """The batch line (no newline) the writer appends after a batch, when it has a key."""
    mark = BatchMark(
        worker=worker, last_seq=last_seq, head=head, hmac=batch_hmac(key, worker, last_seq, head)
    )
    return BATCH_PREFIX + _encoder.encode(mark) + b"}"


def is_batch_line(raw: bytes | memoryview) -> bool:
    """Whether a line of an active segment is a batch line, not a record."""
    return raw[:9] == BATCH_PREFIX


def decode_batch(raw: bytes) -> BatchMark:
    """The mark of a batch line; msgspec.DecodeError when it is not one."""
    return _batch_decoder.decode(raw).batch
