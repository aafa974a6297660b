"""The HTML replay report, rendered by a real browser (headless Chromium).

A log of realistic sessions (`ingest.samples`) is written by the real engine with the
example security policy; a stricter policy is replayed over it with `--format html`; the
page is loaded from disk in headless Chromium (``--dump-dom``, no network, a throwaway
profile) and the DOM its script produced is checked against the JSON report: the numbers
it wrote, the transition matrix, the SVG charts (flips over time, per hook, per user) and
the table of changed events.

Chromium is the Debian package ``chromium`` (``apt-get install -y chromium``). Without it
this test fails, on purpose: the HTML report is only tested by rendering it.
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from engine.records import new_event
from engine.run import Engine
from engine.sources import load_sources
from hookaudit.replay_cmd import replay_cmd
from ingest.log.writer import LogWriter
from ingest.samples import sessions

ROOT = Path(__file__).resolve().parents[2]
POLICY = ROOT / "infra" / "policies" / "security.json"
EXTRA_HOOKS = """
def no_push(event):
    cmd = str((event.get("tool_input") or {}).get("command", ""))
    if cmd.startswith("git push"):
        return {"hookSpecificOutput": {"hookEventName": "PreToolUse",
                "permissionDecision": "deny", "permissionDecisionReason": "pushes need review"}}
    if cmd.startswith("npm "):
        return {"hookSpecificOutput": {"hookEventName": "PreToolUse",
                "permissionDecision": "ask", "permissionDecisionReason": "npm: <confirm> & go"}}
    return None
"""


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    pytest.fail("headless Chromium is needed to test the HTML report: apt-get install -y chromium")


def build_log(tmp: Path) -> Path:
    data = tmp / "data"
    eff = load_sources([("project", str(POLICY))])
    engine = Engine(home=str(tmp))

    async def evaluate() -> list[Any]:
        outs = []
        for raw in sessions(12, seed=5):
            user, host = raw.pop("_user"), raw.pop("_host")
            outs.append(await engine.evaluate(new_event(raw, host=host, user=user), eff))
        return outs

    with LogWriter.open(data, "w1") as w:
        w.append_batch(asyncio.run(evaluate()))
    return data


def render(html: Path, tmp: Path) -> str:
    profile = tmp / "chromium-profile"
    done = subprocess.run(
        [
            chromium(), "--headless", "--no-sandbox", "--disable-gpu",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--no-first-run", "--no-default-browser-check", f"--user-data-dir={profile}",
            "--window-size=1280,2000", "--dump-dom", html.as_uri(),
        ],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def text_of(dom: str, element_id: str) -> str:
    m = re.search(rf'id="{element_id}"[^>]*>([^<]*)<', dom)
    assert m, f"#{element_id} not in the rendered page"
    return m.group(1)


def test_html_report_renders_in_chromium(tmp_path: Path) -> None:
    data = build_log(tmp_path)
    (tmp_path / "extra_hooks.py").write_text(EXTRA_HOOKS)
    extra = tmp_path / "extra.json"
    extra.write_text(json.dumps({"hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [
        {"type": "python", "callable": "extra_hooks.py:no_push"}]}]}}))  # fmt: skip
    args = [
        "--data-dir",
        str(data),
        "--settings",
        f"project:{POLICY}",
        "--settings",
        f"user:{extra}",
    ]
    runner = CliRunner()
    res = runner.invoke(replay_cmd, [*args, "--format", "json", "--store", "none"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.output)
    assert report["changed"] > 0 and report["transitions"]
    page = tmp_path / "report.html"
    res = runner.invoke(replay_cmd, [*args, "--format", "html", "--output", str(page)])
    assert res.exit_code == 0, res.output

    html = page.read_text()
    assert "<script src" not in html and "<link" not in html and "@import" not in html
    assert "default-src 'none'" in html  # the page may not load anything
    assert "npm: <confirm>" not in html  # embedded JSON is escaped for <script>

    dom = render(page, tmp_path)
    assert 'data-rendered="yes"' in dom, "the report script did not finish"
    assert text_of(dom, "kpi-events") == str(report["events"])
    assert text_of(dom, "kpi-changed") == str(report["changed"])
    assert text_of(dom, "kpi-counterfactual") == str(report["counterfactual"])
    sessions_kpi = f"{report['sessions']['changed']} / {report['sessions']['total']}"
    assert text_of(dom, "kpi-sessions") == sessions_kpi
    for transition, count in report["transitions"].items():
        attr = re.escape(transition.replace(">", "&gt;"))  # as the DOM serialises it
        assert re.search(rf'data-transition="{attr}"[^>]*>{count}<', dom), transition
    charts = {
        name: re.search(rf'<svg id="chart-{name}".*?</svg>', dom, re.S)
        for name in ("timeline", "hooks", "users")
    }
    for name, m in charts.items():
        assert m, f"chart {name} missing"
        assert 'class="bar"' in m.group(0), f"chart {name} has no bars"
    bars = re.findall(r'data-value="(\d+)"', charts["timeline"].group(0))  # type: ignore[union-attr]
    assert sum(map(int, bars)) == report["changed"]
    users = re.findall(r'class="bar" data-value="(\d+)"', charts["users"].group(0))  # type: ignore[union-attr]
    assert sum(map(int, users)) == sum(u["changed"] for u in report["by_user"].values())
    table = re.search(r'<table id="changes-table">.*?</table>', dom, re.S)
    assert table and table.group(0).count("<tr") == len(report["changes"]) + 1
    assert "npm: &lt;confirm&gt; &amp; go" in dom or report["transitions"].get("none->ask") is None


def test_html_is_not_dumped_on_a_terminal(tmp_path: Path) -> None:
    """`--format html` without --output on a terminal (a real pseudo-terminal, through
    `script`) is a usage error naming --output, before anything is read; the other tests
    here write the page to a pipe and to a file."""
    import shlex
    import shutil
    import subprocess
    import sys

    assert shutil.which("script"), "util-linux's script missing: install.sh installs util-linux"
    (tmp_path / "d" / "log").mkdir(parents=True)
    cmd = [sys.executable, "-m", "hookaudit", "replay", "--data-dir", str(tmp_path / "d"),
           "--settings", "project:infra/policies/strict.json", "--format", "html"]  # fmt: skip
    tty = subprocess.run(["script", "-qec", shlex.join(cmd), "/dev/null"], capture_output=True,
                         text=True, timeout=60, cwd=Path(__file__).resolve().parents[2])  # fmt: skip
    assert tty.returncode == 2, tty.stdout
    assert "give --output FILE.html" in tty.stdout and "<html" not in tty.stdout.lower()
