"""Signed decisions: the worker signs or keys each Reply, emit, serve and the relay verify it.

Rules of this file:
- The signature (or tag) covers the Reply's exact bytes as published (msgpack), and the
  Reply names its event id: a verifier accepts a reply only if it verifies against a
  trusted key AND names the event it waits for, so a signed reply for one event is
  worthless for any other. Event ids are UUIDv7s chosen by the emitter, once.
- Two forms, both bound to the worker's key, neither forgeable by a process that holds
  only emitter credentials:
  * ``Hookaudit-Sig``: an ed25519 signature (base64) under the worker's seed. What a
    one-shot `emit` gets: one verification, no set-up.
  * ``Hookaudit-Mac``: a keyed BLAKE2b-256 tag (base64) under a key that only the worker
    and one requesting process can compute: X25519 of the worker's exchange key and the
    process's own ephemeral key, whose public half the process sends with each event
    (``Hookaudit-Peer``). The exchange key is derived from the seed (BLAKE2b, its own
    personalisation), not the signing key converted: the ed25519 key only signs, and what
    it signs is the exchange public key (``Hookaudit-Kx``: key + signature, sent with each
    tag, checked once per process and kept). A long-lived requester (serve, the relay)
    pays the signature check and the key agreement once per worker, then ~1 µs a reply
    instead of a ~60 µs signature check; the worker keeps the keys of the peers it has
    seen (bounded). The ephemeral secret never leaves memory.
  A reply without a valid form is refused; a bad ``Hookaudit-Peer`` gets a signature.
- Keys are nkeys (``SU…`` seed, ``U…`` public key), the format NATS itself uses.
  The worker's seed: ``--reply-key FILE`` / ``$HOOKAUDIT_REPLY_KEY``, else
  ``<data-dir>/nats/auth/reply.nk`` (created on first use, 0600). Emitters trust
  ``--worker-key U…[,U…]`` / ``$HOOKAUDIT_WORKER_KEY``, else ``<data-dir>/nats/auth/reply.pub``.
- No NATS import; PyNaCl (nkeys' own dependency) is imported when a key is loaded.

Example:
    >>> seed = ensure_reply_key(Path("/tmp/ha"))  # doctest: +SKIP
    >>> signer = Signer.from_file(seed)  # doctest: +SKIP
    >>> Verifier.from_keys([signer.public]).verify(b"x", signer.sign(b"x"))  # doctest: +SKIP
    True
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from engine.errors import SettingsError, Unavailable
from ingest.protocol import KX_HEADER, MAC_HEADER, SIG_HEADER

__all__ = [
    "ENV_REPLY_KEY",
    "ENV_WORKER_KEY",
    "Signer",
    "Verifier",
    "ensure_reply_key",
    "ensure_reply_key_in",
    "reply_public_path",
    "reply_seed_path",
    "trusted_verifier",
]

ENV_REPLY_KEY = "HOOKAUDIT_REPLY_KEY"
ENV_WORKER_KEY = "HOOKAUDIT_WORKER_KEY"

_USER_PREFIX = 20 << 3  # nkeys.PREFIX_BYTE_USER: public keys start with 'U'


def reply_seed_path(data_dir: Path) -> Path:
    from ingest.nats.auth import auth_dir

    return auth_dir(data_dir) / "reply.nk"


def reply_public_path(data_dir: Path) -> Path:
    from ingest.nats.auth import auth_dir

    return auth_dir(data_dir) / "reply.pub"


def ensure_reply_key(data_dir: Path) -> Path:
    """The data dir's reply signing seed, created (0600, with reply.pub) if missing.

    Example:
        >>> ensure_reply_key(Path("/tmp/ha")).name  # doctest: +SKIP
        'reply.nk'
    """
    seed_path = reply_seed_path(data_dir)
    ensure_reply_key_in(seed_path.parent)
    return seed_path


def ensure_reply_key_in(directory: Path) -> str:
    """Create ``reply.nk`` (0600) and ``reply.pub`` in `directory` if missing; the public key."""
    from ingest.nats.auth import new_seed, private_dir, public_key, write_private

    seed_path = directory / "reply.nk"
    pub_path = directory / "reply.pub"
    private_dir(directory)
    if not seed_path.is_file():
        write_private(seed_path, new_seed() + b"\n")
    pub = public_key(seed_path.read_bytes())
    if not pub_path.is_file() or pub_path.read_text().strip() != pub:
        write_private(pub_path, pub.encode() + b"\n")
    return pub


def _decode_public(key: str, where: str) -> bytes:
    import nkeys

    text = key.strip()
    try:
        raw = base64.b32decode(text + "=" * (-len(text) % 8))
    except (binascii.Error, ValueError) as e:
        raise SettingsError(where, "worker key", f"{text[:12]!r}… is not an nkey") from e
    if len(raw) != 35 or raw[0] != _USER_PREFIX:
        raise SettingsError(
            where, "worker key", f"{text[:12]!r}… is not an nkey user public key (U…)"
        )
    if nkeys.crc16_checksum(raw[:33]) != raw[33:]:
        raise SettingsError(where, "worker key", f"{text[:12]!r}… has a bad checksum")
    return bytes(raw[1:33])


_KX_CONTEXT = b"hookaudit-kx1"  # what the worker's ed25519 key signs: this + exchange key
_KX_CACHE = 64  # exchange certificates a requester keeps (one per trusted worker, in use)


def _mac_key(shared: bytes, worker_x: bytes, peer_x: bytes) -> bytes:
    """The reply MAC key of one (worker, requester) pair, from their X25519 agreement."""
    h = hashlib.blake2b(digest_size=32, person=b"hookaudit-reply1")
    h.update(shared + worker_x + peer_x)
    return h.digest()


def _tag(key: bytes, data: bytes) -> bytes:
    """The reply's MAC: keyed BLAKE2b-256 (RFC 7693's keyed mode), ~1 µs in the stdlib."""
    return hashlib.blake2b(data, key=key, digest_size=32, person=b"hookaudit-mac1").digest()


def _b64_32(text: str) -> bytes | None:
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None
    return raw if len(raw) == 32 else None


_B64_32, _B64_96 = 44, 128  # base64 lengths of a key and of a certificate (key + signature)
_PEER_CACHE = 4096  # requesters (serve, relay processes) a worker keeps keys for


class _Keys:
    """Keys derived from header texts, kept by text: only texts of one exact length (a
    hostile header is never decoded nor kept), at most `size` (all dropped when full)."""

    def __init__(self, length: int, size: int, make: Callable[[str], bytes | None]) -> None:
        self.length, self.size, self.make = length, size, make
        self._known: dict[str, bytes | None] = {}

    def __len__(self) -> int:
        return len(self._known)

    def get(self, text: str) -> bytes | None:
        if len(text) != self.length:
            return None
        try:
            return self._known[text]
        except KeyError:
            pass
        key = self.make(text)
        if len(self._known) >= self.size:
            self._known.clear()
        self._known[text] = key
        return key


class Signer:
    """Signs (or keys) reply bytes with a worker's seed.

    Example:
        >>> Signer.from_file(Path("/tmp/ha/nats/auth/reply.nk")).public[:1]  # doctest: +SKIP
        'U'
    """

    def __init__(self, seed: bytes) -> None:
        import nacl.bindings
        import nkeys

        try:
            _prefix, raw = nkeys.decode_seed(bytearray(seed.strip()))
        except nkeys.NkeysError as e:
            raise SettingsError("reply key", "seed", "not an nkey seed (SU…)") from e
        self._nacl: Any = nacl.bindings
        _pk, sk = nacl.bindings.crypto_sign_seed_keypair(bytes(raw))
        self._sk: bytes = sk
        # The exchange key: its own secret derived from the seed, its public half signed.
        self._x_sk: bytes = hashlib.blake2b(
            bytes(raw), digest_size=32, person=b"hookaudit-kx-sk1"
        ).digest()
        self._x_pk: bytes = nacl.bindings.crypto_scalarmult_base(self._x_sk)
        cert = self._x_pk + nacl.bindings.crypto_sign(_KX_CONTEXT + self._x_pk, sk)[:64]
        self._kx = base64.b64encode(cert).decode()
        self._peers = _Keys(_B64_32, _PEER_CACHE, self._agree)
        from ingest.nats.auth import public_key

        self.public = public_key(seed)

    @classmethod
    def from_file(cls, path: Path) -> Signer:
        try:
            return cls(Path(path).read_bytes())
        except OSError as e:
            raise SettingsError(str(path), "--reply-key", f"cannot read: {e.strerror}") from e

    def sign(self, data: bytes) -> str:
        """The base64 ed25519 signature of `data` (the ``Hookaudit-Sig`` header value)."""
        return base64.b64encode(self._nacl.crypto_sign(data, self._sk)[:64]).decode()

    def reply_headers(self, data: bytes, peer: str | None) -> dict[str, str]:
        """The headers that prove `data` is this worker's: a tag under the key shared
        with `peer` (the event's ``Hookaudit-Peer``) when it is a usable X25519 key,
        else a signature."""
        if peer:
            key = self._peers.get(peer)
            if key is not None:
                tag = _tag(key, data)
                return {MAC_HEADER: base64.b64encode(tag).decode(), KX_HEADER: self._kx}
        return {SIG_HEADER: self.sign(data)}

    def _agree(self, peer: str) -> bytes | None:
        raw = _b64_32(peer)
        if raw is None:
            return None
        try:
            shared = self._nacl.crypto_scalarmult(self._x_sk, raw)
        except RuntimeError:  # a low-order point: libsodium refuses it; sign instead
            return None
        return _mac_key(shared, self._x_pk, raw)


class _Ephemeral:
    """This process's X25519 key pair for keyed replies: made on first use, memory only."""

    pair: tuple[bytes, bytes] | None = None

    @classmethod
    def get(cls, nacl_bindings: Any) -> tuple[bytes, bytes]:
        if cls.pair is None:
            cls.pair = nacl_bindings.crypto_box_keypair()  # (public, secret)
        return cls.pair


class Verifier:
    """Verifies replies against one or more trusted worker public keys."""

    def __init__(self, raw_keys: Iterable[bytes]) -> None:
        import nacl.bindings
        import nacl.exceptions

        self._nacl: Any = nacl.bindings
        self._bad: type[Exception] = nacl.exceptions.BadSignatureError
        self._keys: list[bytes] = [bytes(k) for k in raw_keys]
        for k in self._keys:
            if len(k) != 32:
                raise SettingsError("--worker-key", "worker key", "not a 32-byte ed25519 key")
        self._kx = _Keys(_B64_96, _KX_CACHE, self._certified)  # Hookaudit-Kx -> MAC key

    @classmethod
    def from_keys(cls, keys: Iterable[str], where: str = "--worker-key") -> Verifier:
        return cls([_decode_public(k, where) for k in keys if k.strip()])

    def peer_header(self) -> str:
        """This process's ``Hookaudit-Peer`` value: sent with each event, it lets the
        worker answer with a tag only this process (and the worker) can check."""
        public, _secret = _Ephemeral.get(self._nacl)
        return base64.b64encode(public).decode()

    def _certified(self, kx: str) -> bytes | None:
        """The MAC key shared with the worker whose signed exchange key `kx` is, if it is
        signed by a trusted key and this process offered a key (see `_Keys`: checked once)."""
        pair = _Ephemeral.pair
        try:
            cert = base64.b64decode(kx, validate=True)
        except (binascii.Error, ValueError):
            return None
        if pair is None or len(cert) != 96:
            return None
        worker_x, sig = cert[:32], cert[32:]
        if not self._signed(_KX_CONTEXT + worker_x, sig):
            return None
        public, secret = pair
        try:
            return _mac_key(self._nacl.crypto_scalarmult(secret, worker_x), worker_x, public)
        except RuntimeError:  # a low-order point: no key
            return None

    def verify_reply(self, data: bytes, headers: dict[str, str] | None) -> bool:
        """True if the reply's headers prove `data` came from a trusted worker: a tag
        under a key this process offered (see `peer_header`), or a signature."""
        if not headers:
            return False
        tag = headers.get(MAC_HEADER)
        if tag is not None:
            kx = headers.get(KX_HEADER)
            # No key offered yet: refused, and nothing kept (a tag sent ahead of the first
            # request must not make the genuine certificate count as bad later).
            key = None if kx is None or _Ephemeral.pair is None else self._kx.get(kx)
            raw = _b64_32(tag)
            return key is not None and raw is not None and hmac.compare_digest(_tag(key, data), raw)
        return self.verify(data, headers.get(SIG_HEADER))

    def verify(self, data: bytes, sig: str | None) -> bool:
        """True if `sig` (base64) signs `data` under one of the trusted keys."""
        if not sig:
            return False
        try:
            raw = base64.b64decode(sig, validate=True)
        except (binascii.Error, ValueError):
            return False
        return len(raw) == 64 and self._signed(data, raw)

    def _signed(self, data: bytes, raw: bytes) -> bool:
        signed = raw + data
        for key in self._keys:
            try:
                self._nacl.crypto_sign_open(signed, key)
                return True
            except self._bad:
                continue
        return False


def trusted_verifier(worker_key: str | None, data_dir: Path) -> Verifier | None:
    """Who may decide: `worker_key` (comma-separated, else $HOOKAUDIT_WORKER_KEY), else the
    data dir's ``reply.pub``; None when no key is known (replies are then taken unsigned).

    A data dir that holds an embedded server (``nats/server.json``) or its keys
    (``nats/auth/``) always has ``reply.pub`` (``nats up`` writes it): there its absence is
    `Unavailable`, never "take replies from any signer" (deleting one file must not turn
    signed decisions off).

    Example:
        >>> trusted_verifier(None, Path("/nonexistent")) is None
        True
    """
    text = worker_key or os.environ.get(ENV_WORKER_KEY)
    if text:
        return Verifier.from_keys(text.split(","))
    from ingest.private import check_data_dir

    check_data_dir(data_dir)  # a reply.pub another user could plant names their key
    pub = reply_public_path(data_dir)
    try:
        content = pub.read_text()
    except FileNotFoundError:
        if pub.parent.is_dir() or (pub.parent.parent / "server.json").exists():
            raise Unavailable(
                f"{pub}: missing, and this data dir's embedded server signs every decision "
                "(`hookaudit nats up` writes it, or give --worker-key)"
            ) from None
        return None
    except OSError as exc:
        raise Unavailable(f"{pub}: cannot read: {exc.strerror or exc}") from exc
    return Verifier.from_keys([content], where=str(pub))
