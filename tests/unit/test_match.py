"""engine.match and engine.shellwords: matchers, `if` rules, command splitting (spec §5, §8, §9).

Conformance cases are named `test_case_<n>_...`. No I/O: paths are strings, never touched.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine import match, shellrules, shellwords
from engine.match import (
    IF_EVENTS_CURRENT,
    IF_EVENTS_LEGACY,
    MAX_MATCHER,
    MAX_QUERY,
    Rule,
    file_watch_paths,
    if_allowed_on,
    if_matches,
    matcher_matches,
    parse_rule,
    regex_error,
)

CWD, HOME, ROOT = "/home/u/proj", "/home/u", "/home/u/proj"


def runs(
    rule: str,
    tool: str,
    tool_input: Mapping[str, object],
    *,
    profile: match.Profile = "current",
    source_root: str | None = None,
    cwd: str = CWD,
) -> bool:
    return if_matches(
        parse_rule(rule, profile=profile),
        tool,
        tool_input,
        cwd=cwd,
        home=HOME,
        source_root=source_root,
        profile=profile,
    )


def bash(rule: str, command: str, profile: match.Profile = "current") -> bool:
    return runs(rule, "Bash", {"command": command}, profile=profile)


def read(
    rule: str, path: str, profile: match.Profile = "current", source_root: str | None = None
) -> bool:
    return runs(rule, "Read", {"file_path": path}, profile=profile, source_root=source_root)


def fetch(rule: str, url: object, profile: match.Profile = "current") -> bool:
    return runs(rule, "WebFetch", {"url": url}, profile=profile)


#: A hang guard for hostile input, as the harness's per-test limit (not a timing inside the
#: test): a catastrophic regex or a quadratic split takes minutes on these inputs and a
#: linear one milliseconds. Speed is measured in tests/bench/bench_plan.py.
hang_guard = pytest.mark.timeout(60)


# -- §8 conformance cases: matchers ---------------------------------------------------------


def test_case_1_bash_matcher_does_not_run_for_bash_output() -> None:
    assert not matcher_matches("PreToolUse", "BashOutput", "Bash")
    assert matcher_matches("PreToolUse", "Bash", "Bash")


def test_case_2_edit_regex_is_unanchored_and_matches_notebook_edit() -> None:
    assert matcher_matches("PreToolUse", "NotebookEdit", "Edit.*")
    assert not matcher_matches("PreToolUse", "NotebookEdit", "^Edit$")


def test_case_3_bare_mcp_server_prefix_matches_nothing_but_regex_does() -> None:
    tool = "mcp__memory__create_entities"
    assert not matcher_matches("PreToolUse", tool, "mcp__memory")
    assert matcher_matches("PreToolUse", tool, "mcp__memory__.*")
    assert matcher_matches("PreToolUse", "mcp__brave-search__web", "mcp__brave-search__.*")


def test_case_4_hyphenated_matcher_is_exact_in_current_and_a_regex_in_legacy() -> None:
    q = "senior-code-reviewer"
    assert not matcher_matches("SubagentStart", q, "code-reviewer")
    assert matcher_matches("SubagentStart", q, "code-reviewer", profile="legacy")
    assert matcher_matches("SubagentStart", "code-reviewer", "code-reviewer")


def test_case_5_comma_list_fires_in_current_and_never_in_legacy() -> None:
    assert matcher_matches("PreToolUse", "Write", "Edit, Write")
    assert matcher_matches("PreToolUse", "Edit", "Edit, Write")
    assert not matcher_matches("PreToolUse", "Write", "Edit, Write", profile="legacy")
    assert not matcher_matches("PreToolUse", "Edit", "Edit, Write", profile="legacy")


def test_case_6_invalid_regex_runs_nothing_in_claude_and_is_exact_in_agent_core() -> None:
    assert not matcher_matches("PreToolUse", "Bash", "[")
    assert not matcher_matches("PreToolUse", "[", "[")
    assert not matcher_matches("PreToolUse", "Bash", "[", dialect="agent-core")
    assert matcher_matches("PreToolUse", "[", "[", dialect="agent-core")


def test_case_7_stop_ignores_the_matcher_in_claude_but_not_in_agent_core() -> None:
    assert matcher_matches("Stop", None, "foo")
    assert not matcher_matches("Stop", None, "foo", dialect="agent-core")
    assert matcher_matches("Stop", None, "", dialect="agent-core")
    assert matcher_matches("Stop", None, None, dialect="agent-core")


def test_an_empty_target_is_matched_like_any_other() -> None:
    """Claude Code 2.1.332's `/compact` raises SubagentStop with agent_type "": it ran the
    groups without a matcher, "", "*", "^$" and ".*", and not ".+" nor "general-purpose|Explore"
    (tests/integration/test_claude_code_compact.py drives it). v2.1.88's source ignored the
    matcher for an empty target: the legacy profile keeps that."""
    runs = ["", "*", "^$", ".*", None]
    skips = [".+", "general-purpose", "general-purpose|Explore"]
    assert all(matcher_matches("SubagentStop", "", m) for m in runs)
    assert not any(matcher_matches("SubagentStop", "", m) for m in skips)
    assert all(matcher_matches("SubagentStop", "", m, profile="legacy") for m in skips)


def test_case_53_file_changed_watch_list_and_basename_regex() -> None:
    assert file_watch_paths(".envrc|.env", "/w") == ["/w/.envrc", "/w/.env"]
    assert matcher_matches("FileChanged", ".env", ".envrc|.env")  # `.` takes the regex path
    assert not matcher_matches("FileChanged", "settings.json", ".envrc|.env")


# -- matchers: §5.1 details -----------------------------------------------------------------


@pytest.mark.parametrize("matcher", [None, "", "*"])
def test_empty_or_star_matcher_matches_everything(matcher: str | None) -> None:
    assert matcher_matches("PreToolUse", "Anything", matcher)
    assert matcher_matches("PreToolUse", "Anything", matcher, dialect="agent-core")


def test_pipe_list_and_case_sensitivity() -> None:
    assert matcher_matches("PreToolUse", "Edit", "Write|Edit")
    assert not matcher_matches("PreToolUse", "edit", "Write|Edit")
    assert not matcher_matches("PreToolUse", "bash", "Bash")
    assert matcher_matches("PreToolUse", "Edit", "Write | Edit")  # current strips around `|`


def test_file_changed_and_stop_failure_keep_the_narrow_charset() -> None:
    # narrow: `,` and `-` are regex characters there, so `a,b` is not a list
    assert not matcher_matches("StopFailure", "rate_limit", "rate_limit,overloaded")
    assert matcher_matches("StopFailure", "overloaded", "rate_limit|overloaded")
    assert matcher_matches("FileChanged", "x-my-file.txt", "my-file")  # regex, unanchored
    assert not matcher_matches("SubagentStart", "x-my-file", "my-file")  # current: exact


@pytest.mark.parametrize(
    ("matcher", "query"),
    [
        ("Task", "Agent"),
        ("Agent", "Task"),
        ("KillShell", "TaskStop"),
        ("TaskStop", "KillShell"),
        ("BashOutputTool", "TaskOutput"),
        ("AgentOutputTool|Read", "TaskOutput"),
        ("^Task$", "Agent"),  # regex path: tried against the legacy names of the query
        ("^Agent$", "Task"),
        ("^BashOutputTool$", "TaskOutput"),
    ],
)
def test_legacy_tool_aliases_apply_both_ways(matcher: str, query: str) -> None:
    assert matcher_matches("PreToolUse", query, matcher)
    assert matcher_matches("PreToolUse", query, matcher, profile="legacy")


def test_aliases_do_not_leak_to_other_names() -> None:
    assert not matcher_matches("PreToolUse", "TaskCreate", "Task")
    assert not matcher_matches("PreToolUse", "Agent", "^KillShell$")


def test_plugin_agent_type_with_colon_takes_the_regex_path() -> None:
    assert matcher_matches("SubagentStart", "my-plugin:reviewer", "^my-plugin:reviewer$")
    assert not matcher_matches("SubagentStart", "my-plugin:reviewer2x", "^my-plugin:reviewer$")


def test_agent_core_every_matcher_is_an_unanchored_regex() -> None:
    assert matcher_matches("PreToolUse", "BashOutput", "Bash", dialect="agent-core")
    assert matcher_matches("PreToolUse", "Edit", "Write|Edit", dialect="agent-core")
    assert not matcher_matches("PreToolUse", "Read", "^Bash$", dialect="agent-core")
    assert matcher_matches("PreToolUse", "*", "*", dialect="agent-core")


# -- ECMAScript regex semantics --------------------------------------------------------------


@pytest.mark.parametrize(
    ("matcher", "query", "expected"),
    [
        ("^Bash$", "Bash\n", False),  # Python's `$` would match before the final newline
        ("Bash$", "Bash", True),
        ("^x\\d$", "x\u0663", False),  # JS `\d` is ASCII only
        ("^x\\d$", "x3", True),
        ("^x\\w$", "x\u00e9", False),
        ("^a\\sb$", "a\u00a0b", True),  # JS `\s` includes no-break space...
        ("^a\\sb$", "a\x1cb", False),  # ...and not the file separator Python's `\s` has
        ("^a\\Sb$", "a\u00a0b", False),
        ("^a.b$", "a\rb", False),  # JS `.` excludes all line terminators
        ("^a.b$", "a\u2028b", False),
        ("^a.b$", "a-b", True),
        ("^a[]b$", "ab", False),  # `[]` matches nothing
        ("^a[^]b$", "a\nb", True),  # `[^]` matches anything
        ("^a{,3}$", "a{,3}", True),  # not a quantifier in JS
        ("^a{,3}$", "aaa", False),
        ("^a{2}$", "aa", True),
        ("^x{$", "x{", True),
        ("^x}]$", "x}]", True),
        ("^Bash\\Z$", "BashZ", True),  # identity escape, not Python's end anchor
        ("^\\A\\e$", "Ae", True),
        ("^(?<n>Ba)sh\\k<n>$", "BashBa", True),
        ("^(a)\\1$", "aa", True),
        ("^(a)\\10$", "a\x08", False),  # \10 is no group 10 here: invalid in Python, rejected
        ("^\\x41\\u0042$", "AB", True),
        ("^\\x4$", "x4", True),  # incomplete hex escape is a literal x
        ("^\\cJ$", "\n", True),
        ("^\\c$", "\\c", True),
        ("^\\0$", "\x00", True),
        ("^[\\d-z]$", "-", True),  # Annex B: a class escape ends no range
        ("^[\\d-z]$", "m", False),
        ("^[a-c]$", "b", True),
        ("^[\\b]$", "\x08", True),
        ("^[[&&~~||-]+$", "[&~|-", True),  # no Python set-operation warnings
        ("^[+--]$", ",", True),  # a range ending in `-`
        ("^[\\101]$", "A", True),  # octal escape in a class
        ("\\bBash\\b", "Bash tool", True),
        ("(?=Ba)Bash", "Bash", True),
        ("(?<=x)Bash", "xBash", True),
        ("^Edit(?:Tool)?$", "EditTool", True),
        ("^Bash$|^Read$", "Read", True),
    ],
)
def test_matcher_regexes_have_ecmascript_semantics(
    matcher: str, query: str, expected: bool
) -> None:
    assert matcher_matches("PreToolUse", query, matcher) is expected


@pytest.mark.parametrize(
    "matcher",
    ["(", ")", "[", "a\\", "*a", "+", "a**", "a*+", "a++", "a{2}*", "(?i)bash", "(?P<x>a)",
     "(?#c)", "(?>a)", "a{3,1}", "(?<n>", "x|*"],
)  # fmt: skip
def test_what_javascript_rejects_is_an_invalid_regex(matcher: str) -> None:
    assert regex_error(matcher) is not None
    assert not matcher_matches("PreToolUse", matcher, matcher)


def test_regex_error_explains_and_is_none_for_valid_regexes() -> None:
    assert regex_error("(") == "missing ')'"
    assert regex_error("Bash|Read") is None
    assert regex_error("x" * (MAX_MATCHER + 1)) == f"longer than {MAX_MATCHER} characters"
    assert "catastrophic" in (regex_error("(a+)+$") or "")


def test_compiled_regexes_are_cached() -> None:
    match._compile.cache_clear()
    for _ in range(3):
        matcher_matches("PreToolUse", "NotebookEdit", "Edit.*")
    assert match._compile.cache_info().hits >= 2


# -- catastrophic and oversized regexes ------------------------------------------------------


@pytest.mark.parametrize(
    "matcher",
    ["(a+)+$", "(a*)*$", "(a|a)*$", "(a|aa)+$", "((a+)?)+$", "(.*a){12}$", "(?:a+){2,}$",
     ".*.*.*.*x", "\\w*\\w*\\w*\\w*!", "(a*)(a*)(a*)(a*)!"],
)  # fmt: skip
@hang_guard
def test_catastrophic_regexes_are_rejected_and_do_not_hang(matcher: str) -> None:
    for query in ("a" * 30 + "!", "a" * 5000 + "!", "a" * MAX_QUERY):
        assert not matcher_matches("PreToolUse", query, matcher)
    assert "catastrophic" in (regex_error(matcher) or "")


@pytest.mark.parametrize(
    ("matcher", "query"),
    [("mcp__.*__.*", "mcp__a__b"), (".*foo.*bar.*", "xfooybarz"), ("(ab|cd)", "xcd"),
     ("^(Edit|Write)$", "Write"), ("(\\.ts)?$", "a.ts"), ("^a{1,3}b+$", "aab")],
)  # fmt: skip
def test_ordinary_regexes_are_not_flagged(matcher: str, query: str) -> None:
    assert regex_error(matcher) is None
    assert matcher_matches("PreToolUse", query, matcher)


@hang_guard
def test_more_than_two_repeats_in_a_row_are_rejected() -> None:
    assert "more than 2 repeats" in (regex_error("a.*b.*c.*d") or "")
    assert "more than 2 repeats" in (regex_error("(a*)(b+)c{1,9}") or "")
    assert regex_error("a.*b|c.*d|e.*f") is None  # counted per branch
    assert regex_error("a.*b.*c") is None
    assert not matcher_matches("PreToolUse", "a" * MAX_QUERY, "a.*.*x")  # worst accepted shape


@pytest.mark.parametrize(
    ("matcher", "query", "expected"),
    [
        (".*foo.*bar.*", "xfooybarz", True),  # edge `.*` are dropped: one repeat left
        (".*?foo.*", "foo", True),
        (".*", "anything", True),
        ("x|.*", "y", True),
        ("Edit.*", "Edi", False),
        ("\\\\.*", "a\\", True),  # an escaped backslash, then `.*`
        ("\\\\.*", "ab", False),
        ("a\\.*", "xa", True),  # `\.*` is any run of dots: nothing to drop...
        ("a\\.*", "b", False),  # ...else `a\` would be an invalid regex
        ("^.*x", "\nx", False),  # anchored: kept, and JS `.` stops at the newline
    ],
)
def test_edge_dot_stars_are_dropped_without_changing_the_answer(
    matcher: str, query: str, expected: bool
) -> None:
    assert matcher_matches("PreToolUse", query, matcher) is expected


def test_over_long_matcher_is_invalid_even_if_it_would_match() -> None:
    long = "B" + "a?" * MAX_MATCHER
    assert not matcher_matches("PreToolUse", "B", long)
    assert matcher_matches("PreToolUse", long, long, dialect="agent-core")  # exact compare


@hang_guard
def test_over_long_query_skips_regexes_but_not_exact_matches() -> None:
    name = "A" * (MAX_QUERY + 1)
    assert not matcher_matches("PreToolUse", name, "A+")
    assert matcher_matches("PreToolUse", name, name)  # simple path
    assert matcher_matches("PreToolUse", name, "A+|" + name, dialect="agent-core") is False
    assert matcher_matches("PreToolUse", name, name, dialect="agent-core")


@hang_guard
def test_huge_hostile_query_is_cheap() -> None:
    query = "a" * 10_000_000
    assert not matcher_matches("PreToolUse", query, "Bash")
    assert not matcher_matches("PreToolUse", query, "(a+)+$")
    assert not matcher_matches("PreToolUse", query, "^a*$")


# -- FileChanged watch list (§5.2) -----------------------------------------------------------


def test_watch_list_parts_are_literal_names_in_the_cwd() -> None:
    assert file_watch_paths("*", "/w") == ["/w/*"]
    assert file_watch_paths(".env|.env||x y", "/w/") == ["/w/.env", "/w/x y"]
    assert file_watch_paths(None, "/w") == []
    assert file_watch_paths("", "/w") == []
    assert file_watch_paths("sub/../a", "/w") == ["/w/a"]  # joined as Node's path.join


# -- `if`: parsing (§5.4) --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Bash", Rule("Bash", None)),
        ("Bash()", Rule("Bash", None)),
        ("Bash(*)", Rule("Bash", None)),
        ("Bash(git *)", Rule("Bash", "git *")),
        ("Bash(echo \\(x\\))", Rule("Bash", "echo (x)")),
        ("Bash(x(y))", Rule("Bash", "x(y)")),
        ("Bash(a\\\\)", Rule("Bash", "a\\")),
        ("Bash(a\\)", Rule("Bash(a\\)", None)),  # the only `)` is escaped
        ("Bash(x)y", Rule("Bash(x)y", None)),  # `)` not final
        ("(x)", Rule("(x)", None)),  # empty tool name
        ("Bash)x(", Rule("Bash)x(", None)),
        ("Task(review)", Rule("Agent", "review")),  # alias on the tool name
        ("KillShell", Rule("TaskStop", None)),
        ("", Rule("", None)),
        ("Bash(\\*)", Rule("Bash", "\\*")),  # `\*` is left for the wildcard rule
    ],
)
def test_parse_rule(text: str, expected: Rule) -> None:
    assert parse_rule(text) == expected
    assert parse_rule(text, profile="legacy") == expected


def _escape_rule_content(content: str) -> str:
    return content.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


@given(st.text(), st.sampled_from(["Bash", "Read", "WebFetch", "mcp__s__t"]))
def test_parse_rule_round_trips_escaped_content(content: str, tool: str) -> None:
    rule = parse_rule(f"{tool}({_escape_rule_content(content)})")
    assert rule == Rule(tool, None if content in ("", "*") else content)


@pytest.mark.parametrize(
    "text", ["\\(" * 100_000, "(" * 100_000 + ")", "Bash(" + "\\" * 200_001 + ")", "x" * 10**6]
)
@hang_guard
def test_parse_rule_is_linear_on_hostile_text(text: str) -> None:
    parse_rule(text)


@given(st.text())
def test_parse_rule_never_raises(text: str) -> None:
    rule = parse_rule(text)
    assert isinstance(rule.tool, str)


# -- `if`: scope -----------------------------------------------------------------------------


def test_case_33_if_on_stop_never_runs() -> None:
    assert not if_allowed_on("Stop")
    assert not if_allowed_on("Stop", "legacy")


def test_if_scope_per_profile() -> None:
    added = IF_EVENTS_CURRENT - IF_EVENTS_LEGACY
    assert added == {"PermissionDenied"}
    for event in ("PreToolUse", "PostToolUse", "PostToolUseFailure", "PermissionRequest"):
        assert if_allowed_on(event) and if_allowed_on(event, "legacy")
    assert if_allowed_on("PermissionDenied")
    assert not if_allowed_on("PermissionDenied", "legacy")
    assert not if_allowed_on("UserPromptSubmit")


# -- `if`: Bash ------------------------------------------------------------------------------


def test_case_31_compound_and_assignment_prefixed_commands() -> None:
    assert bash("Bash(git *)", "npm test && git push")
    assert bash("Bash(git *)", "FOO=bar git push")
    assert not bash("Bash(git *)", "npm test")


def test_case_32_legacy_prefix_syntax() -> None:
    for profile in ("current", "legacy"):
        assert bash("Bash(git push:*)", "git push origin", profile)
        assert bash("Bash(git push:*)", "git push", profile)
        assert not bash("Bash(git push:*)", "git pushx", profile)


@pytest.mark.parametrize(
    ("rule", "command", "expected"),
    [
        ("Bash(ls *)", "lsof", False),
        ("Bash(ls*)", "lsof", True),
        ("Bash(ls *)", "ls", True),
        ("Bash(npm run test *)", "npm run test", True),
        ("Bash(npm run test *)", "npm run test --watch", True),
        ("Bash(git:* push)", "git:x push", True),  # `:*` only counts at the very end
        ("Bash(git:* push)", "git push", False),
        ("Bash(* --force)", "git push --force", True),
        ("Bash(git * main)", "git push origin main", True),
        ("Bash(npm test)", "npm test", True),
        ("Bash(npm test)", "  npm    test  ", True),
        ("Bash(npm test)", "npm test --watch", False),
        ("Bash(rm *)", "echo hi; rm -rf x", True),
        ("Bash(rm *)", "echo hi || rm -rf x", True),
        ("Bash(rm *)", "cat x | rm -rf x", True),
        ("Bash(rm *)", "cat x |& rm -rf x", True),
        ("Bash(rm *)", "sleep 1 & rm -rf x", True),
        ("Bash(rm *)", "echo hi\nrm -rf x", True),
        ("Bash(rm *)", "(cd x && rm y)", True),
        ("Bash(rm *)", "if true; then rm x; fi", True),
        ("Bash(rm *)", "echo 'rm -rf x'", False),
        ("Bash(rm *)", "echo rm -rf x", False),
        ("Bash(git commit -m a b)", 'git commit -m "a b"', True),  # argv joined by spaces
        ('Bash(git commit -m "a b")', 'git commit -m "a b"', True),  # or as written
        ("Bash(echo \\*)", "echo '*'", True),  # `\*` is a literal star
        ("Bash(echo \\*)", "echo hi", False),
        ("Bash(npm test)", "npm test > out.txt 2>&1", True),  # redirections are not argv
        ("Bash(npm test)", "A=1 B='x y' npm test", True),
        ("Bash(rm *)", "git commit -F - <<EOF\nrm -rf /\nEOF", False),  # here-doc body
        ("Bash(rm *)", "cat <<EOF\n$(rm -rf /)\nEOF", True),  # ...which still expands
        ("Bash(rm *)", "cat <<'EOF'\n$(rm -rf /)\nEOF", False),  # ...unless quoted
        ("Bash(rm *)", "echo $(rm -rf x)", True),
        ("Bash(rm *)", "echo `rm -rf x`", True),
        ("Bash(rm *)", 'echo "$(rm -rf x)"', True),
        ("Bash(rm *)", "diff <(rm x) y", True),
        ("Bash(git push *)", "git $(echo push) origin", True),  # names arguments + `$()`
        ("Bash(git push *)", "git $SUB origin", True),
        ("Bash(git push *)", "git ${SUB} origin", True),
        ("Bash(git push *)", "git '$SUB' origin", False),  # single quotes: no expansion
        ("Bash(git *)", "echo $HOME", False),  # names only the command
        ("Bash(Bash)", "Bash", True),
    ],
)
def test_bash_rules_current(rule: str, command: str, expected: bool) -> None:
    assert bash(rule, command) is expected


@pytest.mark.parametrize(
    ("rule", "command", "expected"),
    [
        ("Bash(rm *)", "echo $(rm -rf x)", False),  # legacy does not look inside `$()`
        ("Bash(rm *)", "echo `rm -rf x`", False),
        ("Bash(git push *)", "git $SUB origin", False),
        ("Bash(git *)", "npm test && git push", True),
        ("Bash(git *)", "FOO=bar git push", True),
    ],
)
def test_bash_rules_legacy(rule: str, command: str, expected: bool) -> None:
    assert bash(rule, command, "legacy") is expected


@pytest.mark.parametrize(
    "command",
    ['echo "unclosed', "echo 'unclosed", "echo $(ls", "echo `ls", "echo )", "echo ${x",
     "$(" * 100 + ")" * 100, "x" * (shellwords.MAX_LENGTH + 1)],
)  # fmt: skip
@hang_guard
def test_unparseable_command_fails_open(command: str) -> None:
    assert bash("Bash(rm *)", command)


def test_bash_tool_input_of_the_wrong_shape_is_false() -> None:
    assert not runs("Bash(rm *)", "Bash", {"command": ["rm", "x"]})
    assert not runs("Bash(rm *)", "Bash", {})
    assert not runs("Bash(rm *)", "Bash", ["rm"])  # type: ignore[arg-type]
    assert runs("Bash", "Bash", {})  # no content: the tool name decides


def test_powershell_current_is_case_insensitive_legacy_has_no_matcher() -> None:
    ps = {"command": 'remove-item -Recurse C:\\x; Write-Host `"done`"'}
    assert runs("PowerShell(Remove-Item *)", "PowerShell", ps)
    assert runs("PowerShell(write-host *)", "PowerShell", ps)
    assert not runs("PowerShell(Get-ChildItem *)", "PowerShell", ps)
    assert not runs("PowerShell(Remove-Item *)", "PowerShell", ps, profile="legacy")
    assert runs("PowerShell", "PowerShell", ps, profile="legacy")


@hang_guard
def test_large_commands_are_split_quickly() -> None:
    command = "echo 'a b' \"c $d\" && " * 9_000 + "rm -rf /"
    assert len(command) < shellwords.MAX_LENGTH
    assert bash("Bash(rm *)", command)
    assert not bash("Bash(rm *)", command[: -len("rm -rf /")] + "ls")


# -- shellwords ------------------------------------------------------------------------------


def test_shellwords_parse_example() -> None:
    script = shellwords.parse("FOO=1 git push && echo $(whoami) 2>/dev/null")
    assert script is not None
    assert [c.argv for c in script.commands] == [
        ("git", "push"),
        ("echo", "$(whoami)"),
        ("whoami",),
    ]
    assert script.has_expansion
    only_top = shellwords.parse("echo $(whoami)", substitutions=False)
    assert only_top is not None and [c.argv for c in only_top.commands] == [("echo", "$(whoami)")]


@pytest.mark.parametrize(
    ("command", "argv"),
    [
        ("echo 'a'\"b\"c", [("echo", "abc")]),
        ('echo "a\\"b" \\$x', [("echo", 'a"b', "$x")]),
        ("echo $'a\\tb'", [("echo", "a\tb")]),
        ("ls \\\n  -la", [("ls", "-la")]),
        ("a # comment; rm x\nb", [("a",), ("b",)]),
        ("echo a#b", [("echo", "a#b")]),
        ("x=1", []),
        ("! git push", [("git", "push")]),
        ("echo $((1 + (2)))", [("echo", "$((1 + (2)))")]),
        ("cmd &> log; cmd2 >> log 2>&1", [("cmd",), ("cmd2",)]),
    ],
)
def test_shellwords_words(command: str, argv: list[tuple[str, ...]]) -> None:
    script = shellwords.parse(command)
    assert script is not None
    assert [c.argv for c in script.commands] == argv


def test_shellwords_powershell_quoting() -> None:
    script = shellwords.parse("Write-Host 'it''s' \"a\"\"b\" `$x C:\\dir", powershell=True)
    assert script is not None
    assert [c.argv for c in script.commands] == [("Write-Host", "it's", 'a"b', "$x", "C:\\dir")]


_SHELL_CHARS = st.text(alphabet="ab $()`'\"\\;&|<>#{}=\n\t-*!", max_size=60)


@given(_SHELL_CHARS, st.booleans(), st.booleans())
def test_shellwords_never_raise(command: str, powershell: bool, substitutions: bool) -> None:
    shellwords.parse(command, powershell=powershell, substitutions=substitutions)
    shellrules.command_matches("a *", command, powershell=powershell, current=substitutions)


@given(st.text(max_size=80))
def test_shellwords_never_raise_on_any_text(command: str) -> None:
    shellwords.parse(command)


@given(st.lists(st.text(alphabet="ab", max_size=3), max_size=4), st.text(alphabet="ab", max_size=8))
def test_wildcard_agrees_with_a_regex_oracle(parts: list[str], text: str) -> None:
    pattern = "*".join(parts)
    oracle = re.fullmatch(".*".join(map(re.escape, parts)), text, re.S) is not None
    if len(parts) == 2 and parts[1] == "" and parts[0].endswith(" "):
        oracle = oracle or text == parts[0][:-1]
    assert shellrules.wildcard(pattern, text) is oracle


# -- `if`: file tools ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rule", "path", "expected"),
    [
        ("Read(.env)", f"{CWD}/.env", True),  # a bare name matches at any depth...
        ("Read(.env)", f"{CWD}/a/b/.env", True),
        ("Read(.env)", "/etc/.env", True),  # ...anywhere (decision)
        ("Read(.env)", f"{CWD}/.envrc", False),
        ("Read(*.ts)", f"{CWD}/src/a.ts", True),
        ("Read(*.ts)", f"{CWD}/src/a.tsx", False),
        ("Read(src/*.ts)", f"{CWD}/src/a.ts", True),
        ("Read(src/*.ts)", f"{CWD}/src/a/b.ts", False),  # `*` stays in one segment
        ("Read(src/**/*.ts)", f"{CWD}/src/a/b.ts", True),
        ("Read(src/**/*.ts)", f"{CWD}/src/b.ts", True),  # `**/` may be empty
        ("Read(src/?.ts)", f"{CWD}/src/a.ts", True),
        ("Read(src/?.ts)", f"{CWD}/src/ab.ts", False),
        ("Read(src/**)", f"{CWD}/src/a/b.ts", True),  # single-segment `dir/**`: <cwd>/dir only
        ("Read(src/**)", f"{CWD}/lib/src/a.ts", False),
        ("Read(src/**)", f"{CWD}/src", False),  # inside `src`, not `src` itself
        ("Read(**/src/**)", f"{CWD}/lib/src/a.ts", True),
        ("Read(src/)", f"{CWD}/lib/src/a.ts", True),  # `dir/` is `dir/**`, at any depth
        ("Read(./src/a.ts)", f"{CWD}/src/a.ts", True),
        ("Read(./a.ts)", f"{CWD}/src/a.ts", False),
        ("Read(//etc/passwd)", "/etc/passwd", True),
        ("Read(//etc/*)", "/etc/ssh/x", False),
        ("Read(~/.ssh/**)", f"{HOME}/.ssh/id_rsa", True),
        ("Read(~/.ssh/**)", f"{CWD}/.ssh/id_rsa", False),
        ("Read(/config/*.json)", f"{ROOT}/config/a.json", True),  # source root (= cwd here)
        ("Read(src/[ab].ts)", f"{CWD}/src/b.ts", True),  # gitignore classes
        ("Read(src/[!ab].ts)", f"{CWD}/src/b.ts", False),
        ("Read(\\*.txt)", f"{CWD}/*.txt", True),  # escaped star is literal
        ("Read(\\*.txt)", f"{CWD}/a.txt", False),
        ("Read(\\[x].txt)", f"{CWD}/[x].txt", True),
        ("Read(\\?.txt)", f"{CWD}/a.txt", False),
    ],
)
def test_file_rules_current(rule: str, path: str, expected: bool) -> None:
    assert read(rule, path) is expected


def test_root_anchor_uses_the_source_root_and_falls_back_to_cwd() -> None:
    assert read("Read(/config/*.json)", "/etc/claude/config/a.json", source_root="/etc/claude")
    assert not read("Read(/config/*.json)", f"{CWD}/config/a.json", source_root="/etc/claude")
    assert read("Read(/config/*.json)", f"{CWD}/config/a.json", source_root=None)


@pytest.mark.parametrize(
    "path",
    ["/etc/../home/x/.env", "/home/x//.env", "/home/x/./.env", "/home/x/.env/", "//home/x/.env",
     "../../x/.env", "~/.env", "C:\\Users\\me\\.env"],
)  # fmt: skip
def test_path_tricks_do_not_evade_a_deny_style_rule(path: str) -> None:
    assert read("Read(**/.env)", path)
    assert read("Read(.env)", path)


def test_relative_and_home_paths_resolve_before_anchored_rules() -> None:
    assert read("Read(//home/u/proj/src/a.ts)", "src/a.ts")
    assert read("Read(//home/u/proj/a.ts)", "src/../a.ts")
    assert read("Read(~/notes.md)", "~/notes.md")
    assert read("Read(//c/Users/**)", "C:\\Users\\me\\x.txt")


@pytest.mark.parametrize(
    ("tool", "field"),
    [("Edit", "file_path"), ("Write", "file_path"), ("MultiEdit", "file_path"),
     ("NotebookEdit", "notebook_path"), ("Glob", "path"), ("Grep", "path")],
)  # fmt: skip
def test_each_file_tool_reads_its_own_field(tool: str, field: str) -> None:
    assert runs(f"{tool}(*.ts)", tool, {field: f"{CWD}/a.ts"})
    assert not runs(f"{tool}(*.ts)", tool, {field: f"{CWD}/a.py"})
    assert not runs(f"{tool}(*.ts)", tool, {field: 3})


def test_glob_and_grep_without_a_path_search_the_cwd() -> None:
    assert runs("Grep(//home/u/proj)", "Grep", {"pattern": "x"})
    assert not runs("Grep(//tmp)", "Grep", {"pattern": "x"})


def test_file_rule_needs_the_same_tool_and_a_string_path() -> None:
    assert not runs("Edit(*.ts)", "Write", {"file_path": f"{CWD}/a.ts"})
    assert not runs("Read(*.ts)", "Read", {})
    assert not runs("Read(*.ts)", "Read", {"file_path": ""})
    assert not runs("Read(*.ts)", "Read", {"file_path": None})


@pytest.mark.parametrize(
    ("rule", "path", "expected"),
    [
        ("Edit(*.ts)", "/a/b/c.ts", True),  # `*` crosses `/`
        ("Read(.env)", f"{CWD}/.env", False),  # never matched before 2.1.176
        (f"Read({CWD}/.env)", f"{CWD}/.env", True),
        (f"Read({CWD}/.env)", f"{CWD}/sub/../.env", True),
        ("Read(/home/*)", "/home/u/x/y", True),
    ],
)
def test_file_rules_legacy_match_the_whole_absolute_path(
    rule: str, path: str, expected: bool
) -> None:
    tool = rule.split("(")[0]
    assert runs(rule, tool, {"file_path": path}, profile="legacy") is expected


def test_legacy_glob_and_grep_test_the_pattern_argument() -> None:
    assert runs("Glob(**/*.py)", "Glob", {"pattern": "**/*.py", "path": "/x"}, profile="legacy")
    assert not runs("Glob(/x*)", "Glob", {"pattern": "*.py", "path": "/x"}, profile="legacy")
    assert runs("Grep(TODO*)", "Grep", {"pattern": "TODO:"}, profile="legacy")
    assert not runs("Grep(TODO*)", "Grep", {"path": "TODO"}, profile="legacy")


@hang_guard
def test_hostile_paths_are_cheap() -> None:
    path = "/" + "/".join(["a"] * 20_000) + "/" + "b" * 100_000
    assert not read("Read(**/a/**/a/**/a/**/c*c*c*c*d)", path)
    assert read("Read(**/a/**/b*)", path)


# -- `if`: WebFetch --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rule", "expected"),
    [
        ("WebFetch", True),
        ("WebFetch(*)", True),
        # Claude Code 2.1.332 runs no hook with a `domain:` rule, whatever the URL
        # (tests/conformance/claude_code: if.webfetch_domain, _exact, _glob, _any, _miss)
        ("WebFetch(domain:docs.example.com)", False),
        ("WebFetch(domain:*.example.com)", False),
        ("WebFetch(domain:*)", False),
        ("WebFetch(example.com)", False),
    ],
)
@pytest.mark.parametrize("profile", ["current", "legacy"])
def test_webfetch_rules_are_the_binary_s(rule: str, expected: bool, profile: str) -> None:
    assert fetch(rule, "https://docs.example.com/a", profile) is expected
    assert not fetch("WebFetch(domain:*)", 42, profile)


# -- `if`: MCP and other tools ---------------------------------------------------------------


def test_mcp_whole_name_rule() -> None:
    tool = "mcp__memory__create_entities"
    for profile in ("current", "legacy"):
        assert runs(tool, tool, {}, profile=profile)
        assert not runs(tool, "mcp__memory__delete", {}, profile=profile)


def test_mcp_server_only_rule_matches_the_server_in_current_only() -> None:
    assert runs("mcp__memory", "mcp__memory__create_entities", {})
    assert runs("mcp__memory__*", "mcp__memory__create_entities", {})
    assert not runs("mcp__memory", "mcp__memoryx__create", {})
    assert not runs("mcp__memory", "mcp__memory__", {})
    assert not runs("mcp__memory", "mcp__memory__create_entities", {}, profile="legacy")
    assert not runs("mcp__memory__*", "mcp__memory__create_entities", {}, profile="legacy")
    assert not runs("mcp__memory(x)", "mcp__memory__create_entities", {})


def test_other_tools_with_content_are_false_and_names_compare_with_aliases() -> None:
    assert not runs("Agent(model:opus)", "Agent", {"model": "opus"})
    assert runs("Agent", "Task", {})
    assert runs("Task", "Agent", {})
    assert not runs("Bash(ls)", "Read", {"command": "ls"})
    assert not runs("Read", "Bash", {})


# -- properties ------------------------------------------------------------------------------

_EVENTS = st.sampled_from(["PreToolUse", "FileChanged", "StopFailure", "Stop", "SubagentStart"])
_PROFILES = st.sampled_from(["current", "legacy"])
_DIALECTS = st.sampled_from(["claude", "agent-core"])
_REGEXISH = st.text(alphabet="()[]{}*+?|\\^$.-,:=!<>a0129dDsSwWbBkcxuPZ ", max_size=24)


@given(_EVENTS, st.none() | st.text(max_size=40), st.none() | st.text(), _PROFILES, _DIALECTS)
def test_matcher_matches_never_raises(
    event: str,
    query: str | None,
    matcher: str | None,
    profile: match.Profile,
    dialect: match.Dialect,
) -> None:
    assert isinstance(
        matcher_matches(event, query, matcher, profile=profile, dialect=dialect), bool
    )


@settings(max_examples=500)
@given(_REGEXISH, st.text(alphabet="a0 \n-Z", max_size=12))
def test_regex_translation_never_raises_or_warns(matcher: str, query: str) -> None:
    matcher_matches(
        "PreToolUse", query, matcher
    )  # filterwarnings=error turns warnings into failures
    matcher_matches("PreToolUse", query, matcher, dialect="agent-core")


@given(st.from_regex(r"[A-Za-z0-9_]{1,30}", fullmatch=True), _EVENTS, _PROFILES, _DIALECTS)
def test_a_literal_exact_matcher_matches_itself(
    name: str, event: str, profile: match.Profile, dialect: match.Dialect
) -> None:
    assert matcher_matches(event, name, name, profile=profile, dialect=dialect)


@given(st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_ -]{0,30}", fullmatch=True))
def test_a_current_exact_matcher_with_hyphens_and_spaces_matches_itself(name: str) -> None:
    assert matcher_matches("SubagentStart", name.strip(), name)


def _js_escape(text: str) -> str:
    return "".join(c if c.isalnum() or c == "_" else "\\" + c for c in text)


@given(st.text(min_size=1, max_size=120))
def test_an_escaped_regex_matches_its_own_text(text: str) -> None:
    assert matcher_matches("PreToolUse", text, f"^{_js_escape(text)}$")
    assert matcher_matches("PreToolUse", text, f"^{_js_escape(text)}$", dialect="agent-core")


@given(st.text(alphabet="ab*?/.\\", max_size=12), st.text(alphabet="ab/.", max_size=16))
def test_path_rules_never_raise(pattern: str, path: str) -> None:
    read(f"Read({pattern})", path or "x")
    read(f"Read({pattern})", path or "x", profile="legacy")


@given(st.text(max_size=40), st.text(max_size=60))
def test_webfetch_rules_never_raise(host: str, url: str) -> None:
    fetch(f"WebFetch(domain:{host})", url)


def _segments_oracle(globs: list[str], names: list[str]) -> bool:
    if not globs:
        return not names
    if globs[0] == "**":
        return any(_segments_oracle(globs[1:], names[k:]) for k in range(len(names) + 1))
    head = bool(names) and fnmatch.fnmatchcase(names[0], globs[0])
    return head and _segments_oracle(globs[1:], names[1:])


@given(
    st.lists(st.sampled_from(["**", "*", "a", "b", "a*", "?"]), max_size=6),
    st.lists(st.sampled_from(["a", "b", "ab", "ba"]), max_size=6),
)
def test_segment_matching_agrees_with_a_backtracking_oracle(
    globs: list[str], names: list[str]
) -> None:
    assert match._segments_match(globs, names) is _segments_oracle(globs, names)
