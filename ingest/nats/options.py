"""One set of NATS connection options for every command, and one way to turn them into a client.

Rules of this file:
- `ENV` names each connection flag's environment variable (the click decorator of the
  flags, `hookaudit.options.nats_options`, is built from it); `NatsArgs.pop(kwargs)`
  collects them; `connect_options` builds the `ConnectOptions`. Every command that talks
  to NATS goes through these.
- Credentials: what the operator gives wins (``--creds``, ``--nkey``, ``--user``…).
  With none given and the data dir's embedded server as the target, the command's role
  key (`ingest.nats.auth.role_credentials`) is used: nobody passes a key by hand.
- Cheap at import (stdlib + msgspec): `emit` imports it on every tool call; nats-py is
  imported inside the functions that need them.

Example:
    >>> NatsArgs().explicit_credentials
    False
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

if TYPE_CHECKING:
    from ingest.nats.auth import Role
    from ingest.nats.streams import ConnectOptions

__all__ = ["ENV", "NatsArgs", "connect_options"]


#: option -> environment variable.
ENV = {
    "nats_url": "HOOKAUDIT_NATS_URL",
    "creds": "HOOKAUDIT_NATS_CREDS",
    "nkey_seed": "HOOKAUDIT_NATS_NKEY",
    "user": "HOOKAUDIT_NATS_USER",
    "password": "HOOKAUDIT_NATS_PASSWORD",
    "tls_ca": "HOOKAUDIT_NATS_TLS_CA",
    "tls_cert": "HOOKAUDIT_NATS_TLS_CERT",
    "tls_key": "HOOKAUDIT_NATS_TLS_KEY",
}


class NatsArgs(msgspec.Struct, frozen=True, kw_only=True):
    """The connection flags as given (None: not given).

    Example:
        >>> NatsArgs(user="me").explicit_credentials
        True
    """

    nats_url: str | None = None
    creds: str | None = None
    nkey_seed: str | None = None
    user: str | None = None
    password: str | None = None
    tls_ca: str | None = None
    tls_cert: str | None = None
    tls_key: str | None = None
    prefix: str = ""

    @property
    def explicit_credentials(self) -> bool:
        return bool(self.creds or self.nkey_seed or self.user)

    @classmethod
    def pop(cls, kwargs: dict[str, Any]) -> NatsArgs:
        """Take the `nats_options` values out of a command's kwargs."""
        return cls(
            **{k: kwargs.pop(k, None) or None for k in ENV},
            prefix=kwargs.pop("prefix", "") or "",
        )

    @classmethod
    def from_env(cls, prefix: str = "") -> NatsArgs:
        """The flags as their environment variables alone would set them."""
        return cls(**{k: os.environ.get(v) or None for k, v in ENV.items()}, prefix=prefix)


def connect_options(
    args: NatsArgs,
    data_dir: Path,
    role: Role,
    *,
    name: str = "hookaudit",
    connect_timeout: float = 2.0,
    max_reconnect: int = 60,
    reconnect_wait: float = 2.0,
) -> ConnectOptions:
    """Where and how `role` connects: the given flags, else the data dir's embedded server.

    Raises `Unavailable` when no server is given and none runs for `data_dir`, and
    `UnsafeDataDir` when another user owns or can write `data_dir` (ingest.private).

    Example:
        >>> co = connect_options(NatsArgs(nats_url="nats://h:4222"), Path("/d"), "worker")
        >>> co.servers, co.nkey_seed
        (('nats://h:4222',), None)
    """
    from ingest.nats.embedded import live_server, resolve_url
    from ingest.nats.streams import ConnectOptions, split_urls
    from ingest.private import check_data_dir

    # Role keys, reply.pub, the server's record and the spool are all read from or written
    # to the data dir: one another user can write is refused before any of them is touched.
    check_data_dir(data_dir)
    url = resolve_url(args.nats_url, data_dir)
    nkey = args.nkey_seed
    follow: Path | None = None
    live = live_server(data_dir) if not args.explicit_credentials else None
    if live is not None and live.url == url:
        follow = Path(data_dir)
        if live.auth:
            from engine.errors import Unavailable
            from ingest.nats.auth import auth_dir, role_credentials

            found = role_credentials(data_dir, role)
            if found is None:
                raise Unavailable(
                    f"{auth_dir(data_dir)}/{role}.nk is missing: restart the server "
                    f"(`hookaudit nats down` then `up`) to recreate the role keys"
                )
            nkey = str(found)
    return ConnectOptions(
        servers=split_urls(url),
        creds=args.creds,
        nkey_seed=nkey,
        user=args.user,
        password=args.password,
        tls_ca=args.tls_ca,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        name=name,
        connect_timeout=connect_timeout,
        max_reconnect=max_reconnect,
        reconnect_wait=reconnect_wait,
        follow=follow,
    )
