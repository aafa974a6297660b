"""The SSRF guard, trying to connect for real, inside a network namespace with no interfaces.

`unshare -rn` gives the child an empty network namespace (only a downed `lo`), so nothing
can leave the machine whatever the guard does. The real `HttpExecutor` runs there against
every published cloud-metadata address, spelled as literals, through IPv6 embeddings and
behind a name that resolves to them. A control URL to a public neighbour address shows
that the executor does try to connect when the guard lets a URL through (it fails with a
transport error instead of `ssrf_blocked_address`), so the test can fail.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

CHILD = r"""
import asyncio, json, sys
from engine.effects import Invocation
from engine.executors.http import HttpExecutor
from engine.records import HookIdentity
from engine.settings import HttpHook

NAMES = {"wireserver.test": ["168.63.129.16"], "imds.test": ["fd00:ec2::254"],
         "mixed.test": ["168.63.129.17", "100.100.100.200"], "public.test": ["168.63.129.17"]}

async def resolver(host, port):
    return NAMES[host]

async def main():
    ex = HttpExecutor(resolver=resolver, environ={})
    out = {}
    for url in json.loads(sys.argv[1]):
        hook = HttpHook(type="http", url=url, timeout=3)
        inv = Invocation(index=0, event="Stop", hook=hook,
            identity=HookIdentity(type="http", source="user", url=url), source="user",
            matcher=None, timeout=3, payload={}, input_json=b"{}", cwd="/")
        res = await ex.run(inv)
        out[url] = [res.error_kind, res.error]
    await ex.aclose()
    print(json.dumps(out))

asyncio.run(main())
"""

HOSTILE = [
    "http://168.63.129.16/machine/?comp=goalstate",  # Azure WireServer
    "http://168.63.129.16:32526/vmSettings",
    "http://2822734096/",  # 168.63.129.16 as one number
    "http://0xa8.0x3f.0x81.0x10/",
    "http://[::ffff:168.63.129.16]/",
    "http://[64:ff9b::a83f:8110]/",  # NAT64
    "http://[2002:a83f:8110::1]/",  # 6to4
    "http://wireserver.test/",
    "http://169.254.169.254/latest/meta-data/",  # AWS, GCP, Azure IMDS, ...
    "http://169.254.170.2/v2/credentials",  # ECS
    "http://169.254.170.23/v1/credentials",  # EKS Pod Identity
    "http://100.100.100.200/latest/meta-data/",  # Alibaba
    "http://169.254.0.23/",  # Tencent
    "http://192.0.0.192/",  # Oracle
    "http://[fd00:ec2::254]/latest/meta-data/",  # AWS IPv6
    "http://imds.test/",
    "http://[fd20:ce::254]/",  # GCP IPv6
    "http://mixed.test/",  # one resolved address is blocked: refused
]
CONTROL = ["http://168.63.129.17/", "http://public.test/"]


@pytest.mark.skipif(sys.platform != "linux", reason="network namespaces are Linux's")
def test_metadata_addresses_blocked_before_connecting_in_an_empty_netns() -> None:
    unshare = shutil.which("unshare")
    assert unshare is not None, "util-linux's unshare is needed (apt-get install util-linux)"
    proc = subprocess.run(
        [unshare, "-rn", sys.executable, "-c", CHILD, json.dumps(HOSTILE + CONTROL)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(proc.stdout)
    refused = [u for u in HOSTILE if seen[u][0] == "ssrf_blocked_address"]
    assert refused == HOSTILE, {u: seen[u] for u in HOSTILE if u not in refused}
    for url in CONTROL:  # let through: the executor tried, and the empty netns stopped it
        assert seen[url][0] not in ("ssrf_blocked_address", None), (url, seen[url])
    print(
        f"ssrf in an empty netns: {len(refused)}/{len(HOSTILE)} metadata URLs refused before "
        f"connecting; {len(CONTROL)} public controls tried to connect and failed: "
        + "; ".join(f"{u} -> {seen[u][0]}" for u in CONTROL)
    )
