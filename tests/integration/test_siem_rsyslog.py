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

from tests.integration.siem_support import Forwarder, free_port, make_outcomes, publish, wait_for
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
