"""infra/compose/compose.yaml run for real, as local processes, without a container runtime.

No docker daemon runs here, so the test plays the runtime's part and nothing else: it runs
infra/compose/setup.sh (as the README says) in a copy of infra/, reads compose.yaml with
its YAML anchors merged as compose merges them, and for every service takes its
`command`, its `env_file` overlaid by its `environment`, and its volume mounts. Each
container path in an argument, an environment value or a node config is mapped to what its
mount names on the host (a bind mount: that file or directory; a named volume: one
directory per volume, shared by every service that mounts it), and the working directory and
HOME are the image's (the Dockerfile's WORKDIR and user home). A container path that no mount
provides (nor the image makes) is a bug of the compose file and fails the test, and so does a
container given a secret of another role (the CA's key, a peer node's key, a seed it does not
use).

What a single host forces, and only that:
- the hostnames nats-1..3 become 127.0.0.1 with each node's own ports: the three shipped node
  configs listen on the same ports (4222 clients, 6222 routes, 8222 monitoring), which is
  right for three containers and collides on one host, so each node gets free ports and only
  the ports (and the 0.0.0.0 of a container's own network, as 127.0.0.1) are rewritten;
- serve's published port (127.0.0.1:8787 on the host) is a free port;
- the processes run as the test's user, not the image's uid 10001 (this interpreter lives
  under a directory that user cannot read).

The nats image's entrypoint runs nats-server with the command when its first argument starts
with '-'. `hookaudit` is the image's: the Dockerfile's COPY set from the compose build
context, built as its `pip install .` would into a venv of its own (this venv's dependencies
on its path, not its editable checkout), with this venv's console script; a module or data
file the image would lack is missing here too. The services start in depends_on order;
`provision` runs to completion under its `restart: on-failure`. Then hook events are sent to
serve as infra/claude/managed-settings.serve.json sends them (its URL path and headers, the
token from hookaudit.env): the shipped policy denies a destructive command and allows a
benign one; `hookaudit verify` (the compose file's documented `exec worker-1 hookaudit
verify`) passes over the shared data volume with the log key, and every event is in the
log. Every process is stopped by its PID at the end, also on failure.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
import urllib.parse
import urllib.request
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from ingest.log.reader import iter_outcomes
from ingest.nats.embedded import find_nats_server

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
NODE_PORTS = {"client": 4222, "route": 6222, "http": 8222}
PATH_RE = re.compile(r"(?:(?<=^)|(?<=[\s:=,\"']))(/[A-Za-z0-9_.-][^\s,:\"']*)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def image_install(build: dict, tmp: Path) -> Path:
    """The hookaudit image's install, without a container runtime: the Dockerfile's COPY set
    (from the compose file's build context) in a source dir, built by setuptools' build_py
    into a venv of its own, which is what `pip install .` puts in site-packages; the third-party
    dependencies come from this venv's site-packages as a plain path entry, so its editable
    install of the checkout is not loaded. Returns that venv's bin dir, with the `hookaudit`
    console script."""
    context = (REPO / "infra" / "compose" / build["context"]).resolve()
    assert context == REPO, context
    dockerfile = (context / build["dockerfile"]).read_text()
    src = tmp / "image" / "src"
    src.mkdir(parents=True)
    for line in re.findall(r"(?m)^COPY\s+(.+)$", dockerfile):
        *sources, dest = line.split()
        for source in sources:
            if (context / source).is_dir():
                shutil.copytree(context / source, src / dest, ignore=ignore_caches)
            else:  # into the directory dest (`./`: WORKDIR /src)
                (src / dest).mkdir(parents=True, exist_ok=True)
                shutil.copy(context / source, src / dest / Path(source).name)
    assert re.search(r"(?m)^RUN pip install --no-cache-dir \. ", dockerfile), dockerfile
    venv = tmp / "image" / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   capture_output=True, timeout=120)  # fmt: skip
    site = Path(
        subprocess.check_output(
            [
                str(venv / "bin" / "python"),
                "-c",
                "import sysconfig; print(sysconfig.get_paths()['purelib'])",
            ],
            text=True,
            timeout=60,
        ).strip()
    )
    deps = sysconfig.get_paths()["purelib"]
    (site / "hookaudit-image-deps.pth").write_text(deps + "\n")
    p = subprocess.run([sys.executable, "-c", "from setuptools import setup; setup()", "-q",
                        "build_py", "--build-lib", str(site)], cwd=src, capture_output=True,
                       text=True, timeout=120, check=False)  # fmt: skip
    assert p.returncode == 0, p.stderr
    script = (BIN / "hookaudit").read_text().split("\n", 1)[1]  # pip's script, its python
    (venv / "bin" / "hookaudit").write_text(f"#!{venv / 'bin' / 'python'}\n{script}")
    (venv / "bin" / "hookaudit").chmod(0o755)
    where = subprocess.check_output(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import sys, engine, ingest.log, queries, replay, hookaudit.entry;"
            "print(ingest.log.__file__); print(any('editable' in repr(f) for f in sys.meta_path))",
        ],
        text=True,
        timeout=60,
        cwd=tmp,  # not the checkout: python -c puts the cwd first on its path
    ).split()
    assert where == [str(site / "ingest" / "log" / "__init__.py"), "False"], where
    return venv / "bin"


SECRET = re.compile(r"(-key\.pem|\.nk)$")
ROLE_SECRETS = {
    **{f"nats-{i}": {f"nats-{i}-key.pem"} for i in (1, 2, 3)},  # not the CA's, nor a peer's
    "provision": {"worker.nk"},
    "worker-1": {"worker.nk", "reply.nk"},
    "worker-2": {"worker.nk", "reply.nk"},
    "serve": {"emitter.nk"},  # cannot sign a decision
}


def secrets_of(svc: Service) -> set[str]:
    """The private keys and seeds a service's mounts expose to it."""
    out: set[str] = set()
    for _, host in svc.mounts:
        files = [host] if host.is_file() else [p for p in host.rglob("*") if p.is_file()]
        out |= {p.name for p in files if SECRET.search(p.name)}
    return out


def ignore_caches(_dir: str, names: list[str]) -> list[str]:
    return [n for n in names if n == "__pycache__"]


@dataclass
class Service:
    """One compose service as this host runs it: argv, env and cwd with every container path
    and name mapped."""

    name: str
    spec: dict
    mounts: list[tuple[str, Path]]  # (container path, host path), longest first
    argv: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    cwd: Path | None = None
    proc: subprocess.Popen[bytes] | None = None
    log: Path | None = None

    def host_path(self, path: str) -> Path:
        """The host path a container path names through this service's mounts."""
        for target, source in self.mounts:
            if path == target or path.startswith(target.rstrip("/") + "/"):
                return source / path[len(target) :].lstrip("/")
        raise AssertionError(f"{self.name}: {path} is in no mount of the service")

    def map_paths(self, text: str) -> str:
        return PATH_RE.sub(lambda m: str(self.host_path(m.group(1))), text)


class Topology:
    """compose.yaml read as compose reads it, mapped onto this host."""

    def __init__(self, compose: Path, volumes: Path, image_dirs: list[str]) -> None:
        """`image_dirs`: the directories the hookaudit image makes (WORKDIR, mkdir): where no
        volume is mounted, each container has its own (a directory per service here)."""
        self.dir = compose.parent
        self.image_dirs = image_dirs
        text = compose.read_text()
        # compose interpolates ${VAR} from the shell: only the published port may, with a
        # default (the test maps that port anyway)
        rest = text.replace("${HOOKAUDIT_SERVE_PORT:-8787}", "8787")
        assert "$" not in rest, "compose.yaml interpolates a variable: this test does not"
        self.doc = yaml.safe_load(text)  # SafeLoader merges `<<` anchors as compose does
        self.volumes = volumes
        self.services = {n: self._service(n, s) for n, s in self.doc["services"].items()}
        self.nodes = [s for s in self.services.values() if self.is_node(s)]
        self.ports: dict[str, dict[int, int]] = {
            s.spec.get("hostname", s.name): {p: free_port() for p in NODE_PORTS.values()}
            for s in self.nodes
        }  # fmt: skip
        self.published: dict[int, tuple[str, int]] = {}  # container port -> host address
        self.published_as: dict[int, str] = {}  # container port -> compose's host address

    @staticmethod
    def is_node(svc: Service) -> bool:
        return str(svc.spec.get("image", "")).startswith("nats:")

    def _service(self, name: str, spec: dict) -> Service:
        mounts = []
        for vol in spec.get("volumes", []):
            src, target = vol.split(":")[:2]
            if src.startswith((".", "/")):
                host = (self.dir / src).resolve()
                assert host.exists(), f"{name}: bind mount {src} does not exist"
            else:
                assert src in self.doc["volumes"], f"{name}: volume {src} is not declared"
                host = self.volumes / src
                host.mkdir(parents=True, exist_ok=True)
            mounts.append((target, host))
        if "build" in spec:
            for d in self.image_dirs:
                if all(target != d for target, _ in mounts):
                    own = self.volumes.parent / "containers" / name / d.lstrip("/")
                    own.mkdir(parents=True, exist_ok=True)
                    mounts.append((d, own))
        mounts.sort(key=lambda m: -len(m[0]))
        return Service(name, spec, mounts)

    def map_names(self, text: str) -> str:
        """nats-N:PORT -> 127.0.0.1:<that node's port on this host>."""
        for host, ports in self.ports.items():
            text = re.sub(
                rf"\b{re.escape(host)}:(\d+)", lambda m, p=ports: f"127.0.0.1:{p[int(m[1])]}", text
            )
        return text

    def node_config(self, svc: Service, tmp: Path) -> Path:
        """The node's config file (its `-c` argument) with paths and ports mapped."""
        conf_in_container = svc.spec["command"][svc.spec["command"].index("-c") + 1]
        text = svc.host_path(conf_in_container).read_text()
        ports = self.ports[svc.spec.get("hostname", svc.name)]
        found = {int(p) for p in re.findall(r"(?m)^\s*(?:listen|http):\s*[\d.]+:(\d+)", text)}
        assert found == set(NODE_PORTS.values()), (svc.name, found)
        conf_dir = tmp / svc.name  # stands for the config's directory in the container
        conf_dir.mkdir()
        lines = []
        for line in text.splitlines():
            line = line.split("#", 1)[0].rstrip()  # comments name paths of no mount
            m = re.match(r'^\s*include\s+"([^"/][^"]*)"', line)
            if m:  # nats-server reads it relative to the config file's directory
                inc = f"{Path(conf_in_container).parent}/{m[1]}"
                (conf_dir / m[1]).symlink_to(svc.host_path(inc))
            else:
                line = svc.map_paths(line)
            line = re.sub(
                r"^(\s*(?:listen|http):\s*)[\d.]+:(\d+)",
                lambda m: f"{m[1]}127.0.0.1:{ports[int(m[2])]}",
                line,
            )
            lines.append(self.map_names(line))
        out = conf_dir / Path(conf_in_container).name
        out.write_text("\n".join(lines) + "\n")
        return out

    def prepare(self, tmp: Path, dockerfile: Path, image_bin: Path) -> None:
        image_dir = re.findall(r"(?m)^WORKDIR\s+(\S+)", dockerfile.read_text())[-1]
        home = re.search(r"--home\s+(\S+)", dockerfile.read_text())
        for svc in self.services.values():
            spec = svc.spec
            if self.is_node(svc):
                assert spec["command"][0].startswith("-"), spec["command"]
                svc.argv = [find_nats_server(), *spec["command"]]
                i = svc.argv.index("-c") + 1
                svc.argv[i] = str(self.node_config(svc, tmp))
                svc.env = {"PATH": "/usr/local/bin:/usr/bin:/bin"}
                continue
            for port in spec.get("ports", []):  # ${VAR:-default}: compose's, VAR unset
                port = re.sub(r"\$\{\w+:-([^}]*)\}", lambda m: m[1], port)
                host_ip, host_port, container = port.split(":")
                self.published[int(container)] = (host_ip, free_port())
                self.published_as[int(container)] = f"{host_ip}:{host_port}"
            env: dict[str, str] = {}
            for line in (self.dir / spec["env_file"]).read_text().splitlines():
                if line.strip() and not line.lstrip().startswith("#"):
                    k, v = line.split("=", 1)
                    env[k] = v
            env.update({k: str(v) for k, v in spec["environment"].items()})
            svc.env = {k: self.map_names(svc.map_paths(v)) for k, v in env.items()}
            svc.cwd = svc.host_path(image_dir)
            svc.env |= {
                "PATH": f"{image_bin}:/usr/local/bin:/usr/bin:/bin",
                "HOME": str(svc.host_path(home[1] if home else image_dir)),
                "LANG": "C.UTF-8",
            }
            assert spec["command"][0] == "hookaudit", spec["command"]
            argv = [str(image_bin / "hookaudit")]
            for arg in spec["command"][1:]:
                for container, (ip, hport) in self.published.items():
                    arg = re.sub(rf"^0\.0\.0\.0:{container}$", f"{ip}:{hport}", arg)
                argv.append(self.map_names(svc.map_paths(arg)))
            svc.argv = argv

    def order(self) -> list[str]:
        done: list[str] = []

        def visit(name: str) -> None:
            if name in done:
                return
            deps = self.services[name].spec.get("depends_on", [])
            for dep in deps:
                visit(dep)
            done.append(name)

        for name in self.services:
            visit(name)
        return done

    def run_to_completion(self, name: str) -> bool:
        """depends_on: service_completed_successfully on this service somewhere."""
        for svc in self.services.values():
            deps = svc.spec.get("depends_on", [])
            if isinstance(deps, dict) and deps.get(name, {}).get("condition") == (
                "service_completed_successfully"
            ):
                return True
        return False


def start(svc: Service, logs: Path) -> None:
    svc.log = logs / f"{svc.name}.log"
    with svc.log.open("ab") as out:
        svc.proc = subprocess.Popen(
            svc.argv, env=svc.env, cwd=svc.cwd, stdout=out, stderr=out, start_new_session=True
        )


def stop(svc: Service) -> None:
    if svc.proc is None or svc.proc.poll() is not None:
        return
    svc.proc.send_signal(signal.SIGTERM)
    try:
        svc.proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        svc.proc.send_signal(signal.SIGKILL)
        svc.proc.wait(timeout=10)


def wait_http(url: str, what: str, svc: Service, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        assert svc.proc is not None and svc.proc.poll() is None, f"{what} exited: {tail(svc)}"
        assert time.monotonic() < deadline, f"{what} not ready after {timeout}s: {tail(svc)}"
        time.sleep(0.2)


def tail(svc: Service) -> str:
    return svc.log.read_text(errors="replace")[-2000:] if svc.log and svc.log.exists() else ""


@pytest.fixture
def tmp() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="hookaudit-compose-"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _hook_input(session: str, command: str, n: int) -> dict:
    return {
        "session_id": session,
        "transcript_path": f"/home/dev/.claude/projects/p/{session}.jsonl",
        "cwd": "/home/dev/project",
        "permission_mode": "default",
        "hook_event_name": "PreToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": command},
        "tool_use_id": f"toolu_compose_{n:04d}",
    }


def test_compose_services_run_and_enforce(tmp: Path) -> None:
    infra = tmp / "infra"
    shutil.copytree(REPO / "infra", infra)
    compose = infra / "compose" / "compose.yaml"
    p = subprocess.run([str(infra / "compose" / "setup.sh")], capture_output=True, text=True,
                       env={**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}"},
                       timeout=120, check=False)  # fmt: skip
    assert p.returncode == 0, p.stderr
    tls = compose.parent / "tls"
    for i in (1, 2, 3):  # valid for the compose name and for the one this host uses
        for check in (["-verify_hostname", f"nats-{i}"], ["-verify_ip", "127.0.0.1"]):
            v = subprocess.run(["openssl", "verify", "-CAfile", str(tls / "ca.pem"), *check,
                                str(tls / f"nats-{i}.pem")], capture_output=True, text=True,
                               timeout=30, check=False)  # fmt: skip
            assert v.returncode == 0, (check, v.stdout, v.stderr)

    dockerfile = (compose.parent / "Dockerfile").read_text()
    image_dirs = re.findall(r"(?m)^WORKDIR\s+(\S+)", dockerfile)
    image_dirs += re.findall(r"mkdir -p (\S+)", dockerfile)
    topo = Topology(compose, tmp / "volumes", sorted(set(image_dirs)))
    assert len(topo.nodes) == 3
    for name, svc in topo.services.items():  # each container holds its role's secrets only
        assert secrets_of(svc) == ROLE_SECRETS[name], (name, secrets_of(svc))
    print("secrets each container holds:", {n: sorted(v) for n, v in ROLE_SECRETS.items()})
    assert "HOOKAUDIT_LOG_KEY" in (compose.parent / "hookaudit.env").read_text()
    assert topo.doc["services"]["serve"]["environment"]["HOOKAUDIT_LOG_KEY"] == ""
    data_of = {n: s.host_path("/var/lib/hookaudit") for n, s in topo.services.items()
               if not topo.is_node(s)}  # fmt: skip
    assert data_of["worker-1"] == data_of["worker-2"], data_of  # the log's volume
    assert len({data_of["worker-1"], data_of["serve"], data_of["provision"]}) == 3, data_of
    print(f"\nnode configs share ports {sorted(NODE_PORTS.values())} (one per container):"
          f" on one host each node gets its own: {topo.ports}")  # fmt: skip
    builds = {json.dumps(s["build"], sort_keys=True) for s in topo.doc["services"].values()
              if "build" in s}  # fmt: skip
    assert len(builds) == 1, builds  # one image for every hookaudit service
    image_bin = image_install(json.loads(builds.pop()), tmp)
    print(f"hookaudit image: the Dockerfile's COPY set installed in {image_bin.parent}")
    topo.prepare(tmp, compose.parent / "Dockerfile", image_bin)
    logs = tmp / "logs"
    logs.mkdir()
    started: list[Service] = []
    ran: list[Service] = []  # run to completion: stopped too if the test fails meanwhile
    try:
        for name in topo.order():
            svc = topo.services[name]
            if topo.run_to_completion(name):
                assert svc.spec.get("restart") == "on-failure", svc.spec.get("restart")
                attempts = 0
                while True:  # restart: on-failure (the cluster may still be forming)
                    attempts += 1
                    start(svc, logs)
                    ran.append(svc)
                    assert svc.proc is not None
                    rc = svc.proc.wait(timeout=120)
                    if rc == 0 or attempts == 10:
                        break
                    time.sleep(1.0)
                assert rc == 0, f"{name} failed {attempts} times: {tail(svc)}"
                print(f"{name}: ran to completion (attempt {attempts}): {' '.join(svc.argv[1:])}")
                print("  ", tail(svc).strip().splitlines()[-1])
                continue
            start(svc, logs)
            started.append(svc)
            print(f"{name}: pid {svc.proc.pid if svc.proc else '?'}: {' '.join(svc.argv)}")
            if topo.is_node(svc) and len([s for s in started if topo.is_node(s)]) == 3:
                for node in topo.nodes:  # JetStream up, the meta leader known
                    port = topo.ports[node.spec.get("hostname", node.name)][NODE_PORTS["http"]]
                    wait_http(f"http://127.0.0.1:{port}/healthz", node.name, node)
        serve = topo.services["serve"]
        ip, port = topo.published[8787]
        wait_http(f"http://{ip}:{port}/healthz", "serve", serve)

        # As Claude Code sends them with infra/claude/managed-settings.serve.json.
        managed = json.loads((infra / "claude" / "managed-settings.serve.json").read_text())
        hook = managed["hooks"]["PreToolUse"][0]["hooks"][0]
        agent_env = {"HOOKAUDIT_TOKEN": serve.env["HOOKAUDIT_SERVE_TOKEN"]}
        headers = {k: re.sub(r"\$(\w+)", lambda m: agent_env[m[1]], v)
                   for k, v in hook["headers"].items()}  # fmt: skip
        url = urllib.parse.urlsplit(hook["url"])
        assert url.netloc == topo.published_as[8787], (hook["url"], topo.published_as)
        endpoint = f"http://{ip}:{port}{url.path}"

        def send(body: dict, auth: bool = True) -> dict:
            req = urllib.request.Request(
                endpoint,
                data=json.dumps(body).encode(),
                headers={**(headers if auth else {}), "Content-Type": "application/json"},
            )
            with urllib.request.urlopen(req, timeout=hook["timeout"] + 5) as r:
                assert r.status == 200
                raw = r.read()
            return json.loads(raw) if raw.strip() else {}

        def decision(answer: dict) -> tuple[str, str]:
            out = answer.get("hookSpecificOutput") or {}
            return out.get("permissionDecision", "allow"), out.get("permissionDecisionReason", "")

        session = f"compose-{uuid.uuid4().hex[:8]}"
        # the token is in force: without it, even `ls` is denied (serve fails closed; a 401
        # would be a non-blocking error to Claude Code, and the call would run)
        refused = decision(send(_hook_input(session, "ls", 0), auth=False))
        assert refused[0] == "deny" and "bearer token" in refused[1], refused

        def one_round(first: int) -> tuple[set[str], set[str], Counter[str]]:
            """Hook calls from tool_use id `first` on: (sent, answered by serve's fallback,
            decisions). The workers may still be connecting: serve fails closed until one
            answers, so it waits for a benign call to be allowed (a fallback is a deny)."""
            deadline = time.monotonic() + 60
            i, waited = first, set()
            while True:
                verdict = decision(send(_hook_input(session, "ls -la", i)))
                if verdict[0] == "allow":
                    break
                assert "no decision" in verdict[1], verdict
                assert time.monotonic() < deadline, f"no worker answered: {verdict}"
                waited.add(f"toolu_compose_{i:04d}")
                i += 1
                time.sleep(0.5)
            sent = {f"toolu_compose_{k:04d}" for k in range(first, i + 1)}
            answers: Counter[str] = Counter(allow=1)
            for k in range(i + 1, i + 13):
                bad = k % 2 == 0
                command = "rm -rf /" if bad else f"git status && ls src{k}"
                got, reason = decision(send(_hook_input(session, command, k)))
                sent.add(f"toolu_compose_{k:04d}")
                answers[got] += 1
                if bad:  # the policy's deny, not serve's fallback
                    assert got == "deny" and "rm -rf outside the project" in reason, reason
                else:
                    assert got == "allow", (command, got, reason)
            return sent, waited, answers

        sent, waited, answers = one_round(1)
        print(f"events sent to serve: {len(sent)} ({len(waited)} answered by the fallback"
              f" while the workers connected): decisions {dict(answers)}")  # fmt: skip

        # `docker compose exec worker-1 hookaudit verify` (compose.yaml's header).
        w1 = topo.services["worker-1"]
        deadline = time.monotonic() + 30
        data = w1.host_path(w1.spec["environment"]["HOOKAUDIT_DATA_DIR"])
        while True:
            records = [o for o in iter_outcomes(data) if o.event.tool_use_id in sent]
            logged = Counter(o.event.tool_use_id for o in records)
            if set(logged) == sent or time.monotonic() > deadline:
                break
            time.sleep(0.3)
        assert set(logged) == sent, sorted(sent - set(logged))
        # Each worker opens its own chain (the compose file's --name) on the shared volume.
        chains = sorted(
            svc.spec["command"][svc.spec["command"].index("--name") + 1]
            for svc in topo.services.values()
            if svc.spec.get("command", [None, None])[1] == "worker"
        )
        assert len(chains) == 2, chains
        deadline = time.monotonic() + 60
        while not all((data / "log" / "active" / c).is_dir() for c in chains):
            assert time.monotonic() < deadline, f"chains {chains} not all opened"
            time.sleep(0.3)
        for o in (o for o in records if o.event.tool_use_id not in waited):
            # what the agent got is the policy's, and the log says so
            bad = "rm -rf" in json.loads(o.event.payload)["tool_input"]["command"]
            assert o.decided_by == "policy" and o.blocked == bad, o
        v = subprocess.run([str(image_bin / "hookaudit"), "verify"], env=w1.env, cwd=w1.cwd,
                           capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
        assert v.returncode == 0, v.stdout + v.stderr
        assert w1.env.get("HOOKAUDIT_LOG_KEY"), "the log key of hookaudit.env"
        # The chain heads the workers anchored on the cluster, checked by an operator with the
        # analyst seed setup.sh made, which no service holds (`docker compose run -v
        # ./keys/analyst.nk:… -e HOOKAUDIT_NATS_NKEY=… worker-1 hookaudit verify --anchors`).
        analyst = {
            **w1.env,
            "HOOKAUDIT_NATS_NKEY": str(compose.parent / "keys" / "analyst.nk"),
        }
        a = subprocess.run([str(image_bin / "hookaudit"), "verify", "--anchors"], env=analyst,
                           cwd=w1.cwd, capture_output=True, text=True, timeout=120,
                           check=False)  # fmt: skip
        assert a.returncode == 0, a.stdout + a.stderr
        per_chain = {
            c.name: sum(1 for _ in iter_outcomes(data, worker=c.name))
            for c in sorted((data / "log" / "active").iterdir())
        }
        assert sorted(per_chain) == chains, per_chain
        assert f"in {len(chains)} chain(s) verified" in v.stdout, v.stdout
        print(f"verify (worker-1's env, log key set): {v.stdout.strip()}")
        print(f"verify --anchors (analyst seed): {a.stdout.strip()}")
        print(f"logged: {len(records)} records for {len(sent)} events, all decided by the"
              f" policy; records per chain {per_chain}")  # fmt: skip
        for svc in started:
            assert svc.proc is not None and svc.proc.poll() is None, f"{svc.name}: {tail(svc)}"
    finally:
        for svc in [*reversed(started), *ran]:
            stop(svc)
    print("stopped:", ", ".join(f"{s.name} (rc {s.proc.returncode})" for s in started if s.proc))
