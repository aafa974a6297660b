"""The fast emit fails closed whatever happens to its relay, and the relay talks only to its own.

Real processes: `nats up`, a worker with python hooks, `hookaudit relay`, `python -m
hookaudit emit`. Faults injected: the relay SIGKILLed (its socket left behind), the relay's
socket replaced by one an attacker (another uid) listens on, a relay that trusts another
worker key (so the real worker's signature does not verify), a same-uid fake relay that
hangs up or sends garbage, and a client of another uid knocking at the relay.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from ingest.nats.auth import new_seed, public_key
from tests.support.relay import REPO, Stack, env, pre_tool_use, write_settings

pytestmark = pytest.mark.timeout(300)

NOBODY = 65534
#: An interpreter another uid may run (root's pyenv is behind /root, 0700). The fast emit
#: is stdlib only, so it runs there too.
SYSTEM_PYTHON = "/usr/bin/python3"
FAST_EMIT = "import sys; sys.path.insert(0, sys.argv[1]); from ingest.emit.fast import main; main(sys.argv[2:])"
root_only = pytest.mark.skipif(
    os.getuid() != 0 or not os.access(SYSTEM_PYTHON, os.X_OK),
    reason="needs root (to run the attacker as another uid) and /usr/bin/python3",
)

# A "relay" that answers every request with an allow (exit 0, nothing printed).
FAKE_RELAY = textwrap.dedent(
    """
    import os, socket, sys
    path, mode = sys.argv[1], sys.argv[2]
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    s.listen(16)
    print("ready", flush=True)
    while True:
        c, _ = s.accept()
        try:
            c.recv(1 << 20)
            if mode == "allow":
                c.sendall(b"HAR1\\x00\\x07decided" + bytes(8))
            elif mode == "garbage":
                c.sendall(b"HTTP/1.1 200 OK\\r\\n\\r\\n")
        except OSError:
            pass  # the client hung up first
        c.close()
    """
)


@pytest.fixture
def stack(tmp_path: Path) -> Iterator[Stack]:
    s = Stack(data=tmp_path / "data", settings=write_settings(tmp_path))
    s.nats_up()
    s.start_worker()
    try:
        s.wait_decided()
        yield s
    finally:
        s.stop()


def _fake_relay(path: Path, mode: str, uid: int | None = None) -> subprocess.Popen[bytes]:
    def demote() -> None:
        if uid is not None:
            os.setgid(uid)
            os.setuid(uid)

    p = subprocess.Popen(
        [SYSTEM_PYTHON, "-I", "-S", "-c", FAKE_RELAY, str(path), mode],
        stdout=subprocess.PIPE,
        preexec_fn=demote,
    )
    assert p.stdout is not None and p.stdout.readline() == b"ready\n"
    return p


def _deny(p: subprocess.CompletedProcess[bytes]) -> bool:
    if p.returncode == 2:
        return True
    if p.returncode == 0 and p.stdout:
        hso = json.loads(p.stdout)["hookSpecificOutput"]
        return bool(hso["permissionDecision"] == "deny")
    return False


def _clean(p: subprocess.CompletedProcess[bytes]) -> None:
    text = p.stderr.decode()
    assert "Traceback" not in text and p.returncode in (0, 2), text


def test_relay_killed_falls_back_to_emit_and_still_fails_closed(stack: Stack) -> None:
    relay = stack.start_relay()
    relay.send_signal(signal.SIGKILL)
    relay.communicate(timeout=20)
    stack.relay = None
    assert (stack.data / "relay" / "emit.sock").is_socket()  # left behind: nobody listens
    p = stack.emit("--wait", "--fail", "closed", stdin=pre_tool_use("rm -rf /"))
    _clean(p)
    assert _deny(p) and b"no rm -rf /" in p.stdout  # the worker's own deny, not a fallback
    p = stack.emit("--wait", "--fail", "closed", stdin=pre_tool_use("ls"))
    assert (p.returncode, p.stdout) == (0, b"")  # and an allow is still an allow
    stack.nats_down()  # relay dead and NATS down: closed means closed
    p = stack.emit("--wait", "--fail", "closed", stdin=pre_tool_use("ls"))
    _clean(p)
    assert _deny(p) and b"fails closed" in p.stdout + p.stderr
    print("relay killed: emit decided by itself (deny kept, allow kept); NATS down too: denied")


@root_only
def test_socket_replaced_by_another_users_socket_is_refused(stack: Stack, lair: Path) -> None:
    relay = stack.start_relay()
    relay.terminate()
    relay.communicate(timeout=20)
    stack.relay = None
    fake = _fake_relay(lair / "emit.sock", "allow", uid=NOBODY)
    try:
        os.replace(lair / "emit.sock", stack.data / "relay" / "emit.sock")
        p = stack.emit("--wait", "--fail", "closed", stdin=pre_tool_use("rm -rf /"))
        _clean(p)
        assert p.returncode == 2 and b"runs as uid 65534, not uid 0" in p.stderr, p.stderr
        p = stack.emit("--wait", "--fail", "open", stdin=pre_tool_use("ls"))
        assert p.returncode == 0 and b"proceeding (--fail open)" in p.stderr
        # HOOKAUDIT_RELAY_UID names the uid a relay of another user must have
        p = stack.emit("--wait", stdin=pre_tool_use("ls"), HOOKAUDIT_RELAY_UID=str(NOBODY))
        assert (p.returncode, p.stdout, p.stderr) == (0, b"", b"")  # its allow is taken
    finally:
        fake.kill()
        fake.communicate(timeout=20)
    print("attacker's socket (uid 65534): closed -> blocked, open -> proceeds with a warning")


@root_only
def test_relay_hangs_up_on_other_uids(stack: Stack, lair: Path) -> None:
    sock = lair / "emit.sock"
    relay = stack.start_relay("--socket", str(sock), "--socket-mode", "0666")

    def as_nobody() -> None:
        os.setgid(NOBODY)
        os.setuid(NOBODY)

    p = subprocess.run(
        [SYSTEM_PYTHON, "-I", "-S", "-c", FAST_EMIT, str(REPO), "--wait", "--fail", "closed"],
        input=pre_tool_use("ls"),
        capture_output=True,
        cwd=REPO,
        env=env(HOOKAUDIT_RELAY=str(sock), HOOKAUDIT_RELAY_UID="0", HOME="/tmp"),
        preexec_fn=as_nobody,
        timeout=60,
    )
    _clean(p)
    # hung up on before or while it sent: either way no answer, so blocked
    assert p.returncode == 2 and b"blocked because the hook fails closed" in p.stderr, p.stderr
    assert any(w in p.stderr for w in (b"without an answer", b"Broken pipe", b"reset")), p.stderr
    relay.terminate()
    _, err = relay.communicate(timeout=20)
    stack.relay = None
    assert f"uid {NOBODY} is not allowed".encode() in err
    print("relay: a client of uid 65534 was hung up on; that emit blocked (fails closed)")


def test_reply_not_signed_by_the_trusted_key_is_no_decision(stack: Stack) -> None:
    other = public_key(new_seed())  # the relay trusts a key the worker does not sign with
    stack.start_relay("--worker-key", other)
    p = stack.emit("--wait", "--timeout", "2", "--fail", "closed", stdin=pre_tool_use("ls"))
    _clean(p)
    assert _deny(p) and b"no decision arrived within 2s" in p.stdout, p.stdout
    p = stack.emit("--wait", "--timeout", "2", "--fail", "open", stdin=pre_tool_use("rm -rf /"))
    assert p.returncode == 0 and b"proceeding (--fail open)" in p.stderr
    print("bad signature: the worker's reply ignored, closed -> denied after --timeout")


@pytest.mark.parametrize("mode", ["hangup", "garbage"])
def test_a_relay_that_breaks_the_protocol_blocks(stack: Stack, mode: str) -> None:
    path = stack.data / "relay" / "emit.sock"
    path.parent.mkdir(mode=0o700, exist_ok=True)
    fake = _fake_relay(path, mode)
    try:
        p = stack.emit("--wait", "--fail", "closed", stdin=pre_tool_use("ls"))
        _clean(p)
        assert p.returncode == 2 and b"blocked because the hook fails closed" in p.stderr
        why = b"without an answer" if mode == "hangup" else b"malformed answer"
        assert why in p.stderr, p.stderr
    finally:
        fake.kill()
        fake.communicate(timeout=20)
    print(f"a relay that {mode}s: blocked (exit 2, one line)")


def test_relay_refuses_to_replace_a_live_relay_or_a_file(stack: Stack, tmp_path: Path) -> None:
    stack.start_relay()
    p = subprocess.run(
        [sys.executable, "-m", "hookaudit", "relay", "--data-dir", str(stack.data)],
        capture_output=True,
        cwd=REPO,
        env=env(),
        timeout=60,
    )
    assert p.returncode == 1 and b"another relay is listening there" in p.stderr
    plain = tmp_path / "not-a-socket"
    plain.write_text("keep me")
    p = subprocess.run(
        [sys.executable, "-m", "hookaudit", "relay", "--data-dir", str(stack.data),
         "--socket", str(plain)],
        capture_output=True, cwd=REPO, env=env(), timeout=60,
    )  # fmt: skip
    assert p.returncode == 1 and b"is not a socket" in p.stderr and plain.read_text() == "keep me"
    assert socket  # the module is used by the fake relay's code


def _fast_emit(script: Path, sock: Path, fail: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-I", "-S", str(script), "--wait", "--fail", fail],
        input=pre_tool_use("ls"),
        env={**os.environ, "HOOKAUDIT_RELAY": str(sock)},
        capture_output=True,
        timeout=60,
    )


def test_the_fast_emit_answers_a_broken_relay_in_the_engines_wording(tmp_path: Path) -> None:
    """Byte for byte `engine.failclosed`'s closed and open wording; exit 2 even without it."""
    from engine.failclosed import closed_reason, open_reason

    sock = tmp_path / "emit.sock"
    fake = _fake_relay(sock, "hangup")
    try:
        why = f"the relay at {sock} closed the connection without an answer"
        p = _fast_emit(REPO / "ingest" / "emit" / "fast.py", sock, "closed")
        assert (p.returncode, p.stdout, p.stderr) == (2, b"", f"{closed_reason(why)}\n".encode())
        p = _fast_emit(REPO / "ingest" / "emit" / "fast.py", sock, "open")
        assert (p.returncode, p.stdout, p.stderr) == (0, b"", f"{open_reason(why)}\n".encode())
        # A broken install (no engine package beside ingest/): still closed, in one line.
        alone = tmp_path / "broken" / "ingest" / "emit" / "fast.py"
        alone.parent.mkdir(parents=True)
        alone.write_bytes((REPO / "ingest" / "emit" / "fast.py").read_bytes())
        p = _fast_emit(alone, sock, "closed")
        _clean(p)
        assert p.returncode == 2 and b"cannot load hookaudit" in p.stderr, p.stderr
        assert len(p.stderr.splitlines()) == 1
    finally:
        fake.kill()
        fake.communicate(timeout=20)
