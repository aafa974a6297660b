"""NATS roles, their permissions and their credentials (nkeys), for the embedded server and yours.

Rules of this file:
- One definition of the roles (`permissions`): the embedded server's config, `infra/nats/accounts.conf` and
  `hookaudit nats keys` are all rendered from it, so they cannot drift apart.
- Credentials are nkey seed files, one per role, mode 0600 in a 0700 directory, whatever the
  umask. Seeds never leave the data dir; only public keys go into a server config.
- No NATS client import: `emit` reads its role's seed path from here cheaply.

Roles (default names; the embedded server uses no prefix):

========  ==============================================================================
emitter   publish hook events; receive replies on ``_INBOX.>`` (PubAcks, decisions). No
          JetStream API: cannot read, purge or delete a stream, nor publish to an inbox.
worker    consume HOOK_EVENTS, publish outcomes and replies, provision the streams. May
          not purge or delete a stream or its messages.
siem      read HOOK_OUTCOMES through a durable consumer of its own, and ack it.
analyst   read-only: stream and consumer info, message get. Used by `nats status`.
replay    the coordinator of a distributed replay (`replay --distribute`): create the
          ``HOOK_REPLAY`` work-queue stream, a consumer on it per replay (and delete or
          purge those), queue the segments, answer the jobs (``hookaudit.replay.*``:
          responses only). No access to the hook streams.
replay-   a job of a distributed replay (`replay-join`): take, ack and hold work from a
join      ``HOOK_REPLAY`` consumer, ask the coordinator. Cannot create, change or delete a
          stream or consumer, nor answer a job as the coordinator would.
========  ==============================================================================

Every role but worker, siem and analyst subscribes only under its own inbox
(`inbox_prefix`): one key cannot read another's replies.

Example:
    >>> ROLES
    ('emitter', 'worker', 'siem', 'analyst', 'replay', 'replay-join')
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

__all__ = [
    "ROLES",
    "Permissions",
    "Role",
    "auth_dir",
    "authorization_block",
    "ensure_emitter_keys_in",
    "ensure_keys_in",
    "ensure_role_keys",
    "inbox_prefix",
    "new_seed",
    "permissions",
    "public_key",
    "role_credentials",
    "write_private",
]

Role = Literal["emitter", "worker", "siem", "analyst", "replay", "replay-join"]

#: The roles, in the order a config lists them.
ROLES: tuple[Role, ...] = ("emitter", "worker", "siem", "analyst", "replay", "replay-join")

#: The names of distributed replay (`replay.workqueue`): one work-queue stream for every
#: replay, a consumer ``REPLAY_<id>`` each, requests ``hookaudit.replay.<id>.<what>``.
#: (A NATS wildcard stands for whole tokens only, so the stream name is fixed.)
REPLAY_STREAM = "HOOK_REPLAY"
REPLAY_SUBJECTS = "hookaudit.replay.*"

_NO_DESTROY = [
    "$JS.API.STREAM.PURGE.>",
    "$JS.API.STREAM.DELETE.>",
    "$JS.API.STREAM.MSG.DELETE.>",
]

#: publish/subscribe -> allow/deny -> subjects; and ``allow_responses: True`` (replay only)
Permissions = dict[str, dict[str, list[str]] | bool]


def _names(prefix: str) -> tuple[str, str, str, str]:
    """(events stream, events subjects, outcomes stream, outcomes subjects), as ingest.nats.streams.names."""
    if not prefix:
        return "HOOK_EVENTS", "hooks.events.>", "HOOK_OUTCOMES", "hooks.outcomes.>"
    up, low = prefix.upper(), prefix.lower()
    return (
        f"{up}_HOOK_EVENTS",
        f"{low}.hooks.events.>",
        f"{up}_HOOK_OUTCOMES",
        f"{low}.hooks.outcomes.>",
    )


def inbox_prefix(public: str) -> str:
    """The inbox prefix of an nkey: its replies (PubAcks, decisions) arrive under it.

    An emitter key may subscribe to its own prefix only, so a process holding one host's
    emitter key cannot read the decisions in flight to another host's.

    Example:
        >>> inbox_prefix("UABC")
        '_INBOX.UABC'
    """
    return f"_INBOX.{public}"


def permissions(
    role: Role, prefixes: tuple[str, ...] = ("",), *, inbox: str = "_INBOX"
) -> Permissions:
    """The nats-server ``permissions`` block of `role` for the deployments named by `prefixes`.

    `inbox` is the emitter's own inbox prefix (`inbox_prefix` of its key): an emitter may
    subscribe below it only. The other roles already read what an inbox carries (worker,
    siem and analyst see outcomes), so they keep ``_INBOX.>``.

    Example:
        >>> permissions("emitter")["publish"]
        {'allow': ['hooks.events.>']}
        >>> permissions("emitter", inbox="_INBOX.UABC")["subscribe"]
        {'allow': ['_INBOX.UABC.>']}
    """
    pub: list[str] = []
    # a worker may not change the anchors stream either: new limits would evict old heads
    frozen = [f"$JS.API.STREAM.UPDATE.{out.replace('_OUTCOMES', '_ANCHORS')}"
              for _, _, out, _ in map(_names, prefixes)]  # fmt: skip
    for ev, ev_subj, out, out_subj in map(_names, prefixes):
        if role == "emitter":
            pub += [ev_subj]
        elif role == "worker":
            pub += [f"$JS.ACK.{ev}.>", out_subj, out_subj.replace(".outcomes.", ".anchors.")]
        elif role == "siem":
            pub += [
                f"$JS.API.STREAM.INFO.{out}",
                f"$JS.API.CONSUMER.CREATE.{out}.>",
                f"$JS.API.CONSUMER.DURABLE.CREATE.{out}.>",
                f"$JS.API.CONSUMER.INFO.{out}.>",
                f"$JS.API.CONSUMER.MSG.NEXT.{out}.>",
                f"$JS.ACK.{out}.>",
            ]
    if role == "emitter":
        return {"publish": {"allow": pub}, "subscribe": {"allow": [f"{inbox}.>"]}}
    if role in ("replay", "replay-join"):
        return _replay_permissions(role, inbox)
    inbox_any: Permissions = {"subscribe": {"allow": ["_INBOX.>"]}}
    if role == "worker":
        allow = ["$JS.API.>", *pub, "_INBOX.>"]
        return {"publish": {"allow": allow, "deny": [*_NO_DESTROY, *frozen]}, **inbox_any}
    if role == "siem":
        return {"publish": {"allow": ["$JS.API.INFO", *pub]}, **inbox_any}
    analyst = [
        "$JS.API.INFO",
        "$JS.API.STREAM.NAMES",
        "$JS.API.STREAM.LIST",
        "$JS.API.STREAM.INFO.*",
        "$JS.API.STREAM.MSG.GET.*",
        "$JS.API.DIRECT.GET.>",
        "$JS.API.CONSUMER.NAMES.*",
        "$JS.API.CONSUMER.LIST.*",
        "$JS.API.CONSUMER.INFO.*.*",
    ]
    return {"publish": {"allow": analyst}, **inbox_any}


def _replay_permissions(role: Role, inbox: str) -> Permissions:
    """A distributed replay's two roles; no deployment prefix: each replay's names carry
    its own id. The coordinator answers the jobs' requests by ``allow_responses`` (only to
    a request it received, once), never by publishing to inboxes at large."""
    st, subj = REPLAY_STREAM, REPLAY_SUBJECTS
    asks = [f"{subj}.join", f"{subj}.firsts", f"{subj}.result", f"{subj}.alive"]
    own = {"subscribe": {"allow": [f"{inbox}.>"]}}
    if role == "replay-join":
        allow = [
            f"$JS.API.CONSUMER.INFO.{st}.*",
            f"$JS.API.CONSUMER.MSG.NEXT.{st}.*",
            f"$JS.ACK.{st}.>",
            *asks,
        ]
        return {"publish": {"allow": allow}, **own}
    allow = [
        "$JS.API.INFO",
        f"$JS.API.STREAM.CREATE.{st}",
        f"$JS.API.STREAM.INFO.{st}",
        f"$JS.API.STREAM.PURGE.{st}",  # what a failed replay leaves of its own subject
        f"$JS.API.CONSUMER.CREATE.{st}.>",
        f"$JS.API.CONSUMER.DURABLE.CREATE.{st}.*",
        f"$JS.API.CONSUMER.INFO.{st}.*",
        f"$JS.API.CONSUMER.DELETE.{st}.*",
        f"{subj}.segs",
    ]
    listen = [*asks, f"$JS.EVENT.ADVISORY.CONSUMER.MAX_DELIVERIES.{st}.*", f"{inbox}.>"]
    return {
        "publish": {"allow": allow},
        "subscribe": {"allow": listen},
        "allow_responses": True,
    }


_SEED_SUFFIX = ".nk"


def auth_dir(data_dir: Path) -> Path:
    """Where the embedded server's credentials live: ``<data_dir>/nats/auth``.

    Example:
        >>> auth_dir(Path("/d")).as_posix()
        '/d/nats/auth'
    """
    return Path(data_dir).resolve() / "nats" / "auth"


def role_credentials(data_dir: Path, role: Role) -> Path | None:
    """The nkey seed file of `role` for the data dir's embedded server, or None if it has none.

    This is how a command (or the SIEM forwarder: ``role_credentials(d, "siem")``) finds
    its credentials: pass the path as ``ConnectOptions(nkey_seed=...)`` / ``--nkey``.

    Example:
        >>> role_credentials(Path("/tmp/ha"), "siem")  # doctest: +SKIP
        PosixPath('/tmp/ha/nats/auth/siem.nk')
    """
    path = auth_dir(data_dir) / f"{role}{_SEED_SUFFIX}"
    return path if path.is_file() else None


def write_private(path: Path, data: bytes) -> None:
    """Write `data` to `path` atomically with mode 0600, whatever the umask.

    Example:
        >>> write_private(Path("/tmp/ha/x"), b"secret")  # doctest: +SKIP
    """
    from ingest.log.files import write_durably

    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    write_durably(tmp, data)
    os.replace(tmp, path)


def private_dir(path: Path) -> Path:
    """Create `path` (and parents) and make it 0700, whatever the umask."""
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path, 0o700)
    return path


def new_seed() -> bytes:
    """A fresh nkey user seed (``SU...``).

    Example:
        >>> new_seed()[:2]
        b'SU'
    """
    import nkeys

    return bytes(nkeys.encode_seed(secrets.token_bytes(32), nkeys.PREFIX_BYTE_USER))


def public_key(seed: bytes) -> str:
    """The public key (``U...``) of an nkey seed.

    Example:
        >>> public_key(new_seed())[:1]
        'U'
    """
    import nkeys

    return bytes(nkeys.from_seed(bytearray(seed.strip())).public_key).decode()


def ensure_role_keys(data_dir: Path) -> dict[str, str]:
    """Create any missing role seed (0600) under `auth_dir`; return role -> public key.

    Example:
        >>> ensure_role_keys(Path("/tmp/ha"))["emitter"][:1]  # doctest: +SKIP
        'U'
    """
    return ensure_keys_in(auth_dir(data_dir))


def ensure_keys_in(directory: Path) -> dict[str, str]:
    """`ensure_role_keys` for any directory (``hookaudit nats keys --dir``)."""
    d = private_dir(directory)
    keys: dict[str, str] = {}
    for role in ROLES:
        path = d / f"{role}{_SEED_SUFFIX}"
        if not path.is_file():
            write_private(path, new_seed() + b"\n")
        else:
            os.chmod(path, 0o600)
        keys[role] = public_key(path.read_bytes())
    return keys


def ensure_emitter_keys_in(directory: Path, names: Iterable[str]) -> dict[str, str]:
    """Per-host emitter seeds ``emitter-<name>.nk`` (0600): create the missing ones of
    `names`; return name -> public key of every one the directory holds.

    Example:
        >>> ensure_emitter_keys_in(Path("/etc/hookaudit/nats"), ["build-01"])  # doctest: +SKIP
        {'build-01': 'U…'}
    """
    d = private_dir(directory)
    for name in names:
        path = d / f"emitter-{name}{_SEED_SUFFIX}"
        if not path.is_file():
            write_private(path, new_seed() + b"\n")
    out: dict[str, str] = {}
    for path in sorted(d.glob(f"emitter-*{_SEED_SUFFIX}")):
        os.chmod(path, 0o600)
        out[path.name[len("emitter-") : -len(_SEED_SUFFIX)]] = public_key(path.read_bytes())
    return out


def authorization_block(
    keys: dict[str, str],
    prefixes: tuple[str, ...] = ("",),
    emitters: dict[str, str] | None = None,
) -> str:
    """The nats-server ``authorization`` block giving each role's public key its permissions.

    No user without a key and no ``no_auth_user``: anonymous clients are refused.
    `emitters` (name -> public key) are per-host emitter keys: the emitter's permissions,
    each with its own inbox (`inbox_prefix`), as is the role's own emitter key.

    Example:
        >>> "authorization" in authorization_block({r: "U" + "A" * 55 for r in ROLES})
        True
    """
    lines = ["authorization {", "  users: ["]
    users: list[tuple[str, Role, str]] = [(r, r, keys[r]) for r in ROLES]
    users += [(f"emitter {n}", "emitter", k) for n, k in sorted((emitters or {}).items())]
    for label, role, key in users:
        lines.append(f"    # {label}")
        perms = permissions(role, prefixes, inbox=inbox_prefix(key))
        body = json.dumps({"nkey": key, "permissions": perms}, indent=None)
        lines.append(f"    {body}")
    lines += ["  ]", "}"]
    return "\n".join(lines) + "\n"
