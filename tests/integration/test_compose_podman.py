"""infra/compose/compose.yaml under a real container runtime: podman, docker-compose on its API.

What test_compose_native.py cannot show, this does: the image built from
infra/compose/Dockerfile (its `pip install .`, its user uid 10001), container networking and
DNS (the nodes and the hookaudit services find each other by their service names, TLS
verified against those names), named volumes written by uid 10001, published ports, the
restart policies, and compose's own ordering (`depends_on` with
`service_completed_successfully`). The commands are the README's: `setup.sh`, then
`docker compose up`, then `exec worker-1 hookaudit verify`.

Nothing leaves this machine. No registry is reachable, so the two base images are made here:
`python:3.11-slim` is Debian bookworm's python3 and pip from debootstrap, laid out as that
image is (tests/integration/podman_images.sh, run by install.sh), and `nats:2.10-alpine` is
the nats-server binary the rest of the suite runs, as that image's entrypoint runs it. The
Dockerfile's `pip install .` takes its wheels from a directory served on 127.0.0.1 (the
Dockerfile's PIP_* build arguments, in an override file with `build.network: host`).
podman runs on a storage, a network configuration and a socket of the test's own (rootful;
runc, limits this kernel allows), so it touches no image or container of the machine's;
everything is removed at the end and its API service stopped by its PID.

Faults, as a deployment meets them: nats-1, the first URL of every hookaudit service, is
stopped (decisions still come from the policy, through nats-2 and nats-3), then started again
and back in the cluster; worker-1's process is SIGKILLed and `restart: always` brings it back.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
import urllib.parse
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from ingest.log.reader import iter_outcomes
from tests.integration.test_compose_native import _hook_input
from tests.support.podman import (
    REPO,
    Runtime,
    Wheelhouse,
    free_port,
    podman_runtime,
    stand_in_images,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

HOOKAUDIT_SERVICES = ("provision", "worker-1", "worker-2", "serve")


@pytest.fixture
def runtime() -> Iterator[Runtime]:
    with podman_runtime() as rt:
        yield rt


def test_compose_file_under_podman(runtime: Runtime) -> None:
    rt = runtime
    repo = rt.root / "repo"  # the compose build context: the Dockerfile's COPY set and infra/
    repo.mkdir()
    dockerfile = (REPO / "infra" / "compose" / "Dockerfile").read_text()
    for line in re.findall(r"(?m)^COPY\s+(.+)$", dockerfile):
        for source in line.split()[:-1]:
            if (REPO / source).is_dir():
                shutil.copytree(REPO / source, repo / source,
                                ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
            else:
                shutil.copy(REPO / source, repo / source)
    shutil.copytree(REPO / "infra", repo / "infra")
    compose_dir = repo / "infra" / "compose"
    p = subprocess.run([str(compose_dir / "setup.sh")], env=rt.env, capture_output=True,
                       text=True, timeout=120, check=False)  # fmt: skip
    assert p.returncode == 0, p.stderr
    doc = yaml.safe_load((compose_dir / "compose.yaml").read_text())
    nats_image = doc["services"]["nats-1"]["image"]
    t0 = time.monotonic()
    rt.start_api()
    stand_in_images(rt, nats_image, rt.root / "nats-image")
    wheels = Wheelhouse()
    build = {
        **doc["services"]["serve"]["build"],
        "network": "host",  # the wheel server is on the host's loopback
        "args": {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": wheels.url},
    }
    override = compose_dir / "compose.test.yaml"
    override.write_text(
        yaml.safe_dump({"services": {s: {"build": build} for s in HOOKAUDIT_SERVICES}})
    )
    serve_port = free_port()
    project = f"hatest{uuid.uuid4().hex[:8]}"
    env = {**rt.env, "HOOKAUDIT_SERVE_PORT": str(serve_port)}

    def compose(
        *args: str, timeout: float = 300, check: bool = True
    ) -> subprocess.CompletedProcess[str]:
        p = subprocess.run(["docker-compose", "--no-ansi", "-p", project,
                            "-f", str(compose_dir / "compose.yaml"), "-f", str(override), *args],
                           cwd=compose_dir, env=env, capture_output=True, text=True,
                           timeout=timeout, check=False)  # fmt: skip
        if check:
            assert p.returncode == 0, (
                f"docker-compose {' '.join(args)}:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
            )
        return p

    def logs(service: str = "") -> str:
        return compose("logs", "--no-color", *([service] if service else []), check=False).stdout

    def container(service: str) -> str:
        return f"{project}_{service}_1"

    try:
        compose("build", timeout=600)
        built = time.monotonic() - t0
        compose("up", "-d", timeout=300)
        up = time.monotonic() - t0 - built
        print(f"\nimages (stand-ins, then the Dockerfile's build) {built:.1f} s; up -d {up:.1f} s")

        state = {s: json.loads(rt.podman("inspect", container(s)))[0] for s in doc["services"]}
        assert state["provision"]["State"]["ExitCode"] == 0, logs("provision")
        for s in doc["services"]:
            if s != "provision":
                assert state[s]["State"]["Status"] == "running", (s, logs(s))
        for s in HOOKAUDIT_SERVICES:  # the image's user, not root
            assert state[s]["Config"]["User"] == "hookaudit", (s, state[s]["Config"]["User"])
        uid = rt.podman("exec", container("worker-1"), "id", "-u").strip()
        assert uid == "10001", uid
        # What a node tells its clients to reconnect to (INFO connect_urls) must be names its
        # certificate holds: a container's IP address fails every client's TLS verification.
        info = rt.podman("exec", container("worker-1"), "python3", "-c",
                         "import socket; s = socket.create_connection(('nats-1', 4222), 5);"
                         "print(s.recv(4096).decode())")  # fmt: skip
        urls = json.loads(info.split(" ", 1)[1])["connect_urls"]
        assert sorted(urls) == ["nats-1:4222", "nats-2:4222", "nats-3:4222"], urls

        # As Claude Code sends them with infra/claude/managed-settings.serve.json, on the
        # published port.
        managed = json.loads(
            (repo / "infra" / "claude" / "managed-settings.serve.json").read_text()
        )
        hook = managed["hooks"]["PreToolUse"][0]["hooks"][0]
        token = re.search(
            r"(?m)^HOOKAUDIT_SERVE_TOKEN=(\S+)", (compose_dir / "hookaudit.env").read_text()
        )
        assert token is not None
        headers = {k: v.replace("$HOOKAUDIT_TOKEN", token[1]) for k, v in hook["headers"].items()}
        endpoint = f"http://127.0.0.1:{serve_port}{urllib.parse.urlsplit(hook['url']).path}"

        def send(body: dict, auth: bool = True) -> tuple[str, str]:
            req = urllib.request.Request(endpoint, data=json.dumps(body).encode(),
                                         headers={**(headers if auth else {}),
                                                  "Content-Type": "application/json"})  # fmt: skip
            with urllib.request.urlopen(req, timeout=hook["timeout"] + 5) as r:
                assert r.status == 200
                raw = r.read()
            out = (json.loads(raw) if raw.strip() else {}).get("hookSpecificOutput") or {}
            return out.get("permissionDecision", "allow"), out.get("permissionDecisionReason", "")

        deadline = time.monotonic() + 60
        while True:  # serve up (its port published)
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{serve_port}/healthz", timeout=2):
                    break
            except OSError:
                assert time.monotonic() < deadline, logs("serve")
                time.sleep(0.3)
        session = f"podman-{uuid.uuid4().hex[:8]}"
        # the token is in force: without it, even `ls` is denied (serve fails closed; a 401
        # would be a non-blocking error to Claude Code, and the call would run)
        refused = send(_hook_input(session, "ls", 0), auth=False)
        assert refused[0] == "deny" and "bearer token" in refused[1], refused

        sent: set[str] = set()
        fallback: set[str] = set()
        counter = iter(range(1, 10_000))

        def until_policy_answers(why: str) -> None:
            """serve fails closed until a worker answers: wait for a benign call's allow."""
            deadline = time.monotonic() + 90
            while True:
                n = next(counter)
                got, reason = send(_hook_input(session, "ls -la", n))
                sent.add(f"toolu_compose_{n:04d}")
                if got == "allow":
                    return
                assert "no decision" in reason, reason
                fallback.add(f"toolu_compose_{n:04d}")
                assert time.monotonic() < deadline, f"{why}: no worker answered\n{logs()[-4000:]}"
                time.sleep(0.5)

        def round_of(k: int) -> Counter[str]:
            answers: Counter[str] = Counter()
            for _ in range(k):
                n = next(counter)
                bad = n % 2 == 0
                got, reason = send(
                    _hook_input(session, "rm -rf /" if bad else f"git status {n}", n)
                )
                sent.add(f"toolu_compose_{n:04d}")
                answers[got] += 1
                if bad:  # the policy's deny, not serve's fallback
                    assert got == "deny" and "rm -rf outside the project" in reason, reason
                else:
                    assert got == "allow", (n, got, reason)
            return answers

        until_policy_answers("first start")
        print("decisions, all up:", dict(round_of(12)))

        # nats-1 (every service's first URL) goes away: the clients go on through the nodes
        # the cluster told them of (by name: client_advertise), and R3 keeps the streams.
        compose("stop", "nats-1", timeout=120)
        until_policy_answers("nats-1 stopped")
        print("decisions, nats-1 stopped:", dict(round_of(12)))
        restarted_at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - 1))
        compose("start", "nats-1", timeout=120)

        # A crash of worker-1's process: `restart: always` starts it again.
        pid = state["worker-1"]["State"]["Pid"]
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 90
        while True:
            now = json.loads(rt.podman("inspect", container("worker-1")))[0]
            if now["State"]["Status"] == "running" and now["State"]["Pid"] not in (0, pid):
                break
            assert time.monotonic() < deadline, (now["State"], logs("worker-1"))
            time.sleep(0.5)
        assert now["RestartCount"] >= 1, now["RestartCount"]
        until_policy_answers("worker-1 restarted")
        print("decisions, worker-1 restarted:", dict(round_of(12)))

        # nats-1 is back in the cluster: routes to both peers (by name, TLS verified).
        deadline = time.monotonic() + 60
        while True:
            since = subprocess.run(
                ["podman", "logs", "--since", restarted_at, container("nats-1")],
                env=rt.env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                timeout=60,
                check=False,
            ).stdout  # the server logs to stderr
            if len(re.findall(r"Route connection created", since)) >= 2:
                break
            assert time.monotonic() < deadline, since[-4000:]
            time.sleep(0.5)
        all_logs = logs()
        # No route dialled by an address its peer's certificate does not hold (the
        # handshake error of this test's own INFO probe above is no such failure).
        bad = [
            ln
            for ln in all_logs.splitlines()
            if "route handshake error" in ln or "failed to verify certificate" in ln
        ]
        assert not bad, bad[:5]  # fmt: skip
        assert "Traceback" not in all_logs, all_logs[-4000:]

        # Every event is in the log on the data volume, and decided as the agent was told.
        mount = json.loads(rt.podman("volume", "inspect", f"{project}_data"))[0]["Mountpoint"]
        data = Path(mount)
        deadline = time.monotonic() + 30
        while True:
            records = [o for o in iter_outcomes(data) if o.event.tool_use_id in sent]
            logged = Counter(o.event.tool_use_id for o in records)
            if set(logged) == sent or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert set(logged) == sent, sorted(sent - set(logged))
        for o in records:
            if o.event.tool_use_id in fallback:
                continue
            bad = "rm -rf" in json.loads(o.event.payload)["tool_input"]["command"]
            assert o.decided_by == "policy" and o.blocked == bad, o
        owners = {p.stat().st_uid for p in (data / "log").rglob("*")}
        assert owners == {10001}, owners  # written by the image's user

        # The compose file's documented check, in the container, with its log key.
        v = compose("exec", "-T", "worker-1", "hookaudit", "verify", timeout=120)
        chains = sorted(p.name for p in (data / "log" / "active").iterdir())
        assert chains == ["worker-1", "worker-2"], chains
        assert "in 2 chain(s) verified" in v.stdout, v.stdout
        dup = sum(n - 1 for n in logged.values())
        print(f"sent {len(sent)} / logged {len(logged)} / duplicated {dup} / lost "
              f"{len(sent - set(logged))} ({len(fallback)} answered by serve's fallback while "
              f"no worker was connected); verify: {v.stdout.strip()}")  # fmt: skip
    except BaseException:
        print(logs()[-8000:])
        raise
    finally:
        compose("down", "--volumes", "--timeout", "10", timeout=300, check=False)
        wheels.stop()
