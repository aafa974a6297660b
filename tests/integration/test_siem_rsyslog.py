"""Syslog delivery to a real rsyslog (Debian package `rsyslog`, TLS through `rsyslog-gnutls`)
started by the test on free loopback ports, over TCP and TLS with certificates made here."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.siem import Forwarder, free_port, make_outcomes, publish
from tests.support.waiting import wait_for
from tests.unit.test_siem_formats import ocsf_errors, parse_cef

pytestmark = pytest.mark.slow

RSYSLOGD = shutil.which("rsyslogd") or "/usr/sbin/rsyslogd"
# The message is written with the fields rsyslog parsed out of it, so a message it could not
# read as RFC 5424 (no MSGID, no structured data) shows.
_LINE = re.compile(
    r'^(?P<msgid>\S+) \[hookaudit@32473 eventId="(?P<id>[^"]+)" seq="(?P<seq>\d+)" '
    r'uid="(?P<uid>[^"]+)"\] \ufeff(?P<msg>.*)$'
)


@dataclass
class Rsyslog:
    tcp: int
    tls: int
    out: Path
    ca: Path
    proc: subprocess.Popen[bytes]

    def messages(self) -> list[dict[str, str]]:
        if not self.out.exists():
            return []
        rows = []
        for line in self.out.read_text("utf-8").splitlines():
            m = _LINE.match(line)
            assert m, f"rsyslog wrote a message it did not parse as ours: {line[:200]!r}"
            rows.append(m.groupdict())
        return rows


@pytest.fixture
def rsyslog(tmp_path: Path) -> Iterator[Rsyslog]:
    assert Path(RSYSLOGD).exists(), "rsyslogd missing: install.sh installs rsyslog"
    d = tmp_path / "rsyslog"
    d.mkdir()
    key, cert = d / "key.pem", d / "cert.pem"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            str(key),
            "-out",
            str(cert),
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
            "-addext",
            "subjectAltName=IP:127.0.0.1,DNS:localhost",
        ],
        check=True,
        capture_output=True,
    )
    tcp, tls, out = free_port(), free_port(), d / "out.log"
    conf = d / "rsyslog.conf"
    conf.write_text(f"""
global(workDirectory="{d}" maxMessageSize="2m"
       defaultNetstreamDriverCAFile="{cert}" defaultNetstreamDriverCertFile="{cert}"
       defaultNetstreamDriverKeyFile="{key}")
module(load="imtcp" maxSessions="50")
input(type="imtcp" address="127.0.0.1" port="{tcp}" ruleset="out")
input(type="imtcp" address="127.0.0.1" port="{tls}" ruleset="out" streamDriver.name="gtls"
      streamDriver.mode="1" streamDriver.authMode="anon")
template(name="raw" type="string" string="%msgid% %structured-data% %msg%\\n")
ruleset(name="out") {{ action(type="omfile" file="{out}" template="raw") }}
""")
    log = (d / "rsyslogd.out").open("wb")
    proc = subprocess.Popen(
        [RSYSLOGD, "-n", "-f", str(conf), "-i", str(d / "pid")],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:

        def listening() -> bool:
            import socket

            for port in (tcp, tls):
                with socket.socket() as s:
                    if s.connect_ex(("127.0.0.1", port)) != 0:
                        return False
            return True

        wait_for(listening, timeout=20, what="rsyslog listening")
        yield Rsyslog(tcp=tcp, tls=tls, out=out, ca=cert, proc=proc)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


async def test_cef_over_tcp_one_octet_counted_rfc5424_message_per_outcome(
    nats_server: Any, nc: Any, names: Any, tmp_path: Path, rsyslog: Rsyslog
) -> None:
    outcomes = make_outcomes(40)
    await publish(nc, names, outcomes)
    fwd = Forwarder(
        nats_server.url,
        names,
        tmp_path / "d",
        "--name",
        "t",
        "--format",
        "cef",
        "--to",
        f"syslog+tcp://127.0.0.1:{rsyslog.tcp}",
    ).start()
    wait_for(lambda: len(rsyslog.messages()) >= 40, what="40 messages in rsyslog")
    time.sleep(0.5)
    fwd.stop()
    msgs = rsyslog.messages()
    assert len(msgs) == 40
    assert [m["id"] for m in msgs] == [o.event.id for o in outcomes]
    assert [int(m["seq"]) for m in msgs] == list(range(1, 41))
    for m, o in zip(msgs, outcomes, strict=True):
        assert m["msgid"] == "PreToolUse"
        cef = parse_cef(m["msg"])
        assert cef["header"][:3] == ["CEF:0", "hookaudit", "hookaudit"]
        assert cef["ext"]["externalId"] == o.event.id
        assert cef["header"][6] == ("7" if o.blocked else "1")


async def test_ocsf_over_tls_and_hostile_values_bounded(
    nats_server: Any, nc: Any, names: Any, tmp_path: Path, rsyslog: Rsyslog
) -> None:
    outcomes = make_outcomes(20, hostile=True)  # 1 MiB commands, CR/LF, |, =, \, non-UTF-8
    await publish(nc, names, outcomes)
    fwd = Forwarder(
        nats_server.url,
        names,
        tmp_path / "d",
        "--name",
        "tls",
        "--format",
        "ocsf",
        "--to",
        f"syslog+tls://127.0.0.1:{rsyslog.tls}",
        "--tls-ca",
        str(rsyslog.ca),
    ).start()
    denials = sum(o.blocked for o in outcomes)
    wait_for(lambda: len(rsyslog.messages()) >= 20 + denials, what="OCSF records over TLS")
    time.sleep(0.5)
    fwd.stop()
    msgs = rsyslog.messages()
    assert len(msgs) == 20 + denials
    seen: Counter[str] = Counter()
    for m in msgs:
        rec = json.loads(m["msg"])
        assert ocsf_errors(rec) == []
        assert rec["metadata"]["uid"] == m["uid"]
        assert len(m["msg"].encode()) < 64 * 1024
        seen[rec["metadata"]["original_event_uid"]] += 1
    assert set(seen) == {o.event.id for o in outcomes}
    hostile = [json.loads(m["msg"]) for m in msgs if int(m["seq"]) == 1]
    assert hostile[0]["metadata"]["is_truncated"] is True
    assert hostile[0]["process"]["cmd_line"].startswith('a|b=c\\d\r\nx]"?ZZZ')


async def test_tls_with_an_unknown_ca_is_refused_and_retried(
    nats_server: Any, nc: Any, names: Any, tmp_path: Path, rsyslog: Rsyslog
) -> None:
    await publish(nc, names, make_outcomes(3))
    fwd = Forwarder(
        nats_server.url,
        names,
        tmp_path / "d",
        "--name",
        "badca",
        "--format",
        "cef",
        "--to",
        f"syslog+tls://127.0.0.1:{rsyslog.tls}",
    ).start()  # system CAs only
    wait_for(
        lambda: (
            (tmp_path / "d/siem/badca/status.json").exists()
            and fwd.status()["sinks"][0]["failed"] >= 1
        ),
        what="a failed TLS handshake",
    )
    s = fwd.status()["sinks"][0]
    fwd.stop()
    assert s["sent"] == 0 and s["lag"] == 3 and "CERTIFICATE_VERIFY_FAILED" in s["last_error"]
    assert rsyslog.messages() == []


# -- RELP: acknowledged syslog (Debian's rsyslog-relp: imrelp) -------------------------------

_RELP_CONF = """
global(workDirectory="{d}" maxMessageSize="2m")
module(load="imrelp")
input(type="imrelp" address="127.0.0.1" port="{port}" ruleset="out")
input(type="imrelp" address="127.0.0.1" port="{tls}" ruleset="out" tls="on"
      tls.cacert="{cert}" tls.mycert="{cert}" tls.myprivkey="{key}" tls.authmode="certvalid")
template(name="raw" type="string" string="%msgid% %structured-data% %msg%\\n")
# Direct: the file is written before imrelp acknowledges the message (a memory queue would
# acknowledge what a SIGKILL then loses: that is the receiver's durability, not the wire's)
ruleset(name="out" queue.type="Direct") {{
  action(type="omfile" file="{out}" template="raw" flushOnTXEnd="on" asyncWriting="off")
}}
"""


class Relp:
    def __init__(self, d: Path) -> None:
        self.d, self.port, self.tls = d, free_port(), free_port()
        self.out = d / "out.log"
        self.key, self.cert = d / "key.pem", d / "cert.pem"
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
                        str(self.key), "-out", str(self.cert), "-days", "1", "-subj",
                        "/CN=localhost", "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"],
                       check=True, capture_output=True)  # fmt: skip
        conf = d / "rsyslog.conf"
        conf.write_text(_RELP_CONF.format(d=d, port=self.port, tls=self.tls, out=self.out,
                                          cert=self.cert, key=self.key))  # fmt: skip
        self.conf = conf
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.logs: list[Any] = []

    def start(self) -> None:
        self.starts += 1
        log = (self.d / f"rsyslogd.{self.starts}.out").open("wb")
        self.logs.append(log)
        self.proc = subprocess.Popen(
            [RSYSLOGD, "-n", "-f", str(self.conf), "-i", str(self.d / "pid")],
            stdout=log,
            stderr=subprocess.STDOUT,
        )

        def listening() -> bool:
            import socket

            for port in (self.port, self.tls):
                with socket.socket() as s:
                    if s.connect_ex(("127.0.0.1", port)) != 0:
                        return False
            return True

        wait_for(listening, timeout=20, what="rsyslog imrelp listening")

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()
        (self.d / "pid").unlink(missing_ok=True)

    def uids(self) -> Counter[str]:
        if not self.out.exists():
            return Counter()
        text = self.out.read_text("utf-8", "replace")
        return Counter(re.findall(r'uid="([^"]+)"', text))


@pytest.fixture
def relp(tmp_path: Path) -> Iterator[Relp]:
    assert Path(RSYSLOGD).exists(), "rsyslogd missing: install.sh installs rsyslog"
    mods = list(Path("/usr/lib").glob("*/rsyslog/imrelp.so"))
    assert mods, "rsyslog's imrelp missing: install.sh installs rsyslog-relp"
    d = tmp_path / "relp"
    d.mkdir()
    r = Relp(d)
    r.start()
    try:
        yield r
    finally:
        if r.proc is not None and r.proc.poll() is None:
            r.proc.terminate()
            try:
                r.proc.wait(10)
            except subprocess.TimeoutExpired:
                r.proc.kill()
                r.proc.wait()
        for log in r.logs:
            log.close()


@pytest.mark.parametrize("proto", ["tcp", "tls"])
async def test_relp_to_a_receiver_killed_mid_stream_loses_nothing(
    nats_server: Any, nc: Any, names: Any, tmp_path: Path, relp: Relp, proto: str
) -> None:
    """rsyslog (imrelp) is SIGKILLed twice while records stream to it over RELP and started
    again: every record arrives (each counts only once rsyslog acknowledged it); duplicates
    (taken but not acknowledged before the kill) are counted and printed. With plain TCP
    syslog the records the kernel had taken when the receiver died are lost."""
    n = 3000
    outcomes = make_outcomes(n)
    await publish(nc, names, outcomes)
    port = relp.port if proto == "tcp" else relp.tls
    # imrelp with tls.authmode certvalid wants a client certificate: the same one, which
    # its CA file (itself) signs
    tls = ["--tls-ca", str(relp.cert), "--tls-cert", str(relp.cert), "--tls-key", str(relp.key)]
    args = tls if proto == "tls" else []
    fwd = Forwarder(nats_server.url, names, tmp_path / "d", "--name", "relp", "--format", "cef",
                    "--to", f"relp+{proto}://127.0.0.1:{port}", "--batch", "100",
                    *args).start()  # fmt: skip
    try:
        for cut in (n // 4, n // 2):
            wait_for(lambda cut=cut: len(relp.uids()) >= cut, what=f"{cut} records in rsyslog")
            relp.kill()
            time.sleep(1.0)
            relp.start()
        wait_for(lambda: len(relp.uids()) >= n, timeout=120, what=f"all {n} records")
        time.sleep(0.5)
        s = fwd.status()["sinks"][0]
    finally:
        rc, err = fwd.stop()
    assert rc == 0, err
    got = relp.uids()
    want = {f"{o.event.id}" for o in outcomes}
    ids = {re.search(r'eventId="([^"]+)"', line)[1]  # type: ignore[index]
           for line in relp.out.read_text().splitlines() if "eventId" in line}  # fmt: skip
    missing = want - ids
    dupes = sum(c - 1 for c in got.values())
    print(f"relp+{proto}: {n} published, 2 kills, {len(missing)} missing, {dupes} duplicates")
    assert not missing, f"{len(missing)} records lost"
    assert s["parked"] == 0 and s["failed"] >= 1, s
    assert "no acknowledgement" in (s["last_error"] or "") or "cannot connect" in (
        s["last_error"] or ""
    ), s
