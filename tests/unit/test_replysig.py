"""Reply signatures and reply subjects: what verifies, and that hostile input only ever says no."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.errors import SettingsError
from ingest.nats.auth import new_seed, public_key
from ingest.protocol import KX_HEADER, MAC_HEADER, SIG_HEADER, reply_subject_ok
from ingest.replysig import _PEER_CACHE, Signer, Verifier, _Ephemeral, trusted_verifier

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


# -- keyed replies (Hookaudit-Peer / Hookaudit-Mac) -------------------------------------


def test_a_keyed_tag_verifies_only_for_its_bytes_worker_and_process() -> None:
    peer = VERIFIER.peer_header()
    headers = SIGNER.reply_headers(b"reply", peer)
    assert set(headers) == {MAC_HEADER, KX_HEADER}
    assert VERIFIER.verify_reply(b"reply", headers)
    assert not VERIFIER.verify_reply(b"replY", headers)
    # another worker's tag for the same peer key, or a verifier that trusts another worker
    assert not VERIFIER.verify_reply(b"reply", OTHER.reply_headers(b"reply", peer))
    assert not Verifier.from_keys([OTHER.public]).verify_reply(b"reply", headers)
    assert Verifier.from_keys([OTHER.public, SIGNER.public]).verify_reply(b"reply", headers)


def test_a_tag_for_another_process_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    import nacl.bindings

    VERIFIER.peer_header()
    other_process = nacl.bindings.crypto_box_keypair()
    tag = SIGNER.reply_headers(b"reply", base64.b64encode(other_process[0]).decode())
    assert set(tag) == {MAC_HEADER, KX_HEADER}
    assert not Verifier.from_keys([SIGNER.public]).verify_reply(b"reply", tag)
    # ... and the other process (its own ephemeral pair) accepts it
    monkeypatch.setattr(_Ephemeral, "pair", other_process)
    assert Verifier.from_keys([SIGNER.public]).verify_reply(b"reply", tag)


def test_a_process_that_offered_no_key_refuses_every_tag(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_Ephemeral, "pair", None)
    v = Verifier.from_keys([SIGNER.public])
    peer = base64.b64encode(bytes(range(1, 33))).decode()
    assert not v.verify_reply(b"reply", SIGNER.reply_headers(b"reply", peer))
    assert v.verify_reply(b"reply", SIGNER.reply_headers(b"reply", None))  # a signature


@pytest.mark.parametrize(
    "peer",
    ["", "not base64!", base64.b64encode(b"short").decode(), base64.b64encode(bytes(32)).decode()],
)
def test_an_unusable_peer_key_gets_a_signature(peer: str) -> None:
    headers = SIGNER.reply_headers(b"reply", peer)
    assert set(headers) == {SIG_HEADER}  # the all-zero key is a low-order point
    assert VERIFIER.verify_reply(b"reply", headers)


@given(peer=st.text(max_size=80), data=st.binary(max_size=200))
def test_hostile_peer_headers_never_raise(peer: str, data: bytes) -> None:
    headers = SIGNER.reply_headers(data, peer)
    assert set(headers) in ({SIG_HEADER}, {MAC_HEADER, KX_HEADER})


@given(
    data=st.binary(max_size=200),
    headers=st.dictionaries(
        st.sampled_from([SIG_HEADER, MAC_HEADER, KX_HEADER, "Other"]),
        st.text(max_size=140),
        max_size=4,
    ),
)
def test_verify_reply_never_raises_on_hostile_headers(data: bytes, headers: dict[str, str]) -> None:
    VERIFIER.peer_header()
    assert VERIFIER.verify_reply(data, headers) is False
    assert VERIFIER.verify_reply(data, None) is False


@given(data=st.binary(max_size=200), flip=st.integers(min_value=0, max_value=31))
def test_any_flipped_tag_bit_fails(data: bytes, flip: int) -> None:
    headers = SIGNER.reply_headers(data, VERIFIER.peer_header())
    raw = bytearray(base64.b64decode(headers[MAC_HEADER]))
    raw[flip // 8] ^= 1 << (flip % 8)
    forged = {**headers, MAC_HEADER: base64.b64encode(bytes(raw)).decode()}
    assert not VERIFIER.verify_reply(data, forged)


def test_the_exchange_key_must_be_signed_by_a_trusted_worker() -> None:
    peer = VERIFIER.peer_header()
    mine, theirs = SIGNER.reply_headers(b"r", peer), OTHER.reply_headers(b"r", peer)
    # OTHER's tag under SIGNER's (trusted) exchange certificate, and the reverse
    assert not VERIFIER.verify_reply(b"r", {**theirs, KX_HEADER: mine[KX_HEADER]})
    assert not VERIFIER.verify_reply(b"r", {**mine, KX_HEADER: theirs[KX_HEADER]})
    # a certificate whose key or signature is altered
    cert = bytearray(base64.b64decode(mine[KX_HEADER]))
    for i in (0, 40):
        bad = bytearray(cert)
        bad[i] ^= 1
        altered = {**mine, KX_HEADER: base64.b64encode(bytes(bad)).decode()}
        assert not Verifier.from_keys([SIGNER.public]).verify_reply(b"r", altered)
    assert not VERIFIER.verify_reply(b"r", {MAC_HEADER: mine[MAC_HEADER]})  # no certificate


def test_the_signing_key_is_not_the_exchange_key() -> None:
    import nacl.bindings

    cert = base64.b64decode(SIGNER.reply_headers(b"r", VERIFIER.peer_header())[KX_HEADER])
    ed_pub = base64.b32decode(SIGNER.public + "=" * (-len(SIGNER.public) % 8))[1:33]
    assert cert[:32] != nacl.bindings.crypto_sign_ed25519_pk_to_curve25519(ed_pub)


def test_the_worker_keeps_a_bounded_number_of_peer_keys() -> None:
    import nacl.bindings

    s = Signer(new_seed())
    for _ in range(_PEER_CACHE + 10):
        s.reply_headers(b"x", base64.b64encode(nacl.bindings.crypto_box_keypair()[0]).decode())
    assert len(s._peers) <= _PEER_CACHE


def test_oversized_hostile_headers_are_never_kept() -> None:
    s = Signer(new_seed())
    huge = "A" * 1_000_000
    assert set(s.reply_headers(b"x", huge)) == {SIG_HEADER}
    assert len(s._peers) == 0
    v = Verifier.from_keys([SIGNER.public])
    v.peer_header()
    assert not v.verify_reply(b"x", {MAC_HEADER: "A" * 44, KX_HEADER: huge})
    assert len(v._kx) == 0


def test_a_tag_before_any_key_was_offered_poisons_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    import nacl.bindings

    pair = nacl.bindings.crypto_box_keypair()
    genuine = SIGNER.reply_headers(b"x", base64.b64encode(pair[0]).decode())
    monkeypatch.setattr(_Ephemeral, "pair", None)
    v = Verifier.from_keys([SIGNER.public])
    assert not v.verify_reply(b"x", genuine)  # no key offered: refused, nothing kept
    monkeypatch.setattr(_Ephemeral, "pair", pair)
    assert v.verify_reply(b"x", genuine)
