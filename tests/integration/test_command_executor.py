"""CommandExecutor against real subprocesses: exit codes, I/O, environment, kills, async.

"Nothing is left running" is checked on the process group. PID 1 in a container often
does not reap orphans, so a killed grandchild can stay a zombie forever and still
answer ``killpg(pgid, 0)``; `group_alive` therefore ignores zombies (state Z in /proc).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from engine.effects import Invocation, RawResult
from engine.executors.command import CommandExecutor
from engine.records import HookIdentity
from engine.settings import CommandHook

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX process groups")

INPUT = b'{"hook_event_name":"PreToolUse","tool_name":"Bash","tool_input":{"command":"ls"}}'


def make_inv(
    command: str,
    *,
    args: list[str] | None = None,
    shell: str | None = None,
    input_json: bytes = INPUT,
    timeout: float = 10.0,
    cwd: str | None = None,
    env: dict[str, str] | None = None,
    plugin_root: str | None = None,
    plugin_data: str | None = None,
    is_async: bool = False,
    rewake: bool = False,
) -> Invocation:
    raw: dict[str, Any] = {"type": "command", "command": command}
    if is_async:
        raw["async"] = True
    if rewake:
        raw["asyncRewake"] = True
    if args is not None:
        raw["args"] = args
    if shell is not None:
        raw["shell"] = shell
    hook = CommandHook.model_validate(raw)
    return Invocation(
        index=0,
        event="PreToolUse",
        hook=hook,
        identity=HookIdentity(type="command", source="user", command=command, args=args),
        source="user",
        matcher="Bash",
        timeout=timeout,
        payload=json.loads(input_json) if input_json.startswith(b"{") else {},
        input_json=input_json,
        cwd=cwd if cwd is not None else os.getcwd(),
        env=env or {},
        plugin_root=plugin_root,
        plugin_data=plugin_data,
    )


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


async def wait_gone(pgid: int, within: float = 3.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not group_alive(pgid):
            return True
        await asyncio.sleep(0.02)
    return not group_alive(pgid)


# --- exit codes, stdin, environment --------------------------------------------------


@pytest.mark.parametrize("code", [0, 1, 2])
async def test_exit_codes(code: int) -> None:
    cmd = f"cat >/dev/null; echo out; echo err >&2; exit {code}"
    res = await CommandExecutor().run(make_inv(cmd))
    assert (res.exit_code, res.stdout, res.stderr) == (code, "out\n", "err\n")
    assert res.error_kind is None and res.error is None and not res.pending
    assert res.duration_ms > 0


async def test_missing_command_is_127_not_an_executor_error() -> None:
    res = await CommandExecutor().run(make_inv("no-such-command-hookaudit-xyz"))
    assert res.exit_code == 127 and res.error_kind is None
    assert "not found" in res.stderr


async def test_runs_under_sh_not_user_shell() -> None:
    ex = CommandExecutor(base_env={**os.environ, "SHELL": "/bin/false"})
    res = await ex.run(make_inv('echo "$0"'))
    assert res.stdout == "/bin/sh\n"


async def test_stdin_is_the_json_verbatim_plus_newline(tmp_path: Path) -> None:
    out = tmp_path / "stdin.bin"
    data = b'{"hook_event_name":"Stop","text":"caf\xc3\xa9 \\u00e9 \\n"}'
    res = await CommandExecutor().run(
        make_inv('cat > "$OUT"', input_json=data, env={"OUT": str(out)})
    )
    assert res.exit_code == 0
    assert out.read_bytes() == data + b"\n"


async def test_environment_merges_inv_env_and_drops_otel() -> None:
    base = {"PATH": os.environ["PATH"], "KEEP": "1", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://x"}
    ex = CommandExecutor(base_env=base)
    res = await ex.run(make_inv("env", env={"CLAUDE_PROJECT_DIR": "/proj", "KEEP": "2"}))
    lines = set(res.stdout.splitlines())
    assert "CLAUDE_PROJECT_DIR=/proj" in lines
    assert "KEEP=2" in lines
    assert not any(line.startswith("OTEL_") for line in lines)


async def test_shell_prefix_wraps_shell_form() -> None:
    ex = CommandExecutor(shell_prefix="echo PREFIX")
    res = await ex.run(make_inv("exit 3"))
    assert (res.exit_code, res.stdout) == (0, "PREFIX exit 3\n")


async def test_exec_form_passes_args_verbatim() -> None:
    res = await CommandExecutor().run(make_inv("printf", args=["%s|", "a b", "$HOME", "*", "'q'"]))
    assert (res.exit_code, res.stdout) == (0, "a b|$HOME|*|'q'|")


# --- plugin placeholders -------------------------------------------------------------


async def test_plugin_vars_substituted_in_command_and_args(tmp_path: Path) -> None:
    root, data = tmp_path / "plugin", tmp_path / "data"
    root.mkdir()
    script = root / "hook.sh"
    script.write_text('#!/bin/sh\necho "ran $1"\n')
    script.chmod(0o755)
    ex = CommandExecutor()
    shell = await ex.run(
        make_inv("${CLAUDE_PLUGIN_ROOT}/hook.sh x", plugin_root=str(root), plugin_data=str(data))
    )
    assert (shell.exit_code, shell.stdout) == (0, "ran x\n")
    exec_ = await ex.run(
        make_inv(
            "${CLAUDE_PLUGIN_ROOT}/hook.sh",
            args=["${CLAUDE_PLUGIN_DATA}/f"],
            plugin_root=str(root),
            plugin_data=str(data),
        )
    )
    assert exec_.stdout == f"ran {data}/f\n"


async def test_plugin_var_outside_plugin_is_an_error_before_spawning(tmp_path: Path) -> None:
    res = await CommandExecutor().run(make_inv("${CLAUDE_PLUGIN_ROOT}/hook.sh"))
    assert res.error_kind == "plugin_var_outside_plugin"
    assert res.exit_code is None and "CLAUDE_PLUGIN_ROOT" in (res.error or "")
    # A skill hook has a root but no data directory.
    res = await CommandExecutor().run(
        make_inv("echo ${CLAUDE_PLUGIN_DATA}", plugin_root=str(tmp_path))
    )
    assert res.error_kind == "plugin_var_outside_plugin"


async def test_missing_plugin_root_is_an_error_not_exit_2(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    res = await CommandExecutor().run(
        make_inv(f"touch {marker}; exit 2", plugin_root=str(tmp_path / "gone"))
    )
    assert res.error_kind == "plugin_root_missing" and res.exit_code is None
    assert not marker.exists()


# --- working directory ---------------------------------------------------------------


async def test_runs_in_event_cwd_when_it_exists(tmp_path: Path) -> None:
    res = await CommandExecutor(workdir="/").run(make_inv("cat >/dev/null; pwd", cwd=str(tmp_path)))
    assert res.stdout.strip() == str(tmp_path) and res.error is None


async def test_cwd_falls_back_to_workdir_then_process_cwd(tmp_path: Path) -> None:
    inv = make_inv("pwd", cwd="/nonexistent/other-host/project")
    res = await CommandExecutor(workdir=str(tmp_path)).run(inv)
    assert res.stdout.strip() == str(tmp_path) and res.exit_code == 0
    assert "does not exist here" in (res.error or "")
    res = await CommandExecutor().run(inv)
    assert res.stdout.strip() == os.getcwd()


# --- output --------------------------------------------------------------------------


async def test_large_output_is_capped_and_counted() -> None:
    res = await CommandExecutor().run(make_inv("head -c 10000000 /dev/zero | tr '\\0' x"))
    assert res.exit_code == 0
    assert res.stdout == "x" * (1 << 20)
    assert res.stdout_bytes == 10_000_000 and res.truncated


async def test_small_cap_applies_per_stream() -> None:
    res = await CommandExecutor(output_cap=4).run(make_inv("printf 123456; printf ab >&2"))
    assert (res.stdout, res.stdout_bytes, res.stderr, res.stderr_bytes) == ("1234", 6, "ab", 2)
    assert res.truncated


async def test_binary_output_decodes_with_replacement() -> None:
    res = await CommandExecutor().run(make_inv("printf '\\377\\376abc\\000'"))
    assert res.stdout == "\ufffd\ufffdabc\x00" and res.stdout_bytes == 6


async def test_killed_by_signal_counts_as_exit_1() -> None:
    res = await CommandExecutor().run(make_inv("kill -KILL $$"))
    assert res.exit_code == 1 and res.error_kind is None
    assert "SIGKILL" in (res.error or "") and "-9" in (res.error or "")


# --- spawn failures ------------------------------------------------------------------


async def test_exec_form_missing_or_not_executable_is_spawn_failed(tmp_path: Path) -> None:
    res = await CommandExecutor().run(make_inv(str(tmp_path / "missing"), args=[]))
    assert res.error_kind == "spawn_failed" and "missing" in (res.error or "")
    script = tmp_path / "noexec.sh"
    script.write_text("#!/bin/sh\nexit 0\n")
    res = await CommandExecutor().run(make_inv(str(script), args=[]))
    assert res.error_kind == "spawn_failed" and "ermission" in (res.error or "")


async def test_powershell_without_pwsh_is_spawn_failed(tmp_path: Path) -> None:
    ex = CommandExecutor(base_env={"PATH": str(tmp_path)})
    res = await ex.run(make_inv("Write-Output hi", shell="powershell"))
    assert res.error_kind == "spawn_failed" and "pwsh not found" in (res.error or "")


# --- stopping hooks ------------------------------------------------------------------


async def test_timeout_kills_the_group() -> None:
    # a hook that would sleep for 1000 s: the answer is the timeout, and its group is gone
    res = await CommandExecutor(grace=1.0).run(make_inv("echo $$; sleep 1000", timeout=0.3))
    assert res.error_kind == "timeout" and res.exit_code is None
    assert "timed out after 0.3 s" in (res.error or "")
    assert await wait_gone(int(res.stdout))


async def test_hook_ignoring_sigterm_is_sigkilled_after_grace() -> None:
    t0 = time.perf_counter()
    res = await CommandExecutor(grace=0.4).run(
        make_inv("trap '' TERM; echo $$; sleep 100", timeout=0.3)
    )
    elapsed = time.perf_counter() - t0
    assert res.error_kind == "timeout" and "SIGKILLed after 0.4 s grace" in (res.error or "")
    assert elapsed >= 0.7  # the timeout, then the whole grace: never killed early
    assert await wait_gone(int(res.stdout))


async def test_sigterm_trap_gets_to_run_within_grace(tmp_path: Path) -> None:
    done = tmp_path / "cleanup"
    cmd = f"trap 'echo cleaned > {done}; exit 0' TERM; sleep 100 & wait"
    res = await CommandExecutor(grace=2.0).run(make_inv(cmd, timeout=0.3))
    assert res.error_kind == "timeout"
    assert done.read_text() == "cleaned\n"


async def test_child_holding_stdout_does_not_hang() -> None:
    # the child keeps stdout open for 100 s: the answer comes, and the child is killed
    res = await CommandExecutor(drain_window=0.3).run(
        make_inv("sleep 100 & echo hi; echo $$ >&2; exit 0")
    )
    assert (res.exit_code, res.stdout, res.error_kind) == (0, "hi\n", None)
    assert "process group killed" in (res.error or "")
    assert await wait_gone(int(res.stderr))


async def test_hook_exiting_without_reading_stdin() -> None:
    big = b'{"x":"' + b"a" * (1 << 20) + b'"}'
    res = await CommandExecutor().run(make_inv("exit 0", input_json=big))
    assert res.exit_code == 0 and res.error_kind is None
    assert "EPIPE" in (res.error or "")


async def test_cancellation_kills_the_group(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    task = asyncio.create_task(
        CommandExecutor().run(make_inv('echo $$ > "$P"; sleep 100', env={"P": str(pid_file)}))
    )
    for _ in range(200):
        if pid_file.exists() and pid_file.read_text().strip():
            break
        await asyncio.sleep(0.01)
    pgid = int(pid_file.read_text())
    assert group_alive(pgid)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await wait_gone(pgid)


async def test_parallel_hooks_run_concurrently(tmp_path: Path) -> None:
    # a barrier: each hook says it started, then waits until all four have; run one at a
    # time, the first would wait alone until its own deadline and fail
    ex = CommandExecutor()
    cmd = (
        'touch "$D/{i}"; n=0; while [ "$(ls "$D" | wc -l)" -lt 4 ]; do'
        " n=$((n+1)); [ $n -gt 3000 ] && exit 1; sleep 0.01; done; echo {i}"
    )
    invs = [make_inv(cmd.format(i=i), env={"D": str(tmp_path)}, timeout=60) for i in range(4)]
    results = await asyncio.gather(*(ex.run(inv) for inv in invs))
    assert [(r.exit_code, r.stdout) for r in results] == [(0, f"{i}\n") for i in range(4)]


# --- async hooks ---------------------------------------------------------------------


async def test_self_declared_async_returns_pending_then_delivers(tmp_path: Path) -> None:
    # the hook cannot finish before the test opens its gate: the answer came first
    ex = CommandExecutor()
    gate = tmp_path / "gate"
    cmd = (
        'echo \'{"async": true}\'; while [ ! -e "$G" ]; do sleep 0.01; done;'
        ' echo \'{"systemMessage":"later"}\'; exit 0'
    )
    res = await ex.run(make_inv(cmd, env={"G": str(gate)}))
    assert res.pending and res.stdout == '{"async": true}' and res.exit_code is None
    assert ex.registry.pending() == 1
    assert await ex.registry.drain() == []
    gate.touch()
    done = await ex.registry.drain(timeout=None)
    assert ex.registry.pending() == 0
    [(inv, final)] = done
    assert inv.hook.command == cmd
    assert (final.exit_code, final.stdout, final.pending) == (
        0,
        '{"systemMessage":"later"}\n',
        False,
    )
    assert final.stdout_bytes == len(final.stdout)
    assert await ex.registry.drain(timeout=None) == []


async def test_self_declared_async_timeout_is_enforced() -> None:
    ex = CommandExecutor(grace=0.2)
    res = await ex.run(
        make_inv('echo \'{"async":true,"asyncTimeout":300}\'; echo $$ >&2; sleep 100')
    )
    assert res.pending
    [(_, final)] = await ex.registry.drain(timeout=60)
    assert final.error_kind == "timeout" and "0.3 s" in (final.error or "")
    assert await wait_gone(int(final.stderr))


async def test_first_line_that_is_not_async_is_a_normal_answer() -> None:
    res = await CommandExecutor().run(make_inv('echo \'{"async": false, "x": 1}\'; sleep 0.1'))
    assert not res.pending and res.exit_code == 0


async def test_config_async_returns_after_stdin_and_delivers(tmp_path: Path) -> None:
    out = tmp_path / "in.json"
    ex = CommandExecutor()
    gate = tmp_path / "gate"
    cmd = 'cat > "$OUT"; while [ ! -e "$G" ]; do sleep 0.01; done; echo done'
    inv = make_inv(cmd, env={"OUT": str(out), "G": str(gate)}, is_async=True)
    res = await ex.run(inv)
    assert res.pending  # the hook cannot finish before the gate opens: the answer came first
    gate.touch()
    [(_, final)] = await ex.registry.drain(timeout=None)
    assert (final.exit_code, final.stdout) == (0, "done\n")
    assert out.read_bytes() == INPUT + b"\n"


async def test_config_async_limit_is_the_hook_timeout() -> None:
    ex = CommandExecutor(grace=0.2)
    res = await ex.run(make_inv("echo $$; sleep 100", timeout=0.3, rewake=True))
    assert res.pending
    [(_, final)] = await ex.registry.drain(timeout=5)
    assert final.error_kind == "timeout"
    assert await wait_gone(int(final.stdout))


async def test_registry_aclose_stops_background_hooks() -> None:
    ex = CommandExecutor(grace=0.2)
    for _ in range(2):
        assert (await ex.run(make_inv("echo $$; sleep 100", is_async=True))).pending
    await asyncio.sleep(0.1)
    await ex.aclose()
    assert ex.registry.pending() == 0
    finals = await ex.registry.drain()
    assert [r.error_kind for _, r in finals] == ["cancelled", "cancelled"]
    for _, r in finals:
        assert await wait_gone(int(r.stdout))


async def test_result_is_a_rawresult() -> None:
    assert isinstance(await CommandExecutor().run(make_inv("true")), RawResult)
