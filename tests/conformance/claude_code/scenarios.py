"""The scenarios: settings + hook behaviours + model turns, grouped by what they exercise.

`ALL` lists them in order; `FAST` is the subset the default test run uses. Names are stable:
the recorded results of a version are keyed by them.
"""

from __future__ import annotations

import json
from typing import Any

from harness import Scenario

ALLOW = ["--allowedTools", "Bash,Write,Edit,Read"]


def H(label: str, **extra: Any) -> dict[str, Any]:
    """A logging command hook answering as `label`'s behaviour says."""
    return {"type": "command", "command": "{HOOK:" + label + "}", **extra}


def G(*hooks: dict[str, Any], matcher: str | None = None, **extra: Any) -> dict[str, Any]:
    g: dict[str, Any] = {"hooks": list(hooks), **extra}
    if matcher is not None:
        g["matcher"] = matcher
    return g


def bash(cmd: str) -> dict[str, Any]:
    return {"tools": [{"name": "Bash", "input": {"command": cmd, "description": "run it"}}]}


def write(path: str, content: str) -> dict[str, Any]:
    return {
        "tools": [
            {"name": "Write", "input": {"file_path": "{ROOT}/proj/" + path, "content": content}}
        ]
    }


def edit(path: str, old: str, new: str) -> dict[str, Any]:
    return {
        "tools": [
            {
                "name": "Edit",
                "input": {"file_path": "{ROOT}/proj/" + path, "old_string": old, "new_string": new},
            }
        ]
    }


def read(path: str) -> dict[str, Any]:
    return {"tools": [{"name": "Read", "input": {"file_path": "{ROOT}/proj/" + path}}]}


DONE = {"text": "done"}


def out(obj: Any, code: int = 0, stderr: str = "") -> dict[str, Any]:
    """A behaviour that prints `obj` (JSON unless it is a str) and exits `code`."""
    b: dict[str, Any] = {"stdout": obj if isinstance(obj, str) else json.dumps(obj), "exit": code}
    if stderr:
        b["stderr"] = stderr
    return b


def err(stderr: str, code: int = 2) -> dict[str, Any]:
    return {"stderr": stderr, "exit": code}


def once(b: dict[str, Any]) -> dict[str, Any]:
    """Answer only when the input says `stop_hook_active: false` (the first Stop)."""
    return {**b, "when": {"stop_hook_active": False}}


def hso(event: str, **fields: Any) -> dict[str, Any]:
    return {"hookSpecificOutput": {"hookEventName": event, **fields}}


TIMED_OUT = (
    "a PreToolUse hook that timed out: Claude Code warns the user that it 'didn't answer in "
    "time'; hookaudit records the timeout in the outcome's errors, and its one stand-in hook "
    "answers in time (a command hook cannot report another hook's timeout as its own), so "
    "the wrapped run shows no warning (the tool runs in both)"
)

RACE_DENY = (
    "several denials: Claude Code tells the model the reason of the hook that finished "
    "last (a race: either reason, run to run); hookaudit the first in configuration order"
)

STRICT_REFUSES = (
    "strict settings (the default): a file Claude Code would keep with a group that never "
    "matches, or ignore whole, is refused; `eval` exits 1 naming it and the `--format claude` "
    "stand-in blocks with that reason (Claude Code runs the file's valid groups, or the "
    "other files' hooks): stricter, never looser"
)

ALL: list[Scenario] = []


def add(
    name: str,
    hooks: dict[str, Any] | None = None,
    turns: list[dict[str, Any]] | None = None,
    behaviours: dict[str, dict[str, Any]] | None = None,
    *,
    scope: str = "project",
    extra: dict[str, Any] | None = None,
    args: list[str] | None = None,
    sources: dict[str, Any] | None = None,
    **kw: Any,
) -> Scenario:
    src = sources if sources is not None else {scope: {"hooks": hooks or {}, **(extra or {})}}
    sc = Scenario(
        name=name,
        sources=src,
        turns=turns if turns is not None else [bash("echo RAN"), DONE],
        behaviours=behaviours or {},
        args=ALLOW if args is None else args,
        **kw,
    )
    ALL.append(sc)
    return sc


# ---- PreToolUse: exit codes -----------------------------------------------------------------
P = "PreToolUse"
add("pre.exit0.silent", {P: [G(H("a"))]}, fast=True)
add("pre.exit2.blocks", {P: [G(H("a"))]}, behaviours={"a": err("no way")}, fast=True)
add("pre.exit2.no_stderr", {P: [G(H("a"))]}, behaviours={"a": {"exit": 2}})
add("pre.exit1.nonblocking", {P: [G(H("a"))]}, behaviours={"a": err("oops", 1)})
add("pre.exit3.nonblocking", {P: [G(H("a"))]}, behaviours={"a": err("oops", 3)})
add("pre.exit0.plain_stdout", {P: [G(H("a"))]}, behaviours={"a": out("hello from hook")})
add("pre.exit0.stderr_only", {P: [G(H("a"))]}, behaviours={"a": {"stderr": "warn", "exit": 0}})
add("pre.exit2.multiline_stderr", {P: [G(H("a"))]}, behaviours={"a": err("line one\nline two")})

# ---- PreToolUse: JSON decisions -------------------------------------------------------------
add(
    "pre.json.deny",
    {P: [G(H("a"))]},
    behaviours={"a": out(hso(P, permissionDecision="deny", permissionDecisionReason="nope"))},
    fast=True,
)
add(
    "pre.json.deny_no_reason",
    {P: [G(H("a"))]},
    behaviours={"a": out(hso(P, permissionDecision="deny"))},
)
add(
    "pre.json.allow",
    {P: [G(H("a"))]},
    behaviours={"a": out(hso(P, permissionDecision="allow", permissionDecisionReason="fine"))},
)
add(
    "pre.json.allow_unlisted_tool",
    {P: [G(H("a"))]},
    behaviours={"a": out(hso(P, permissionDecision="allow"))},
    args=[],
)
add(
    "pre.json.ask_headless",
    {P: [G(H("a"))]},
    behaviours={"a": out(hso(P, permissionDecision="ask", permissionDecisionReason="check"))},
)
add("pre.json.defer", {P: [G(H("a"))]}, behaviours={"a": out(hso(P, permissionDecision="defer"))})
add(
    "pre.json.bogus_decision",
    {P: [G(H("a"))]},
    behaviours={"a": out(hso(P, permissionDecision="maybe"))},
)
add(
    "pre.json.updated_input",
    {P: [G(H("a"))]},
    behaviours={
        "a": out(
            hso(
                P,
                permissionDecision="allow",
                updatedInput={"command": "echo REWRITTEN", "description": "x"},
            )
        )
    },
    fast=True,
)
add(
    "pre.json.updated_input_no_decision",
    {P: [G(H("a"))]},
    behaviours={"a": out(hso(P, updatedInput={"command": "echo REWRITTEN"}))},
)
add(
    "pre.json.additional_context",
    {P: [G(H("a"))]},
    behaviours={"a": out(hso(P, additionalContext="CTX-PRE"))},
)
add(
    "pre.json.deny_with_context",
    {P: [G(H("a"))]},
    behaviours={
        "a": out(
            hso(P, permissionDecision="deny", permissionDecisionReason="r", additionalContext="CTX")
        )
    },
)
add(
    "pre.json.legacy_block",
    {P: [G(H("a"))]},
    behaviours={"a": out({"decision": "block", "reason": "old style"})},
)
add(
    "pre.json.legacy_approve",
    {P: [G(H("a"))]},
    behaviours={"a": out({"decision": "approve", "reason": "old ok"})},
    args=[],
)
add(
    "pre.json.top_decision_beside_hso",
    {P: [G(H("a"))]},
    behaviours={
        "a": out({"decision": "block", "reason": "top", **hso(P, permissionDecision="allow")})
    },
)
add(
    "pre.json.top_approve_beside_hso_deny",
    {P: [G(H("a"))]},
    behaviours={
        "a": out(
            {
                "decision": "approve",
                **hso(P, permissionDecision="deny", permissionDecisionReason="hso"),
            }
        )
    },
)
add(
    "pre.json.continue_false",
    {P: [G(H("a"))]},
    behaviours={"a": out({"continue": False, "stopReason": "halt"})},
    fast=True,
)
add(
    "pre.json.continue_false_deny",
    {P: [G(H("a"))]},
    behaviours={
        "a": out(
            {
                "continue": False,
                "stopReason": "halt",
                **hso(P, permissionDecision="deny", permissionDecisionReason="d"),
            }
        )
    },
)
add(
    "pre.json.system_message",
    {P: [G(H("a"))]},
    behaviours={"a": out({"systemMessage": "note to user"})},
)
add("pre.json.suppress_output", {P: [G(H("a"))]}, behaviours={"a": out({"suppressOutput": True})})
add(
    "pre.json.exit2_with_allow_json",
    {P: [G(H("a"))]},
    behaviours={"a": out(hso(P, permissionDecision="allow"), 2, "blocked anyway")},
)
add(
    "pre.json.exit1_with_deny_json",
    {P: [G(H("a"))]},
    behaviours={"a": out(hso(P, permissionDecision="deny", permissionDecisionReason="j"), 1)},
)
add(
    "pre.json.wrong_event_name",
    {P: [G(H("a"))]},
    behaviours={"a": out(hso("PostToolUse", permissionDecision="deny"))},
)
add(
    "pre.json.hso_without_event_name",
    {P: [G(H("a"))]},
    behaviours={
        "a": out(
            {"hookSpecificOutput": {"permissionDecision": "deny", "permissionDecisionReason": "x"}}
        )
    },
)
add("pre.json.malformed", {P: [G(H("a"))]}, behaviours={"a": out("{not json")})
add("pre.json.array", {P: [G(H("a"))]}, behaviours={"a": out("[1,2]")})
add(
    "pre.json.prefixed_text",
    {P: [G(H("a"))]},
    behaviours={
        "a": out(
            'note\n{"hookSpecificOutput":{"hookEventName":"PreToolUse",'
            '"permissionDecision":"deny"}}'
        )
    },
)
add(
    "pre.json.unknown_fields",
    {P: [G(H("a"))]},
    behaviours={"a": out({"foo": 1, **hso(P, permissionDecision="deny", bar=2)})},
)

# ---- PreToolUse: several hooks ----------------------------------------------------------------
add(
    "multi.deny_beats_allow",
    {P: [G(H("a"), H("b"))]},
    behaviours={
        "a": out(hso(P, permissionDecision="allow")),
        "b": out(hso(P, permissionDecision="deny", permissionDecisionReason="b says no")),
    },
    fast=True,
)
add(
    "multi.two_denies",
    {P: [G(H("a"), H("b"))]},
    behaviours={
        "a": out(hso(P, permissionDecision="deny", permissionDecisionReason="A")),
        "b": out(hso(P, permissionDecision="deny", permissionDecisionReason="B")),
    },
    deviation=RACE_DENY,
    deviates=("told", "decision"),
)
add(
    "multi.exit2_and_allow",
    {P: [G(H("a")), G(H("b"))]},
    behaviours={"a": err("A blocks"), "b": out(hso(P, permissionDecision="allow"))},
)
add(
    "multi.two_exit2",
    {P: [G(H("a"), H("b"))]},
    behaviours={"a": err("A blocks"), "b": err("B blocks")},
    deviation=RACE_DENY,
    deviates=("told", "decision"),
)
add(
    "multi.ask_and_allow",
    {P: [G(H("a"), H("b"))]},
    behaviours={
        "a": out(hso(P, permissionDecision="ask")),
        "b": out(hso(P, permissionDecision="allow")),
    },
)
add(
    "multi.two_contexts",
    {P: [G(H("a"), H("b"))]},
    behaviours={
        "a": out(hso(P, additionalContext="CTX-A")),
        "b": out(hso(P, additionalContext="CTX-B")),
    },
    deviation="several PreToolUse contexts: Claude Code puts them in one note, a line each, in "
    "the order the hooks finished (a race); hookaudit in configuration order",
    deviates=("told",),
)
add(
    "multi.context_and_deny",
    {P: [G(H("a"), H("b"))]},
    behaviours={
        "a": out(hso(P, additionalContext="CTX-A")),
        "b": out(hso(P, permissionDecision="deny", permissionDecisionReason="no")),
    },
)
add(
    "multi.two_updated_inputs",
    {P: [G(H("a")), G(H("b"))]},
    behaviours={
        "a": out(hso(P, permissionDecision="allow", updatedInput={"command": "echo A"})),
        "b": out(hso(P, permissionDecision="allow", updatedInput={"command": "echo B"})),
    },
    deviation="several rewrites: Claude Code keeps whichever hook finishes last; hookaudit "
    "keeps the last in configuration order",
    deviates=("told", "files"),
)
add(
    "multi.two_denies_first_slow",
    {P: [G(H("a"), H("b"))]},
    behaviours={
        "a": {**out(hso(P, permissionDecision="deny", permissionDecisionReason="A")), "sleep": 1.5},
        "b": out(hso(P, permissionDecision="deny", permissionDecisionReason="B")),
    },
)
add(
    "multi.error_and_deny",
    {P: [G(H("a"), H("b"))]},
    behaviours={
        "a": err("broken", 1),
        "b": out(hso(P, permissionDecision="deny", permissionDecisionReason="no")),
    },
)
add(
    "multi.two_system_messages",
    {P: [G(H("a"), H("b"))]},
    behaviours={"a": out({"systemMessage": "S-A"}), "b": out({"systemMessage": "S-B"})},
)

# ---- matchers ----------------------------------------------------------------------------------
for name, m, _hit in [
    ("exact", "Bash", True),
    ("exact_other", "Write", False),
    ("star", "*", True),
    ("empty", "", True),
    ("alternation", "Write|Bash", True),
    ("alternation_miss", "Write|Read", False),
    ("regex", "Ba.*", True),
    ("regex_anchor", "^Bas$", False),
    ("lowercase", "bash", False),
    ("comma_list", "Write, Bash", True),
    ("spaces", " Bash ", True),
    ("bad_regex", "(", False),
    ("partial", "Bas", False),
    ("mcp_pattern", "mcp__.*", False),
]:
    add(
        f"matcher.pre.{name}",
        {P: [G(H("a"), matcher=m)]},
        fast=name == "alternation",
        # strict refuses the file for the bad regex, and its stand-in blocks the call
        deviation=STRICT_REFUSES if name == "bad_regex" else None,
        deviates=("told",) if name == "bad_regex" else (),
    )
add("matcher.pre.bad_regex.lenient", {P: [G(H("a"), matcher="(")]}, lenient=True)
add("matcher.absent", {P: [G(H("a"))]})
# An invalid regex beside a valid group: Claude Code keeps the file and runs the valid group
# (its deny blocks). --lenient does the same; strict refuses the file and its stand-in blocks.
for name, bad in [("bracket", "["), ("paren", "Bash("), ("inline_flag", "(?i)bash")]:
    for lenient in (True, False):
        add(
            f"matcher.bad_regex_beside_valid.{name}" + ("" if lenient else ".strict"),
            {P: [G(H("a"), matcher=bad), G(H("b"), matcher="Bash")]},
            behaviours={"b": err("DENIED-BY-B")},
            lenient=lenient,
            deviation=None if lenient else STRICT_REFUSES,
            deviates=() if lenient else ("eval", "decision", "ran", "told"),
        )
add("matcher.two_groups_one_hits", {P: [G(H("a"), matcher="Write"), G(H("b"), matcher="Bash")]})

# ---- `if` rules --------------------------------------------------------------------------------
for name, rule in [
    ("bash_prefix", "Bash(echo *)"),
    ("bash_miss", "Bash(rm *)"),
    ("bash_exact", "Bash(echo RAN)"),
    ("tool_only", "Bash"),
    ("other_tool", "Write"),
    ("bash_colon", "Bash(echo:*)"),
    ("bash_star_mid", "Bash(* RAN)"),
    ("garbage", "Bash(("),
]:
    add(
        f"if.pre.{name}",
        {P: [G(H("a", **{"if": rule}))]},
        behaviours={"a": err("IF-HIT")},
        fast=name == "bash_prefix",
    )
add(
    "if.write_path",
    {P: [G(H("a", **{"if": "Write(*.txt)"}))]},
    [write("a.txt", "x"), DONE],
    behaviours={"a": err("IF-HIT")},
)
add(
    "if.write_path_miss",
    {P: [G(H("a", **{"if": "Write(*.md)"}))]},
    [write("a.txt", "x"), DONE],
    behaviours={"a": err("IF-HIT")},
)
add(
    "if.write_dir_glob",
    {P: [G(H("a", **{"if": "Write(src/**)"}))]},
    [write("src/a.txt", "x"), DONE],
    behaviours={"a": err("IF-HIT")},
)
add("if.on_stop_never_runs", {"Stop": [G(H("a", **{"if": "Bash(*)"}))]}, [DONE])

# `if` rules on paths: every form of a permission rule's path (gitignore-style: `//abs`,
# `/project-relative`, `~/home`, a bare name, `*`, `**`, case), for Read and Edit, hit and
# miss. The file read is <project>/sub/secret.txt, or ~/notes.txt for the `~` forms.


def read_at(path: str) -> dict[str, Any]:
    return {"tools": [{"name": "Read", "input": {"file_path": path}}]}


SECRET = "{ROOT}/proj/sub/secret.txt"
HOME_FILE = "{ROOT}/home/notes.txt"
for name, rule, target in [
    ("bare_name", "Read(secret.txt)", SECRET),
    ("bare_glob", "Read(*.txt)", SECRET),
    ("dir_bare", "Read(sub/secret.txt)", SECRET),
    ("slash_project", "Read(/sub/secret.txt)", SECRET),
    ("slash_project_miss", "Read(/secret.txt)", SECRET),
    ("slash_abs", "Read(/{ROOT}/proj/sub/secret.txt)", SECRET),
    ("double_slash_abs", "Read(//{ROOT}/proj/sub/secret.txt)", SECRET),
    ("double_slash_glob", "Read(//{ROOT}/**)", SECRET),
    ("double_star", "Read(**/secret.txt)", SECRET),
    ("double_star_dir", "Read(sub/**)", SECRET),
    ("single_star_dir", "Read(sub/*)", SECRET),
    ("star_too_shallow", "Read(*/secret.txt)", SECRET),
    ("case", "Read(SECRET.TXT)", SECRET),
    ("dot_slash", "Read(./sub/secret.txt)", SECRET),
    ("tilde", "Read(~/notes.txt)", HOME_FILE),
    ("tilde_glob", "Read(~/**)", HOME_FILE),
    ("tilde_miss", "Read(~/notes.txt)", SECRET),
    ("edit_rule_on_read", "Edit(secret.txt)", SECRET),
]:
    add(
        f"if.path.{name}",
        {P: [G(H("a", **{"if": rule}))]},
        [read_at(target), DONE],
        behaviours={"a": err("IF-HIT")},
        files={"sub/secret.txt": "s3cret\n", "../home/notes.txt": "notes\n"},
    )
for name, rule in [
    ("edit_bare", "Edit(secret.txt)"),
    ("edit_slash", "Edit(/sub/secret.txt)"),
    ("edit_double_slash", "Edit(//{ROOT}/proj/sub/secret.txt)"),
    ("edit_glob", "Edit(**/*.txt)"),
    ("read_rule_on_edit", "Read(secret.txt)"),
]:
    add(
        f"if.path.{name}",
        {P: [G(H("a", **{"if": rule}))]},
        [
            {
                "tools": [
                    {
                        "name": "Edit",
                        "input": {
                            "file_path": SECRET,
                            "old_string": "s3cret",
                            "new_string": "plain",
                        },
                    }
                ]
            },
            DONE,
        ],
        behaviours={"a": err("IF-HIT")},
        files={"sub/secret.txt": "s3cret\n"},
    )

# WebFetch rules: `domain:` forms beside the bare tool and `*`
for name, rule in [
    ("webfetch_tool", "WebFetch"),
    ("webfetch_star", "WebFetch(*)"),
    ("webfetch_domain", "WebFetch(domain:example.com)"),
    ("webfetch_domain_miss", "WebFetch(domain:other.org)"),
    ("webfetch_domain_glob", "WebFetch(domain:*.example.com)"),
    ("webfetch_domain_exact", "WebFetch(domain:docs.example.com)"),
    ("webfetch_domain_any", "WebFetch(domain:*)"),
]:
    add(
        f"if.{name}",
        {P: [G(H("a", **{"if": rule}), matcher="WebFetch")]},
        [
            {
                "tools": [
                    {
                        "name": "WebFetch",
                        "input": {"url": "https://docs.example.com/a", "prompt": "summarise"},
                    }
                ]
            },
            DONE,
        ],
        behaviours={"a": err("IF-HIT")},
        args=["--allowedTools", "WebFetch"],
    )
add(
    "if.on_post",
    {"PostToolUse": [G(H("a", **{"if": "Bash(echo *)"}))]},
    behaviours={"a": out(hso("PostToolUse", additionalContext="POST-IF"))},
)

# ---- tools other than Bash ---------------------------------------------------------------------
add(
    "tool.write.deny",
    {P: [G(H("a"), matcher="Write")]},
    [write("w.txt", "hello"), DONE],
    behaviours={"a": err("no writes")},
    fast=True,
)
add("tool.write.allowed", {P: [G(H("a"), matcher="Write")]}, [write("w.txt", "hello"), DONE])
add(
    "tool.write.rewrite",
    {P: [G(H("a"), matcher="Write")]},
    [write("w.txt", "hello"), DONE],
    behaviours={
        "a": out(
            hso(
                P,
                permissionDecision="allow",
                updatedInput={"file_path": "{ROOT}/proj/other.txt", "content": "R"},
            )
        )
    },
)
add(
    "tool.edit.deny",
    {P: [G(H("a"), matcher="Edit")]},
    [read("e.txt"), edit("e.txt", "one", "two"), DONE],
    behaviours={"a": err("no edits")},
    files={"e.txt": "one\n"},
)
add(
    "tool.edit.allowed",
    {P: [G(H("a"), matcher="Edit|Read")]},
    [read("e.txt"), edit("e.txt", "one", "two"), DONE],
    files={"e.txt": "one\n"},
)
add(
    "tool.read.deny",
    {P: [G(H("a"), matcher="Read")]},
    [read("r.txt"), DONE],
    behaviours={"a": err("no reads")},
    files={"r.txt": "secret\n"},
)
add("tool.read.missing_file", {"PostToolUseFailure": [G(H("a"))]}, [read("nope.txt"), DONE])
add(
    "tool.two_in_one_turn",
    {P: [G(H("a"))]},
    [
        {
            "tools": [
                {"name": "Bash", "input": {"command": "echo ONE"}},
                {"name": "Bash", "input": {"command": "echo TWO"}},
            ]
        },
        DONE,
    ],
)

# ---- PostToolUse / PostToolUseFailure ----------------------------------------------------------
Q = "PostToolUse"
add("post.silent", {Q: [G(H("a"))]}, fast=True)
add("post.exit2", {Q: [G(H("a"))]}, behaviours={"a": err("post says")})
add("post.exit1", {Q: [G(H("a"))]}, behaviours={"a": err("post broke", 1)})
add(
    "post.block",
    {Q: [G(H("a"))]},
    behaviours={"a": out({"decision": "block", "reason": "bad output"})},
)
add("post.context", {Q: [G(H("a"))]}, behaviours={"a": out(hso(Q, additionalContext="POST-CTX"))})
add(
    "post.updated_output",
    {Q: [G(H("a"))]},
    behaviours={"a": out(hso(Q, updatedToolOutput="REPLACED OUTPUT"))},
)
add(
    "post.continue_false",
    {Q: [G(H("a"))]},
    behaviours={"a": out({"continue": False, "stopReason": "post halt"})},
)
add("post.plain_stdout", {Q: [G(H("a"))]}, behaviours={"a": out("post stdout")})
add("post.matcher_miss", {Q: [G(H("a"), matcher="Write")]})
F = "PostToolUseFailure"
add("fail.silent", {F: [G(H("a"))]}, [bash("exit 3"), DONE])
add(
    "fail.context",
    {F: [G(H("a"))]},
    [bash("exit 3"), DONE],
    behaviours={"a": out(hso(F, additionalContext="FAIL-CTX"))},
)
add("fail.exit2", {F: [G(H("a"))]}, [bash("exit 3"), DONE], behaviours={"a": err("fail says")})
add("fail.not_on_success", {F: [G(H("a"))]})

# ---- UserPromptSubmit --------------------------------------------------------------------------
U = "UserPromptSubmit"
add("ups.silent", {U: [G(H("a"))]}, [DONE], fast=True)
add("ups.plain_stdout_context", {U: [G(H("a"))]}, [DONE], behaviours={"a": out("UPS-PLAIN")})
add(
    "ups.context",
    {U: [G(H("a"))]},
    [DONE],
    behaviours={"a": out(hso(U, additionalContext="UPS-CTX"))},
)
add("ups.exit2", {U: [G(H("a"))]}, [DONE], behaviours={"a": err("prompt refused")})
add(
    "ups.block",
    {U: [G(H("a"))]},
    [DONE],
    behaviours={"a": out({"decision": "block", "reason": "nope"})},
)
add(
    "ups.continue_false",
    {U: [G(H("a"))]},
    [DONE],
    behaviours={"a": out({"continue": False, "stopReason": "ups halt"})},
)
add("ups.exit1", {U: [G(H("a"))]}, [DONE], behaviours={"a": err("ups broke", 1)})
add("ups.matcher_ignored", {U: [G(H("a"), matcher="nomatch")]}, [DONE])
add(
    "ups.two_contexts",
    {U: [G(H("a"), H("b"))]},
    [DONE],
    behaviours={"a": out("PLAIN-A"), "b": out(hso(U, additionalContext="CTX-B"))},
    deviation="one hook's plain stdout and another's additionalContext: Claude Code gives the "
    "model a 'hook success' note and an 'additional context' note; one command hook prints "
    "one or the other, so hookaudit's stand-in joins both as additional context",
    deviates=("told",),
)
add(
    "ups.system_message",
    {U: [G(H("a"))]},
    [DONE],
    behaviours={"a": out({"systemMessage": "UPS-SYS"})},
)

# ---- SessionStart / SessionEnd / Setup ---------------------------------------------------------
S = "SessionStart"
add("ss.silent", {S: [G(H("a"))]}, [DONE])
add("ss.plain_stdout", {S: [G(H("a"))]}, [DONE], behaviours={"a": out("SS-PLAIN")}, fast=True)
add(
    "ss.context",
    {S: [G(H("a"))]},
    [DONE],
    behaviours={"a": out(hso(S, additionalContext="SS-CTX"))},
)
add("ss.exit2", {S: [G(H("a"))]}, [DONE], behaviours={"a": err("ss err")})
add("ss.matcher_startup", {S: [G(H("a"), matcher="startup")]}, [DONE])
add("ss.matcher_resume", {S: [G(H("a"), matcher="resume")]}, [DONE])
add(
    "ss.continue_false",
    {S: [G(H("a"))]},
    [DONE],
    behaviours={"a": out({"continue": False, "stopReason": "ss halt"})},
)
add("se.silent", {"SessionEnd": [G(H("a"))]}, [DONE])
add("se.exit2", {"SessionEnd": [G(H("a"))]}, [DONE], behaviours={"a": err("bye")})
add("se.matcher_other", {"SessionEnd": [G(H("a"), matcher="other")]}, [DONE])
add("se.matcher_clear", {"SessionEnd": [G(H("a"), matcher="clear")]}, [DONE])

# ---- Stop --------------------------------------------------------------------------------------
T = "Stop"
add("stop.silent", {T: [G(H("a"))]}, [DONE], fast=True)
add(
    "stop.exit2_once",
    {T: [G(H("a"))]},
    [DONE, {"text": "second"}],
    behaviours={"a": once(err("keep going"))},
    fast=True,
)
add(
    "stop.block_json",
    {T: [G(H("a"))]},
    [DONE, {"text": "second"}],
    behaviours={"a": once(out({"decision": "block", "reason": "more work"}))},
)
add(
    "stop.block_no_reason",
    {T: [G(H("a"))]},
    [DONE, {"text": "second"}],
    behaviours={"a": once(out({"decision": "block"}))},
)
add(
    "stop.continue_false",
    {T: [G(H("a"))]},
    [DONE, {"text": "second"}],
    behaviours={"a": once(out({"continue": False, "stopReason": "stop halt"}))},
)
add(
    "stop.context",
    {T: [G(H("a"))]},
    [DONE, {"text": "second"}],
    behaviours={"a": once(out(hso(T, additionalContext="STOP-CTX")))},
)
add("stop.exit2_always_cap", {T: [G(H("a"))]}, [DONE], behaviours={"a": err("never done")})
add(
    "stop.exit1",
    {T: [G(H("a"))]},
    [DONE],
    behaviours={"a": err("stop broke", 1)},
)
add("stop.plain_stdout", {T: [G(H("a"))]}, [DONE], behaviours={"a": out("stop stdout")})
add("stop.matcher_ignored", {T: [G(H("a"), matcher="xyz")]}, [DONE])
add("stop.after_tool", {T: [G(H("a"))]})
add(
    "stop.two_blocks",
    {T: [G(H("a"), H("b"))]},
    [DONE, {"text": "second"}],
    behaviours={
        "a": once(out({"decision": "block", "reason": "A-more"})),
        "b": once(out({"decision": "block", "reason": "B-more"})),
    },
    deviation="several blocking Stop hooks: Claude Code gives the model each hook's reason as "
    "its own feedback; hookaudit's decision carries one reason",
    deviates=("told", "user"),
)

# ---- StopFailure (API errors) ------------------------------------------------------------------
E500 = {"error": {"status": 400, "type": "invalid_request_error", "message": "mock bad request"}}
add("stopfailure.invalid_request", {"StopFailure": [G(H("a"))]}, [E500], fast=True)
add("stopfailure.matcher", {"StopFailure": [G(H("a"), matcher="invalid_request")]}, [E500])
add("stopfailure.matcher_miss", {"StopFailure": [G(H("a"), matcher="rate_limit")]}, [E500])
add(
    "stopfailure.auth",
    {"StopFailure": [G(H("a"))]},
    [{"error": {"status": 401, "type": "authentication_error", "message": "bad key"}}],
)
add("stopfailure.stop_not_run", {"Stop": [G(H("a"))], "StopFailure": [G(H("b"))]}, [E500])

# ---- PermissionRequest (default mode, no allow rule) -------------------------------------------
R = "PermissionRequest"
W1 = [write("p.txt", "perm"), DONE]
add("perm.silent", {R: [G(H("a"))]}, W1, args=[], fast=True)
add(
    "perm.allow",
    {R: [G(H("a"))]},
    W1,
    args=[],
    behaviours={"a": out(hso(R, decision={"behavior": "allow"}))},
    fast=True,
)
add(
    "perm.deny",
    {R: [G(H("a"))]},
    W1,
    args=[],
    behaviours={"a": out(hso(R, decision={"behavior": "deny", "message": "perm no"}))},
)
add(
    "perm.deny_interrupt",
    {R: [G(H("a"))]},
    W1,
    args=[],
    behaviours={
        "a": out(hso(R, decision={"behavior": "deny", "message": "stop", "interrupt": True}))
    },
)
add(
    "perm.allow_updated_input",
    {R: [G(H("a"))]},
    W1,
    args=[],
    behaviours={
        "a": out(
            hso(
                R,
                decision={
                    "behavior": "allow",
                    "updatedInput": {"file_path": "{ROOT}/proj/q.txt", "content": "Q"},
                },
            )
        )
    },
)
add("perm.exit2", {R: [G(H("a"))]}, W1, args=[], behaviours={"a": err("perm exit2")})
add(
    "perm.allow_and_deny",
    {R: [G(H("a"), H("b"))]},
    W1,
    args=[],
    behaviours={
        "a": out(hso(R, decision={"behavior": "allow"})),
        "b": out(hso(R, decision={"behavior": "deny", "message": "B no"})),
    },
    deviation="PermissionRequest allow and deny from two hooks: Claude Code takes the answer "
    "that came first (here the allow); hookaudit lets deny win (fail-safe)",
    deviates=("told", "user", "files", "decision"),
)
add(
    "perm.two_allows",
    {R: [G(H("a"), H("b"))]},
    W1,
    args=[],
    behaviours={
        "a": out(hso(R, decision={"behavior": "allow"})),
        "b": out(hso(R, decision={"behavior": "allow"})),
    },
)
add("perm.matcher_miss", {R: [G(H("a"), matcher="Bash")]}, W1, args=[])
add(
    "perm.pre_allow_skips",
    {P: [G(H("a"))], R: [G(H("b"))]},
    W1,
    args=[],
    behaviours={"a": out(hso(P, permissionDecision="allow"))},
)
add(
    "perm.pre_ask",
    {P: [G(H("a"))], R: [G(H("b"))]},
    [bash("echo RAN"), DONE],
    behaviours={
        "a": out(hso(P, permissionDecision="ask")),
        "b": out(hso(R, decision={"behavior": "allow"})),
    },
)
add("perm.denied_event", {"PermissionDenied": [G(H("a"))]}, W1, args=[])
add(
    "perm.continue_false",
    {R: [G(H("a"))]},
    W1,
    args=[],
    behaviours={"a": out({"continue": False, "stopReason": "perm halt"})},
)

# ---- settings sources and precedence -----------------------------------------------------------
add("src.user", {P: [G(H("u"))]}, scope="user", behaviours={"u": err("user blocks")})
add("src.local", {P: [G(H("l"))]}, scope="local", behaviours={"l": err("local blocks")})
add("src.flag", {P: [G(H("f"))]}, scope="flag", behaviours={"f": err("flag blocks")})
add(
    "src.all_four",
    sources={s: {"hooks": {P: [G(H(s[0]))]}} for s in ("user", "project", "local", "flag")},
    fast=True,
)
add(
    "src.dedup_same_command",
    sources={s: {"hooks": {P: [G(H("same"))]}} for s in ("user", "project")},
)
add("src.dedup_same_group", {P: [G(H("same"), H("same"))]})
add("src.dedup_diff_timeout", {P: [G(H("same", timeout=5), H("same", timeout=9))]})
add("src.dedup_two_groups", {P: [G(H("same"), matcher="Bash"), G(H("same"), matcher="*")]})
add(
    "src.disable_all_project",
    {P: [G(H("a"))]},
    extra={"disableAllHooks": True},
    behaviours={"a": err("x")},
)
add(
    "src.disable_all_local_over_project",
    sources={"project": {"hooks": {P: [G(H("p"))]}}, "local": {"disableAllHooks": True}},
)
add(
    "src.disable_all_user_vs_project",
    sources={"user": {"disableAllHooks": True}, "project": {"hooks": {P: [G(H("p"))]}}},
)
add("src.disable_all_false", {P: [G(H("a"))]}, extra={"disableAllHooks": False})
add("src.managed_only_no_managed", {P: [G(H("a"))]}, extra={"allowManagedHooksOnly": True})
add(
    "src.managed_only_in_user",
    sources={"user": {"allowManagedHooksOnly": True}, "project": {"hooks": {P: [G(H("p"))]}}},
)

# ---- malformed settings and lenient mode -------------------------------------------------------
GOOD = '{"type":"command","command":"{HOOK:good}"}'
add(
    "bad.not_json",
    sources={"project": '{"hooks": {"PreToolUse": [ {"hooks": [' + GOOD + "]}"},
    lenient=True,
)
add(
    "bad.not_json_user_good_project",
    sources={"user": "{ nope", "project": {"hooks": {P: [G(H("p"))]}}},
    lenient=True,
)
add(
    "bad.entry_missing_command",
    sources={"project": {"hooks": {P: [G({"type": "command"}, H("good"))]}}},
    lenient=True,
)
add(
    "bad.entry_unknown_type",
    sources={"project": {"hooks": {P: [G({"type": "bogus", "command": "x"}, H("good"))]}}},
    lenient=True,
)
add(
    "bad.group_not_object",
    sources={"project": {"hooks": {P: ["oops", G(H("good"))]}}},
    lenient=True,
)
add(
    "bad.event_not_list",
    sources={"project": {"hooks": {P: {"hooks": []}, "PostToolUse": [G(H("good"))]}}},
    lenient=True,
)
add(
    "bad.unknown_event",
    sources={"project": {"hooks": {"NoSuchEvent": [G(H("x"))], P: [G(H("good"))]}}},
    lenient=True,
)
add(
    "bad.timeout_string",
    sources={"project": {"hooks": {P: [G(H("good", timeout="ten"))]}}},
    lenient=True,
)
add(
    "bad.hooks_not_object",
    sources={"project": {"hooks": [1, 2]}, "user": {"hooks": {P: [G(H("u"))]}}},
    lenient=True,
)
add(
    "bad.matcher_number",
    sources={"project": {"hooks": {P: [{"matcher": 5, "hooks": [H("good")]}]}}},
    lenient=True,
)

# ---- timeouts ----------------------------------------------------------------------------------
add(
    "timeout.pre_exceeded",
    {P: [G(H("a", timeout=3))]},
    behaviours={"a": {"sleep": 9, "exit": 2, "stderr": "late"}},
    deviation=TIMED_OUT,
    deviates=("user",),
)
add(
    "timeout.pre_within",
    {P: [G(H("a", timeout=5))]},
    behaviours={"a": {"sleep": 0.5, "exit": 2, "stderr": "in time"}},
)
add(
    "timeout.stop_exceeded",
    {T: [G(H("a", timeout=3))]},
    [DONE, {"text": "second"}],
    behaviours={"a": once({"sleep": 9, "exit": 2, "stderr": "late"})},
)

# ---- async -------------------------------------------------------------------------------------
add(
    "async.pre_exit2_ignored",
    {P: [G(H("a", **{"async": True}))]},
    # The model's next turn waits for the async hook's log line: an async hook runs beside
    # the session, and without the wait Claude Code could exit before it had started.
    [bash("echo RAN"), {**DONE, "wait_hook": {"log": "{ROOT}/hooks.jsonl", "label": "a"}}],
    behaviours={"a": err("async no")},
)

# ---- subagents ---------------------------------------------------------------------------------
AGENT = {
    "tools": [
        {
            "name": "Agent",
            "input": {
                "description": "sub",
                "prompt": "do it",
                "subagent_type": "general-purpose",
                "run_in_background": False,
            },
        }
    ]
}
SUB = [AGENT, bash("echo SUB"), {"text": "sub done"}, DONE]
add("sub.start_stop", {"SubagentStart": [G(H("s"))], "SubagentStop": [G(H("t"))]}, SUB, fast=True)
add(
    "sub.pre_in_subagent",
    {P: [G(H("a"), matcher="Bash")]},
    SUB,
    behaviours={"a": err("no sub bash")},
)
add(
    "sub.stop_block",
    {"SubagentStop": [G(H("t"))]},
    [AGENT, {"text": "sub done"}, {"text": "sub again"}, DONE],
    behaviours={"t": once(out({"decision": "block", "reason": "sub more"}))},
)
add(
    "sub.start_context",
    {"SubagentStart": [G(H("s"))]},
    SUB,
    behaviours={"s": out(hso("SubagentStart", additionalContext="SUB-CTX"))},
)
add("sub.matcher_type", {"SubagentStart": [G(H("s"), matcher="general-purpose")]}, SUB)
add("sub.matcher_type_miss", {"SubagentStart": [G(H("s"), matcher="Explore")]}, SUB)
add(
    "sub.nested_pre",
    {
        P: [G(H("a"), matcher="Bash")],
        "SubagentStart": [G(H("s"))],
        "SubagentStop": [G(H("t"))],
    },
    [AGENT, AGENT, bash("echo NESTED"), {"text": "inner done"}, {"text": "outer done"}, DONE],
)
add(
    "sub.pre_agent_tool_deny",
    {P: [G(H("a"), matcher="Agent")]},
    SUB,
    behaviours={"a": err("no agents")},
)

# ---- hook types: http, prompt, agent -----------------------------------------------------------
add("type.prompt_ok", {P: [G({"type": "prompt", "prompt": 'MOCKVERDICT:{"ok":true} $ARGUMENTS'})]})
add(
    "type.prompt_deny",
    {
        P: [
            G(
                {
                    "type": "prompt",
                    "prompt": 'MOCKVERDICT:{"ok":false,"reason":"llm says no"} $ARGUMENTS',
                }
            )
        ]
    },
)
add(
    "type.prompt_stop_block",
    {
        T: [
            G(
                {
                    "type": "prompt",
                    "prompt": 'MOCKVERDICT:{"ok":false,"reason":"not yet"} $ARGUMENTS',
                }
            )
        ]
    },
    [DONE, {"text": "second"}],
)
add("type.agent_ok", {P: [G({"type": "agent", "prompt": 'MOCKVERDICT:{"ok":true} $ARGUMENTS'})]})
add(
    "type.agent_deny",
    {
        P: [
            G(
                {
                    "type": "agent",
                    "prompt": 'MOCKVERDICT:{"ok":false,"reason":"agent no"} $ARGUMENTS',
                }
            )
        ]
    },
)

# ---- http hooks to a loopback server the harness starts ---------------------------------------


def HT(label: str, **extra: Any) -> dict[str, Any]:
    """An http hook to the scenario's loopback server, answering as `label`'s behaviour says."""
    return {"type": "http", "url": "http://127.0.0.1:{HTTP}/hook/" + label, **extra}


DENY_BODY = json.dumps(hso(P, permissionDecision="deny", permissionDecisionReason="http no"))
add("http.deny", {P: [G(HT("h"))]}, http={"h": {"body": DENY_BODY}}, fast=True)
add("http.empty_200", {P: [G(HT("h"))]}, http={"h": {}})
add("http.non_2xx", {P: [G(HT("h"))]}, http={"h": {"status": 500, "body": DENY_BODY}})
add("http.bad_json", {P: [G(HT("h"))]}, http={"h": {"body": "not json"}})
add(
    "http.context",
    {Q: [G(HT("h"))]},
    http={"h": {"body": json.dumps(hso(Q, additionalContext="HTTP-CTX"))}},
)
add(
    "http.timeout",
    {P: [G(HT("h", timeout=2))]},
    http={"h": {"sleep": 6, "body": DENY_BODY}},
    deviation=TIMED_OUT,
    deviates=("user",),
)
add(
    "http.allowed_url",
    {P: [G(HT("h"))]},
    extra={"allowedHttpHookUrls": ["http://127.0.0.1:*/hook/*"]},
    http={"h": {"body": DENY_BODY}},
)
add(
    "http.url_not_allowed",
    {P: [G(HT("h"))]},
    extra={"allowedHttpHookUrls": ["http://example.invalid/*"]},
    http={"h": {"body": DENY_BODY}},
)
add(
    "http.url_allowed_in_other_scope",
    sources={
        "user": {"allowedHttpHookUrls": ["http://127.0.0.1:*/*"]},
        "project": {
            "allowedHttpHookUrls": ["http://example.invalid/*"],
            "hooks": {P: [G(HT("h"))]},
        },
    },
    http={"h": {"body": DENY_BODY}},
)
TOKEN = {"TOKEN": "s3cret"}
add(
    "http.header_env",
    {P: [G(HT("h", headers={"X-Token": "$TOKEN"}, allowedEnvVars=["TOKEN"]))]},
    http={"h": {"echo_header": "X-Token"}},
    env=TOKEN,
)
add(
    "http.header_env_braces",
    {P: [G(HT("h", headers={"X-Token": "Bearer ${TOKEN}"}, allowedEnvVars=["TOKEN"]))]},
    http={"h": {"echo_header": "X-Token"}},
    env=TOKEN,
)
add(
    "http.header_env_not_listed",
    {P: [G(HT("h", headers={"X-Token": "$TOKEN"}))]},
    http={"h": {"echo_header": "X-Token"}},
    env=TOKEN,
)
add(
    "http.header_env_outside_policy",
    {P: [G(HT("h", headers={"X-Token": "$TOKEN"}, allowedEnvVars=["TOKEN"]))]},
    extra={"httpHookAllowedEnvVars": ["OTHER"]},
    http={"h": {"echo_header": "X-Token"}},
    env=TOKEN,
)
add(
    "http.header_env_in_policy",
    {P: [G(HT("h", headers={"X-Token": "$TOKEN"}, allowedEnvVars=["TOKEN"]))]},
    extra={"httpHookAllowedEnvVars": ["TOKEN"]},
    http={"h": {"echo_header": "X-Token"}},
    env=TOKEN,
)

# ---- managed settings (/etc/claude-code/managed-settings.json, written by the harness) --------
add(
    "managed.hooks_with_project",
    sources={"managed": {"hooks": {P: [G(H("m"))]}}, "project": {"hooks": {P: [G(H("p"))]}}},
)
add(
    "managed.only_managed_hooks",
    sources={
        "managed": {"allowManagedHooksOnly": True, "hooks": {P: [G(H("m"))]}},
        "project": {"hooks": {P: [G(H("p"))]}},
        "user": {"hooks": {P: [G(H("u"))]}},
    },
)
add(
    "managed.only_without_hooks",
    sources={"managed": {"allowManagedHooksOnly": True}, "project": {"hooks": {P: [G(H("p"))]}}},
)
add(
    "managed.block",
    sources={"managed": {"hooks": {P: [G(H("m"))]}}},
    behaviours={"m": err("managed says no")},
)
add(
    "managed.disable_all",
    sources={"managed": {"disableAllHooks": True}, "project": {"hooks": {P: [G(H("p"))]}}},
)
add(
    "managed.user_disable_all_keeps_managed",
    sources={"managed": {"hooks": {P: [G(H("m"))]}}, "user": {"disableAllHooks": True}},
)
add(
    "managed.http_url_ceiling",
    sources={
        "managed": {"allowedHttpHookUrls": ["http://example.invalid/*"]},
        "project": {"allowedHttpHookUrls": ["http://127.0.0.1:*/*"], "hooks": {P: [G(HT("h"))]}},
    },
    http={"h": {"body": DENY_BODY}},
    deviation="a managed allowedHttpHookUrls is a ceiling in hookaudit: Claude Code unions "
    "every scope's list, so the project's entry lets the hook post to 127.0.0.1 and its deny "
    "blocks; hookaudit refuses the URL (outside the managed list) and the tool runs",
    deviates=("eval", "decision", "ran", "told", "user", "files"),
)

# ---- Notification, PreCompact and the rest -----------------------------------------------------
add("notif.none_headless", {"Notification": [G(H("n"))]})
add(
    "compact.manual",
    {"PreCompact": [G(H("c"))], "PostCompact": [G(H("d"))]},
    [DONE],
    prompt="/compact",
)
add(
    "compact.manual_block",
    {"PreCompact": [G(H("c"))]},
    [DONE],
    prompt="/compact",
    behaviours={"c": err("no compaction")},
)
add(
    "compact.matcher_manual",
    {"PreCompact": [G(H("c"), matcher="manual")]},
    [DONE],
    prompt="/compact",
)
add("compact.matcher_auto", {"PreCompact": [G(H("c"), matcher="auto")]}, [DONE], prompt="/compact")

# ---- more events and forms ---------------------------------------------------------------------
add("setup.init", {"Setup": [G(H("s"))]}, [DONE], args=[*ALLOW, "--init"])
add(
    "setup.init_context",
    {"Setup": [G(H("s"))]},
    [DONE],
    args=[*ALLOW, "--init"],
    behaviours={"s": out(hso("Setup", additionalContext="SETUP-CTX"))},
)
add(
    "setup.init_plain",
    {"Setup": [G(H("s"))]},
    [DONE],
    args=[*ALLOW, "--init"],
    behaviours={"s": out("SETUP-PLAIN")},
)
add(
    "setup.maintenance",
    {"Setup": [G(H("s"), matcher="maintenance")]},
    [DONE],
    args=[*ALLOW, "--maintenance"],
)
# Claude Code does not wait for InstructionsLoaded hooks, and kills those still running when
# the session ends: the model's reply waits for the hook's log line (as for async hooks).
WAIT_I = {**DONE, "wait_hook": {"log": "{ROOT}/hooks.jsonl", "label": "i"}}
add(
    "instructions.loaded",
    {"InstructionsLoaded": [G(H("i"))]},
    [WAIT_I],
    files={"CLAUDE.md": "# project rules\n"},
)
add(
    "instructions.matcher",
    {"InstructionsLoaded": [G(H("i"), matcher="session_start")]},
    [WAIT_I],
    files={"CLAUDE.md": "# project rules\n"},
)
add("group.env_ignored", {P: [G(H("a"), env={"X": "1"})]})
add("hook.timeout_field_ok", {P: [G(H("a", timeout=30))]}, behaviours={"a": err("t")})
add("hook.status_message", {P: [G(H("a", statusMessage="checking"))]})
add("pre.json.empty_object", {P: [G(H("a"))]}, behaviours={"a": out({})})
add("pre.json.empty_stdout_exit2", {P: [G(H("a"))]}, behaviours={"a": {"exit": 2, "stdout": ""}})
add("pre.json.null_hso", {P: [G(H("a"))]}, behaviours={"a": out({"hookSpecificOutput": None})})
add(
    "pre.json.reason_on_allow_headless",
    {P: [G(H("a"))]},
    args=[],
    behaviours={"a": out(hso(P, permissionDecision="allow", permissionDecisionReason="ok"))},
)
add(
    "post.write_context",
    {Q: [G(H("a"), matcher="Write")]},
    [write("pw.txt", "x"), DONE],
    behaviours={"a": out(hso(Q, additionalContext="POST-WRITE"))},
)
add(
    "post.read_block",
    {Q: [G(H("a"), matcher="Read")]},
    [read("r.txt"), DONE],
    behaviours={"a": out({"decision": "block", "reason": "read seen"})},
    files={"r.txt": "x\n"},
)
add(
    "ups.context_and_exit2",
    {U: [G(H("a"), H("b"))]},
    [DONE],
    behaviours={"a": out(hso(U, additionalContext="A")), "b": err("B refuses")},
)

FAST = [s for s in ALL if s.fast]

# ---- environment: CLAUDE_PROJECT_DIR after the session moved into a subdirectory -------------
# The session starts in the project, then `cd sub` (a subdirectory with its own
# .claude/settings.json): later hook inputs carry cwd=<project>/sub. A hook found at
# "$CLAUDE_PROJECT_DIR"/ROOTMARK runs only if the variable still names the project.
ROOTED = {
    "type": "command",
    "if": "Bash(echo *)",
    "command": 'test -f "$CLAUDE_PROJECT_DIR/ROOTMARK" && {HOOK:a}',
}
for name, sub_settings in [("subdir_with_settings", "{}"), ("subdir_plain", None)]:
    files = {"ROOTMARK": "", "sub/keep.txt": "x\n"}
    if sub_settings is not None:
        files["sub/.claude/settings.json"] = sub_settings
    add(
        f"env.project_dir_{name}",
        {P: [G(ROOTED, matcher="Bash")]},
        [bash("cd sub"), bash("echo RAN"), DONE],
        behaviours={"a": err("DENIED-FROM-PROJECT-DIR")},
        files=files,
    )

# ---- output limits: long hook output that reaches the model ---------------------------------
LONG = "L" * 30_000
for name, event, turns, answer in [
    ("ups_context", "UserPromptSubmit", [DONE], hso("UserPromptSubmit", additionalContext=LONG)),
    ("ups_plain", "UserPromptSubmit", [DONE], LONG),
    ("session_start_context", "SessionStart", [DONE], hso("SessionStart", additionalContext=LONG)),
    ("pre_context", P, None, hso(P, additionalContext=LONG)),
    ("post_context", "PostToolUse", None, hso("PostToolUse", additionalContext=LONG)),
    ("pre_deny_reason", P, None, hso(P, permissionDecision="deny", permissionDecisionReason=LONG)),
    ("pre_exit2_stderr", P, None, None),
]:
    add(
        f"limits.{name}",
        {event: [G(H("a"))]},
        turns,
        behaviours={"a": err(LONG) if answer is None else out(answer)},
    )

# ---- the malformed settings again, strict (hookaudit's default) ------------------------------
# Claude Code ignores the broken file (or the unknown event) and runs the rest; strict
# hookaudit refuses it, and its `--format claude` stand-in blocks with the reason. Each twin
# pins the observations that deviates: stricter, never looser.
STRICT_FIELDS: dict[str, tuple[str, ...]] = {  # as measured against 2.1.332
    "bad.not_json": ("told",),
    "bad.not_json_user_good_project": ("eval", "ran", "told"),
    "bad.entry_missing_command": ("told",),
    "bad.entry_unknown_type": ("ran",),
    "bad.group_not_object": ("told",),
    "bad.event_not_list": ("told",),
    "bad.unknown_event": ("eval", "ran", "told"),
    "bad.timeout_string": ("told",),
    "bad.hooks_not_object": ("eval", "ran", "told"),
    "bad.matcher_number": ("told",),
}
UNKNOWN_TYPE_KEPT = (
    "an unknown hook type (strict, the default): hookaudit keeps the file, runs its other "
    "hooks and records the unknown type as a hook error (the enforcing posture denies on "
    "it); Claude Code ignores the whole file. Stricter: a deny among the other hooks blocks"
)
for sc in [s for s in ALL if s.name in STRICT_FIELDS]:
    add(
        sc.name + ".strict",
        sources=sc.sources,
        turns=sc.turns,
        behaviours=sc.behaviours,
        lenient=False,
        deviation=UNKNOWN_TYPE_KEPT if sc.name == "bad.entry_unknown_type" else STRICT_REFUSES,
        deviates=STRICT_FIELDS[sc.name],
    )
