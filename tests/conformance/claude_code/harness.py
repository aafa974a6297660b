"""Run one scenario against the real Claude Code and against hookaudit, and compare.

A scenario is settings (per source) + scripted hook behaviours + scripted model turns. Three
runs make one verdict:

1. `original`: Claude Code with the scenario's hooks. Every hook is `hook.py DIR LABEL`, which
   logs the hook input Claude Code sent it.
2. `eval`: `hookaudit eval --format json` on every hook input Claude Code produced, with the
   same settings files: it must run exactly the hooks Claude Code ran.
3. `wrapped`: Claude Code whose only hooks are one `hookaudit eval --format claude` per event,
   over the original settings: the model, the user and the file system must see exactly what
   they saw in run 1.

What is compared (an `Observation`): which hooks ran per event occurrence, what each model
request was told (the newest user turn: tool results, hook context, prompts), what reached
the user (stream-json result and notices), and the files the session left in the project.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
HOOK = HERE / "hook.py"
PINNED = (HERE / "PINNED").read_text().strip()
HOOKAUDIT = [str(REPO / ".venv" / "bin" / "hookaudit")]
if not Path(HOOKAUDIT[0]).exists():
    HOOKAUDIT = [sys.executable, "-m", "hookaudit"]

sys.path.insert(0, str(HERE))
import mock_api  # noqa: E402

SCOPES = ("user", "project", "local", "flag", "managed")
# Claude Code 2.1.332 reads managed settings from this path only (its override hook is
# compiled out): a scenario with a "managed" source writes it for the length of its runs,
# holding MANAGED_LOCK exclusively; every other scenario holds it shared, so no run of this
# harness, in any process, sees another scenario's managed file.
MANAGED = Path("/etc/claude-code/managed-settings.json")
MANAGED_LOCK = Path(tempfile.gettempdir()) / "hookaudit-conformance-managed.lock"


def claude_bin(version: str = PINNED) -> Path:
    """The installed binary of `version`; raises with the install command when missing."""
    b = HERE / ".cc" / version / "node_modules" / ".bin" / "claude"
    if not b.exists():
        raise FileNotFoundError(
            f"Claude Code {version} is not installed: run "
            f"tests/conformance/claude_code/install.sh {version}"
        )
    return b


@dataclass
class Scenario:
    """One case. `sources` maps a scope to its settings object (or raw text, for broken files).

    Inside settings, the string `{HOOK:label}` becomes the command of a logging hook and
    `{ROOT}` the run directory. `behaviours` say what each label answers.
    """

    name: str
    sources: dict[str, Any]
    turns: list[dict[str, Any]]
    behaviours: dict[str, dict[str, Any]] = field(default_factory=dict)
    prompt: str = "go"
    args: list[str] = field(default_factory=list)
    deviation: str | None = None
    #: the observations a documented deviation may differ in ("eval", "decision", "ran",
    #: "told", "user", "files"); a difference anywhere else is a mismatch
    deviates: tuple[str, ...] = ()
    fast: bool = False
    files: dict[str, str] = field(default_factory=dict)
    wrap: bool = True
    lenient: bool = False
    note: str = ""
    #: label -> what the loopback HTTP hook server answers at /hook/<label> (`http_hooks`);
    #: a scenario with any gets one server for all its runs, `{HTTP}` in settings is its port.
    http: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: extra environment for Claude Code and hookaudit (header interpolation)
    env: dict[str, str] = field(default_factory=dict)


@dataclass
class Arm:
    root: Path
    stream: list[dict[str, Any]]
    requests: list[dict[str, Any]]
    hooklog: list[dict[str, Any]]
    files: dict[str, str]
    rc: int
    stderr: str


def _subst(obj: Any, root: Path) -> Any:
    if isinstance(obj, str):
        obj = re.sub(
            r"\{HOOK:([A-Za-z0-9_.-]+)\}",
            lambda m: f"python3 {HOOK} {root} {m.group(1)}",
            obj,
        )
        return obj.replace("{ROOT}", str(root)).replace("{HTTP}", str(_HTTP_PORT.get(root, 0)))
    if isinstance(obj, list):
        return [_subst(x, root) for x in obj]
    if isinstance(obj, dict):
        return {k: _subst(v, root) for k, v in obj.items()}
    return obj


# The port of the scenario's HTTP hook server, by run directory (`{HTTP}` in settings).
_HTTP_PORT: dict[Path, int] = {}


def _paths(root: Path) -> dict[str, Path]:
    return {
        "user": root / "home" / ".claude" / "settings.json",
        "project": root / "proj" / ".claude" / "settings.json",
        "local": root / "proj" / ".claude" / "settings.local.json",
        "flag": root / "flag-settings.json",
        "managed": root / "managed-settings.json",  # a copy; Claude Code reads MANAGED
    }


def _write_sources(root: Path, sources: dict[str, Any]) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for scope, content in sources.items():
        p = _paths(root)[scope]
        p.parent.mkdir(parents=True, exist_ok=True)
        text = content if isinstance(content, str) else json.dumps(_subst(content, root), indent=1)
        if isinstance(content, str):
            text = _subst(content, root)
        p.write_text(text)
        out[scope] = p
    return out


def _env(root: Path, port: int, extra: dict[str, str] | None = None) -> dict[str, str]:
    return {
        **(extra or {}),
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(root / "home"),
        "CLAUDE_CONFIG_DIR": str(root / "home" / ".claude"),
        "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{port}",
        "ANTHROPIC_API_KEY": "dummy",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_AUTOUPDATER": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "CONFORM_LOG": str(root / "hooks.jsonl"),
        "LANG": "C.UTF-8",
    }


def run_claude(sc: Scenario, root: Path, sources: dict[str, Any], binary: Path) -> Arm:
    """Run Claude Code once in a fresh HOME and project under `root`."""
    (root / "home" / ".claude").mkdir(parents=True, exist_ok=True)
    proj = root / "proj"
    (proj / ".claude").mkdir(parents=True, exist_ok=True)
    (root / "behaviours").mkdir(exist_ok=True)
    for label, b in sc.behaviours.items():
        (root / "behaviours" / f"{label}.json").write_text(json.dumps(_subst(b, root)))
    for rel, text in sc.files.items():
        (proj / rel).parent.mkdir(parents=True, exist_ok=True)
        (proj / rel).write_text(_subst(text, root))
    written = _write_sources(root, sources)
    record = root / "requests.jsonl"
    record.touch()
    server, _ = mock_api.serve(_subst(sc.turns, root), record)
    made_dir = False
    if "managed" in written:
        made_dir = not MANAGED.parent.exists()
        MANAGED.parent.mkdir(parents=True, exist_ok=True)
        MANAGED.write_text(written["managed"].read_text())
    try:
        args = [
            str(binary),
            "-p",
            sc.prompt,
            "--output-format",
            "stream-json",
            "--verbose",
            "--include-hook-events",
            *(_subst(sc.args, root)),
        ]
        if "flag" in written:
            args += ["--settings", str(written["flag"])]
        try:
            p = subprocess.run(
                args,
                cwd=proj,
                env=_env(root, server.server_address[1], sc.env),
                capture_output=True,
                text=True,
                timeout=180,
                stdin=subprocess.DEVNULL,
            )
            rc, out, err = p.returncode, p.stdout, p.stderr
        except subprocess.TimeoutExpired as exc:
            rc, out, err = (
                -9,
                (exc.stdout or b"").decode()
                if isinstance(exc.stdout, bytes)
                else (exc.stdout or ""),
                "timeout",
            )
    finally:
        server.shutdown()
        server.server_close()
        if "managed" in written:
            MANAGED.unlink(missing_ok=True)
            if made_dir:
                with contextlib.suppress(OSError):
                    MANAGED.parent.rmdir()
    (root / "stream.jsonl").write_text(out)
    (root / "stderr.txt").write_text(err)
    stream = []
    for line in out.splitlines():
        try:
            stream.append(json.loads(line))
        except ValueError:
            stream.append({"_text": line})
    return Arm(root, stream, _jsonl(record), _jsonl(root / "hooks.jsonl"), _tree(proj), rc, err)


def _jsonl(p: Path) -> list[dict[str, Any]]:
    if not p.exists():
        return []
    out = []
    for line in p.read_text().splitlines():
        with contextlib.suppress(ValueError):
            out.append(json.loads(line))
    return out


def _tree(proj: Path) -> dict[str, str]:
    out = {}
    for p in sorted(proj.rglob("*")):
        if p.is_file() and ".claude" not in p.relative_to(proj).parts:
            try:
                out[str(p.relative_to(proj))] = p.read_text()[:2000]
            except (OSError, UnicodeDecodeError):
                out[str(p.relative_to(proj))] = "<binary>"
    return out


# ---- the HTTP hook server --------------------------------------------------------------


def http_hooks(behaviours: dict[str, dict[str, Any]], base: Path) -> Any:
    """A loopback server for `http` hooks at /hook/<label>, started on a free port.

    Each POST is logged like hook.py logs (`{"label", "input"}`) to the hooks.jsonl of the run
    whose project the input's `cwd` names; the answer is the label's behaviour: `status`
    (200), `body` (str, default empty), `sleep` (s), `echo_header` (a header name: the body is
    then a PreToolUse additionalContext naming that header's value).
    """
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("content-length") or 0))
            try:
                data: Any = json.loads(raw)
            except ValueError:
                data = raw.decode("utf-8", "replace")
            label = self.path.rsplit("/", 1)[-1]
            cwd = Path(str(data.get("cwd", ""))) if isinstance(data, dict) else Path("/")
            root = cwd.parent if base in cwd.parents else base
            name = "hooks.jsonl"
            entry = {"label": label, "input": data, "headers": dict(self.headers.items())}
            with (root / name).open("a", encoding="utf-8") as f:
                f.write(json.dumps(entry) + "\n")
            b = behaviours.get(label, {})
            if b.get("sleep"):
                time.sleep(float(b["sleep"]))
            body = str(b.get("body", ""))
            if b.get("echo_header"):
                value = self.headers.get(str(b["echo_header"]), "<absent>")
                body = json.dumps(
                    {
                        "hookSpecificOutput": {
                            "hookEventName": "PreToolUse",
                            "additionalContext": f"HEADER={value}",
                        }
                    }
                )
            out = body.encode()
            try:
                self.send_response(int(b.get("status", 200)))
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)
            except OSError:
                pass  # the hook timed out and its caller went away

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _http_counts(root: Path) -> dict[str, int]:
    """How many requests the HTTP hook server logged per label in this run directory."""
    counts: dict[str, int] = {}
    for e in _jsonl(root / "hooks.jsonl"):
        if "headers" in e:
            counts[str(e.get("label"))] = counts.get(str(e.get("label")), 0) + 1
    return counts


# ---- observation ------------------------------------------------------------------------

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def _norm(text: str, root: Path) -> str:
    text = text.replace(str(root), "$ROOT")
    text = text.replace(re.sub(r"[^A-Za-z0-9]", "-", str(root / "proj")), "$MROOT")
    text = _UUID.sub("$UUID", text)
    # Claude Code names a saved over-long hook output after a hash of the hook (its command:
    # the stand-in's, in the wrapped run), e.g. hook-<id>-PreToolUse-<32 hex>-additionalContext
    text = re.sub(r"-[0-9a-f]{32}-([A-Za-z]+\.txt)\b", r"-$HOOKHASH-\1", text)
    text = re.sub(r"python3 \S*hook\.py \$ROOT ", "hook:", text)
    text = re.sub(r"\b\d+(\.\d+)?m?s\b", "$DUR", text)
    # A hook's message names the hook's command; in the wrapped run that is hookaudit's.
    text = re.sub(r"hook error: \[[^\]\n]*\]: ", "hook error: ", text)
    text = re.sub(r'(blocking error from command:? )"[^"\n]*"', r'\1"$CMD"', text)
    text = re.sub(r'("\$CMD": )\[(hook:|/)[^\]\n]*\]: ', r"\1", text)
    text = re.sub(r"\b20\d\d-\d\d-\d\d\b", "$DATE", text)
    text = re.sub(r"(?m)^\[(python3 |/|MOCKVERDICT)[^\]\n]*\]: ", "", text)
    text = re.sub(r"(?m)^\[hook:[^\]\n]*\]: ", "", text)
    text = re.sub(r"\b(task|run|hook|agent)_id\": \"[^\"]*\"", r'\1_id": "$ID"', text)
    text = re.sub(r"\b(agentId|agent_id|task_id)[:=] ?[0-9a-z-]{6,}", r"\1:$ID", text)
    text = re.sub(r"\ba[0-9a-f]{16}\b", "$AGENT", text)
    text = re.sub(r"\b(duration_ms|subagent_tokens): \d+", r"\1: 0", text)
    text = re.sub(
        r"\"(end_time|start_time|duration_ms|duration_api_ms|retry_delay_ms)\": \d+",
        r'"\1": 0',
        text,
    )
    return text


def _norm_obj(obj: Any, root: Path) -> Any:
    if isinstance(obj, str):
        return _norm(obj, root)
    if isinstance(obj, list):
        return [_norm_obj(x, root) for x in obj]
    if isinstance(obj, dict):
        return {k: _norm_obj(v, root) for k, v in obj.items()}
    return obj


def _blocks(content: Any, root: Path) -> list[Any]:
    if isinstance(content, str):
        return [_norm(content, root)]
    out: list[Any] = []
    for b in content or []:
        if not isinstance(b, dict):
            continue
        t = b.get("type")
        if t == "text":
            out.append(_norm(b.get("text", ""), root))
        elif t == "tool_result":
            c = b.get("content")
            if isinstance(c, list):
                c = "\n".join(x.get("text", "") for x in c if isinstance(x, dict))
            out.append(
                {
                    "tool_result": _norm(str(c or ""), root),
                    "is_error": bool(b.get("is_error")),
                    "id": b.get("tool_use_id"),
                }
            )
        elif t == "tool_use":
            out.append(
                {
                    "tool_use": b.get("name"),
                    "input": json.loads(_norm(json.dumps(b.get("input")), root)),
                }
            )
    return out


def told(arm: Arm) -> list[list[Any]]:
    """For each scripted model request: what was new in its conversation since the last one."""
    out = []
    seen = 0
    for r in arm.requests:
        k = str(r.get("kind", ""))
        if not (k.startswith("turn") or k == "done"):
            continue
        msgs = r["body"].get("messages") or []
        if len(msgs) < seen:
            seen = 0  # a new conversation (a subagent, or after compaction)
        new = msgs[max(seen - 1, 0) :] if seen else msgs
        seen = len(msgs)
        # The user turns, and the system notes Claude Code puts between them (a JSON Stop
        # block adds one; an exit 2 block does not).
        blocks = [
            b if m.get("role") == "user" else {"system": b}
            for m in new
            if m.get("role") in ("user", "system")
            for b in _blocks(m.get("content"), arm.root)
            if not (isinstance(b, str) and b.startswith("The date has changed."))
        ]
        # Results of parallel tool calls arrive in the order the tools finished.
        results = sorted(
            (b for b in blocks if isinstance(b, dict) and "tool_result" in b),
            key=lambda b: str(b["id"]),
        )
        it = iter(results)
        out.append([next(it) if isinstance(b, dict) and "tool_result" in b else b for b in blocks])
    return out


# Per-hook progress and rendering events: a wrapped run has other hooks by construction.
_SYSTEM_SKIP = {
    "hook_started",
    "hook_response",
    "hook_progress",
    "init",
    "status",
    "compact_boundary",
    "ui_invalidate",
}


def user_view(arm: Arm) -> dict[str, Any]:
    """What the user of `claude -p` saw: the result record and the notices of the stream."""
    notices = []
    result: dict[str, Any] = {}
    for e in arm.stream:
        if e.get("type") == "system" and e.get("subtype") not in _SYSTEM_SKIP:
            d = {k: v for k, v in e.items() if k not in ("uuid", "session_id", "timestamp")}
            notices.append(_norm_obj(json.loads(_norm(json.dumps(d), arm.root)), arm.root))
        if e.get("type") == "result":
            result = {
                "subtype": e.get("subtype"),
                "is_error": e.get("is_error"),
                "result": _norm(str(e.get("result", "")), arm.root),
                "num_turns": e.get("num_turns"),
                "stop_reason": e.get("stop_reason"),
            }
    # One hook's systemMessage is one notice; several hooks' are several notices in the order
    # they finished. Compare the lines shown, in sorted order.
    says = sorted(
        line
        for n in notices
        if n.get("subtype") == "informational" and "says:" in str(n.get("content", ""))
        for line in str(n["content"]).splitlines()
    )
    notices = [
        n
        for n in notices
        if not (n.get("subtype") == "informational" and "says:" in str(n.get("content", "")))
    ]
    return {"result": result, "notices": notices, "says": says, "rc": arm.rc}


def occurrences(arm: Arm) -> list[dict[str, Any]]:
    """Hook runs grouped by the hook input they were given (one group per event occurrence)."""
    groups: list[dict[str, Any]] = []
    for e in arm.hooklog:
        inp = e["input"]
        key = json.dumps(inp, sort_keys=True)
        for g in groups:
            # The same input again after a label already ran on it is a new occurrence.
            if g["key"] == key and e["label"] not in g["labels"]:
                g["labels"].append(e["label"])
                break
        else:
            groups.append({"key": key, "input": inp, "labels": [e["label"]]})
    for g in groups:
        g["labels"].sort()
    return groups


def ran(arm: Arm) -> list[tuple[str, list[str]]]:
    return [
        (
            str(g["input"].get("hook_event_name")) if isinstance(g["input"], dict) else "?",
            g["labels"],
        )
        for g in occurrences(arm)
    ]


def observe(arm: Arm) -> dict[str, Any]:
    return {"ran": ran(arm), "told": told(arm), "user": user_view(arm), "files": arm.files}


# ---- hookaudit sides --------------------------------------------------------------------


def _specs(written: dict[str, Path]) -> list[str]:
    out = []
    for scope in SCOPES:
        if scope in written:
            out += ["--settings", f"{scope}:{written[scope]}"]
    return out


def eval_side(sc: Scenario, arm: Arm, sources: dict[str, Any]) -> list[dict[str, Any]]:
    """`hookaudit eval` on every input Claude Code produced; which hooks it ran."""
    written = {s: p for s, p in _paths(arm.root).items() if s in sources}
    res = []
    for g in occurrences(arm):
        if not isinstance(g["input"], dict):
            continue
        env = dict(_env(arm.root, 9, sc.env), CONFORM_LOG=str(arm.root / "eval-hooks.jsonl"))
        env["CLAUDE_PROJECT_DIR"] = str(arm.root / "proj")  # as Claude Code sets it for hooks
        cmd = [*HOOKAUDIT, "eval", "--format", "json", *_specs(written)]
        if sc.lenient:
            cmd.append("--lenient")
        before = _http_counts(arm.root)
        p = subprocess.run(
            cmd,
            input=json.dumps(g["input"]),
            capture_output=True,
            text=True,
            env=env,
            cwd=arm.root / "proj",
            timeout=120,
        )
        after = _http_counts(arm.root)
        # An http hook ran when the loopback server saw it (a refused URL never gets there).
        reached = {k for k, n in after.items() if n > before.get(k, 0)}
        try:
            doc = json.loads(p.stdout)
        except ValueError:
            doc = {"_error": (p.stderr or p.stdout).strip()[:500]}
        labels = sorted(
            m.group(1)
            for h in doc.get("hooks", [])
            if h.get("outcome") != "skipped"
            for m in [
                re.search(r"hook\.py \S+ (\S+)", str(h.get("command") or ""))
                or re.search(r"/hook/([A-Za-z0-9_.-]+)$", str(h.get("url") or ""))
            ]
            if m and (h.get("url") is None or m.group(1) in reached)
        )
        res.append(
            {
                "event": g["input"].get("hook_event_name"),
                "claude": g["labels"],
                "hookaudit": labels,
                "decision": {
                    k: doc.get(k)
                    for k in (
                        "blocked",
                        "decision",
                        "reason",
                        "updated_input",
                        "additional_context",
                        "system_messages",
                        "continue",
                        "stop_reason",
                        "errors",
                        "_error",
                    )
                },
            }
        )
    return res


def _events_of(sources: dict[str, Any]) -> list[str]:
    evs: list[str] = []
    for content in sources.values():
        if isinstance(content, dict):
            for ev in content.get("hooks") or {}:
                if ev not in evs:
                    evs.append(ev)
        elif isinstance(content, str):
            for ev in re.findall(r'"([A-Z][A-Za-z]+)"\s*:\s*\[', content):
                if ev not in evs and ev not in ("hooks",):
                    evs.append(ev)
    return evs


def wrapped_sources(sc: Scenario, root: Path) -> dict[str, Any]:
    """One `hookaudit eval --format claude` hook per event, reading the original files.

    The originals are kept as ``orig/<scope>.json``, outside any ``.claude`` directory: the
    stand-in is the project's own settings file, so the originals' project is the one
    Claude Code names in ``CLAUDE_PROJECT_DIR`` (a project rule's ``/path`` is relative to
    it), as for any settings file given with ``--settings project:FILE``."""
    orig = {scope: root / "orig" / f"{scope}.json" for scope in SCOPES}
    (root / "orig").mkdir(parents=True, exist_ok=True)
    specs: list[str] = []
    for scope in SCOPES:
        if scope in sc.sources:
            c = sc.sources[scope]
            orig[scope].parent.mkdir(parents=True, exist_ok=True)
            orig[scope].write_text(
                _subst(c, root) if isinstance(c, str) else json.dumps(_subst(c, root))
            )
            specs.append(f"--settings {scope}:{orig[scope]}")
    cmd = " ".join(
        [
            *HOOKAUDIT,
            "eval",
            "--format",
            "claude",
            "--wait-async",
            *specs,
            *(["--lenient"] if sc.lenient else []),
        ]
    )
    hooks = {
        ev: [{"hooks": [{"type": "command", "command": cmd, "timeout": 600}]}]
        for ev in _events_of(sc.sources)
    }
    if "managed" in sc.sources:
        # allowManagedHooksOnly would ignore a project hook: the stand-in is a managed hook,
        # beside the managed file's other keys.
        m = sc.sources["managed"]
        keep = {k: v for k, v in m.items() if k != "hooks"} if isinstance(m, dict) else {}
        return {"managed": {**_subst(keep, root), "hooks": hooks}}
    return {"project": {"hooks": hooks}}


# ---- verdict ----------------------------------------------------------------------------


@dataclass
class Result:
    name: str
    status: str  # match | deviation | mismatch | error
    diffs: list[str]
    original: dict[str, Any]
    evals: list[dict[str, Any]]
    deviation: str | None = None
    fixture: dict[str, Any] = field(default_factory=dict)


def run_scenario(sc: Scenario, binary: Path, keep: Path | None = None) -> Result:
    """Run one scenario (original, eval and wrapped), holding the managed-settings lock."""
    with _managed_lock("managed" in sc.sources):
        return _run_scenario(sc, binary, keep)


@contextlib.contextmanager
def _managed_lock(exclusive: bool) -> Any:
    with MANAGED_LOCK.open("a") as f:
        fcntl.flock(f, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        try:
            if exclusive and MANAGED.exists():
                raise RuntimeError(f"{MANAGED} exists: a managed scenario would overwrite it")
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _run_scenario(sc: Scenario, binary: Path, keep: Path | None) -> Result:
    base = Path(tempfile.mkdtemp(prefix=f"cc-{sc.name[:30]}-"))
    hserver = None
    if sc.http:
        hserver = http_hooks(sc.http, base)
        for arm in ("o", "w"):
            _HTTP_PORT[base / arm] = hserver.server_address[1]
    try:
        o_root = base / "o"
        o_root.mkdir()
        orig = run_claude(sc, o_root, sc.sources, binary)
        obs_o = observe(orig)
        diffs: list[str] = []
        evals = eval_side(sc, orig, sc.sources)
        for e in evals:
            if e["claude"] != e["hookaudit"]:
                diffs.append(
                    f"eval {e['event']}: Claude Code ran {e['claude']}, hookaudit "
                    f"{e['hookaudit']} {e['decision'].get('_error') or ''}".rstrip()
                )
        diffs += decision_diffs(orig, evals)
        if sc.wrap:
            w_root = base / "w"
            w_root.mkdir()
            wrapped = run_claude(sc, w_root, wrapped_sources(sc, w_root), binary)
            obs_w = observe(wrapped)
            # In the wrapped run, hook.py is run by hookaudit with the same inputs.
            for k in ("ran", "told", "user", "files"):
                a, b = obs_o[k], _rebase(obs_w[k])
                if json.dumps(a, sort_keys=True) != json.dumps(b, sort_keys=True):
                    where, x, y = first_difference(a, b, k)
                    diffs.append(
                        f"wrapped {where}: Claude Code {json.dumps(x)[:600]} | "
                        f"with hookaudit {json.dumps(y)[:600]}"
                    )
        status = verdict(sc, diffs)
        fixture = {
            "hook_inputs": [g["input"] for g in occurrences(orig)],
            "transcript": _transcript(orig),
        }
        if subagents := _subagents(orig):
            fixture["subagents"] = subagents
        return Result(sc.name, status, diffs, obs_o, evals, sc.deviation, fixture)
    except Exception as exc:  # a harness failure is reported as a result, not a crash
        return Result(sc.name, "error", [f"{type(exc).__name__}: {exc}"], {}, [])
    finally:
        if hserver is not None:
            hserver.shutdown()
            hserver.server_close()
            for arm in ("o", "w"):
                _HTTP_PORT.pop(base / arm, None)
        if keep is not None:
            dest = keep / sc.name
            shutil.rmtree(dest, ignore_errors=True)
            shutil.copytree(base, dest, symlinks=True)
        shutil.rmtree(base, ignore_errors=True)


def field_of(diff: str) -> str:
    """The observation a difference is in: "eval", "decision", or the wrapped run's "ran",
    "told", "user" or "files"."""
    head = diff.split(" ", 2)
    if head[0] == "wrapped" and len(head) > 1:
        return re.split(r"[.\[:]", head[1], maxsplit=1)[0]
    return head[0]


def verdict(sc: Scenario, diffs: list[str]) -> str:
    """match; deviation when every difference is in a field the scenario documents as
    deviating (a deviation pinned to nothing, or a difference elsewhere, is a mismatch)."""
    if not diffs:
        return "match"
    if sc.deviation and sc.deviates and all(field_of(d) in sc.deviates for d in diffs):
        return "deviation"
    return "mismatch"


def _tool_results(arm: Arm) -> dict[str, tuple[bool, str]]:
    """tool_use_id -> (is_error, text) of each tool result the model was given."""
    out: dict[str, tuple[bool, str]] = {}
    for r in arm.requests:
        for m in r.get("body", {}).get("messages") or []:
            content = m.get("content")
            if not isinstance(content, list):
                continue
            for b in content:
                if isinstance(b, dict) and b.get("type") == "tool_result":
                    c = b.get("content")
                    if isinstance(c, list):
                        c = "\n".join(x.get("text", "") for x in c if isinstance(x, dict))
                    out[str(b.get("tool_use_id"))] = (bool(b.get("is_error")), str(c or ""))
    return out


def _said_to_model(arm: Arm) -> str:
    """Every text the model was sent, in one string (its requests' messages)."""
    return json.dumps([r.get("body", {}).get("messages") for r in arm.requests])


def _blocked_elsewhere(
    inp: dict[str, Any], e: dict[str, Any], nxt: dict[str, Any] | None, told: str
) -> list[str]:
    """UserPromptSubmit and Stop, decided against what the binary did:
    - a prompt is blocked when it never reached the model;
    - a prompt is also kept from the model by `continue: false`;
    - a Stop is blocked when the model was sent on (the binary's next Stop, `nxt`, says
      `stop_hook_active`), and then hookaudit's reason is what it was sent on with; context
      a Stop hook adds sends it on too; a block the binary's cap on blocks in a row let
      through (a Stop that is itself `stop_hook_active`) is the binary's, not the hook's."""
    event = inp.get("hook_event_name")
    d = e["decision"]
    reason = str(d.get("reason") or "").strip()
    if event == "UserPromptSubmit":
        prompt = inp.get("prompt")
        if not isinstance(prompt, str) or not prompt:
            return []
        claude = json.dumps(prompt)[1:-1] not in told
        ours = bool(d.get("blocked")) or d.get("continue") is False  # both keep it from the model
    elif event == "Stop":
        claude = bool(nxt is not None and nxt.get("stop_hook_active") is True)
        # a block sends the model on, and so does context a Stop hook adds
        ours = bool(d.get("blocked")) or bool(d.get("additional_context"))
        if ours and not claude and inp.get("stop_hook_active") is True:
            return []  # the binary's own cap on Stop blocks in a row: not the hook's decision
    else:
        return []
    if ours != claude:
        return [
            f"decision {event}: Claude Code {'blocked' if claude else 'let it through'}, "
            f"hookaudit decided {e['decision'].get('decision')!r} "
            f"({e['decision'].get('_error') or ''})"
        ]
    if ours and event == "Stop" and reason and json.dumps(reason)[1:-1] not in told:
        return [f"decision Stop: reason {reason[:200]!r} is not what the model was sent on with"]
    return []


def decision_diffs(orig: Arm, evals: list[dict[str, Any]]) -> list[str]:
    """hookaudit's decision and reason against what the binary did: a PreToolUse call is
    blocked when the model got the hook's refusal as the tool's result, and then the reason
    hookaudit gives must be in that result; UserPromptSubmit and Stop as `_blocked_elsewhere`
    says."""
    results = _tool_results(orig)
    told = _said_to_model(orig)
    groups = occurrences(orig)
    out = []
    for k, (g, e) in enumerate(zip(groups, evals, strict=False)):
        inp = g["input"]
        if isinstance(inp, dict) and inp.get("hook_event_name") in ("UserPromptSubmit", "Stop"):
            later = (
                x["input"] for x in groups[k + 1 :]
                if isinstance(x["input"], dict) and x["input"].get("hook_event_name") == "Stop"
            )  # fmt: skip
            out += _blocked_elsewhere(inp, e, next(later, None), told)
            continue
        if not isinstance(inp, dict) or inp.get("hook_event_name") != "PreToolUse":
            continue
        got = results.get(str(inp.get("tool_use_id")))
        if got is None:
            continue  # the call never came back to the model (the turn stopped)
        is_error, text = got
        claude_blocked = is_error and ("hook error" in text or "blocked by" in text.lower())
        ours = bool(e["decision"].get("blocked"))
        if ours != claude_blocked:
            out.append(
                f"decision PreToolUse {inp.get('tool_name')}: Claude Code "
                f"{'blocked' if claude_blocked else 'ran'} the call, hookaudit decided "
                f"{e['decision'].get('decision')!r} ({e['decision'].get('_error') or ''})"
            )
        elif ours:
            reason = str(e["decision"].get("reason") or "").strip()
            if reason and reason not in text:
                out.append(
                    f"decision PreToolUse {inp.get('tool_name')}: reason {reason[:200]!r} is "
                    f"not what the model was told: {text[:200]!r}"
                )
    return out


def first_difference(a: Any, b: Any, path: str) -> tuple[str, Any, Any]:
    """The path of the first place where `a` and `b` differ, and the two values there."""
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if json.dumps(a.get(k), sort_keys=True) != json.dumps(b.get(k), sort_keys=True):
                return first_difference(a.get(k), b.get(k), f"{path}.{k}")
    if isinstance(a, list) and isinstance(b, list):
        for i, (x, y) in enumerate(zip(a, b, strict=False)):
            if json.dumps(x, sort_keys=True) != json.dumps(y, sort_keys=True):
                return first_difference(x, y, f"{path}[{i}]")
        if len(a) != len(b):
            return f"{path}[{min(len(a), len(b))}:]", a[len(b) :], b[len(a) :]
    return path, a, b


def _rebase(obj: Any) -> Any:
    return obj


def _entries(p: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for line in p.read_text().splitlines():
        with contextlib.suppress(ValueError):
            out.append(json.loads(line))
    return out


def _transcript(arm: Arm) -> list[dict[str, Any]]:
    """The session's own transcript (`<project>/<session>.jsonl`)."""
    found = sorted((arm.root / "home" / ".claude" / "projects").glob("*/*.jsonl"))
    return _entries(found[0]) if found else []


def _subagents(arm: Arm) -> list[dict[str, Any]]:
    """Each subagent's transcript and meta file (`<session>/subagents/agent-<id>.jsonl` and
    `.meta.json`), as Claude Code wrote them."""
    out = []
    for p in sorted((arm.root / "home" / ".claude" / "projects").glob("*/*/subagents/*.jsonl")):
        meta = p.with_suffix(".meta.json")
        out.append({
            "file": p.name,
            "transcript": _entries(p),
            "meta": json.loads(meta.read_text()) if meta.exists() else None,
        })  # fmt: skip
    return out


def run_all(
    scenarios: list[Scenario],
    binary: Path,
    jobs: int = 3,
    keep: Path | None = None,
    progress: bool = True,
) -> list[Result]:
    """Run scenarios `jobs` at a time (each is two Claude Code runs and some evals)."""
    results: dict[str, Result] = {}
    queue = list(scenarios)
    lock = threading.Lock()

    def worker() -> None:
        while True:
            with lock:
                if not queue:
                    return
                sc = queue.pop(0)
            r = run_scenario(sc, binary, keep)
            with lock:
                results[sc.name] = r
                if progress:
                    print(
                        f"  [{len(results)}/{len(scenarios)}] {r.status:9} {sc.name}",
                        file=sys.stderr,
                        flush=True,
                    )

    threads = [threading.Thread(target=worker) for _ in range(max(1, jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [results[s.name] for s in scenarios]


def summary(results: list[Result]) -> str:
    m = sum(r.status == "match" for r in results)
    d = sum(r.status == "deviation" for r in results)
    return f"{len(results)} scenarios, {m} match, {d} documented deviations"
