"""Reply signatures and reply subjects: what verifies, and that hostile input only ever says no."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.errors import SettingsError
from ingest.natsauth import new_seed, public_key
from ingest.protocol import reply_subject_ok
from ingest.replysig import Signer, Verifier, trusted_verifier

SIGNER = Signer(new_seed())
OTHER = Signer(new_seed())
VERIFIER = Verifier.from_keys([SIGNER.public])


def test_a_signature_verifies_only_for_its_bytes_and_key() -> None:
    sig = SIGNER.sign(b"reply")
    assert VERIFIER.verify(b"reply", sig)
    assert not VERIFIER.verify(b"replY", sig)
    assert not VERIFIER.verify(b"reply", OTHER.sign(b"reply"))
    assert not VERIFIER.verify(b"reply", None)
    assert not VERIFIER.verify(b"reply", "")
    assert Verifier.from_keys([OTHER.public, SIGNER.public]).verify(b"reply", sig)


@given(data=st.binary(max_size=256), sig=st.text(max_size=120))
def test_verify_never_raises_on_hostile_signatures(data: bytes, sig: str) -> None:
    assert VERIFIER.verify(data, sig) is False


@given(data=st.binary(max_size=256), flip=st.integers(min_value=0, max_value=63))
def test_any_flipped_signature_bit_fails(data: bytes, flip: int) -> None:
    raw = bytearray(base64.b64decode(SIGNER.sign(data)))
    raw[flip] ^= 1
    assert not VERIFIER.verify(data, base64.b64encode(bytes(raw)).decode())


@given(key=st.text(max_size=80))
def test_bad_public_keys_are_a_settings_error(key: str) -> None:
    try:
        Verifier.from_keys([key])
    except SettingsError as e:
        assert "worker key" in str(e)


@pytest.mark.parametrize(
    "key",
    [
        "not-a-key",
        "S" + SIGNER.public[1:],  # a seed-type prefix
        SIGNER.public[:-1] + ("A" if SIGNER.public[-1] != "A" else "B"),  # checksum
        "N" + SIGNER.public[1:],
    ],
)
def test_keys_that_are_not_user_public_keys_are_refused(key: str) -> None:
    with pytest.raises(SettingsError, match="worker key"):
        Verifier.from_keys([key])


def test_a_bad_seed_is_a_settings_error(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="not an nkey seed"):
        Signer(b"SUnot-a-seed")
    with pytest.raises(SettingsError, match="--reply-key"):
        Signer.from_file(tmp_path / "missing.nk")


def test_trusted_keys_come_from_the_option_the_env_or_the_data_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HOOKAUDIT_WORKER_KEY", raising=False)
    assert trusted_verifier(None, tmp_path) is None
    (tmp_path / "nats" / "auth").mkdir(parents=True)
    (tmp_path / "nats" / "auth" / "reply.pub").write_text(SIGNER.public + "\n")
    v = trusted_verifier(None, tmp_path)
    assert v is not None and v.verify(b"x", SIGNER.sign(b"x"))
    monkeypatch.setenv("HOOKAUDIT_WORKER_KEY", OTHER.public)
    v = trusted_verifier(None, tmp_path)
    assert v is not None and not v.verify(b"x", SIGNER.sign(b"x"))
    v = trusted_verifier(f"{SIGNER.public},{OTHER.public}", tmp_path)
    assert v is not None and v.verify(b"x", SIGNER.sign(b"x"))


def test_public_key_of_a_seed() -> None:
    assert public_key(new_seed()).startswith("U")


@pytest.mark.parametrize(
    "subject",
    [
        "hooks.outcomes.PreToolUse.allow",
        "$JS.API.STREAM.DELETE.HOOK_EVENTS",
        "$JS.API.CONSUMER.DELETE.HOOK_EVENTS.workers",
        "_INBOX.>",
        "_INBOX.*",
        "_INBOX.a b",
        "_INBOX.",
        "_INBOX..x",
        "_INBOX.x\r\nPUB x 1",
        "_INBOX." + "a" * 300,
        "_inbox.x",
    ],
)
def test_the_worker_answers_no_subject_but_an_inbox(subject: str) -> None:
    assert not reply_subject_ok(subject)


@given(st.text(max_size=300))
def test_an_accepted_reply_subject_is_a_plain_inbox(subject: str) -> None:
    if reply_subject_ok(subject):
        assert subject.startswith("_INBOX.") and subject.isascii()
        assert not set(subject) & set("*> \t\r\n")
        assert all(subject.split("."))
