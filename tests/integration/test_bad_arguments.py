"""Every `hookaudit` command, given bad arguments, fails with one line and the documented code.

The commands are enumerated from the click group, so a new command or option is covered
without editing this file. Each case is a real subprocess (`python -m hookaudit …`) in an
empty data dir and an empty HOME, stdin closed. For every case: no traceback and no
"internal error"; a failure is exit 1 (it ran and failed) or 2 (usage), and its last stderr
line is the error, starting with the command's name. Cases marked "must fail" (a bad enum
value, a number that is not one, a negative count, an input file that does not exist, an
output that cannot be written, a bad duration, an unknown option) must not exit 0.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import click
import pytest

from hookaudit.cli import root

REPO = Path(__file__).resolve().parents[2]
POLICY = REPO / "infra" / "policies" / "security.json"

# Commands an agent runs on every tool call: a usage error must not block the agent, so
# with the default --fail open it is reported on stderr and exits 0 (documented in emit).
FAIL_OPEN = {("emit",)}
# Options whose every value of their type is valid (a seed is any integer).
ANY_VALUE = {("demo", "--seed")}
# Inputs given as required arguments so that the option under test is reached.
REQUIRED = {
    "--settings": f"project:{POLICY}",
    "--worker": "w1",
    "--to": "s3://bucket/prefix",
    "--replay-id": "0190c3a2-7b1e-7c3d-9f00-123456789abc",
    "--dir": "keys",
    "--rules": str(REPO / "infra" / "sigma"),
    "statement": "SELECT 1",
    "settings": str(POLICY),
    "name": "denied",
    "role": "emitter",
    "agent": "codex",
}
# Options a command needs before it reaches the one under test, though click cannot require
# them (a group that also runs alone: `siem` forwards, `siem status` reports).
NEEDED = {("siem",): {"--name": "soc", "--to": "-"}}
# Commands that, in an empty data dir, have nothing to connect for: their NATS files are
# never opened (`siem status` with no sink), so a missing one may exit 0 there.
NO_CONNECTION_WHEN_EMPTY = {("siem", "status")}
OUTPUT_NAMES = {"output"}
INPUT_FILES = {
    "policy", "database", "mcp_configs", "creds", "nkey_seed", "event",
    "tls_ca", "tls_cert", "tls_key", "nats_tls_ca", "nats_tls_cert", "nats_tls_key",
}  # fmt: skip


@dataclass(frozen=True)
class Case:
    command: tuple[str, ...]
    args: tuple[str, ...]
    must_fail: bool
    usage: bool = False  # must exit 2

    def __str__(self) -> str:
        return " ".join((*self.command, *(a if len(a) < 60 else a[:20] + "…" for a in self.args)))


def _leaves(
    group: click.Group, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], click.Command]]:
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        assert cmd is not None
        if isinstance(cmd, click.Group):
            if cmd.invoke_without_command:  # it runs alone too, with options of its own
                yield (*path, name), cmd
            yield from _leaves(cmd, (*path, name))
        else:
            yield (*path, name), cmd


def _base(cmd: click.Command, skip: click.Parameter | None, path: tuple[str, ...]) -> list[str]:
    """The required parameters (other than `skip`) filled with valid values."""
    args: list[str] = []
    for opt, value in NEEDED.get(path, {}).items():
        if skip is None or opt not in skip.opts:
            args += [opt, value]
    for p in cmd.params:
        if p is skip:
            continue
        if isinstance(p, click.Argument) and p.name in REQUIRED:
            args.append(REQUIRED[p.name])
        elif isinstance(p, click.Option) and p.required:
            args += [p.opts[0], REQUIRED[p.opts[0]]]
    return args


def _bad_values(path: tuple[str, ...], p: click.Parameter) -> Iterator[tuple[str, bool, bool]]:
    """(value, must_fail, usage) for one parameter, from its type and name."""
    name = p.name or ""
    t = p.type
    if isinstance(t, click.Choice):
        yield "not-a-choice", True, True
    elif isinstance(t, click.types._NumberParamTypeBase):
        if (path[-1], p.opts[0] if p.opts else name) in ANY_VALUE:
            return
        yield "abc", True, True
        yield "-5", True, False
        yield "99999999999999999999", False, False
        if isinstance(t, click.types.FloatParamType):
            yield "nan", True, False
    elif name in OUTPUT_NAMES:
        yield "/nonexistent/dir/out.x", True, False
        yield "", True, False
        yield "/proc/self", True, False  # a directory
    elif name in INPUT_FILES:
        read = path not in NO_CONNECTION_WHEN_EMPTY or not name.startswith("nats_tls")
        yield "/nonexistent/file.json", read, False
        yield "/proc/self", read, False  # a directory
    elif name == "data_dir":
        yield "/proc/nope/x", False, False
        yield "/etc/hostname", False, False  # a file
    elif name in ("since", "until"):
        yield "99999999d", True, False
        yield "not-a-time", True, False
    elif name in ("settings", "settings_specs", "baseline_settings"):
        yield "project:/nonexistent/settings.json", True, False
        yield "nosuchscope:/x.json", True, False
    elif isinstance(t, click.types.StringParamType):
        yield "", False, False


LEAVES = dict(_leaves(root))


def cases(path: tuple[str, ...]) -> list[Case]:
    out: list[Case] = []
    for cmd in [LEAVES[path]]:
        base = _base(cmd, None, path)
        out.append(Case(path, ("--no-such-option", *base), True, True))
        for p in cmd.params:
            if getattr(p, "is_flag", False) or getattr(p, "hidden", False):
                continue
            for value, must_fail, usage in _bad_values(path, p):
                rest = _base(cmd, p, path)
                arg = (value,) if isinstance(p, click.Argument) else (p.opts[0], value)
                out.append(Case(path, (*rest, *arg), must_fail, usage))
    return out


def _run(case: Case, tmp: Path) -> tuple[Case, subprocess.CompletedProcess[str] | None, Path]:
    work = tmp / f"case{abs(hash(case)) % 10**12}"
    (work / "home").mkdir(parents=True)
    (work / "data").mkdir()
    args = list(case.args)
    if not any(a == "--data-dir" for a in args) and _takes(case.command, "--data-dir"):
        args += ["--data-dir", str(work / "data")]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HOOKAUDIT_", "CLAUDE_"))}
    env |= {"HOME": str(work / "home"), "TMPDIR": str(work), "COLUMNS": "100"}
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "hookaudit", *case.command, *args],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            cwd=work,
            env=env,
            timeout=60,
        )
    except subprocess.TimeoutExpired:
        proc = None
    return case, proc, work


def _takes(path: tuple[str, ...], opt: str) -> bool:
    cmd: click.Command | None = root
    for name in path:
        assert isinstance(cmd, click.Group)
        cmd = cmd.get_command(click.Context(cmd), name)
    assert cmd is not None
    return any(opt in p.opts for p in cmd.params)


def _problem(case: Case, proc: subprocess.CompletedProcess[str] | None) -> str | None:
    if proc is None:
        return "hung (60 s)"
    err = proc.stderr
    if "Traceback" in err or "internal error" in err:
        return f"traceback: {err.strip().splitlines()[-1][:300]!r}"
    lines = [line for line in err.splitlines() if line.strip()]
    if proc.returncode == 0 and case.command in FAIL_OPEN:
        if case.usage and not (lines and lines[-1].startswith("hookaudit")):
            return "a usage error ignored without a word on stderr"
        return None
    if proc.returncode == 0:
        return "exit 0 for bad input" if case.must_fail else None
    if proc.returncode not in (1, 2):
        return f"exit {proc.returncode} (documented: 1 failure, 2 usage)"
    if case.usage and proc.returncode != 2:
        return f"exit {proc.returncode} for a usage error (expected 2): {err.strip()!r}"
    if not lines:
        return f"exit {proc.returncode} with nothing on stderr"
    last = lines[-1]
    if not last.startswith("hookaudit"):
        return f"last stderr line is not a hookaudit error: {last[:300]!r}"
    if any(line.startswith(("Usage:", "Try ", "Error:", " ")) for line in lines):
        return f"a multi-line error: {err.strip()[:300]!r}"
    return None


def test_every_command_is_covered() -> None:
    expected = {
        ("replay",), ("query",), ("sql",), ("demo",), ("nats", "up"), ("worker",),
        ("relay",), ("siem",), ("siem", "status"), ("detect",), ("log", "ship"),
        ("log", "prune"), ("log", "seal"), ("replay-join",), ("nats", "keys"),
        ("nats", "creds"), ("lint",), ("spool", "rejects"),
    }  # fmt: skip
    assert expected <= set(LEAVES)
    # every command `hookaudit --help` lists is one of them, or a group of them
    ctx = click.Context(root)
    for name in root.list_commands(ctx):
        assert (name,) in LEAVES or any(p[0] == name for p in LEAVES), name
    assert sum(len(cases(p)) for p in LEAVES) > 100


@pytest.mark.parametrize("path", sorted(LEAVES), ids=" ".join)
def test_bad_arguments_fail_in_one_line(path: tuple[str, ...], tmp_path: Path) -> None:
    all_cases = cases(path)
    problems: list[str] = []
    try:
        with ThreadPoolExecutor(max_workers=4) as pool:
            for case, proc, _work in pool.map(lambda c: _run(c, tmp_path), all_cases):
                why = _problem(case, proc)
                if why is not None:
                    problems.append(f"hookaudit {case}: {why}")
    finally:
        for ndir in tmp_path.glob("*/data/nats"):  # a server a bad case started anyway
            subprocess.run(
                [sys.executable, "-m", "hookaudit", "nats", "down", "--data-dir", str(ndir.parent)],
                capture_output=True,
                timeout=60,
            )
        shutil.rmtree(tmp_path, ignore_errors=True)
    assert not problems, f"{len(problems)} of {len(all_cases)} cases:\n" + "\n".join(problems)


@pytest.mark.parametrize(
    "args",
    [
        ("query", "denied", "--since", "99999999d"),
        ("replay", "--settings", f"project:{POLICY}", "--since", "99999999d"),
    ],
)
def test_absurd_durations_are_one_line(args: tuple[str, ...], tmp_path: Path) -> None:
    case = Case(args[:1], args[1:], True)
    _, proc, _ = _run(case, tmp_path)
    assert _problem(case, proc) is None
    assert proc is not None and "99999999d" in proc.stderr


# Commands that make a data dir on purpose when it is missing (documented in their --help),
# and emit, an agent's hook, whose answer to any failure is its --fail answer.
MAKES_DATA_DIR = {
    ("nats", "up"), ("demo",), ("worker",), ("serve",), ("provision",), ("relay",),
    ("emit",), ("replay-join",), ("nats", "provision"),
}  # fmt: skip


def _reads_data_dir() -> list[tuple[str, ...]]:
    return sorted(p for p in LEAVES if p not in MAKES_DATA_DIR and _takes(p, "--data-dir"))


@pytest.mark.parametrize("path", _reads_data_dir(), ids=" ".join)
def test_a_data_dir_that_does_not_exist_is_an_error_not_an_empty_history(
    path: tuple[str, ...], tmp_path: Path
) -> None:
    """A mistyped --data-dir (or HOOKAUDIT_DATA_DIR) must not read as an empty log (exit 0
    with no rows), and nothing may be made there (siem made the dir and a redaction key).
    (siem, backfill and spool flush given --nats keep their own state there and make it.)"""
    typo = tmp_path / "dta"
    case = Case(path, (*_base(LEAVES[path], None, path), "--data-dir", str(typo)), True)
    _, proc, _ = _run(case, tmp_path)
    assert proc is not None, "hung"
    assert proc.returncode == 1, (proc.returncode, proc.stdout[:300], proc.stderr[-500:])
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and f"{typo}: no such data dir" in lines[0], proc.stderr
    assert lines[0].startswith("hookaudit"), lines
    assert not typo.exists(), f"{typo} was made"
    env_case = Case(path, tuple(_base(LEAVES[path], None, path)), True)
    work = tmp_path / "env"
    (work / "home").mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HOOKAUDIT_", "CLAUDE_"))}
    env |= {"HOME": str(work / "home"), "HOOKAUDIT_DATA_DIR": str(typo)}
    p = subprocess.run([sys.executable, "-m", "hookaudit", *path, *env_case.args],
                       stdin=subprocess.DEVNULL, capture_output=True, text=True, cwd=work,
                       env=env, timeout=60)  # fmt: skip
    assert p.returncode == 1 and f"{typo}: no such data dir" in p.stderr, p.stderr
    assert not typo.exists()
