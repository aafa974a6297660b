"""The README a new user starts from: its quick start, its links, its size; the docs it
points to.

The quick start promises that `./install.sh --dev` installs every system package the test
command needs and that `install.sh --help` says why each: both are checked against the tests.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()
INSTALL = (REPO / "install.sh").read_text()


def _section(title: str) -> str:
    start = README.index(f"\n## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start : end if end > 0 else None]


def _install_packages() -> list[str]:
    m = re.search(r"^DEBIAN_PACKAGES=\(([^)]*)\)", INSTALL, re.M)
    assert m is not None, "install.sh: no DEBIAN_PACKAGES=(…) line"
    return m.group(1).split()


def _install_provides() -> set[str]:
    m = re.search(r"declare -A PROVIDES=\((.*?)\)\n", INSTALL, re.S)
    assert m is not None, "install.sh: no PROVIDES table"
    values = re.findall(r'\]=("[^"]*"|\S+)', m.group(1))  # one or more, space-separated
    return {w.rsplit("/", 1)[-1] for v in values for w in v.strip('"').split()}


def test_quick_start_is_the_two_commands() -> None:
    quick = _section("Quick start")
    assert "./install.sh && .venv/bin/hookaudit demo" in quick
    assert "./install.sh --dev && .venv/bin/python -m pytest -q" in quick
    ci = (REPO / ".ci" / "run").read_text()
    assert "./install.sh --dev" in ci and ".venv/bin/python -m pytest -q" in ci


def test_install_sh_says_why_each_package() -> None:
    header = INSTALL.split("set -euo pipefail", 1)[0]
    for pkg in _install_packages():
        assert re.search(rf"^#\s+{re.escape(pkg)}\b", header, re.M) or f", {pkg} " in header, pkg


def test_readme_is_short_and_speaks_of_the_software_only() -> None:
    assert len(README.splitlines()) <= 250
    docs = [README, *(p.read_text() for p in (REPO / "docs").rglob("*.md"))]
    for text in docs:
        for word in (r"\bthis session\b(?! id)", r"\bissue \d", r"not met today", r"\bsession \d"):
            assert not re.search(word, text), word


def test_every_tool_a_test_looks_for_is_installed_by_install_sh() -> None:
    wanted: set[str] = set()
    for path in (REPO / "tests").rglob("*.py"):
        if "bench" in path.parts:
            continue
        text = path.read_text()
        wanted |= set(re.findall(r"shutil\.which\(\"([\w.-]+)\"\)", text))
        wanted |= set(re.findall(r"_need\(\"([\w.-]+)\"", text))
        if "RSYSLOGD" in text:
            wanted.add("rsyslogd")
    wanted -= {"hookaudit", "chromium-browser"}  # ours; the other name of chromium
    assert wanted, "no test looks for a system tool: the scan is broken"
    assert wanted <= _install_provides(), sorted(wanted - _install_provides())


def _slug(heading: str) -> str:
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def test_readme_links_stay_inside_the_repository_and_resolve() -> None:
    anchors = {_slug(h) for h in re.findall(r"^#+ (.+)$", README, re.M)}
    links = re.findall(r"\]\(([^)\s]+)\)", README)
    assert links
    for target in links:
        assert not target.startswith(("http://", "https://")), f"a link outside: {target}"
        if target.startswith("#"):
            assert target[1:] in anchors, f"no heading for {target}"
        else:
            assert (REPO / target.split("#", 1)[0]).exists(), f"{target}: no such file"
    # the protocol the engine reproduces is documented here, for users, and linked
    assert "docs/hooks-protocol.md" in links


def test_operating_section_covers_the_first_day() -> None:
    text = (REPO / "docs" / "guides" / "operations.md").read_text()
    start = text.index("\n## Operating hookaudit\n")
    end = text.find("\n## ", start + 1)
    ops = text[start : end if end > 0 else None]
    for part in ("Start", "Restart", "Upgrade", "Backup", "Monitor"):
        assert f"**{part}.**" in ops, part
    assert "hookaudit verify" in ops and "nats status" in ops and "spool status" in ops
