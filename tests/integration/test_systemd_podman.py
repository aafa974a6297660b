"""infra/systemd under a real systemd: install.sh, then the units, booted in a container.

systemd 252 (Debian bookworm's) runs as PID 1 in a podman container (`--systemd=always`,
no network but loopback) made from the root file system install.sh prepared
(tests/integration/podman_images.sh). In it, as an operator would: a user `agent`, then
`infra/systemd/install.sh --agent-user agent` (pip takes its wheels from a directory mounted
read-only: nothing is downloaded), then `systemctl enable --now` of nats, two workers, serve,
the relay and a SIEM sink. Then:

- every unit is active, each as its own user (serve as hookaudit-serve, the relay as
  hookaudit-relay, the back end as hookaudit);
- what the users may read: serve's user can read neither the worker's seeds nor the
  signing seed, nor the log key, nor the log, nor a worker's environment; the seeds are
  handed to each unit by systemd (LoadCredential), root's files otherwise;
- serve on 127.0.0.1:8787 answers the shipped policy's deny for `rm -rf /` and allows `ls`,
  with the token of serve.env, and refuses a request without it;
- `hookaudit emit --wait --fail closed` as the agent goes through the relay's socket and
  gets the policy's deny;
- `systemctl reload` (SIGHUP) keeps a worker up; SIGKILL of a worker: `Restart=always`
  starts it again; the SIEM sink writes an OCSF record per outcome;
- `hookaudit verify` with the log key passes over both chains; no unit logged a traceback.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.podman import CACHE, REPO, ROOTFS, Runtime, podman_runtime

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

UNITS = ["hookaudit-nats", "hookaudit-worker@1", "hookaudit-worker@2", "hookaudit-serve",
         "hookaudit-relay", "hookaudit-siem@file"]  # fmt: skip


@pytest.fixture
def runtime() -> Iterator[Runtime]:
    with podman_runtime() as rt:
        yield rt


class Host:
    """The booted container: run commands in it."""

    def __init__(self, rt: Runtime, name: str) -> None:
        self.rt, self.name = rt, name

    def sh(self, script: str, *, user: str | None = None, check: bool = True,
           timeout: float = 300, stdin: str | None = None) -> subprocess.CompletedProcess[str]:  # fmt: skip
        argv = ["podman", "exec", "-i", *(["--user", user] if user else []), self.name,
                "/bin/sh", "-c", script]  # fmt: skip
        p = subprocess.run(argv, env=self.rt.env, input=stdin, capture_output=True, text=True,
                           timeout=timeout, check=False)  # fmt: skip
        if check:
            assert p.returncode == 0, f"{script}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
        return p

    def journal(self) -> str:
        return self.sh("journalctl --no-pager -o cat -u 'hookaudit-*'", check=False).stdout

    def wait(self, what: str, script: str, timeout: float = 90) -> str:
        deadline = time.monotonic() + timeout
        while True:
            p = self.sh(script, check=False)
            if p.returncode == 0:
                return p.stdout
            assert time.monotonic() < deadline, (
                f"{what}: {p.stdout}{p.stderr}\n{self.journal()[-4000:]}"
            )
            time.sleep(0.5)


def post(host: Host, command: str, n: int, token: str | None) -> tuple[int, dict]:
    body = json.dumps({"session_id": "systemd", "cwd": "/home/agent/p", "hook_event_name": "PreToolUse",
                       "tool_name": "Bash", "tool_input": {"command": command},
                       "tool_use_id": f"toolu_sd_{n}"})  # fmt: skip
    auth = f', "Authorization": "Bearer {token}"' if token else ""
    script = f"""/opt/hookaudit/bin/python - <<'PY'
import urllib.request, urllib.error
req = urllib.request.Request("http://127.0.0.1:8787/hooks", data={body!r}.encode(),
                             headers={{"Content-Type": "application/json"{auth}}})
try:
    with urllib.request.urlopen(req, timeout=20) as r:
        raw = r.read(); print(r.status); print(raw.decode() or "{{}}")
except urllib.error.HTTPError as e:
    print(e.code); print("{{}}")
PY"""
    out = host.sh(script).stdout.split("\n", 1)
    return int(out[0]), json.loads(out[1])


def test_the_systemd_units_under_systemd(runtime: Runtime, tmp_path: Path) -> None:
    rt = runtime
    if not ROOTFS.is_file() or not (CACHE / "wheelhouse" / ".complete").exists():
        pytest.fail(f"{ROOTFS} or its wheelhouse is missing: run ./install.sh (as root)")
    src = tmp_path / "src"  # what the operator checked out (pip builds in it)
    src.mkdir()
    for part in (
        "pyproject.toml",
        "README.md",
        "engine",
        "ingest",
        "queries",
        "replay",
        "hookaudit",
        "infra",
    ):
        if (REPO / part).is_dir():
            shutil.copytree(REPO / part, src / part, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(REPO / part, src / part)
    rt.start_api()
    rt.podman("import", "--quiet", "--change", "CMD [\"/sbin/init\"]",
              "--change", "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
              str(ROOTFS), "localhost/hookaudit-systemd:test")  # fmt: skip
    name = f"hookaudit-systemd-{uuid.uuid4().hex[:8]}"
    t0 = time.monotonic()
    rt.podman("run", "-d", "--name", name, "--systemd=always", "--network", "none",
              "--hostname", "agenthost", "-v", f"{src}:/src", "-v",
              f"{CACHE / 'wheelhouse'}:/wheels:ro", "localhost/hookaudit-systemd:test")  # fmt: skip
    host = Host(rt, name)
    try:
        host.wait("systemd up", "systemctl is-system-running | grep -Eq 'running|degraded'")
        host.sh("useradd --create-home agent")
        inst = host.sh("PIP_NO_INDEX=1 PIP_FIND_LINKS=/wheels /src/infra/systemd/install.sh "
                       "--agent-user agent", timeout=600)  # fmt: skip
        assert "installed: hookaudit, version" in inst.stdout, inst.stdout + inst.stderr
        host.sh("printf 'HOOKAUDIT_SIEM_FORMAT=ocsf\\nHOOKAUDIT_SIEM_TO=file:///var/lib/hookaudit/siem/out.ndjson\\n'"
                " > /etc/hookaudit/siem-file.env && chmod 0600 /etc/hookaudit/siem-file.env")  # fmt: skip
        host.sh(f"systemctl enable --now {' '.join(UNITS)}")
        installed = time.monotonic() - t0
        for unit in UNITS:
            host.wait(f"{unit} active", f"systemctl is-active --quiet {unit}")

        def pid_user(unit: str) -> tuple[int, str]:
            pid = int(host.sh(f"systemctl show -p MainPID --value {unit}").stdout)
            user = host.sh(f"stat -c %U /proc/{pid}").stdout.strip()
            return pid, user

        users = {u: pid_user(u)[1] for u in UNITS}
        assert users == {"hookaudit-nats": "hookaudit", "hookaudit-worker@1": "hookaudit",
                         "hookaudit-worker@2": "hookaudit", "hookaudit-serve": "hookaudit-serve",
                         "hookaudit-relay": "hookaudit-relay", "hookaudit-siem@file": "hookaudit"}, users  # fmt: skip

        # What the HTTP-facing user can read: none of the back end's secrets.
        worker_pid = pid_user("hookaudit-worker@1")[0]
        for path in ("/etc/hookaudit/keys/reply.nk", "/etc/hookaudit/keys/worker.nk",
                     "/etc/hookaudit/worker.env", "/etc/hookaudit/serve.env",
                     f"/proc/{worker_pid}/environ", "/var/lib/hookaudit/log"):  # fmt: skip
            p = host.sh(f"ls {path} >/dev/null 2>&1 && cat {path} >/dev/null 2>&1 || ls {path}/* >/dev/null 2>&1",
                        user="hookaudit-serve", check=False)  # fmt: skip
            assert p.returncode != 0, f"hookaudit-serve can read {path}"
        cred = host.sh("ls /run/credentials/hookaudit-worker@1.service/").stdout.split()
        assert sorted(cred) == ["reply.nk", "worker.nk"], cred
        cred = host.sh("ls /run/credentials/hookaudit-serve.service/").stdout.split()
        assert cred == ["emitter.nk"], cred

        token = host.sh(". /etc/hookaudit/serve.env && echo $HOOKAUDIT_SERVE_TOKEN").stdout.strip()
        status, refused = post(host, "ls", 0, None)  # no token: denied (serve fails closed)
        assert (status, refused["hookSpecificOutput"]["permissionDecision"]) == (200, "deny")
        deadline = time.monotonic() + 90
        n = 1
        while True:  # until a worker answers (serve fails closed meanwhile)
            status, answer = post(host, "ls -la", n, token)
            n += 1
            if status == 200 and not answer.get("hookSpecificOutput"):
                break
            assert time.monotonic() < deadline, (answer, host.journal()[-4000:])
            time.sleep(0.5)
        status, answer = post(host, "rm -rf /", n, token)
        out = answer["hookSpecificOutput"]
        assert out["permissionDecision"] == "deny" and "rm -rf outside the project" in out[
            "permissionDecisionReason"], out  # fmt: skip

        # The agent's emit through the relay (the relay's uid pinned, its socket's group).
        event = json.dumps({"session_id": "systemd", "cwd": "/home/agent/p", "hook_event_name": "PreToolUse",
                            "tool_name": "Bash", "tool_input": {"command": "rm -rf /etc"},
                            "tool_use_id": "toolu_sd_relay"})  # fmt: skip
        e = host.sh("HOOKAUDIT_RELAY=/run/hookaudit-relay/emit.sock HOOKAUDIT_RELAY_UID=hookaudit-relay "
                    "/opt/hookaudit/bin/hookaudit emit --wait --fail closed", user="agent",
                    stdin=event, check=False)  # fmt: skip
        assert e.returncode == 0, (e.stdout, e.stderr)  # the deny as Claude Code's JSON
        said = json.loads(e.stdout)["hookSpecificOutput"]
        assert said["permissionDecision"] == "deny", said
        assert "rm -rf outside the project" in said["permissionDecisionReason"], said

        # Reload keeps the worker; a crash is restarted.
        host.sh("systemctl reload hookaudit-worker@1")
        host.wait(
            "worker@1 reloaded",
            "journalctl --no-pager -o cat -u hookaudit-worker@1 | grep -q 'settings reloaded'",
        )
        host.wait("worker@1 after reload", "systemctl is-active --quiet hookaudit-worker@1")
        before = host.sh("systemctl show -p NRestarts --value hookaudit-worker@2").stdout.strip()
        host.sh("systemctl kill -s KILL hookaudit-worker@2")
        host.wait("worker@2 restarted", f"[ \"$(systemctl show -p NRestarts --value hookaudit-worker@2)\" -gt {before} ]"
                  " && systemctl is-active --quiet hookaudit-worker@2")  # fmt: skip

        # The SIEM sink: an OCSF record per outcome so far.
        ocsf = host.wait(
            "siem records",
            "test -s /var/lib/hookaudit/siem/out.ndjson && cat /var/lib/hookaudit/siem/out.ndjson",
        )
        records = [json.loads(line) for line in ocsf.splitlines() if line.strip()]
        assert any(r.get("class_uid") == 2004 for r in records), records[:2]  # the deny's finding

        v = host.wait("verify", "set -a; . /etc/hookaudit/worker.env; HOOKAUDIT_DATA_DIR=/var/lib/hookaudit "
                      "/opt/hookaudit/bin/hookaudit verify")  # fmt: skip
        assert "chain(s) verified" in v, v
        journal = host.journal()
        assert "Traceback" not in journal, journal[-4000:]
        print(f"\ninstalled and started in {installed:.1f} s; units as {users}; {len(records)} OCSF "
              f"records; verify: {v.strip()}")  # fmt: skip
    except BaseException:
        print(host.journal()[-8000:])
        raise
    finally:
        rt.podman("rm", "--force", "--time", "5", name, check=False, timeout=120)
