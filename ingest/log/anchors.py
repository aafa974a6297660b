"""Chain heads anchored outside the host, and the check of the local log against them.

A worker publishes one `Anchor` per appended batch (worker, seq of the batch's last
record, that record's hash) to a stream the host cannot rewrite (`HOOK_ANCHORS`: no
delete, no purge, no update for the worker role). Each head commits to the whole chain
before it, so an attacker who rewrites the local log, even recomputing every hash and
re-signing with a key of their own, cannot match the heads that were anchored before,
and one who cuts the newest records off leaves an anchored seq with no record.

Rules of this file:
- Pure: anchors in (bytes, as fetched by `ingest.nats.streams.fetch_anchors`), findings out. No
  NATS here (the log package imports none).
- Every anchor is checked, not only the newest: whoever holds the worker's NATS key can
  publish a *new* head for a rewritten log, but cannot remove the old ones.
- An anchor that cannot be decoded is reported, never a crash.

Example:
    >>> encode_anchor(Anchor(worker="w1", seq=3, head="ab"))
    b'{"worker":"w1","seq":3,"head":"ab"}'
"""

from __future__ import annotations

import os
from collections.abc import Iterable

import msgspec

from ingest.log.findings import VerifyError
from ingest.log.layout import check_worker, segments
from ingest.log.lines import view_decoder
from ingest.log.reader import iter_raw_lines

__all__ = ["Anchor", "AnchorCheck", "check_anchors", "decode_anchor", "encode_anchor"]


class Anchor(msgspec.Struct, frozen=True, kw_only=True):
    """A chain head: after `seq`, worker `worker`'s chain ended in record hash `head`."""

    worker: str
    seq: int
    head: str


class AnchorCheck(msgspec.Struct, kw_only=True):
    """What `check_anchors` found: how many anchors matched, the problems, per worker the
    last anchored seq and how many local records come after it (not anchored yet)."""

    checked: int = 0
    errors: list[VerifyError] = msgspec.field(default_factory=list)
    last_anchored: dict[str, int] = msgspec.field(default_factory=dict)
    unanchored: dict[str, int] = msgspec.field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.errors


_enc = msgspec.json.Encoder()
_dec = msgspec.json.Decoder(Anchor)


def encode_anchor(a: Anchor) -> bytes:
    return _enc.encode(a)


def decode_anchor(data: bytes) -> Anchor:
    """One anchor; ValueError naming what is wrong."""
    try:
        a = _dec.decode(data)
        check_worker(a.worker)
    except (msgspec.DecodeError, ValueError, RecursionError) as exc:
        raise ValueError(f"unreadable anchor: {exc}") from None
    return a


def _local_heads(data_dir: str | os.PathLike[str], worker: str) -> Iterable[tuple[int, str]]:
    """(seq, hash) of every record of a worker's chain as stored, in log order."""
    for seg in segments(data_dir, worker=worker):
        for _, raw in iter_raw_lines(seg):
            try:
                r = view_decoder.decode(raw)
            except (msgspec.DecodeError, RecursionError):
                continue  # `verify` reports it; an anchor on it then finds no match
            yield r.seq, r.hash


def check_anchors(data_dir: str | os.PathLike[str], anchors: Iterable[bytes]) -> AnchorCheck:
    """Check every anchored head against the local chains.

    Example:
        >>> check_anchors(data_dir, [encode_anchor(Anchor(worker="w1", seq=2, head=h))]).ok
        True
    """
    out = AnchorCheck()
    wanted: dict[str, dict[int, str]] = {}
    for n, data in enumerate(anchors, 1):
        try:
            a = decode_anchor(data)
        except ValueError as exc:
            out.errors.append(VerifyError(file="anchors", line=n, record_seq=None,
                                          kind="anchor", message=str(exc)))  # fmt: skip
            continue
        have = wanted.setdefault(a.worker, {})
        if have.get(a.seq, a.head) != a.head:  # two heads for one seq: someone forged one
            why = f"two anchored heads for {a.worker} seq {a.seq}: {have[a.seq]} and {a.head}"
            out.errors.append(VerifyError(file="anchors", line=n, record_seq=a.seq,
                                          kind="anchor", message=why))  # fmt: skip
        have.setdefault(a.seq, a.head)
    for worker, heads in sorted(wanted.items()):
        out.last_anchored[worker] = max(heads)
        seen: set[int] = set()
        after = 0
        for seq, h in _local_heads(data_dir, worker):
            if seq > out.last_anchored[worker]:
                after += 1
            want = heads.get(seq)
            if want is None or seq in seen:
                continue
            seen.add(seq)
            if h == want:
                out.checked += 1
            else:
                why = (f"record seq {seq} has hash {h[:16]}…, the head anchored for it is "
                       f"{want[:16]}… (history rewritten since it was anchored)")  # fmt: skip
                out.errors.append(VerifyError(file=f"chain {worker}", line=None, record_seq=seq,
                                              kind="anchor", message=why))  # fmt: skip
        out.unanchored[worker] = after
        missing = sorted(set(heads) - seen)
        if missing:
            span = f"{missing[0]}" if len(missing) == 1 else f"{missing[0]}..{missing[-1]}"
            why = (f"{len(missing)} anchored head(s) (seq {span}) have no record here "
                   "(records cut off or the chain deleted)")  # fmt: skip
            out.errors.append(VerifyError(file=f"chain {worker}", line=None,
                                          record_seq=missing[0], kind="anchor", message=why))  # fmt: skip
    return out
