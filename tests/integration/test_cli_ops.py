"""The first hour at the command line: the demo, output files, replay filters, CSV.

Real subprocesses over a real log (a two-session demo), as a new user runs them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
STRICT = REPO / "infra" / "policies" / "strict.json"


def run(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("HOOKAUDIT_")}
    return subprocess.run(
        [sys.executable, "-m", "hookaudit", *args],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        cwd=cwd,
        env=base | (env or {}),
        timeout=120,
    )


@pytest.fixture(scope="module")
def demo_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    d = tmp_path_factory.mktemp("demo") / "data"
    proc = run("demo", "--data-dir", str(d), "--sessions", "2")
    assert proc.returncode == 0, proc.stderr
    return d


def test_demo_prints_a_runnable_path_and_the_export(demo_dir: Path, tmp_path: Path) -> None:
    d = tmp_path / "fresh"
    proc = run("demo", "--data-dir", str(d), "--sessions", "1")
    assert proc.returncode == 0, proc.stderr
    assert f"export HOOKAUDIT_DATA_DIR={d}" in proc.stdout
    # the progress line's total ("published n/~total") is what the sessions hold; a denied
    # tool cuts the rest of its turn, so a few fewer are published, never more
    import re

    from hookaudit.demo_cmd import _expected_events

    m = re.search(r"(\d+) events published", proc.stdout)
    assert m is not None, proc.stdout
    total = _expected_events(1, 7)
    assert 0.8 * total <= int(m.group(1)) <= total
    tries = [ln.strip() for ln in proc.stdout.splitlines() if " query denied" in ln]
    assert tries, proc.stdout
    # run as `python -m hookaudit`, the printed command is that, not a bare `hookaudit`
    assert tries[0].startswith(f"{sys.executable} -m hookaudit"), tries[0]
    # and the "try:" lines run as printed, in a shell with no HOOKAUDIT_ variable set
    block = proc.stdout.split("; try:\n", 1)[1]
    lines = [ln.strip() for ln in block.splitlines() if ln.startswith("  ")]
    assert len(lines) >= 3 and lines[0].startswith("export HOOKAUDIT_DATA_DIR="), block
    base = {k: v for k, v in os.environ.items() if not k.startswith("HOOKAUDIT_")}
    shell = subprocess.run(
        ["bash", "-euc", "\n".join(lines)],
        capture_output=True, text=True, cwd=tmp_path, env=base, timeout=300,
    )  # fmt: skip
    assert shell.returncode == 0, shell.stderr
    assert "decision" in shell.stdout and (tmp_path / "replay.html").is_file()


def test_demo_refuses_a_data_dir_with_a_log(demo_dir: Path) -> None:
    before = sorted(p.name for p in (demo_dir / "log" / "active").rglob("*"))
    proc = run("demo", "--data-dir", str(demo_dir), "--sessions", "1")
    assert proc.returncode == 1
    assert proc.stderr.count("\n") == 1 and "holds a log" in proc.stderr, proc.stderr
    assert sorted(p.name for p in (demo_dir / "log" / "active").rglob("*")) == before


def test_demo_refuses_a_running_server_and_leaves_it_running(tmp_path: Path) -> None:
    d = tmp_path / "live"
    up = run("nats", "up", "--data-dir", str(d))
    assert up.returncode == 0, up.stderr
    try:
        pid = json.loads(up.stdout)["pid"]
        proc = run("demo", "--data-dir", str(d), "--sessions", "1")
        assert proc.returncode == 1
        assert f"pid {pid}" in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
        os.kill(pid, 0)  # still running
    finally:
        run("nats", "down", "--data-dir", str(d))


def test_demo_data_dir_that_cannot_be_made_is_one_line() -> None:
    proc = run("demo", "--data-dir", "/proc/nope")
    assert proc.returncode == 1
    assert (
        proc.stderr.startswith("hookaudit demo: --data-dir /proc/nope")
        and proc.stderr.count("\n") == 1
    )


def test_sql_database_is_never_created(demo_dir: Path, tmp_path: Path) -> None:
    db = tmp_path / "nope.duckdb"
    proc = run("sql", "--data-dir", str(demo_dir), "--database", str(db), "SELECT 1 AS x")
    assert proc.returncode == 1 and "no such DuckDB file" in proc.stderr
    assert not db.exists()


def test_sql_database_given_is_not_modified(demo_dir: Path, tmp_path: Path) -> None:
    import duckdb

    db = tmp_path / "mine.duckdb"
    con = duckdb.connect(str(db))
    con.execute("CREATE TABLE t AS SELECT 42 AS x")
    con.close()
    before = db.read_bytes()
    proc = run(
        "sql", "--data-dir", str(demo_dir), "--database", str(db),
        "SELECT count(*) AS n FROM outcomes", "--format", "json",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)[0]["n"] > 0
    assert db.read_bytes() == before


def test_csv_lines_end_with_lf(demo_dir: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "hookaudit", "sql", "--data-dir", str(demo_dir),
         "SELECT decision, count(*) AS n FROM outcomes GROUP BY 1 ORDER BY 1", "--format", "csv"],
        capture_output=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert b"\r" not in proc.stdout
    assert proc.stdout.startswith(b"decision,n\n")


@pytest.mark.parametrize(
    ("args", "code", "says"),
    [
        (("--event", "NotAnEvent"), 2, "unknown event 'NotAnEvent' (known: "),
        (("--since", "2026-03-02", "--until", "2026-03-01"), 2, "the window is empty"),
        (("--since", "99999999d"), 2, "reaches back before the year 1"),
        (("--format", "html", "--output", "/nonexistent/x.html"), 1, "/nonexistent does not exist"),
    ],
)
def test_replay_refuses_before_running(
    demo_dir: Path, args: tuple[str, ...], code: int, says: str
) -> None:
    replays = demo_dir / "replays"
    before = sorted(replays.iterdir()) if replays.exists() else []
    proc = run("replay", "--data-dir", str(demo_dir), "--settings", f"project:{STRICT}", *args)
    assert proc.returncode == code, proc.stderr
    assert says in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
    assert (sorted(replays.iterdir()) if replays.exists() else []) == before  # nothing ran


def test_replay_selecting_nothing_says_why(demo_dir: Path) -> None:
    proc = run(
        "replay", "--data-dir", str(demo_dir), "--settings", f"project:{STRICT}",
        "--session", "no-such-session", "--format", "json",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "no event selected" in proc.stderr and "--session no-such-session" in proc.stderr
    assert json.loads(proc.stdout)["selected"] == 0


@pytest.mark.parametrize("cmd", [("query", "denied"), ("sql", "SELECT 1 AS x")])
def test_unwritable_output_is_refused_before_the_query(
    demo_dir: Path, cmd: tuple[str, ...]
) -> None:
    for fmt in ("csv", "parquet"):
        proc = run(*cmd, "--data-dir", str(demo_dir), "--format", fmt, "-o", "/nonexistent/x.out")
        assert proc.returncode == 1
        assert (
            proc.stderr == "hookaudit: /nonexistent/x.out: directory /nonexistent does not exist\n"
        )


def test_worker_stops_on_sigterm_while_nats_is_down(tmp_path: Path) -> None:
    import signal
    import time

    d = tmp_path / "w"
    assert run("nats", "up", "--data-dir", str(d)).returncode == 0
    policy = REPO / "infra" / "policies" / "security.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("HOOKAUDIT_")}
    worker = subprocess.Popen(
        [sys.executable, "-m", "hookaudit", "worker", "--data-dir", str(d),
         "--settings", f"project:{policy}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not (d / "log").exists() and time.monotonic() < deadline:  # the worker is up
            time.sleep(0.1)
        time.sleep(1.0)
    finally:
        run("nats", "down", "--data-dir", str(d))
    time.sleep(1.0)
    worker.send_signal(signal.SIGTERM)
    _, err = worker.communicate(timeout=60)
    assert worker.returncode == 0, err
    assert "Traceback" not in err and "internal error" not in err, err
    assert json.loads(err.strip().splitlines()[-1])["events"] == 0


BAD_SETTINGS = {
    "hook": {"PreToolUse": []},
    "hooks": {
        "PreToolUse": [
            {
                "matcher": "Bash",
                "hooks": [
                    {"type": "command", "command": "true", "if": "Bash(curl *"},
                    {"type": "command", "command": "true", "if": "garbage !!"},
                    {"type": "comand", "command": "true"},
                    {"type": "python", "callable": "missing.py:guard"},
                ],
            }
        ]
    },
}


def test_lint_reports_each_gate_that_would_vanish(tmp_path: Path) -> None:
    bad = tmp_path / "settings.json"
    bad.write_text(json.dumps(BAD_SETTINGS))
    proc = run("lint", str(bad), f"project:{STRICT}")
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()
    assert [ln.rsplit("[", 1)[1] for ln in lines] == [
        "unknown-key]", "bad-if]", "bad-if]", "unknown-type]", "python-missing]",
    ]  # fmt: skip
    assert lines[1].startswith(f"{bad}: hooks.PreToolUse[0].hooks[0].if: ")
    clean = run("lint", f"project:{STRICT}")
    assert clean.returncode == 0 and clean.stdout.startswith("ok: 1 file(s)")
    as_json = run("lint", str(bad), "--format", "json")
    assert {f["kind"] for f in json.loads(as_json.stdout)} >= {"bad-if", "unknown-type"}


def test_strict_refuses_to_start_eval_replay_and_worker(tmp_path: Path, demo_dir: Path) -> None:
    bad = tmp_path / "settings.json"
    bad.write_text(json.dumps(BAD_SETTINGS))
    event = json.dumps({"hook_event_name": "Stop", "session_id": "s", "cwd": str(tmp_path)})
    ev = tmp_path / "event.json"
    ev.write_text(event)
    for args in (
        ("eval", "--strict", "--settings", f"project:{bad}", "--event", str(ev)),
        ("replay", "--strict", "--data-dir", str(demo_dir), "--settings", f"project:{bad}"),
        ("worker", "--strict", "--data-dir", str(tmp_path / "w"), "--settings", f"project:{bad}"),
    ):
        proc = run(*args)
        assert proc.returncode == 1, (args, proc.stderr)
        assert proc.stderr.splitlines()[-1].endswith(
            "5 lint finding(s) in the settings; refusing to start"
        )
        assert "hooks.PreToolUse[0].hooks[1].if" in proc.stderr
        assert "Traceback" not in proc.stderr
    # without --strict, eval still runs the same settings (Claude Code would)
    assert (
        run("eval", "--lenient", "--settings", f"project:{bad}", "--event", str(ev)).returncode == 0
    )
    assert (
        run("eval", "--strict", "--settings", f"project:{STRICT}", "--event", str(ev)).returncode
        == 0
    )


def test_html_report_header_removed_hooks_and_fit(demo_dir: Path, tmp_path: Path) -> None:
    """Rendered in headless Chromium: a readable policy line, removed hooks said so,
    unique hook labels, and a changed-events table no wider than its card."""
    import re
    import shutil

    page = tmp_path / "r.html"
    proc = run(
        "replay", "--data-dir", str(demo_dir), "--settings", f"project:{STRICT}",
        "--store", "none", "--format", "html", "--output", str(page),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    assert browser, "headless Chromium is needed: apt-get install -y chromium"
    probe = page.read_text().replace(
        'document.body.setAttribute("data-rendered", "yes");',
        'document.body.setAttribute("data-rendered", "yes");'
        'var c = document.getElementById("changes"), t = document.getElementById("changes-table");'
        'document.body.setAttribute("data-fit", t && t.getBoundingClientRect().right <= '
        'c.closest("section").getBoundingClientRect().right ? "yes" : "no");',
    )
    page.write_text(probe)
    done = subprocess.run(
        [browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
         "--disable-background-networking", f"--user-data-dir={tmp_path / 'profile'}",
         "--window-size=1000,2000", "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    dom = done.stdout
    assert 'data-rendered="yes"' in dom, done.stderr[-1000:]
    assert 'data-fit="yes"' in dom
    meta = re.search(r'id="meta"[^>]*>([^<]*)<', dom)
    assert meta is not None
    assert "{" not in meta.group(1) and "new command hooks sandboxed" in meta.group(1)
    assert 'data-side="removed"' in dom and "removed (only in the baseline)" in dom
    data = json.loads(
        re.search(r'id="report-data">(.*?)</script>', page.read_text(), re.S).group(1)  # type: ignore[union-attr]
    )
    labels = list(data["hook_labels"].values())
    assert len(labels) == len(set(labels)) == len(data["by_hook"])


def test_replay_progress_has_a_total(demo_dir: Path) -> None:
    from replay.jobs import log_total

    lines = sum(p.read_bytes().count(b"\n") for p in (demo_dir / "log" / "active").rglob("*.jsonl"))
    assert log_total(demo_dir) == lines > 0
