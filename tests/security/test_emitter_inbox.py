"""One host's emitter key cannot read the decisions in flight to another host.

`hookaudit nats keys --emitter hosta --emitter hostb` makes per-host emitter keys whose
`subscribe` permission is their own inbox prefix (``_INBOX.<public key>.>``). A real
nats-server runs the users.conf it wrote; a real worker decides; host A's `emit --wait`
gets its signed decisions while host B's key tries to subscribe to every inbox, to A's
prefix, and (as nats-py does by default) to ``_INBOX.>``: each is refused by the server
and B sees nothing.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from nats.aio.client import Client
from nats.aio.msg import Msg

from ingest.nats.auth import inbox_prefix, public_key
from tests.support.relay import REPO, env, keyed_server, pre_tool_use, write_settings

pytestmark = pytest.mark.timeout(180)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _emit(
    url: str, keys: Path, seed: str, command: str
) -> subprocess.CompletedProcess[bytes]:
    args = [
        sys.executable, "-m", "hookaudit", "emit", "--data-dir", str(keys.parent / f"d-{seed}"),
        "--nats", url, "--nkey", str(keys / seed), "--wait", "--fail", "closed",
        "--worker-key", (keys / "reply.pub").read_text().strip(),
    ]  # fmt: skip
    return await asyncio.to_thread(
        subprocess.run, args, input=pre_tool_use(command), capture_output=True, cwd=REPO,
        env=env(), timeout=90,
    )  # fmt: skip


async def test_another_hosts_emitter_key_cannot_read_the_inbox(tmp_path: Path) -> None:
    server, url, keys = await keyed_server(tmp_path, "hosta", "hostb")
    worker: subprocess.Popen[bytes] | None = None
    spies: list[Client] = []
    try:
        settings = write_settings(tmp_path)
        worker = subprocess.Popen(
            [sys.executable, "-m", "hookaudit", "worker", "--data-dir", str(tmp_path / "w"),
             "--nats", url, "--nkey", str(keys / "worker.nk"),
             "--reply-key", str(keys / "reply.nk"), "--settings", f"project:{settings}"],
            cwd=REPO, env=env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )  # fmt: skip

        seen: list[str] = []
        errors: list[str] = []

        async def on_msg(msg: Msg) -> None:
            seen.append(msg.subject)

        async def on_error(e: Exception) -> None:
            errors.append(str(e).lower())

        a_inbox = inbox_prefix(public_key((keys / "emitter-hosta.nk").read_bytes()))
        # host B as hookaudit connects it (its own prefix), and as plain nats-py does
        b_seed = str(keys / "emitter-hostb.nk")
        spy = Client()
        await spy.connect(url, nkeys_seed=b_seed, error_cb=on_error)
        spies.append(spy)
        for subject in ("_INBOX.>", f"{a_inbox}.>", ">"):
            await spy.subscribe(subject, cb=on_msg)
        await spy.flush()

        results = [await _emit(url, keys, "emitter-hosta.nk", c) for c in ("rm -rf /", "ls")]
        assert b'"permissionDecision":"deny"' in results[0].stdout, results[0].stderr
        assert (results[1].returncode, results[1].stdout) == (0, b""), results[1].stderr
        own = await _emit(url, keys, "emitter-hostb.nk", "rm -rf /")  # B's own still works
        assert b'"permissionDecision":"deny"' in own.stdout, own.stderr
        await asyncio.sleep(0.5)
        assert seen == [], seen
        for subject in ("_inbox.>", f"{a_inbox.lower()}.>"):
            assert any(
                f'permissions violation for subscription to "{subject}"' in e for e in errors
            ), errors
    finally:
        for c in spies:
            await c.close()
        if worker is not None:
            worker.terminate()
            worker.communicate(timeout=30)
        server.terminate()
        server.wait(timeout=30)
    print(
        f"inbox: host A decided 2/2 through its own prefix; host B's key was refused "
        f"{len(errors)} subscriptions (every inbox, A's prefix, '>') and saw 0 messages"
    )
