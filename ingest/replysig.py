"""Signed decisions: the worker signs each Reply (ed25519), emit and serve verify it.

Rules of this file:
- The signature covers the Reply's exact bytes as published (msgpack), and the Reply
  names its event id: a verifier accepts a reply only if it verifies against a trusted
  key AND names the event it waits for, so a signed reply for one event is worthless
  for any other. Event ids are UUIDv7s chosen by the emitter, once.
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
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from engine.errors import SettingsError

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
    from ingest.natsauth import auth_dir

    return auth_dir(data_dir) / "reply.nk"


def reply_public_path(data_dir: Path) -> Path:
    from ingest.natsauth import auth_dir

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
    from ingest.natsauth import new_seed, private_dir, public_key, write_private

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


class Signer:
    """Signs reply bytes with a worker's seed.

    Example:
        >>> Signer.from_file(Path("/tmp/ha/nats/auth/reply.nk")).public[:1]  # doctest: +SKIP
        'U'
    """

    def __init__(self, seed: bytes) -> None:
        import nacl.signing
        import nkeys

        try:
            _prefix, raw = nkeys.decode_seed(bytearray(seed.strip()))
        except nkeys.NkeysError as e:
            raise SettingsError("reply key", "seed", "not an nkey seed (SU…)") from e
        self._key: Any = nacl.signing.SigningKey(bytes(raw))
        from ingest.natsauth import public_key

        self.public = public_key(seed)

    @classmethod
    def from_file(cls, path: Path) -> Signer:
        try:
            return cls(Path(path).read_bytes())
        except OSError as e:
            raise SettingsError(str(path), "--reply-key", f"cannot read: {e.strerror}") from e

    def sign(self, data: bytes) -> str:
        """The base64 ed25519 signature of `data` (the ``Hookaudit-Sig`` header value)."""
        return base64.b64encode(self._key.sign(data).signature).decode()


class Verifier:
    """Verifies reply signatures against one or more trusted worker public keys."""

    def __init__(self, raw_keys: Iterable[bytes]) -> None:
        import nacl.exceptions
        import nacl.signing

        self._keys: list[Any] = [nacl.signing.VerifyKey(k) for k in raw_keys]
        self._bad: type[Exception] = nacl.exceptions.BadSignatureError

    @classmethod
    def from_keys(cls, keys: Iterable[str], where: str = "--worker-key") -> Verifier:
        return cls([_decode_public(k, where) for k in keys if k.strip()])

    def verify(self, data: bytes, sig: str | None) -> bool:
        """True if `sig` (base64) signs `data` under one of the trusted keys."""
        if not sig:
            return False
        try:
            raw = base64.b64decode(sig, validate=True)
        except (binascii.Error, ValueError):
            return False
        if len(raw) != 64:
            return False
        for key in self._keys:
            try:
                key.verify(data, raw)
                return True
            except self._bad:
                continue
        return False


def trusted_verifier(worker_key: str | None, data_dir: Path) -> Verifier | None:
    """Who may decide: `worker_key` (comma-separated, else $HOOKAUDIT_WORKER_KEY), else the
    data dir's ``reply.pub``; None when no key is known (replies are then taken unsigned).

    Example:
        >>> trusted_verifier(None, Path("/nonexistent")) is None
        True
    """
    text = worker_key or os.environ.get(ENV_WORKER_KEY)
    if text:
        return Verifier.from_keys(text.split(","))
    pub = reply_public_path(data_dir)
    try:
        content = pub.read_text()
    except OSError:
        return None
    return Verifier.from_keys([content], where=str(pub))
