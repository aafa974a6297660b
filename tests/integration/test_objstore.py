"""Sealed segments shipped to a real S3-compatible server (moto's server mode on loopback),
verified, pruned locally, then queried by DuckDB and replayed from the bucket."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from engine.records import uuid7
from hookaudit.cli import root as main
from ingest.log.layout import segments
from ingest.log.lines import idempotency_key
from ingest.log.verifier import verify
from ingest.log.writer import LogWriter
from queries.db import open_db
from replay.jobs import replay
from replay.request import Policy, Request
from tests.integration.test_log_contract import make
from tests.support.tty import on_tty

BIN = Path(sys.executable).parent
KEYS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1"}  # fmt: skip


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """moto_server on a free loopback port, stopped by PID; yields its endpoint URL."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    log = open(tmp_path_factory.mktemp("moto") / "moto.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen([str(BIN / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
                            stdout=log, stderr=log)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                urllib.request.urlopen(f"{url}/moto-api/", timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None, "moto_server exited"
                time.sleep(0.1)
        else:
            raise AssertionError("moto_server did not start in 30 s")
        yield url
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


@pytest.fixture
def env(s3: str, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    for k, v in KEYS.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("HOOKAUDIT_S3_ENDPOINT", raising=False)
    return dict(KEYS)


def bucket(s3: str, name: str) -> Any:
    import pyarrow.fs as pafs

    host = s3.removeprefix("http://")
    fs = pafs.S3FileSystem(access_key="testing", secret_key="testing", region="us-east-1",
                           endpoint_override=host, scheme="http", allow_bucket_creation=True)  # fmt: skip
    fs.create_dir(name)
    return fs


def write_log(data: Path) -> None:
    """Three sealed segments of 40 records and an active one of 10."""
    with LogWriter.open(data, "w1") as w:
        for k in range(3):
            w.append_batch([make(40 * k + i, "w1") for i in range(40)])
            w.seal()
        w.append_batch([make(120 + i, "w1") for i in range(10)])


QUERY = "SELECT count(*), count(DISTINCT id), sum(blocked::int) FROM outcomes"


def answers(data: Path) -> tuple[Any, ...]:
    con = open_db(data, cache=False)
    try:
        got = con.sql(QUERY).fetchall()[0]
        runs = con.sql("SELECT count(*) FROM hook_runs").fetchall()[0][0]
        denied = con.sql("SELECT id FROM outcomes WHERE decision = 'deny' ORDER BY id").fetchall()
    finally:
        con.close()
    return (*got, runs, len(denied), denied[0][0])


def replayed(data: Path, tmp: Path) -> dict[str, Any]:
    settings = tmp / "settings.json"
    settings.write_text(json.dumps({"hooks": {}}))
    req = Request(str(data), (("project", str(settings)),), uuid7(), policy=Policy(store="none"))
    return replay(req).report


def cli(*args: str) -> Any:
    r = CliRunner().invoke(main, list(args), env=dict(os.environ))
    return r


def test_ship_verify_prune_then_query_and_replay_from_the_bucket(
    s3: str, env: dict[str, str], tmp_path: Path
) -> None:
    data = tmp_path / "data"
    write_log(data)
    fs = bucket(s3, "audit")
    before = answers(data)
    rep_before = replayed(data, tmp_path)
    assert before[:2] == (130, 130) and rep_before["events"] == 130

    r = cli("log", "ship", "--data-dir", str(data), "--to", "s3://audit/prod/h",
            "--endpoint-url", s3)  # fmt: skip
    assert r.exit_code == 0, r.output
    assert "shipping 3 segment(s), 120 records" in r.output  # what is to ship, first
    assert "shipped 3 segment(s) to s3://audit/prod/h" in r.output
    objs = sorted(i.path for i in fs.get_file_info(_selector("audit/prod/h")) if i.is_file)
    assert objs == sorted(
        [f"audit/prod/h/sealed/w1/0000000{n}{s}" for n in (1, 2, 3)
         for s in (".parquet", ".keys", ".runs.parquet")] + ["audit/prod/h/manifest/w1.jsonl"]
    )  # fmt: skip
    again = cli("log", "ship", "--data-dir", str(data), "--to", "s3://audit/prod/h",
                "--endpoint-url", s3)  # fmt: skip
    assert "shipped 0 segment(s)" in again.output  # what is shipped is skipped

    # an object changed in the bucket after shipping: prune refuses, the local copy stays
    good = _get(fs, "audit/prod/h/sealed/w1/00000002.parquet")
    _put(fs, "audit/prod/h/sealed/w1/00000002.parquet", good[:-10] + b"0123456789")
    r = cli("log", "prune", "--shipped", "--data-dir", str(data))
    assert r.exit_code == 1 and "00000002.parquet: object no longer matches" in r.output
    _put(fs, "audit/prod/h/sealed/w1/00000002.parquet", good)

    r = cli("log", "prune", "--shipped", "--data-dir", str(data))
    assert r.exit_code == 0, r.output
    assert "pruned 2 shipped segment(s)" in r.output  # 00000001 went in the refused run
    sealed = data / "log" / "sealed" / "w1"
    assert sorted(p.name for p in sealed.iterdir()) == [f"0000000{n}.keys" for n in (1, 2, 3)]
    segs = segments(data)
    assert [s.location for s in segs if s.kind == "sealed"] == [
        f"s3://audit/prod/h/sealed/w1/0000000{n}.parquet" for n in (1, 2, 3)
    ]

    # a re-delivered event whose record went to the bucket is still answered with it
    first = make(0, "w1")
    key = idempotency_key(first.event.id, first.settings_id, first.replay_id)
    with LogWriter.open(data, "w1") as w:
        again = w.append_batch([first])
        assert again == [] and w.lookup_many([key])[key].seq == 1

    # DuckDB over the bucket, replay from it, verify reading it: the same answers
    assert answers(data) == before
    rep_after = replayed(data, tmp_path)
    assert rep_after["digest"] == rep_before["digest"]
    assert rep_after["events"] == rep_before["events"]
    report = verify(data)
    assert report.ok and report.records == 130, report.errors

    # the bucket rewritten after pruning: verify, reading the objects, names the segment
    _put(fs, "audit/prod/h/sealed/w1/00000003.parquet", good)
    report = verify(data)
    assert not report.ok
    assert any("00000003.parquet" in e.file and e.kind == "edited" for e in report.errors)
    print(f"objstore: 3 segments shipped and read back, 1 rewritten object refused by prune, "
          f"{before[0]} rows queried and {rep_after['events']} replayed from the bucket, "
          "rewritten object caught by verify")  # fmt: skip


def test_a_local_copy_that_differs_from_its_manifest_is_not_shipped(
    s3: str, env: dict[str, str], tmp_path: Path
) -> None:
    data = tmp_path / "data"
    write_log(data)
    fs = bucket(s3, "audit2")
    seg = data / "log" / "sealed" / "w1" / "00000002.parquet"
    raw = bytearray(seg.read_bytes())
    raw[100] ^= 1
    seg.write_bytes(bytes(raw))
    r = cli("log", "ship", "--data-dir", str(data), "--to", "s3://audit2", "--endpoint-url", s3)
    assert r.exit_code == 1
    assert "sealed/w1/00000002.parquet: sha256 does not match manifest/w1.jsonl" in r.output
    shipped = [i.path for i in fs.get_file_info(_selector("audit2")) if i.is_file]
    assert "audit2/sealed/w1/00000002.parquet" not in shipped
    assert "audit2/manifest/w1.jsonl" not in shipped  # the manifest goes last
    r = cli("log", "prune", "--shipped", "--data-dir", str(data))
    assert r.exit_code == 0 and "pruned 1 shipped segment(s)" in r.output
    assert seg.exists()


def test_ship_on_a_terminal_draws_its_progress(
    s3: str, env: dict[str, str], tmp_path: Path
) -> None:
    data = tmp_path / "data"
    write_log(data)
    bucket(s3, "bars")
    argv = [sys.executable, "-m", "hookaudit", "log", "ship", "--data-dir", str(data),
            "--to", "s3://bars", "--endpoint-url", s3]  # fmt: skip
    run = on_tty(argv, env=dict(os.environ))
    assert run.returncode == 0, run.stderr
    drawn = run.stderr.decode()
    assert "shipping 3 segment(s), 120 records" in drawn
    assert "shipping" in drawn and "segments" in drawn, drawn  # the bar: count, rate, time left
    assert "shipped w1 segment" not in drawn  # the bar stands for the per-segment lines
    assert run.stdout.decode().strip() == "shipped 3 segment(s) to s3://bars"


def test_bad_targets_are_one_line_errors(env: dict[str, str], tmp_path: Path) -> None:
    data = tmp_path / "data"
    write_log(data)
    r = cli("log", "ship", "--data-dir", str(data), "--to", "http://x/y")
    assert r.exit_code == 1 and "expected s3://BUCKET[/PREFIX]" in r.output
    for to, endpoint, says in [
        ("s3://b/../x", None, "an empty, '.' or '..' segment"),
        ("s3://b/a/./x", None, "an empty, '.' or '..' segment"),
        ("s3://b/x\r\n", None, "control characters"),
        ("s3://[::1", None, "'s3://[::1': Invalid IPv6 URL"),
        ("s3://b", "http://[::1", "S3 endpoint 'http://[::1': Invalid IPv6 URL"),
    ]:
        extra = ["--endpoint-url", endpoint] if endpoint else []
        r = cli("log", "ship", "--data-dir", str(data), "--to", to, *extra)
        assert r.exit_code == 1 and says in r.output, (to, r.output)
        assert len(r.output.splitlines()) == 1 and "Traceback" not in r.output
    port = _free_port()  # nothing listens there
    r = cli("log", "ship", "--data-dir", str(data), "--to", "s3://b",
            "--endpoint-url", f"http://127.0.0.1:{port}")  # fmt: skip
    assert r.exit_code == 1 and "upload failed" in r.output and "Traceback" not in r.output
    r = cli("log", "prune", "--data-dir", str(data))
    assert r.exit_code == 2 and "--shipped" in r.output


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _selector(base: str) -> Any:
    import pyarrow.fs as pafs

    return pafs.FileSelector(base, recursive=True)


def _get(fs: Any, key: str) -> bytes:
    with fs.open_input_stream(key) as f:
        return bytes(f.read())


def _put(fs: Any, key: str, data: bytes) -> None:
    with fs.open_output_stream(key) as f:
        f.write(data)
