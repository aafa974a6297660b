"""`hookaudit wire opencode`: the OpenCode plugin that hands every hook to hookaudit.

OpenCode has no shell hooks: a plugin is a JavaScript module it loads in process. The one
written here imports nothing but `node:child_process` (it works offline, with no
`@opencode-ai/plugin` installed), runs ``hookaudit emit --agent opencode`` for each hook
with the hook's arguments as JSON on stdin, and throws when the answer is a deny, when
hookaudit exits non-zero, answers something it cannot read, or does not answer within its
own deadline (OpenCode gives plugins none): every failure blocks.

Example:
    >>> "hookaudit" in plugin(["/v/bin/hookaudit"], Path("/d"))
    True
"""

from __future__ import annotations

import json
from pathlib import Path

from ingest.wire.agents import HOOK_TIMEOUT, WAIT_TIMEOUT

__all__ = ["MARK", "plugin", "plugin_path"]

MARK = "// written by `hookaudit wire opencode`"

_TEMPLATE = """__MARK__: every OpenCode hook goes to
// hookaudit (data dir __DATA__), enforcing and fail-closed. Wiring again rewrites this file.
import { spawn } from "node:child_process";

const COMMAND = __COMMAND__;
const WAIT = ["--wait", "--timeout", "__WAIT__", "--fail", "closed"];
const DEADLINE_MS = __DEADLINE__; // OpenCode gives plugins no timeout: this is the plugin's own
const CLOSED = "; blocked because the hook fails closed";

function emit(event, input, output, directory, wait) {
  return new Promise((resolve) => {
    let child;
    try {
      child = spawn(COMMAND[0], [...COMMAND.slice(1), ...(wait ? WAIT : [])], {
        stdio: ["pipe", "pipe", "pipe"],
      });
    } catch (e) {
      resolve({ code: -1, stdout: "", stderr: String(e) });
      return;
    }
    let stdout = "";
    let stderr = "";
    let done = false;
    const finish = (result) => {
      if (!done) {
        done = true;
        clearTimeout(timer);
        resolve(result);
      }
    };
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      finish({ code: -1, stdout: "", stderr: `no answer within ${DEADLINE_MS} ms` });
    }, DEADLINE_MS);
    child.stdout.on("data", (d) => { stdout += d; });
    child.stderr.on("data", (d) => { stderr += d; });
    child.on("error", (e) => finish({ code: -1, stdout, stderr: String(e) }));
    child.on("close", (code) => finish({ code, stdout, stderr }));
    child.stdin.on("error", () => {});
    child.stdin.end(JSON.stringify({ hook_event_name: event, input, output, directory }));
  });
}

async function enforce(event, input, output, directory) {
  let r;
  try {
    r = await emit(event, input, output, directory, true);
  } catch (e) {
    throw new Error(`hookaudit: ${e}${CLOSED}`);
  }
  const text = (r.stdout || "").trim();
  if (text) {
    let answer;
    try {
      answer = JSON.parse(text);
    } catch (e) {
      throw new Error(`hookaudit: unreadable answer${CLOSED}`);
    }
    if (answer && answer.decision === "deny") {
      throw new Error(String(answer.reason || "blocked by the hookaudit policy"));
    }
    if (answer && answer.args !== undefined) {
      // the policy rewrote the call's input: it runs with exactly these arguments
      if (event !== "tool.execute.before" || !output || typeof answer.args !== "object"
          || answer.args === null || Array.isArray(answer.args)) {
        throw new Error(`hookaudit: a rewrite this hook cannot apply${CLOSED}`);
      }
      for (const k of Object.keys(output.args || {})) delete output.args[k];
      Object.assign(output.args, answer.args);
    }
  }
  if (r.code !== 0) {
    throw new Error(`hookaudit: ${(r.stderr || "").trim() || "exit " + r.code}${CLOSED}`);
  }
}

export const HookAudit = async (ctx) => {
  const dir = ctx && typeof ctx.directory === "string" ? ctx.directory : undefined;
  return {
    "tool.execute.before": async (input, output) => enforce("tool.execute.before", input, output, dir),
    "chat.message": async (input, output) => enforce("chat.message", input, output, dir),
    "tool.execute.after": async (input, output) => {
      await emit("tool.execute.after", input, output, dir, false);
    },
    event: async ({ event }) => {
      if (event && (event.type === "session.created" || event.type === "session.idle")) {
        await emit(event.type, event, null, dir, false);
      }
    },
  };
};
"""


def plugin(command: list[str], data_dir: Path) -> str:
    """The plugin's text, running `command` (the hookaudit executable's argv) for `data_dir`."""
    argv = [*command, "emit", "--agent", "opencode", "--data-dir", str(data_dir)]
    return (
        _TEMPLATE.replace("__MARK__", MARK)
        .replace("__DATA__", str(data_dir).replace("\n", " "))
        .replace("__COMMAND__", json.dumps(argv))
        .replace("__WAIT__", str(WAIT_TIMEOUT))
        .replace("__DEADLINE__", str(HOOK_TIMEOUT * 1000))
    )


def plugin_path(*, home: Path | None, project: Path | None) -> Path:
    """Where the plugin goes: the project's .opencode/plugin/, else the user's
    ~/.config/opencode/plugin/ (under --home when given)."""
    if project is not None:
        return project / ".opencode" / "plugin" / "hookaudit.js"
    return (
        (home if home is not None else Path.home())
        / ".config"
        / "opencode"
        / "plugin"
        / "hookaudit.js"
    )
