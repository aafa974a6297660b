"""A data dir another local user owns or can write is refused before hookaudit trusts it.

The attack: a neighbour (uid 65534 here, a real process) makes the data dir first, runs a
NATS server and a worker of their own in it (`hookaudit nats up`, an allow-everything
policy), and waits. Whoever then runs `hookaudit emit --data-dir` there would read the
neighbour's server record, role key and reply.pub, and take the neighbour's signed allow
for `rm -rf /`. The same holds for a data dir anyone may write (a sloppy 0777 share) and
for a subdirectory that is a symlink (the spool would land where the link points).

Real processes throughout: the neighbour runs as another uid (setpriv, keeping only
CAP_DAC_READ_SEARCH so it can read this checkout and its interpreter under /root, never
write anything of ours), the victim is `python -m hookaudit` as this user.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ingest.private import SUBDIRS, UnsafeDataDir, check_data_dir, make_private
from tests.support.relay import REPO, Stack, env, hookaudit, pre_tool_use

pytestmark = pytest.mark.timeout(300)

NOBODY = 65534
AS_NOBODY = [
    "setpriv",
    f"--reuid={NOBODY}",
    f"--regid={NOBODY}",
    "--clear-groups",
    "--inh-caps=+dac_read_search",
    "--ambient-caps=+dac_read_search",
]


@pytest.fixture
def root() -> None:
    """Only root can become another uid: the README's quick start and CI run as root, and
    a run that cannot says so (the compose test fails the same way), never skips."""
    if os.geteuid() != 0:
        pytest.fail("the neighbour runs as another uid: run this test as root")


@pytest.fixture(autouse=True)
def _setpriv() -> None:
    if os.geteuid() == 0 and shutil.which("setpriv") is None:
        pytest.fail("setpriv is missing: ./install.sh installs util-linux, which has it")


def _as_nobody(*args: str, stdin: bytes = b"", home: Path) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [*AS_NOBODY, sys.executable, "-m", "hookaudit", *args],
        input=stdin,
        capture_output=True,
        cwd=REPO,
        env=env(HOME=str(home)),
        timeout=90,
    )


def _tree(d: Path) -> list[str]:
    return sorted(str(p.relative_to(d)) for p in d.rglob("*"))


def _one_line(p: subprocess.CompletedProcess[bytes]) -> str:
    err = p.stderr.decode()
    assert "Traceback" not in err, err
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1, err
    return lines[0]


@pytest.fixture
def neighbour(lair: Path) -> Iterator[Path]:
    """The neighbour's data dir, with their NATS server and an allow-everything worker."""
    home = lair / "home"
    data = lair / "data"
    settings = lair / "allow-all.json"
    for p in (
        _as_nobody("nats", "up", "--data-dir", str(data), home=lair),
        subprocess.run([*AS_NOBODY, "mkdir", str(home)], capture_output=True),
    ):
        assert p.returncode == 0, p.stderr.decode()
    settings.write_text("{}")
    worker = subprocess.Popen(
        [*AS_NOBODY, sys.executable, "-m", "hookaudit", "worker", "--data-dir", str(data),
         "--settings", f"project:{settings}"],
        cwd=REPO, env=env(HOME=str(home)), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while True:  # the neighbour's own emit: the planted server answers, and allows
            p = _as_nobody(
                "emit", "--wait", "--timeout", "5", "--fail", "closed", "--data-dir", str(data),
                stdin=pre_tool_use("rm -rf /"), home=home,
            )  # fmt: skip
            if p.returncode == 0 and not p.stdout:
                break
            assert time.monotonic() < deadline, p.stderr.decode()
        yield data
    finally:
        worker.terminate()
        worker.wait(timeout=30)
        _as_nobody("nats", "down", "--data-dir", str(data), home=home)


def test_a_neighbours_data_dir_gets_no_event_and_gives_no_decision(
    root: None, neighbour: Path
) -> None:
    assert neighbour.stat().st_uid == NOBODY
    before = _tree(neighbour)
    spooled = sorted((neighbour / "spool").glob("*")) if (neighbour / "spool").exists() else []

    p = hookaudit(
        "emit", "--wait", "--fail", "closed", "--data-dir", str(neighbour),
        stdin=pre_tool_use("rm -rf /"),
    )  # fmt: skip
    # The neighbour's worker would have said allow (the fixture's own emit got exactly
    # that); this user's emit never asks it: the fail mode's deny, and why.
    assert p.returncode == 0, p.stderr.decode()
    out = json.loads(p.stdout)["hookSpecificOutput"]
    assert out["permissionDecision"] == "deny"
    line = _one_line(p)
    assert f"data dir {neighbour}: owned by uid {NOBODY}, not by this user" in line, line
    assert "no decision" in line

    # Fail open: the action proceeds, with the reason on stderr; nothing is spooled there.
    p = hookaudit("emit", "--data-dir", str(neighbour), stdin=pre_tool_use("ls"))
    assert p.returncode == 0 and not p.stdout
    assert f"owned by uid {NOBODY}" in _one_line(p)
    # Refused input is not kept there either (it would be the neighbour's to read).
    p = hookaudit("emit", "--fail", "closed", "--data-dir", str(neighbour), stdin=b"[]")
    assert p.returncode == 2
    assert "input NOT kept" in _one_line(p) and f"owned by uid {NOBODY}" in p.stderr.decode()
    assert _tree(neighbour) == before
    now = sorted((neighbour / "spool").glob("*")) if (neighbour / "spool").exists() else []
    assert now == spooled

    # Every command that would start, join or trust the neighbour's server refuses in a line.
    for args in (
        ("nats", "up"),
        ("nats", "status"),
        ("worker", "--settings", f"project:{neighbour.parent / 'allow-all.json'}"),
        ("serve", "--listen", "127.0.0.1:0"),
        ("spool", "flush"),
        ("siem", "--name", "n", "--to", "file:///dev/null"),
    ):
        p = hookaudit(*args, "--data-dir", str(neighbour), timeout=60)
        assert p.returncode == 1, (args, p.stderr.decode())
        assert f"owned by uid {NOBODY}" in _one_line(p), args
    assert _tree(neighbour) == before


def test_a_data_dir_others_may_write_is_refused_and_left_untouched(tmp_path: Path) -> None:
    share = tmp_path / "share"
    share.mkdir()
    os.chmod(share, 0o777)
    p = hookaudit("nats", "up", "--data-dir", str(share))
    assert p.returncode == 1
    line = _one_line(p)
    assert line == (
        f"hookaudit: data dir {share}: writable by group or others (mode 0777; chmod go-w it): "
        "refusing to keep keys or events there"
    ), line
    p = hookaudit(
        "emit", "--wait", "--fail", "closed", "--data-dir", str(share),
        stdin=pre_tool_use("rm -rf /"),
    )  # fmt: skip
    assert json.loads(p.stdout)["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert "mode 0777" in _one_line(p)
    assert _tree(share) == []  # no keys, no server record, no spooled event
    for args in (("demo", "--sessions", "1"), ("relay",)):  # the same line, no traceback
        p = hookaudit(*args, "--data-dir", str(share), timeout=60)
        assert p.returncode == 1 and "mode 0777; chmod go-w it" in _one_line(p), args
        assert "internal error" not in p.stderr.decode()
    assert _tree(share) == []

    # A path with a line break or an escape is named on one line all the same.
    odd = tmp_path / "odd\ndir\x1b[2J"
    odd.mkdir()
    os.chmod(odd, 0o777)
    for args in (("nats", "up"), ("emit", "--wait", "--fail", "closed")):
        p = hookaudit(*args, "--data-dir", str(odd), stdin=pre_tool_use("ls"))
        assert "odd\\x0adir\\x1b[2J: writable by group or others" in _one_line(p), args

    # `nats keys --dir` reuses the seeds it finds: the same rule for its directory.
    p = hookaudit("nats", "keys", "--dir", str(share))
    assert p.returncode == 1
    assert _one_line(p) == (
        f"hookaudit: nats keys: --dir {share}: writable by group or others (mode 0777; "
        "chmod go-w it): refusing to keep keys or events there"
    )
    assert _tree(share) == []

    # Group-writable (a umask of 002 on a shared group) is refused the same way.
    os.chmod(share, 0o770)
    p = hookaudit("nats", "up", "--data-dir", str(share))
    assert p.returncode == 1 and "mode 0770" in _one_line(p)
    # Fixed as the message says, the same command works.
    os.chmod(share, 0o750)
    p = hookaudit("nats", "up", "--data-dir", str(share))
    try:
        assert p.returncode == 0, p.stderr.decode()
    finally:
        hookaudit("nats", "down", "--data-dir", str(share))


def test_a_subdirectory_that_is_a_symlink_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "data"
    elsewhere = tmp_path / "elsewhere"
    data.mkdir(mode=0o700)
    elsewhere.mkdir(mode=0o700)
    (data / "spool").symlink_to(elsewhere)
    # No server runs: emit would spool the event, through the link, into `elsewhere`.
    p = hookaudit(
        "emit", "--nats", "nats://127.0.0.1:1", "--data-dir", str(data),
        stdin=pre_tool_use("ls"),
    )  # fmt: skip
    assert p.returncode == 0
    assert f"data dir {data}: {data / 'spool'}: a symlink: refusing to use it" in _one_line(p)
    assert list(elsewhere.iterdir()) == []
    p = hookaudit(
        "emit", "--fail", "closed", "--nats", "nats://127.0.0.1:1", "--data-dir", str(data),
        stdin=json.dumps({"hook_event_name": "Stop", "session_id": "s"}).encode(),
    )  # fmt: skip
    assert p.returncode == 2 and "a symlink" in _one_line(p)
    assert list(elsewhere.iterdir()) == []

    # The data dir itself may be a link (an operator's choice); its target is what counts.
    (data / "spool").unlink()
    link = tmp_path / "link"
    link.symlink_to(data)
    check_data_dir(link)
    os.chmod(data, 0o777)
    with pytest.raises(UnsafeDataDir, match="mode 0777"):
        check_data_dir(link)


@pytest.mark.parametrize("sub", SUBDIRS)
def test_every_subdirectory_is_held_to_the_rule(tmp_path: Path, sub: str) -> None:
    data = tmp_path / "d"
    make_private(data / sub)
    check_data_dir(data)
    os.chmod(data / sub, 0o757)
    with pytest.raises(UnsafeDataDir, match=f"{sub}: writable by group or others"):
        check_data_dir(data)
    os.chmod(data / sub, 0o700)
    os.rmdir(data / sub) if not any((data / sub).iterdir()) else shutil.rmtree(data / sub)
    (data / sub).write_text("")
    with pytest.raises(UnsafeDataDir, match="not a directory"):
        check_data_dir(data)


def test_a_missing_data_dir_passes_and_is_made_private_whatever_the_umask(tmp_path: Path) -> None:
    check_data_dir(tmp_path / "not-yet")
    old = os.umask(0o002)
    try:
        make_private(tmp_path / "not-yet" / "siem" / "default")
        p = subprocess.run(
            [sys.executable, "-m", "hookaudit", "demo", "--sessions", "3",
             "--data-dir", str(tmp_path / "demo")],
            capture_output=True, cwd=REPO, env=env(), timeout=240,
        )  # fmt: skip
    finally:
        os.umask(old)
    assert p.returncode == 0, p.stderr.decode()
    for d in (tmp_path / "not-yet", tmp_path / "not-yet" / "siem" / "default"):
        assert d.stat().st_mode & 0o777 == 0o700
    # Every directory the demo made under its data dir is private, so the next command
    # over it (a worker, nats up) does not refuse hookaudit's own directories.
    made = [tmp_path / "demo", *(p for p in (tmp_path / "demo").rglob("*") if p.is_dir())]
    loose = [str(d) for d in made if d.stat().st_mode & 0o022]
    assert loose == []
    check_data_dir(tmp_path / "demo")


def test_the_owner_rule_as_another_user(root: None, lair: Path) -> None:
    """As uid 65534: its own and root's directories pass, a third user's is refused."""
    own, roots, third = lair / "own", lair / "roots", lair / "third"
    subprocess.run([*AS_NOBODY, "mkdir", "-m", "0700", str(own)], check=True)
    roots.mkdir(mode=0o755)
    third.mkdir(mode=0o755)
    os.chown(third, 1, 1)
    probe = (
        "import sys\n"
        "from ingest.private import UnsafeDataDir, check_data_dir\n"
        "for d in sys.argv[1:]:\n"
        "    try:\n"
        "        check_data_dir(d); print('ok')\n"
        "    except UnsafeDataDir as e:\n"
        "        print(e)\n"
    )
    p = subprocess.run(
        [*AS_NOBODY, sys.executable, "-c", probe, str(own), str(roots), str(third)],
        capture_output=True, cwd=REPO, env=env(), timeout=60,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr.decode()
    assert p.stdout.decode().splitlines() == [
        "ok",
        "ok",
        f"data dir {third}: owned by uid 1, not by this user (uid {NOBODY}): "
        "refusing to keep keys or events there",
    ]


def test_a_private_data_dir_still_works_end_to_end(tmp_path: Path) -> None:
    """The check costs nothing to a well-made deployment: nats up, worker, emit decide."""
    from tests.support.relay import write_settings

    s = Stack(data=tmp_path / "data", settings=write_settings(tmp_path))
    s.nats_up()
    s.start_worker()
    try:
        s.wait_decided()
        p = s.emit("--wait", "--fail", "closed", stdin=pre_tool_use("rm -rf /"))
        assert json.loads(p.stdout)["hookSpecificOutput"]["permissionDecisionReason"] == (
            "no rm -rf /"
        )
        check_data_dir(s.data)
    finally:
        s.stop()
        s.nats_down()


@settings(max_examples=200, deadline=None)
@given(
    mode=st.integers(0, 0o777),
    sub=st.sampled_from(["", *SUBDIRS]),
    uid=st.sampled_from([None, 0, 1, NOBODY]),
)
def test_the_rule_over_every_mode_and_owner(mode: int, sub: str, uid: int | None) -> None:
    """A directory (the data dir, or one of its subdirectories) is refused exactly when group
    or others may write it, or (as root, who can give it away) another user than this one
    or root owns it; the data dir and the other directories stay 0700 and ours."""
    base = Path(tempfile.mkdtemp(prefix="hookaudit-rule-"))
    try:
        data = base / "d"
        make_private(data / sub if sub else data)
        target = data / sub if sub else data
        os.chmod(target, mode)
        owner = os.geteuid()
        if uid is not None and os.geteuid() == 0:
            os.chown(target, uid, -1)
            owner = uid
        unsafe = bool(mode & 0o022) or owner not in (os.geteuid(), 0)
        try:
            check_data_dir(data)
        except UnsafeDataDir as e:
            assert unsafe, str(e)
            assert "\n" not in str(e) and str(target) in str(e)
        else:
            assert not unsafe, (oct(mode), owner)
    finally:
        for d in (base / "d", *(base / "d").rglob("*")):
            d.chmod(0o700)  # the cleanup may go through it (as a plain user too)
        shutil.rmtree(base, ignore_errors=True)
