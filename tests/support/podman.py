"""podman for the tests that run infra/ under a real container runtime (compose, systemd).

`Runtime`: rootful podman with a storage, a network configuration and an API socket of the
test's own (runc; the file and process limits this kernel allows), so no image or container
of the machine's is touched; `runtime` removes everything it made. The base images come from
what install.sh prepared under .cache/compose/ (tests/integration/podman_images.sh): no
registry is reachable here, and the tests reach nothing off this machine.
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from ingest.nats.embedded import find_nats_server

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
CACHE = REPO / ".cache" / "compose"
ROOTFS = CACHE / "debian-rootfs.tar"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Runtime:
    """podman with a storage, networks and an API socket of its own, and docker-compose on it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        for tool in ("podman", "runc", "docker-compose"):
            if shutil.which(tool) is None and not Path("/usr/sbin", tool).exists():
                pytest.fail(f"{tool} is not installed: run ./install.sh (as root)")
        if os.geteuid() != 0:
            pytest.fail("the compose test runs rootful podman: run it as root")
        nofile = resource.getrlimit(resource.RLIMIT_NOFILE)
        nproc = resource.getrlimit(resource.RLIMIT_NPROC)[0]
        pid_max = int(Path("/proc/sys/kernel/pid_max").read_text())
        # podman's defaults (1048576 files) are above what this process may raise them to,
        # and this kernel refuses a process limit above pid_max.
        nproc = min(nproc, pid_max)
        limits = [f"nofile={nofile[0]}:{nofile[1]}", f"nproc={nproc}:{nproc}"]
        (root / "networks").mkdir()
        (root / "containers.conf").write_text(
            "[containers]\n"
            f"default_ulimits = {json.dumps(limits)}\n"
            "[engine]\n"
            'runtime = "runc"\n'  # crun refuses this kernel's hybrid cgroups
            "[network]\n"
            f'network_config_dir = "{root / "networks"}"\n'
        )
        (root / "storage.conf").write_text(
            f'[storage]\ndriver = "overlay"\ngraphroot = "{root / "storage"}"\n'
            f'runroot = "{root / "run"}"\n'
        )
        self.sock = root / "podman.sock"
        self.env = {
            **os.environ,
            "CONTAINERS_CONF": str(root / "containers.conf"),
            "CONTAINERS_STORAGE_CONF": str(root / "storage.conf"),
            "DOCKER_HOST": f"unix://{self.sock}",
            "PATH": f"{BIN}:{os.environ['PATH']}",
        }
        self.service: subprocess.Popen[bytes] | None = None

    def podman(self, *args: str, timeout: float = 300, check: bool = True) -> str:
        p = subprocess.run(["podman", *args], env=self.env, capture_output=True, text=True,
                           timeout=timeout, check=False)  # fmt: skip
        if check:
            assert p.returncode == 0, f"podman {' '.join(args)}: {p.stderr[-2000:]}"
        return p.stdout

    def start_api(self) -> None:
        with (self.root / "podman-service.log").open("ab") as log:
            self.service = subprocess.Popen(
                ["podman", "system", "service", "--time=0", f"unix://{self.sock}"],
                env=self.env, stdout=log, stderr=log, start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + 30
        while True:
            try:
                with socket.socket(socket.AF_UNIX) as s:
                    s.connect(str(self.sock))
                    s.sendall(b"GET /_ping HTTP/1.0\r\nHost: d\r\n\r\n")
                    if b" 200 " in s.recv(200):
                        return
            except OSError:
                pass
            assert self.service.poll() is None, (self.root / "podman-service.log").read_text()
            assert time.monotonic() < deadline, "podman's API did not come up"
            time.sleep(0.2)

    def stop_api(self) -> None:
        if self.service is not None and self.service.poll() is None:
            self.service.send_signal(signal.SIGTERM)
            try:
                self.service.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.service.kill()
                self.service.wait(timeout=10)


@contextlib.contextmanager
def podman_runtime() -> Iterator[Runtime]:
    root = Path(tempfile.mkdtemp(prefix="hookaudit-podman-"))
    rt = Runtime(root)
    try:
        yield rt
    finally:
        rt.stop_api()
        # the test's own storage only: its overlay mounts go before the directory does
        rt.podman("system", "reset", "--force", timeout=120, check=False)
        shutil.rmtree(root, ignore_errors=True)


def stand_in_images(rt: Runtime, nats_image: str, ctx: Path) -> None:
    """The two base images this machine cannot pull, tagged as the compose files name them."""
    rootfs = ROOTFS
    if not rootfs.is_file():
        pytest.fail(f"{rootfs} is missing: run ./install.sh (tests/integration/podman_images.sh)")
    rt.podman("import", "--quiet",
              "--change", "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
              "--change", "ENV LANG=C.UTF-8", "--change", 'CMD ["python3"]',
              str(rootfs), "docker.io/library/python:3.11-slim")  # fmt: skip
    ctx.mkdir()
    shutil.copy(find_nats_server(), ctx / "nats-server")
    # nats:*-alpine's entrypoint runs nats-server with the command when it starts with '-'.
    (ctx / "Containerfile").write_text(
        'FROM scratch\nCOPY nats-server /nats-server\nENTRYPOINT ["/nats-server"]\n'
    )
    name = nats_image if "/" in nats_image else f"docker.io/library/{nats_image}"
    rt.podman("build", "--quiet", "--tag", name, str(ctx))


class Wheelhouse:
    """The wheels of the image's `pip install .`, served on 127.0.0.1 (stopped by PID)."""

    def __init__(self) -> None:
        self.dir = CACHE / "wheelhouse"
        if not (self.dir / ".complete").exists():
            pytest.fail(
                f"{self.dir} is missing: run ./install.sh (tests/integration/podman_images.sh)"
            )
        self.port = free_port()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "http.server", str(self.port), "--bind", "127.0.0.1",
             "--directory", str(self.dir)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        self.url = f"http://127.0.0.1:{self.port}/"
        deadline = time.monotonic() + 20
        while True:
            try:
                with urllib.request.urlopen(self.url, timeout=2):
                    return
            except OSError:
                assert time.monotonic() < deadline, "wheel server not up"
                time.sleep(0.1)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)
